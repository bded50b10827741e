"""What each command imports, deferred embedding that is never lost (kill -9), the cached
optimised model graph, and cached --help / TAB answers. Nothing here is timed: speed is measured by
`memsafe bench --startup`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from memsafe import api, embed
from memsafe.bench import timing
from memsafe.bench.mcp import RawClient

HEAVY = ("onnxruntime", "numpy", "tokenizers", "mcp", "mcp_types", "detect_secrets")


def imported(args: list[str], env: dict, cwd=None) -> tuple[set[str], subprocess.CompletedProcess]:
    """Top-level packages a real `memsafe ARGS` process imported (`python -X importtime`)."""
    proc = run(args, {**env, "PYTHONPROFILEIMPORTTIME": "1"}, cwd=cwd)
    names = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$",
                                                              proc.stderr, re.M)}
    return names, proc


def run(args: list[str], env: dict, cwd=None, **kw) -> subprocess.CompletedProcess:
    """The `memsafe` console script (as a shell's completion script calls it), else `python -m memsafe`."""
    script = Path(sys.executable).with_name("memsafe")
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "memsafe"]
    return subprocess.run([*argv, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=cwd, timeout=300, **kw)


@pytest.fixture
def seeded(tmp_path, store, db_path):
    api.remember(store, "We deploy with blue-green switches on Fridays")  # global: `get` sees it from anywhere
    api.remember(store, "The cache is warmed at boot")
    return {"MEMSAFE_DB": str(db_path), "MEMSAFE_CACHE_DIR": str(tmp_path / "cache")}


@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["recall", "--help"],
    ["recall", "deploy", "--project", "web", "--mode", "lexical"],
    ["recall", "deploy", "--project", "web", "--mode", "lexical", "--json"],
    ["list", "--project", "web"], ["get", "1"], ["get", "1", "--json"],
])
def test_light_commands_import_nothing_heavy(seeded, args):
    for attempt in ("first", "again"):  # --help: computed, then answered from the cache
        names, proc = imported(args, seeded)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not names & set(HEAVY), f"{args} ({attempt}) imported {sorted(names & set(HEAVY))}"


CLI_APP = ("typer", "rich", "pydantic", "click")


@pytest.mark.parametrize("args", [
    ["recall", "deploy", "--project", "web", "--mode", "lexical"],
    ["recall", "deploy", "-p", "web", "--mode=lexical", "--json", "-n", "3"],
    ["remember", "The queue drains at noon", "--project", "web", "--no-embed", "--tag", "ops"],
    ["remember", "Backups run nightly", "--global", "--no-embed", "--json"],
])
def test_hot_commands_run_without_the_typer_app_or_the_libraries_they_do_not_need(seeded, args):
    """A plain recall or remember (the fast path, memsafe.cli.fast): no Typer, rich or pydantic,
    and, once the counts and secret gates are cached (the second run), no tiktoken or detect-secrets."""
    for attempt in ("first", "again"):
        names, proc = imported([*args[:1], f"{args[1]} {attempt}" if args[0] == "remember" else args[1],
                                *args[2:]], seeded)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not names & {*HEAVY[:-1], *CLI_APP}, f"{args} ({attempt}) imported {sorted(names & {*HEAVY, *CLI_APP})}"
    assert not names & {"tiktoken", "detect_secrets"}, f"{args} (again) imported {sorted(names)}"


def _both_paths(tmp_path, seeded, cases):
    """Each case (argv, stdin) run by the fast path and by the Typer app, each on its own copy of
    the seeded store: [(case, fast result, Typer result)], results as (exit code, stdout, stderr)."""
    import apsw

    source = apsw.Connection(seeded["MEMSAFE_DB"])
    out = []
    envs = {}
    for name, fast in (("fast", "1"), ("typer", "0")):
        copy = tmp_path / name / "memory.db"
        copy.parent.mkdir(parents=True)
        with apsw.Connection(str(copy)).backup("main", source, "main") as backup:
            backup.step()
        envs[name] = {**seeded, "MEMSAFE_DB": str(copy), "MEMSAFE_CLI_FAST": fast,
                      "MEMSAFE_NOW": "2030-01-01T00:00:00Z", "MEMSAFE_BACKGROUND_EMBED": "0"}
    uid = re.compile(r"\b[0-9a-f]{32}\b")  # a new memory's uid
    for args, stdin in cases:
        results = []
        for name in ("fast", "typer"):
            db = envs[name]["MEMSAFE_DB"]
            proc = run([a.replace("{db}", db) for a in args], envs[name], input=stdin)
            shown = (uid.sub("UID", t.replace(db, "DB")) for t in (proc.stdout, proc.stderr))
            results.append((proc.returncode, *shown))
        out.append(((args, stdin), *results))
    source.close()
    return out


