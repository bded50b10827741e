"""Write docs/agents-session-example.md: a made-up working session of 22 prompts run through the
Claude Code plugin's hooks exactly as Claude Code runs them (`sh bin/memsafe-hook claude`, the
event JSON on stdin, a transcript in Claude Code's JSON Lines shape, Stop after every turn, a
compaction half-way), on a fresh store holding a few memories of earlier sessions. Records what
was injected at each prompt and what was captured at the end.

    .venv/bin/python scripts/agent_session_example.py [OUT]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOOK = ROOT / "memsafe" / "data" / "claude-plugin" / "bin" / "memsafe-hook"
MEMSAFE = Path(sys.executable).with_name("memsafe")
SESSION = "5d1f0c2e-8a41-4b7e-9c3d-2e6f7a8b9c01"
TOKEN = "ghp_R8x2mQ7vL1pZ9kW4tY6uN3bC5dF0hJ2sA8eX"

EARLIER = [  # (text, options): what earlier sessions left
    ("Deploys go out on Tuesdays only; the release freeze starts Thursday at noon.", {"tags": ["pinned"]}),
    ("The payment client retries a failed call three times with exponential backoff (src/retry.py).",
     {"kind": "decision"}),
    ("Make the login test in tests/test_login.py deterministic: it fails when the clock crosses midnight.",
     {"kind": "task"}),
    ("The CI runners use Python 3.11 and run pytest with -p no:cacheprovider.", {"confidence": 0.95}),
    ("Grafana dashboards for the web service live in ops/grafana/web.json.", {}),
    ("The office plants are watered on Fridays.", {}),
    ("The retry tests need the fake payment server: run make fake-payments before pytest tests/test_retry.py.", {}),
    ("freezegun is already pinned in requirements-dev.txt for the billing tests.", {}),
    ("The staging database is shared with the QA team; never run migrations on it by hand.", {}),
    ("The retry test flakes on CI when the runner is slow: the backoff assertion compares wall-clock times.", {}),
]

# (prompt, tool uses after it: (tool, input, result, failed)); {repo} is the repository
TURNS: list[tuple[str, list[tuple[str, dict, str, bool]]]] = [
    ("Morning. The retry test in tests/test_retry.py fails on CI since yesterday, can you take a look?", []),
    ("What is the retry budget of the payment client supposed to be?", []),
    ("Run the retry tests first so we see the failure.",
     [("Bash", {"command": "pytest tests/test_retry.py -q"},
       "Exit code 1\nFAILED tests/test_retry.py::test_backoff - assert 0.1 == 0.2", True)]),
    ("So the backoff doubles from 100 ms?", []),
    ("Actually, the backoff base is 200 ms, not 100 ms.", []),
    ("Fix src/retry.py to use the 200 ms base.",
     [("Edit", {"file_path": "{repo}/src/retry.py", "old_string": "BASE = 0.1", "new_string": "BASE = 0.2"}, "ok",
       False)]),
    ("Run the tests again.", [("Bash", {"command": "pytest tests/test_retry.py -q"}, "4 passed in 0.21s", False)]),
    ("We decided to keep the retry budget at three attempts, even for idempotent calls.", []),
    ("Commit that with a short message.",
     [("Bash", {"command": "git commit -am 'Retry backoff starts at 200 ms'"},
       "[main 3c9e1a7] Retry backoff starts at 200 ms\n 1 file changed, 1 insertion(+), 1 deletion(-)", False)]),
    ("Now the login test: is it the flaky one with the clock?", []),
    ("Let's go with freezegun for the login test, not a hand-rolled fake clock.", []),
    ("COMPACT", []),
    ("Add freezegun to the dev requirements.",
     [("Edit", {"file_path": "{repo}/requirements-dev.txt", "old_string": "pytest", "new_string": "pytest\nfreezegun"},
       "ok", False)]),
    ("From now on, put new dev dependencies in requirements-dev.txt only.", []),
    ("Write the test change in tests/test_login.py.",
     [("Write", {"file_path": "{repo}/tests/test_login.py", "content": "..."}, "ok", False)]),
    ("Run the login tests.",
     [("Bash", {"command": "pytest tests/test_login.py -q"}, "Exit code 1\nE   ModuleNotFoundError: freezegun", True),
      ("Bash", {"command": "pip install -r requirements-dev.txt"}, "Successfully installed freezegun-1.5.1", False),
      ("Bash", {"command": "pytest tests/test_login.py -q"}, "6 passed in 0.35s", False)]),
    ("I prefer one commit per fix, so commit the login change separately.",
     [("Bash", {"command": "git commit -am 'Freeze the clock in the login test'"},
       "[main 8b2d4f0] Freeze the clock in the login test\n 2 files changed, 9 insertions(+)", False)]),
    ("When do deploys go out again?", []),
    ("Write a haiku about autumn for the team channel.", []),
    ("Remember that the staging database is reset every Monday at 06:00 UTC.", []),
    (f"Remember that the staging token is {TOKEN} for the deploy job.", []),
    ("What did we decide about retries today?", []),
    ("Where are the Grafana dashboards for the web service?", []),
    ("Thanks, that's all for today.", []),
]


class Session:
    def __init__(self, folder: Path):
        self.repo = folder / "web"
        self.repo.mkdir()
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
        self.db = folder / "memory.db"
        self.transcript = folder / f"{SESSION}.jsonl"
        self.env = {**os.environ, "MEMSAFE_HOME": str(folder / "home"), "MEMSAFE_DB": str(self.db),
                    "MEMSAFE_BIN": str(MEMSAFE)}
        self.n = 0

    def hook(self, event: dict) -> tuple[str, float]:
        base = {"session_id": SESSION, "transcript_path": str(self.transcript), "cwd": str(self.repo),
                "permission_mode": "default"}
        started = time.perf_counter()
        done = subprocess.run(["sh", str(HOOK), "claude"], input=json.dumps({**base, **event}).encode(),
                              capture_output=True, env=self.env, timeout=120)
        ms = (time.perf_counter() - started) * 1000
        assert done.returncode == 0, done.stderr
        text = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] if done.stdout.strip() else ""
        return text, ms

    def line(self, obj: dict) -> None:
        self.n += 1
        with open(self.transcript, "a", encoding="utf-8") as fh:
            stamp = f"2026-12-01T09:{self.n // 60:02d}:{self.n % 60:02d}.000Z"
            fh.write(json.dumps({"parentUuid": None, "isSidechain": False, "type": obj.pop("_type"),
                                 "sessionId": SESSION, "cwd": str(self.repo), "uuid": f"u{self.n}",
                                 "timestamp": stamp, **obj}) + "\n")

    def turn(self, prompt: str, tools: list) -> None:
        self.line({"_type": "user", "message": {"role": "user", "content": prompt}})
        for tool, tool_input, result, failed in tools:
            use = f"toolu_{self.n}"
            tool_input = {k: v.replace("{repo}", str(self.repo)) if isinstance(v, str) else v
                          for k, v in tool_input.items()}
            self.line({"_type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": use, "name": tool, "input": tool_input}]}})
            self.line({"_type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use, "content": result, "is_error": failed}]}})
        self.line({"_type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Done."}]}})


def block(text: str) -> str:
    return "```text\n" + (text or "(nothing injected)") + "\n```"


def main(out: Path) -> None:
    from memsafe import api

    with tempfile.TemporaryDirectory(prefix="memsafe-session-") as tmp:
        s = Session(Path(tmp))
        os.environ.update({k: s.env[k] for k in ("MEMSAFE_HOME", "MEMSAFE_DB")})
        opened = api.open_store(str(s.db))
        project = api.current_project(opened.store, s.repo)
        for text, options in EARLIER:
            api.remember(opened.store, text, project=project, embed_now=False, **options)
        opened.store.close()
        doc = ["# A working session through the agent hooks", "",
               "Made up, and run for real by `scripts/agent_session_example.py`: the Claude Code plugin's hook "
               "command (`sh bin/memsafe-hook claude`) as Claude Code runs it, with the event JSON on stdin and "
               "the transcript in Claude Code's JSON Lines shape; `Stop` after every turn, a compaction after "
               "turn 11. The store starts with ten memories of earlier sessions. A memory the session was shown "
               "already (in the brief, or with an earlier prompt) is not shown again until a compaction or a "
               "change: turn 2's answer, #2, is in the brief. Times are wall-clock per hook process on the "
               "machine that ran it.", "", "## Session start (`SessionStart`, source startup)", ""]
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline = (time.perf_counter() - started) * 1000
        load = os.getloadavg()[0]
        text, ms = s.hook({"hook_event_name": "SessionStart", "source": "startup"})
        doc[-3:-3] = [f"When this file was written the machine's load average was {load:.1f} and `python -c pass` "
                      f"took {baseline:.0f} ms: read the times against that.", ""]
        doc += [f"{ms:.0f} ms", "", block(text), ""]
        number = 0
        for prompt, tools in TURNS:
            if prompt == "COMPACT":
                _, ms_pre = s.hook({"hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""})
                text, ms = s.hook({"hook_event_name": "SessionStart", "source": "compact"})
                doc += ["## Compaction (`PreCompact`, then `SessionStart` with source compact)", "",
                        f"PreCompact {ms_pre:.0f} ms (capture); SessionStart {ms:.0f} ms", "", block(text), ""]
                continue
            number += 1
            text, ms = s.hook({"hook_event_name": "UserPromptSubmit", "prompt": prompt})
            shown = prompt.replace(TOKEN, TOKEN[:8] + "…")
            doc += [f"## Turn {number}", "", f"> {shown}", "", f"UserPromptSubmit {ms:.0f} ms", "", block(text), ""]
            if tools:
                named = [f"{t} `{i.get('command') or i.get('file_path', '').replace('{repo}/', '')}`"
                         + (" (failed)" if f else "") for t, i, _, f in tools]
                doc += ["Tools: " + "; ".join(named), ""]
            s.turn(prompt, tools)
            _, ms_stop = s.hook({"hook_event_name": "Stop", "stop_hook_active": False})
            doc += [f"Stop {ms_stop:.0f} ms (capture)", ""]
        _, ms = s.hook({"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"})
        doc += [f"## Session end (`SessionEnd`, {ms:.0f} ms): what was captured", "",
                "`memsafe list --source hook --all-projects`:", ""]
        listed = subprocess.run([str(MEMSAFE), "list", "--source", "hook", "--all-projects"], capture_output=True,
                                text=True, env={**s.env, "COLUMNS": "200"})
        doc += ["```text", listed.stdout.rstrip(), "```", ""]
        opened = api.open_store(str(s.db))
        memories = api.session_captures(opened.store, SESSION)
        summary = next(m for m in memories if api.SUMMARY_TAG in m.tags)
        versions = len(api.history(opened.store, summary.id).versions)
        opened.store.close()
        doc += [f"The session summary, memory {summary.id} (one memory, rewritten in place by each hook: "
                f"{versions} versions in its history):", "", "```text", summary.content, "```", "",
                "Each statement, with its kind and tags:", ""]
        for m in memories:
            if m is not summary:
                doc.append(f"- #{m.id} {m.kind} [{', '.join(t for t in m.tags if not t.startswith('session:'))}]: "
                           f"{m.content}")
        doc += ["", f"`memsafe agent undo {SESSION}` forgets all {len(memories)} of them in one command.", ""]
    out.write_text("\n".join(doc), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "agents-session-example.md")
