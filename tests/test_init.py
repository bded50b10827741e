"""`memsafe init` against a temporary HOME: fake agent config files (their other servers must
survive), a fake `claude` command that records its arguments, a real git repository, real
processes. What init writes is parsed back as each agent would read it (docs/agents.md)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_memsafe

from memsafe import api

FAKE_CLAUDE = """#!{python}
import json, os, sys
log = os.environ["FAKE_CLAUDE_LOG"]
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
state = os.environ["FAKE_CLAUDE_STATE"]
args = sys.argv[1:]
if args[:2] == ["mcp", "get"]:
    sys.exit(0 if os.path.exists(state) else 1)
if args[:2] == ["mcp", "add"]:
    open(state, "w").close()
if args[:2] == ["mcp", "remove"]:
    os.remove(state)
installed = os.path.join(os.environ["HOME"], ".claude", "plugins", "installed_plugins.json")
if args[:2] == ["plugin", "install"]:
    os.makedirs(os.path.dirname(installed), exist_ok=True)
    with open(installed, "w") as fh:
        json.dump({{"version": 2, "plugins": {{args[2]: [{{"scope": "user"}}]}}}}, fh)
if args[:2] == ["plugin", "uninstall"]:
    os.remove(installed)
"""

CURSOR_BEFORE = {"mcpServers": {"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]}}}
DESKTOP_BEFORE = {"globalShortcut": "Ctrl+Space", "mcpServers": {"fs": {"command": "npx", "args": ["fs"]}}}


@pytest.fixture
def machine(tmp_path):
    """A HOME with Claude Desktop and Cursor configs, a `claude` on PATH, bash as the shell, and a
    git repository with a CLAUDE.md as the working directory. Returns (env, paths)."""
    home = tmp_path / "fakehome"
    desktop = home / ".config" / "Claude" / "claude_desktop_config.json"
    cursor = home / ".cursor" / "mcp.json"
    desktop.parent.mkdir(parents=True)
    cursor.parent.mkdir(parents=True)
    desktop.write_text(json.dumps(DESKTOP_BEFORE, indent=4))
    cursor.write_text(json.dumps(CURSOR_BEFORE, indent=2))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    claude = bindir / "claude"
    claude.write_text(FAKE_CLAUDE.format(python=sys.executable))
    claude.chmod(claude.stat().st_mode | stat.S_IXUSR)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "CLAUDE.md").write_text("# Project rules\n\nUse tabs.\n")
    env = {
        "HOME": str(home), "SHELL": "/bin/bash", "XDG_CONFIG_HOME": "", "XDG_DATA_HOME": "",
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_CLAUDE_LOG": str(tmp_path / "claude.log"), "FAKE_CLAUDE_STATE": str(tmp_path / "claude.state"),
    }
    paths = {"home": home, "desktop": desktop, "cursor": cursor, "repo": repo, "claude_log": tmp_path / "claude.log"}
    return env, paths


def _claude_calls(paths) -> list[list[str]]:
    log = paths["claude_log"]
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root except the fake claude's call log."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "claude.log"}


def test_dry_run_shows_every_step_and_changes_nothing(machine, tmp_path):
    env, paths = machine
    before = _snapshot(tmp_path)
    r = run_memsafe("init", "--dry-run", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stderr
    for what in ("git hook", "Claude Code", "Claude Desktop", "Cursor", "CLAUDE.md", "bash completion",
                 "decay --quiet", "+    \"memsafe\": {"):
        assert what in r.stdout, what
    assert _snapshot(tmp_path) == before
    assert [c[:2] for c in _claude_calls(paths)] == [["mcp", "get"]]  # only looked
    plan = json.loads(run_memsafe("init", "--dry-run", "--json", env=env, cwd=paths["repo"]).stdout)
    assert {c["target"] for c in plan["changes"] if c["state"] == "change"} == {
        "git hook", "Claude Code plugin", "Claude Desktop", "Cursor", "CLAUDE.md", "bash completion"}
    assert all("old" not in c and "new" not in c for c in plan["changes"])  # no file's full text
    assert _snapshot(tmp_path) == before


def test_yes_sets_everything_up_keeping_other_servers_and_undo_removes_it(machine):
    env, paths = machine
    r = run_memsafe("init", "--yes", "--completions", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stdout + r.stderr
    command = api.memsafe_command()

    # Claude Code: memsafe's plugin (which brings the MCP server) through Claude Code's own commands
    calls = _claude_calls(paths)
    assert ["plugin", "marketplace", "add", str(api.init.plugin_folder())] in calls
    assert ["plugin", "install", "memsafe@memsafe"] in calls
    assert not [c for c in calls if c[:2] == ["mcp", "add"]]  # not a second server beside the plugin's

    # JSON configs: the other servers and settings kept, memsafe added as each agent reads it, backup made
    for key, before in (("desktop", DESKTOP_BEFORE), ("cursor", CURSOR_BEFORE)):
        path = paths[key]
        data = json.loads(path.read_text())
        server = data["mcpServers"]["memsafe"]
        workspace = {"env": {"MEMSAFE_WORKSPACE": "${workspaceFolder}"}} if key == "cursor" else {}
        assert server == {"command": command[0], "args": [*command[1:], "serve"], **workspace}
        assert os.path.isabs(server["command"])
        assert {k: v for k, v in data["mcpServers"].items() if k != "memsafe"} == before["mcpServers"]
        assert {k: v for k, v in data.items() if k != "mcpServers"} == {
            k: v for k, v in before.items() if k != "mcpServers"}
        assert json.loads(path.with_name(path.name + ".memsafe-backup").read_text()) == before

    # the server entry really starts memsafe (as an agent would: absolute command, no PATH)
    probe = subprocess.run([server["command"], *server["args"][:-1], "--version"], capture_output=True, text=True,
                           env={"HOME": env["HOME"]})
    assert probe.returncode == 0 and probe.stdout.startswith("memsafe ")

    # rules block added after the user's text; hook installed; completion file written
    claude_md = (paths["repo"] / "CLAUDE.md").read_text()
    assert claude_md.startswith("# Project rules\n\nUse tabs.\n\n" + api.RULES_BEGIN)
    assert claude_md.count(api.RULES_BEGIN) == 1 and "recall" in claude_md
    assert api.hook_status(paths["repo"]).installed
    completion = paths["home"] / ".local/share/bash-completion/completions/memsafe"
    assert completion.read_text() == api.completion_script("bash")

    # a second run changes nothing
    again = run_memsafe("init", "--yes", "--completions", env=env, cwd=paths["repo"])
    assert again.returncode == 0 and "everything is already in place" in again.stdout, again.stdout
    assert (paths["repo"] / "CLAUDE.md").read_text() == claude_md

    # undo: everything init added is gone, the rest is as it was
    r = run_memsafe("init", "--undo", "--yes", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert (paths["repo"] / "CLAUDE.md").read_text() == "# Project rules\n\nUse tabs.\n"
    assert json.loads(paths["desktop"].read_text()) == DESKTOP_BEFORE
    assert json.loads(paths["cursor"].read_text()) == CURSOR_BEFORE
    assert not api.hook_status(paths["repo"]).installed
    assert not completion.exists()
    assert _claude_calls(paths)[-2:] == [["plugin", "uninstall", "memsafe@memsafe"],
                                         ["plugin", "marketplace", "remove", "memsafe"]]


def test_unparseable_config_is_refused_in_one_line_and_never_overwritten(machine):
    env, paths = machine
    broken = '{"mcpServers": {"github": {"command": "npx",}}  // trailing comma\n'
    paths["cursor"].write_text(broken)
    r = run_memsafe("init", "--yes", "--no-hook", "--no-rules", env=env, cwd=paths["repo"])
    assert paths["cursor"].read_text() == broken
    assert not list(paths["cursor"].parent.glob("*.memsafe-backup*"))
    refusal = [line for line in r.stdout.splitlines() if "Cursor" in line]
    assert len(refusal) == 1 and "not valid JSON" in refusal[0]
    assert "memsafe" in json.loads(paths["desktop"].read_text())["mcpServers"]  # the others still done


def test_no_rules_file_creates_agents_md_and_claude_md_with_a_db_pinned(machine, tmp_path):
    env, paths = machine
    (paths["repo"] / "CLAUDE.md").unlink()
    db = tmp_path / "pinned.db"
    r = run_memsafe("--db", str(db), "init", "--yes", "--no-hook", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("CLAUDE.md", "AGENTS.md"):
        assert (paths["repo"] / name).read_text().startswith(api.RULES_BEGIN)
    assert json.loads(paths["cursor"].read_text())["mcpServers"]["memsafe"]["args"][-3:] == ["--db", str(db), "serve"]
    assert f"--db {db} decay --quiet" in r.stdout
    assert not (paths["home"] / ".local/share/bash-completion").exists()  # --yes alone does not install it
    r = run_memsafe("init", "--undo", "--yes", env=env, cwd=paths["repo"])
    assert r.returncode == 0
    assert not (paths["repo"] / "AGENTS.md").exists() and not (paths["repo"] / "CLAUDE.md").exists()


def test_not_a_terminal_without_yes_is_one_line_and_exit_2(machine):
    env, paths = machine
    r = run_memsafe("init", env=env, cwd=paths["repo"])
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--yes" in r.stderr


def test_interactive_answers_skip_steps(machine, monkeypatch):
    # on a terminal every change is asked; "n" skips it
    from typer.testing import CliRunner

    from memsafe.cli import app
    env, paths = machine
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(paths["repo"])
    monkeypatch.setattr("memsafe.cli.init.is_terminal", lambda: True)
    # hook no, Claude Code plugin yes, Desktop no, Cursor no, CLAUDE.md no, completion no
    answers = "n\ny\nn\nn\nn\nn\n"
    r = CliRunner().invoke(app, ["init"], input=answers)
    assert r.exit_code == 0, r.output
    assert not api.hook_status(paths["repo"]).installed
    assert [c[:2] for c in _claude_calls(paths)][-1] == ["plugin", "install"]
    assert json.loads(paths["cursor"].read_text()) == CURSOR_BEFORE
    assert api.RULES_BEGIN not in (paths["repo"] / "CLAUDE.md").read_text()
    assert "1 change made" in r.output


def test_rules_block_is_replaced_in_place_not_duplicated(tmp_path):
    from memsafe.api.init import RULES_END, _with_block, _without_block

    old = f"intro\n\n{api.RULES_BEGIN}\nold rules\n{RULES_END}\n\n## Later section\n"
    new = _with_block(old, api.RULES_BEGIN, RULES_END, f"{api.RULES_BEGIN}\nnew\n{RULES_END}\n")
    assert new == f"intro\n\n{api.RULES_BEGIN}\nnew\n{RULES_END}\n\n## Later section\n"
    assert _without_block(new, api.RULES_BEGIN, RULES_END) == "intro\n\n## Later section\n"


def test_docs_agents_md_shows_what_init_writes(machine):
    # docs/agents.md is what a user copies by hand: its blocks must match what init writes
    import re

    env, paths = machine
    r = run_memsafe("init", "--yes", "--no-hook", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stdout + r.stderr
    doc = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", doc, re.DOTALL)]
    assert len(blocks) == 2
    command = api.memsafe_command()
    for block, key in zip(blocks, ("desktop", "cursor")):
        documented = block["mcpServers"]["memsafe"]
        written = json.loads(paths[key].read_text())["mcpServers"]["memsafe"]
        assert documented.keys() == written.keys()
        assert documented["args"] == written["args"][len(command) - 1:]
    for call in _claude_calls(paths):
        if call[:1] == ["plugin"]:
            shown = " ".join(call).replace(str(api.init.plugin_folder()), '"$(memsafe agent plugin)"')
            assert f"claude {shown}" in doc, shown
    assert "claude mcp add --scope user memsafe -- /abs/path/to/memsafe serve" in doc  # the way without the plugin
    rules = re.search(r"```markdown\n(.*?)```", doc, re.DOTALL).group(1)
    assert rules in (paths["repo"] / "CLAUDE.md").read_text()


def test_yes_alone_makes_every_change_its_help_names_and_says_what_it_left_out(machine):
    env, paths = machine
    help_text = run_memsafe("init", "--help", env={**env, "COLUMNS": "200"}).stdout
    assert "but shell completion, which needs --completions too" in help_text
    r = run_memsafe("init", "--yes", env=env, cwd=paths["repo"])
    assert r.returncode == 0, r.stdout + r.stderr
    completion = paths["home"] / ".local/share/bash-completion/completions/memsafe"
    assert not completion.exists()
    shown = [line for line in r.stdout.splitlines() if "bash completion" in line]
    assert shown == [f"- bash completion: left out with --yes alone (write {completion}): pass --completions for it"]
    assert "complete -o default" not in r.stdout  # no diff of a change it does not make
    assert r.stdout.rstrip().endswith("5 changes made (shell completion left out: pass --completions).")
    again = run_memsafe("init", "--yes", env=env, cwd=paths["repo"])
    assert again.returncode == 0
    assert again.stdout.rstrip().endswith("Nothing to do: everything is already in place (shell completion left out: "
                                          "pass --completions).")


def test_a_refused_change_makes_init_exit_1_and_says_so(machine):
    env, paths = machine
    paths["cursor"].write_text("{not json")
    r = run_memsafe("init", "--yes", "--no-hook", "--no-rules", "--no-completions", env=env, cwd=paths["repo"])
    assert r.returncode == 1
    assert r.stdout.rstrip().endswith("2 changes made, 1 refused.")  # Claude Code and Desktop; Cursor refused
    assert paths["cursor"].read_text() == "{not json"
    dry = run_memsafe("init", "--dry-run", "--no-hook", "--no-rules", env=env, cwd=paths["repo"])
    assert dry.returncode == 0 and "not valid JSON" in dry.stdout  # a plan is not a failure