def test_the_fast_path_prints_and_exits_exactly_as_the_typer_app(tmp_path, seeded):
    """Same stdout, stderr and exit code for successes, handler errors (plain and --json), usage
    errors and help, whichever path runs the command line."""
    cases = [
        (["recall", "deploy", "--project", "web", "--mode", "lexical"], None),
        (["recall", "deploy", "--all-projects", "--json", "--limit", "1", "-b", "300", "-k", "general", "-t", "x"],
         None),
        (["recall", "cache warmed", "--all-projects", "--include-forgotten", "--since", "24h"], None),
        (["recall", "deploy", "--as-of", "3 days ago", "--include-forgotten"], None),
        (["recall", "deploy", "--as-of", "3 days ago", "--include-forgotten", "--json"], None),
        (["recall", "deploy", "--mode", "bogus"], None),
        (["recall", "deploy", "--mode", "bogus", "--json"], None),
        (["recall", "   "], None),
        (["recall", "deploy", "--budget", "0"], None),
        (["recall", "deploy", "-n5"], None),
        (["recall", "a", "b"], None),
        (["recall", "--help"], None),
        (["recall"], None),
        (["remember", "Deploys need two approvals", "--kind", "decision", "-t", "ops", "--pin", "-p", "web"], None),
        (["remember", "-", "--global", "--json", "--importance", "0.25", "--source", "agent", "-e", "Kafka"],
         "Kafka lag alerts page the on-call\n"),
        (["remember", "Deploys need two approvals", "--kind", "decision", "-t", "ops", "--pin", "-p", "web"], None),
        (["remember", "my password is Xk9mP2qLw8vRt5", "--global"], None),
        (["remember", "my password is Xk9mP2qLw8vRt5", "--global", "--json"], None),
        (["remember", "x", "--kind", "nonsense"], None),
        (["remember", "x", "--importance", "2"], None),
        (["--db", "{db}", "remember", "  ", "--global"], None),
    ]
    results = _both_paths(tmp_path, seeded, cases)
    for case, fast, typer_ in results:
        assert fast == typer_, case
    assert "deploy" in results[0][1][1].lower() and results[0][1][0] == 0  # the cases did run
    assert json.loads(results[14][1][1])["id"] == 4 and results[16][1][0] == 1


def test_import_on_the_fast_path_prints_and_exits_exactly_as_the_typer_app(tmp_path, seeded, store):
    """`memsafe import` runs without the Typer app (its start-up was half of an import of
    1,000 memories) and says the same: the report, --json, --dry-run, a refused file, a partial
    import (exit 3), a missing file, a usage error, and an import that embeds."""
    export = tmp_path / "export.jsonl"
    api.remember(store, "Kafka consumers retry three times", project="web", entities=["Kafka"])
    api.export_to_path(store, export, all_projects=True)
    lines = export.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], '{"type": "memory", "content": 7}', *lines[1:]]) + "\n")
    sm = tmp_path / "server:fire:memory.jsonl"
    sm.write_text(json.dumps({"type": "entity", "name": "Billing", "entityType": "service",
                              "observations": ["Billing retries webhooks hourly", "Billing: :fire: on call"]}) + "\n")
    fresh = str(tmp_path / "fresh" / "memory.db")
    cases = [
        (["import", str(export), "--no-embed"], None),
        (["import", str(export), "--json", "--no-embed"], None),
        (["import", str(bad), "--no-embed"], None),
        (["import", str(bad), "--no-embed", "--json"], None),
        (["import", str(bad), "--skip-invalid", "--json", "--no-embed"], None),
        (["import", str(bad), "--skip-invalid", "--dry-run"], None),
        (["--db", fresh, "import", str(export), "--dry-run", "-f", "memsafe"], None),
        (["import", str(tmp_path / "missing.jsonl")], None),
        (["import", str(tmp_path / "missing.jsonl"), "--json"], None),
        (["import", str(export), "--format", "bogus"], None),
        (["import", str(sm), "--format=server-memory", "-p", "web", "--redact"], None),
    ]
    results = _both_paths(tmp_path, seeded, cases)
    for case, fast, typer_ in results:
        assert fast == typer_, case
    codes = [fast[0] for _, fast, _ in results]
    assert codes == [0, 0, 1, 1, 3, 3, 0, 1, 1, 2, 0], results
    assert "2 memories added" in results[10][1][2] and "pending" not in results[10][1][2]  # it embedded
    assert "\N{FIRE}" in results[10][1][2]  # rich read `:fire:` in the file's name, on both paths
    assert not os.path.exists(fresh)  # a dry run creates no store
    names, proc = imported(["import", str(export), "--no-embed"], seeded)
    assert proc.returncode == 0, proc.stderr
    assert not names & {*HEAVY, *CLI_APP}, sorted(names & {*HEAVY, *CLI_APP})


READING = [  # each reading command (and forget) on the fast path
    ["get", "1"], ["list", "--project", "web"], ["status"], ["history", "1"], ["graph", "show", "Kafka", "-p", "web"],
    ["forget", "2", "--reason", "stale"],
]


def test_reading_commands_on_the_fast_path_print_and_exit_exactly_as_the_typer_app(tmp_path, seeded, store):
    """get, list, status, history, graph show and forget run without the Typer app and say the
    same, plain, piped and --json: results, handler errors (not found, an unknown entity), usage
    errors (a bad id, both scopes, two statuses, a value out of range) and the exit codes."""
    api.remember(store, "Kafka consumers retry three times", project="web", entities=["Kafka"])
    api.update(store, 1, content="We deploy with blue-green switches on Thursdays")
    cases = [
        (["status"], None),
        (["status", "--json", "-p", "web"], None),
        (["get", "1"], None),
        (["get", "1", "--json"], None),
        (["get", "3", "--project", "web"], None),
        (["get", "99"], None),
        (["get", "99", "--json"], None),
        (["get", "x"], None),
        (["get", "1", "--all-projects", "-p", "web"], None),
        (["get", "1", "--all-projects", "-p", "web", "--json"], None),
        (["list"], None),
        (["list", "--all-projects", "--json"], None),
        (["list", "-n", "1", "--source", "user", "--all"], None),
        (["list", "--archived"], None),
        (["list", "--archived", "--forgotten"], None),
        (["list", "--archived", "--forgotten", "--json"], None),
        (["list", "--source", "bogus"], None),
        (["list", "-n", "0"], None),
        (["history", "1"], None),
        (["history", "1", "--json"], None),
        (["history", "99"], None),
        (["graph", "show", "Kafka", "-p", "web"], None),
        (["graph", "show", "Kafka", "--json", "--depth", "1", "--all-projects"], None),
        (["graph", "show", "nope"], None),
        (["graph", "show", "nope", "--json"], None),
        (["graph", "show", "Kafka", "--depth", "11"], None),
        (["forget", "2", "--reason", "stale"], None),
        (["forget", "2", "--json"], None),
        (["forget", "99", "--json"], None),
        (["forget", "1", "--reason", " "], None),
        (["list", "--forgotten", "--json"], None),
        (["get", "2", "--json"], None),
    ]
    results = _both_paths(tmp_path, seeded, cases)
    for case, fast, typer_ in results:
        assert fast == typer_, case
    codes = [fast[0] for _, fast, _ in results]
    assert codes == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2,
                     0, 0, 1, 0, 0, 1, 1, 2, 0, 1, 1, 2, 0, 0], codes
    assert "Thursdays" in results[2][1][1] and "Fridays" in results[18][1][1]  # the cases did run
    assert "Kafka consumers" in results[21][1][1] and "Forgot memory 2" in results[26][1][1]
    assert json.loads(results[30][1][1])[0]["id"] == 2 and json.loads(results[31][1][1])["status"] == "forgotten"
    assert json.loads(results[6][1][1])["error"]["type"] == "NotFound"


@pytest.mark.parametrize("args", READING)
def test_reading_commands_run_without_the_typer_app(seeded, store, args):
    """The reading commands (and forget) take the fast path: no Typer, Click, rich or pydantic,
    and (but `status`, which loads the model to say whether vector search works) nothing heavy
    once the secret gates are cached (a second run)."""
    api.remember(store, "Kafka consumers retry three times", project="web", entities=["Kafka"])
    imported(args if args[0] != "forget" else ["get", "1"], seeded)  # the secret gates' cache, as in use
    names, proc = imported(args, {**seeded, "COLUMNS": "300"})  # status names a long temporary path: no wrapping
    assert proc.returncode == 0, [line for line in proc.stderr.splitlines() if not line.startswith("import time")]
    if args[0] == "status":  # rich's emoji table may be read (a model's `name:size:hash`), not its console
        names -= {"rich"} if "rich.console" not in proc.stderr else set()
    heavy = set(CLI_APP) | (set() if args[0] == "status" else set(HEAVY))
    assert not names & heavy, f"{args} imported {sorted(names & heavy)}"


def test_the_fast_path_takes_only_command_lines_it_reads_exactly_as_the_typer_app():
    from memsafe.cli import fast

    command, db, kwargs = fast.parse(["--db=x.db", "recall", "-n", "3", "q", "--kind", "fact", "-k", "task", "--json"])
    assert (command, db, kwargs["query"], kwargs["limit"], kwargs["kind"], kwargs["json_"]) == (
        "recall", "x.db", "q", 3, ["fact", "task"], True)
    command, db, kwargs = fast.parse(["remember", "-", "--importance", ".5", "-e", "A", "--entity=B", "--global"])
    assert (command, db, kwargs["content"], kwargs["importance"], kwargs["entity"], kwargs["global_"]) == (
        "remember", None, "-", 0.5, ["A", "B"], True)
    command, db, kwargs = fast.parse(["import", "f.jsonl", "-f", "server-memory", "--dry-run", "-p", "web", "--json"])
    assert (command, db, kwargs["file"], kwargs["format_"], kwargs["dry_run"], kwargs["project"], kwargs["json_"],
            kwargs["no_embed"]) == ("import", None, "f.jsonl", "server-memory", True, "web", True, False)
    for argv in (["recall"], ["recall", "a", "b"], ["recall", "q", "--help"], ["recall", "q", "-h"],
                 ["recall", "--", "q"],
                 ["recall", "q", "-n5"], ["recall", "q", "--limit", "0"], ["recall", "q", "--limit", "+3"],
                 ["recall", "q", "--limit", "３"], ["recall", "q", "--json=1"], ["recall", "q", "--project", "--json"],
                 ["recall", "q", "--kind", "Fact"], ["remember", "x", "--importance", "1.5"],
                 ["remember", "x", "--importance", "nan"], ["remember", "x", "--importance", "1e-1"],
                 ["remember", "x", "--source", "me"], ["remember", "x", "--db", "y"], ["--db", "recall", "q"],
                 ["--version", "recall", "q"], ["list", "x"], [], ["recall", "q", "--unknown"],
                 ["import"], ["import", "a", "b"], ["import", "f", "--format", "Memsafe"], ["import", "f", "-f"],
                 ["import", "f", "--help"], ["import", "f", "--vectors"], ["import", "f", "--dry-run=1"],
                 ["get"], ["get", "x"], ["get", "-1"], ["get", "+1"], ["get", "1", "2"], ["get", "1", "--reason", "r"],
                 ["forget", "1", "--reason", "  "], ["history", "1", "--help"], ["status", "x"], ["status", "-h"],
                 ["list", "-n", "0"], ["list", "--source", "me"], ["graph"], ["graph", "show"],
                 ["graph", "show", "E", "--depth", "11"], ["graph", "show", "E", "F"], ["graph", "list"],
                 ["graph", "show", " "]):
        assert fast.parse(argv) is None, argv
    assert fast.parse(["graph", "show", "Kafka", "--depth=0", "-n", "3", "--all-projects"]) == (
        "graph show", None, {"depth": 0, "limit": 3, "project": None, "project_path": None, "all_projects": True,
                             "json_": False, "entity": "Kafka"})
    assert fast.parse(["--db", "x.db", "status", "--json"]) == (
        "status", "x.db", {"project": None, "project_path": None, "json_": True})
    command, db, kwargs = fast.parse(["forget", "12", "--reason", "stale", "-p", "web"])
    assert (command, kwargs["memory_id"], kwargs["reason"], kwargs["project"]) == ("forget", 12, "stale", "web")
    command, db, kwargs = fast.parse(["list", "--forgotten", "--source", "hook", "-n", "5"])
    assert (command, kwargs["forgotten"], kwargs["source"], kwargs["limit"], kwargs["all_"]) == (
        "list", True, "hook", 5, False)


def test_a_text_no_secret_gate_can_match_is_scanned_without_detect_secrets(tmp_path):
    """`safety._library_free` (no detect-secrets import) answers only for texts where the library
    finds nothing: checked on the safety tests' whole corpus, in a process that kept the gates."""
    from test_safety import SECRETS, _prefilter_corpus

    from memsafe import safety

    texts = _prefilter_corpus()
    env = {**os.environ, "MEMSAFE_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import json, sys; from memsafe import safety; texts = json.load(sys.stdin); {}"
            "print(json.dumps([[safety._library_free(safety._visible(t)[0]) for t in texts], "
            "'detect_secrets' in sys.modules]))")
    keep = subprocess.run([sys.executable, "-c", code.format("safety.scan('x');")], input=json.dumps(texts),
                          capture_output=True, text=True, env=env, timeout=300)
    assert keep.returncode == 0, keep.stderr
    assert json.loads(keep.stdout) == [[False] * len(texts), True]  # the library is loaded: never free
    fresh = subprocess.run([sys.executable, "-c", code.format("")], input=json.dumps(texts),
                           capture_output=True, text=True, env=env, timeout=300)
    free, loaded = json.loads(fresh.stdout)
    assert not loaded
    assert not any(free[: len(SECRETS)])
    assert sum(free) >= len(texts) // 3  # ordinary text is the common case
    for text, answered in zip(texts, free):
        if answered:
            assert safety.scan(text) == [], text


def test_help_and_tab_answers_come_from_the_cache_and_equal_the_cli(seeded):
    plain = {**seeded, "MEMSAFE_CLI_CACHE": "0"}
    tab = {"_MEMSAFE_COMPLETE": "complete_bash", "COMP_WORDS": "memsafe\nrec", "COMP_CWORD": "1"}
    for args, extra in ((["recall", "--help"], {}), ([], tab)):
        expected = run(args, {**plain, **extra})
        assert expected.returncode == 0 and expected.stdout.strip()
        first = run(args, {**seeded, **extra})
        names, again = imported(args, {**seeded, **extra})
        assert first.stdout == again.stdout == expected.stdout
        assert "typer" not in names and "rich" not in names  # answered without the CLI
    # the detached prefill answers the next TABs (every command-name prefix) exactly as the CLI would
    other = {**tab, "COMP_WORDS": "memsafe graph s", "COMP_CWORD": "2"}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        names, hit = imported([], {**seeded, **other})
        if "typer" not in names:
            break
        time.sleep(0.5)
    assert "typer" not in names, "the prefill never stored `memsafe graph s<TAB>`"
    assert hit.stdout == run([], {**plain, **other}).stdout and "show" in hit.stdout


def test_a_broken_answer_cache_is_ignored(seeded, tmp_path):
    run(["--help"], seeded)
    for f in (tmp_path / "cache").glob("cli-answers-*.json"):
        f.write_text("{not json")
    proc = run(["--help"], seeded)
    assert proc.returncode == 0 and "remember" in proc.stdout


def pending(db: Path) -> int:
    opened = api.open_store(str(db))
    try:
        return opened.store.pending_count()
    finally:
        opened.store.close()


def status_pending(env: dict) -> int:
    proc = run(["status", "--json"], env)
    return json.loads(proc.stdout)["pending_embeddings"]


def test_mcp_remember_killed_before_its_embedding_is_filled_by_the_next_recall(tmp_path, embedder):
    """kill -9 between the committed write and its embedding: nothing is lost, `status` counts it
    pending, and the next process with the model (here a default `recall`) fills it."""
    db = tmp_path / "db" / "memory.db"
    env = {"MEMSAFE_HOME": str(tmp_path / "home"), "MEMSAFE_SERVE_WARM": "0", "MEMSAFE_DB": str(db)}
    client = RawClient(db, env=env, cwd=tmp_path)
    try:
        client.initialize()
        reply = client.call("remember", {"content": "The ledger service retries three times", "is_global": True})
        assert not reply.get("isError") and "#1" in reply["content"][0]["text"]
    finally:
        client.proc.send_signal(signal.SIGKILL)
        client.proc.wait(30)
    assert status_pending(env) == 1
    proc = run(["recall", "how often does the ledger retry", "--json"], env)
    assert proc.returncode == 0 and [m["id"] for m in json.loads(proc.stdout)["results"]] == [1]
    assert status_pending(env) == 0


def test_cli_remember_is_embedded_by_a_detached_process(tmp_path, embedder):
    db = tmp_path / "db" / "memory.db"
    env = {"MEMSAFE_HOME": str(tmp_path / "home"), "MEMSAFE_DB": str(db)}
    off = run(["remember", "Backups run nightly at two", "--global"], {**env, "MEMSAFE_BACKGROUND_EMBED": "0"})
    assert off.returncode == 0 and status_pending(env) == 1  # stored at once, vector pending
    on = run(["remember", "Deploys need two approvals", "--global"], {**env, "MEMSAFE_BACKGROUND_EMBED": "1"})
    assert on.returncode == 0
    deadline = time.monotonic() + 120  # eventual, not timed: the background process fills both
    while pending(db) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pending(db) == 0


def test_embed_new_reports_near_duplicates_but_never_the_memory_itself(store, embedder):
    a = api.remember(store, "The user prefers tabs", embed_now=False)
    b = api.remember(store, "The user prefers tabs.", embed_now=False)
    api.backfill(store, limit=1)  # another process embedded `a` meanwhile
    done, near = api.embed_new(store)
    assert done == 1 and [(i, n["id"]) for i, n in near] == [(b.id, a.id)]
    c = api.remember(store, "Staging rotates its keys monthly", embed_now=False)
    with store.write():  # c embedded elsewhere while this process still sees it pending
        store.ensure_vector_table(embedder.model_id, embedder.dim)
        store.put_vector(c.id, embedder.embed_one(c.content).astype("float32").tobytes())
        store.update_memory(c.id, {"embedded": 0})
    done, near = api.embed_new(store)
    assert done == 1 and near == []  # not "nearly the same as itself"


def test_cached_model_graph_is_bit_identical_and_rebuilt_when_corrupt(tmp_path, monkeypatch, embedder):
    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    model, tokenizer = embed.model_files()
    texts = ["we deploy on Fridays", "the cache is warmed at boot " * 30, "ünïcode ✓"]
    (tmp_path / "cache").mkdir()
    old = tmp_path / "cache" / f"{model.stem}-0123456789abcdef01234567.onnx"  # the single-file cache of before
    old.write_bytes(b"old")
    stale = tmp_path / "cache" / f"{model.stem}-76543210fedcba9876543210"  # another key: a graph of before
    stale.mkdir()
    (stale / "model.data").write_bytes(b"weights")
    unused = time.time() - embed.STALE_CACHE_SECONDS - 60  # loaded by no process since
    os.utime(stale, (unused, unused))
    built = embed.Embedder(model, tokenizer)  # optimises and saves the graph, its weights beside it
    folders = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(folders) == 1 and sorted(p.name for p in folders[0].iterdir()) == ["model.data", "model.onnx"]
    assert not old.exists() and not stale.exists()
    from_cache = embed.Embedder(model, tokenizer)
    monkeypatch.setenv("MEMSAFE_MODEL_CACHE", "0")
    plain = embed.Embedder(model, tokenizer)
    assert np.array_equal(built.embed(texts), plain.embed(texts))
    assert np.array_equal(from_cache.embed(texts), plain.embed(texts))
    monkeypatch.delenv("MEMSAFE_MODEL_CACHE")
    for name in ("model.data", "model.onnx"):
        cached = folders[0] / name
        size = cached.stat().st_size
        cached.write_bytes(cached.read_bytes()[:4096])  # truncated
        again = embed.Embedder(model, tokenizer)
        assert np.array_equal(again.embed(texts), plain.embed(texts))
        assert cached.stat().st_size == size  # rebuilt
    (folders[0] / "model.onnx").unlink()  # half a folder
    assert np.array_equal(embed.Embedder(model, tokenizer).embed(texts), plain.embed(texts))
    assert (folders[0] / "model.onnx").is_file()
    assert not list((tmp_path / "cache").glob(".*.tmp"))


def test_the_graph_without_nan_guards_is_bit_identical_to_the_shipped_model(tmp_path, monkeypatch, embedder):
    """The softmax NaN guards (`Where(IsNaN(p), 0, p)`) go, and the vectors stay those of
    onnxruntime running the shipped file, for single texts and a padded batch."""
    import onnxruntime as ort

    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    model, tokenizer = embed.model_files()
    ops = [n.op_type for n in embed._onnx_subset().FromString(model.read_bytes()).graph.node]
    lean = embed.without_nan_guards(model.read_bytes())
    lean_ops = [n.op_type for n in embed._onnx_subset().FromString(lean).graph.node]
    assert ops.count("IsNaN") == 6 and lean_ops.count("IsNaN") == 0
    assert lean_ops.count("Where") == ops.count("Where") - 6 and len(lean_ops) == len(ops) - 12
    assert embed.without_nan_guards(lean) == lean  # nothing left to take out
    shipped = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    ours = embed.Embedder(model, tokenizer)
    texts = ["we deploy on Fridays", "the cache is warmed at boot " * 30, "ünïcode ✓", "x"]
    encodings = ours._encode(texts)
    width = max(len(e.ids) for e in encodings)
    ids, mask = np.zeros((len(texts), width), dtype=np.int64), np.zeros((len(texts), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, :len(e.ids)], mask[row, :len(e.ids)] = e.ids, 1
    wanted = {i.name for i in shipped.get_inputs()}
    for rows in ([0], [2], list(range(len(texts)))):  # one text, and a batch padded to its longest
        feeds = {k: v[rows] for k, v in {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)}.items() if k in wanted}
        if len(rows) == 1:
            feeds = {k: v[:, : len(encodings[rows[0]].ids)] for k, v in feeds.items()}
        assert np.array_equal(ours.session.run(None, feeds)[0], shipped.run(None, feeds)[0])


def test_a_one_query_session_gives_the_same_vectors_within_rounding(embedder):
    """A CLI recall's session skips prepacking (`Embedder(one_query=True)`): another
    matrix kernel, so not bit-identical, but within 1e-6, and it ranks texts as the default does."""
    model, tokenizer = embed.model_files()
    quick = embed.Embedder(model, tokenizer, one_query=True)
    texts = ["we deploy on Fridays", "the cache is warmed at boot " * 30, "ünïcode ✓", "", "x"]
    docs = embedder.embed(texts)
    assert np.abs(quick.embed(texts) - docs).max() < 1e-6
    for query in ("how is the cache warmed?", "deploy day", "unicode"):
        assert np.abs(quick.embed_one(query) - embedder.embed_one(query)).max() < 1e-6
        ranked = [list(np.argsort(-(docs @ model.embed_one(query)))) for model in (quick, embedder)]
        assert ranked[0] == ranked[1], query


def test_the_python_word_pieces_of_an_ascii_query_are_those_of_tokenizers(tmp_path, monkeypatch, embedder):
    """`embed._WordPiece` (a one-query process reads an ASCII query without `tokenizers`) gives the
    ids `tokenizers` gives, or declines: checked on generated memories, odd ASCII (controls, runs of
    punctuation, words over 100 letters, texts over 256 pieces, added tokens) and random strings;
    the vocabulary it keeps in the cache folder gives the same answers."""
    import random

    from memsafe.bench.scale import synthetic_memories

    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    _, tokenizer_path = embed.model_files()
    reference = embedder.tokenizer
    rng = random.Random(13)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 3 + " \t\n\r" * 4 + \
        "".join(map(chr, range(0, 128)))
    texts = [m["content"] for m in synthetic_memories(300)] + [
        "How is the cache warmed at boot?", "deploy-on-friday's_ops/v2.0 (see #41) & ~/x.y", "x", " padded ",
        "tab\tnew\nline\rreturn\x00nul\x07bel\x0bvt\x0cff\x1c\x1f\x7fdel", "a" * 101, "b" * 100, "unaffable " * 300,
        "[MASK] this", "[mask] lower", "a [SEP] b", "[UNK]", "[", "]]", "CamelCaseWord snake_case_word kebab-case-word",
        "!!!???...,,,;;;", "''\"\"``", "email: a.b@c.io http://x.y/z?q=1&r=2", "12345678901234567890 3.14159",
        "qwxzj zzzzzz xylophonequartz", "   ", "\t\n", "-", "ÿ", "café", "naïve résumé",
    ] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(400)]
    light = embed._WordPiece.cached(tokenizer_path)  # from the JSON, kept
    again = embed._WordPiece.cached(tokenizer_path)  # from the cache folder
    assert light is not None and again is not None and list((tmp_path / "cache").glob("wordpiece-*.marshal"))
    answered = 0
    for text in texts:
        ids = light.encode(text)
        assert ids == again.encode(text), text
        if ids is not None:
            answered += 1
            assert ids == reference.encode(text).ids, text
    assert answered >= len(texts) * 0.9
    assert light.encode("café") is None and light.encode("[MASK] this") is None and light.encode("   ") is None
    quick = embed.Embedder(*embed.model_files(), one_query=True)
    assert np.abs(quick.embed_one("How is the cache warmed at boot?")
                  - embedder.embed_one("How is the cache warmed at boot?")).max() < 1e-6
    assert quick._tokenizer is None  # `tokenizers` was not needed
    assert np.abs(quick.embed(["café", "two texts"]) - embedder.embed(["café", "two texts"])).max() < 1e-6


def test_a_default_recall_loads_numpy_with_one_blas_thread_unless_told_otherwise():
    code = ("import os, sys; from memsafe import embed; embed.load_soon(one_query=True); embed._loader.join(); "
            "print(embed.loaded(), 'numpy' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.split() == ["True", "True", "1"], proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert proc.stdout.split() == ["True", "True", "2"], proc.stderr[-2000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the shortcut is Linux's")
@pytest.mark.parametrize("env", [{}, {"XDG_CACHE_HOME": "/tmp/xdg/"}, {"XDG_CACHE_HOME": "/a//b"},
                                 {"XDG_CACHE_HOME": "relative"}, {"XDG_CACHE_HOME": ""}, {"HOME": "/home/u/"},
                                 {"HOME": "/"}, {"HOME": "relative", "XDG_CACHE_HOME": "/x"}])
def test_the_cache_folder_is_platformdirs_without_importing_it(monkeypatch, env):
    import platformdirs

    from memsafe import settings

    monkeypatch.delenv("MEMSAFE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert settings.cache_dir() == Path(platformdirs.user_cache_dir("memsafe", appauthor=False))


def test_a_query_that_names_no_time_is_answered_without_the_date_pattern():
    """`when.find` skips compiling its date pattern for an ASCII query with no digit and none of
    the words every date alternative needs: only where the pattern finds nothing."""
    import random
    from datetime import datetime, timezone

    from memsafe import when

    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    rng = random.Random(7)
    words = ["how", "is", "the", "cache", "warmed", "at", "boot", "may", "in", "of", "since", "during", "mid",
             "late", "early", "last", "next", "this", "past", "ago", "a", "few", "two", "week", "weekend", "monday",
             "Sept", "DEC", "today", "yesterday", "tonight", "2023", "3", "2022-01-05", "Q3", "end", "of",
             "start", "June", "decided", "marching", "augment", "octopus", "novel", "playday", "agog", "years"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    texts += ["What did Gina paint in May 2023?", "what did we decide last December", "3 days ago", "early June",
              "how is the cache warmed at boot", "  spaced   out  ", "ſeptember 2023", "in ſeptember", "naïve in May"]
    skipped = 0
    for text in texts:
        if not when._may_name_time(text):
            skipped += 1
            assert not list(when._span().finditer(text)), text
            assert when.find(text, now) == ([], " ".join(text.split()))
    assert skipped > 100 and when.find("in May 2023", now)[0]


def test_a_model_load_started_before_a_reset_loads_nothing_after_it(monkeypatch, tmp_path):
    """A `load_soon` thread that runs late (a loaded machine) must not load a model under the settings
    of what came after a `reset` (tests change MEMSAFE_MODEL_DIR between them): it loads nothing."""
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path / "nowhere"))
    generation = embed._generations
    embed.reset()
    try:
        assert embed.get_embedder(generation) is None and embed.load_error() is None  # nothing was tried
        assert embed.get_embedder() is None and "nowhere" in embed.load_error()
    finally:
        embed.reset()


def test_timing_statistics():
    assert timing.percentile([3, 1, 2], 0.5) == 2
    assert timing.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert timing.percentile([], 0.5) == 0.0
    s = timing.summary([0.010, 0.020, 0.030], scale=1000)
    assert s["p50"] == 20.0 and s["min"] == 10.0 and s["max"] == 30.0 and s["n"] == 3
    m = timing.Measure("x", [sys.executable, "-c", "pass"], target_ratio=100)
    result = timing.interleaved([m], 2)
    assert result["measures"]["x"]["met"] is True and result["measures"]["x"]["seconds"]["n"] == 2


def test_cached_token_ranks_count_exactly_like_tiktoken_and_survive_corruption(tmp_path, monkeypatch):
    import tiktoken

    from memsafe import tokens

    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    reference = tiktoken.get_encoding(tokens.ENCODING)
    texts = ["hello world", "ünïcode ✓ 🎉 \ud800".encode("utf-8", "replace").decode(), "def f(x): return x**2" * 50]
    for state in ("built", "cached", "corrupt"):
        if state == "corrupt":
            for f in (tmp_path / "cache").glob("*.marshal"):
                f.write_bytes(b"\x00garbage")
        tokens._encoding.cache_clear()
        tokens._count_kept.cache_clear()  # counted again, not remembered from the state before
        try:
            assert [tokens.count(t) for t in texts] == [len(reference.encode(t)) for t in texts], state
            assert tokens.encoding_name() == tokens.ENCODING
        finally:
            tokens._encoding.cache_clear()
    assert len(list((tmp_path / "cache").glob("*.marshal"))) == 1


def test_a_default_recall_loads_the_model_from_its_start_and_still_fails_cleanly(seeded):
    """A default recall starts loading the model on its own thread before it opens the store (issue
    13: the load overlaps the store work). A usage error meanwhile is still one line and exit 2: the
    process leaves without the interpreter's teardown (`memsafe.__main__._exit_now`), so it never
    aborts inside onnxruntime however far the load got; lexical recall loads nothing."""
    for args in (["recall", "deploy", "--since", "the day after never"], ["recall", "\u200b"]):
        for _ in range(3):  # the load is at another point each time
            names, proc = imported(args, seeded)
            assert "numpy" in names and proc.returncode == 2, proc.stderr[-2000:]
            errors = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
            assert len(errors) == 1 and errors[0].startswith("Error: "), errors
    names, proc = imported(["recall", "blue-green deploy"], seeded)
    assert proc.returncode == 0 and "blue-green" in proc.stdout and "onnxruntime" in names


@pytest.mark.parametrize("cores, threads", [(1, 1), (2, 2), (4, 4), (8, 4), (None, 1)])
def test_the_model_takes_the_cores_the_process_may_run_on_up_to_four(monkeypatch, cores, threads):
    """`embed.default_threads`: min(4, cores), counting the CPUs the process may run on
    (`os.sched_getaffinity`), else the machine's, else 1."""
    if cores is None:  # no affinity call, no count
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
        monkeypatch.setattr(os, "cpu_count", lambda: None)
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert embed.default_threads() == threads


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a process that may run on 2 CPUs or more, and CPU affinity")
def test_a_process_pinned_to_one_cpu_embeds_on_one_thread():
    """`taskset -c 0 memsafe embed` (or a container's cpuset) leaves the process one CPU of the
    machine's many: the model gets one thread, not a thread per core of the machine (they would
    only contend on the one CPU)."""
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
            "from memsafe import embed; e = embed.get_embedder()\n"
            "print(embed.default_threads(), e.session.get_session_options().intra_op_num_threads)")
    env = {k: v for k, v in os.environ.items() if k != "MEMSAFE_EMBED_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.split() == ["1", "1"], proc.stderr[-2000:]


HOOK_LIGHT = ("typer", "rich", "click", "pydantic", "numpy", "onnxruntime", "tokenizers", "tiktoken", "mcp",
              "detect_secrets")


@pytest.mark.parametrize("event", ["SessionStart", "UserPromptSubmit"])
def test_the_agent_hooks_that_answer_the_model_import_no_cli_model_or_tokenizer(tmp_path, store, db_path, event):
    """The hooks at session start and at each prompt run in a process of their own: they answer
    from the store by keywords, without the CLI (Typer, Click, rich, pydantic), numpy, the model,
    a tokenizer library or the secret scanner's plugins; a session start also without the secret
    scanner (`memsafe.safety`) and the query parser (`memsafe.when`)."""
    api.remember(store, "We deploy notifications with a blue-green switch", kind="decision")
    api.remember(store, "The runbook for restarting notifications lives in ops/notify.md", tags=["pinned"])
    home = tmp_path / "home"
    payload = {"cwd": str(tmp_path), "hook_event_name": event,
               "transcript_path": str(tmp_path / "none.jsonl"),
               **({"source": "startup"} if event == "SessionStart" else {"prompt": "restarting notifications"})}
    env = {"MEMSAFE_HOME": str(home), "MEMSAFE_CACHE_DIR": str(tmp_path / "cache")}
    for attempt in ("first", "again"):  # the second as in use: token counts and secret gates cached
        proc = run(["--db", str(db_path), "agent", "hook"], {**env, "PYTHONPROFILEIMPORTTIME": "1"}, cwd=tmp_path,
                   input=json.dumps(payload | {"session_id": str(uuid.uuid4())}))  # as Claude Code names sessions
        modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", proc.stderr, re.M))
        assert proc.returncode == 0 and "runbook" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
        assert not (home / "hook.log").exists() or not (home / "hook.log").read_text().strip()
    names = {m.split(".")[0] for m in modules}
    assert not names & set(HOOK_LIGHT), sorted(names & set(HOOK_LIGHT))
    assert "memsafe.store.sqlite" in modules  # it did read the store
    if event == "SessionStart":
        assert not modules & {"memsafe.safety", "memsafe.when", "memsafe.api.retrieval"}, sorted(modules)
