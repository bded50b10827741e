"""The command line: output contracts, exit codes, one-line errors for bad input, encodings
, offline token counting, project scoping."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import run_memsafe

from memsafe import __version__, api, settings


def one_line_error(result) -> str:
    """Assert the failure is one line on stderr, no traceback, non-zero exit; return the line."""
    assert result.exit_code != 0
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_remember_recall_json_contract(cli):
    r = cli("remember", "The build cache lives in ~/.cache/buildkit", "--kind", "fact", "--tag", "ops", "--json")
    assert r.exit_code == 0, r.stderr
    memory = json.loads(r.stdout)
    assert memory["kind"] == "fact" and memory["tags"] == ["ops"] and memory["source"] == "user"
    r = cli("recall", "where is the buildkit cache", "--json")
    doc = json.loads(r.stdout)
    assert set(doc) >= {"query", "budget", "tokens_used", "results"}
    assert doc["results"][0]["id"] == memory["id"] and doc["results"][0]["source"] == "user"
    assert doc["tokens_used"] <= doc["budget"]


def test_remember_reads_stdin_and_prints_the_id(cli):
    r = cli("remember", "-", input="Rotate the signing key yearly\n")
    assert r.exit_code == 0 and "Remembered memory 1" in r.stdout
    assert json.loads(cli("get", "1", "--json").stdout)["content"] == "Rotate the signing key yearly"


def test_update_reads_stdin_like_remember(cli):
    """`update --content -` stored a literal "-"."""
    assert cli("remember", "Rotate the signing key yearly").exit_code == 0
    r = cli("update", "1", "--content", "-", input="Rotate the signing key every six months\n")
    assert r.exit_code == 0, r.stderr
    assert json.loads(cli("get", "1", "--json").stdout)["content"] == "Rotate the signing key every six months"


def test_duplicate_names_the_existing_id(cli):
    cli("remember", "Use ruff for linting")
    line = one_line_error(cli("remember", "Use ruff for linting"))
    assert "already remembered as memory 1" in line


@pytest.mark.parametrize("args", [["get", "424242"], ["forget", "424242"], ["restore", "424242"]])
def test_not_found_is_one_line_and_exit_1(cli, args):
    cli("remember", "seed memory")
    result = cli(*args)
    one_line_error(result)
    assert result.exit_code == 1


@pytest.mark.parametrize(
    "args",
    [["get", "abc"], ["forget", "1.5"], ["recall", "x", "--budget", "0"], ["recall", "x", "--budget", "-3"],
     ["recall", "x", "--limit", "0"], ["remember", "x", "--kind", "nonsense"], ["purge"],
     ["remember", ""], ["remember", "   "], ["recall", "   "], ["config", "set", "token_budget", "0"],
     ["config", "set", "safety_multiplier", "abc"], ["config", "get", "no_such_key"]],
)
def test_usage_errors_exit_2_without_traceback(cli, args):
    result = cli(*args)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr + result.stdout


def test_purge_without_terminal_needs_yes(cli):
    cli("remember", "to be destroyed")
    line = one_line_error(cli("purge", "1"))
    assert "--yes" in line
    assert json.loads(cli("get", "1", "--json").stdout)["status"] == "active"
    r = cli("purge", "1", "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["purged_ids"] == [1]
    again = json.loads(cli("remember", "another one to destroy", "--json").stdout)["id"]
    r = cli("purge", str(again), "--yes")
    assert "Purged 1 memory (0 versions of history removed)" in r.stderr + r.stdout


def test_counts_read_in_the_right_number():
    from memsafe import render

    assert [render.count_of(n, "memory") for n in (0, 1, 2, 1500)] == [
        "0 memories", "1 memory", "2 memories", "1,500 memories"]
    assert render.count_of(1, "config") == "1 config" and render.count_of(3, "config") == "3 config keys"


def test_forget_restore_through_cli(cli):
    cli("remember", "The staging DB password rotates every Friday", "--tag", "secrets")
    assert cli("forget", "1", "--reason", "stale").exit_code == 0
    for query in ("staging password rotation", "Friday", "when do credentials change"):
        doc = json.loads(cli("recall", query, "--json").stdout)
        assert all(r["id"] != 1 for r in doc["results"])
    marked = json.loads(cli("recall", "staging password", "--include-forgotten", "--json").stdout)["results"]
    assert marked[0]["id"] == 1 and marked[0]["status"] == "forgotten"
    assert "[forgotten]" in cli("recall", "staging password", "--include-forgotten").stdout
    assert cli("restore", "1").exit_code == 0
    assert json.loads(cli("recall", "Friday", "--json").stdout)["results"][0]["id"] == 1


def test_config_set_is_validated_and_used(cli):
    assert cli("config", "set", "token_budget", "50").exit_code == 0
    assert cli("config", "get", "token_budget").stdout.strip() == "50"
    cli("remember", "word " * 400)
    doc = json.loads(cli("recall", "word", "--json").stdout)
    assert doc["budget"] == 50 and doc["tokens_used"] <= 42
    listed = json.loads(cli("config", "list", "--json").stdout)
    assert listed["token_budget"]["value"] == 50 and listed["token_budget"]["default"] == 2000


def test_a_negative_setting_is_refused_as_a_value_not_read_as_an_option(cli):
    # `config set weight_lexical -1` answered "No such option: -1".
    r = cli("config", "set", "weight_lexical", "-1")
    assert r.exit_code == 2 and "weight_lexical must be between 0 and 100, got -1" in r.stderr
    assert "No such option" not in r.stderr and "Traceback" not in r.stderr


def test_fusion_weights_cannot_both_be_zero(cli):
    """Both at 0 would make every recall empty; the second one is refused and says what to do."""
    cli("remember", "the billing service retries three times")
    assert cli("config", "set", "weight_vector", "0").exit_code == 0
    r = cli("config", "set", "weight_lexical", "0")
    assert r.exit_code == 1 and "cannot both be 0" in r.stderr and "Traceback" not in r.stderr
    assert cli("config", "get", "weight_lexical").stdout.strip() == str(api.config.default_config()["weight_lexical"])
    assert json.loads(cli("recall", "billing retries", "--json").stdout)["results"]


def test_status_reports_paths_and_state(cli, db_path):
    cli("remember", "status probe")
    r = cli("status", "--json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["db_path"] == str(db_path)
    assert doc["counts"]["active"] == 1 and doc["vector_search"]["available"]
    assert doc["model"]["dim"] == 384 and doc["schema_version"] >= 1


def test_status_without_vectors_explains_and_exits_nonzero(db_path, memsafe_proc):
    r = memsafe_proc("--db", str(db_path), "remember", "works without vectors", env={"MEMSAFE_NO_VEC": "1"})
    assert r.returncode == 0, r.stderr
    r = memsafe_proc("--db", str(db_path), "status", env={"MEMSAFE_NO_VEC": "1"})
    assert r.returncode == 1 and "vector search unavailable" in r.stdout and "fix:" in r.stdout
    assert "1 active" in r.stdout and "Traceback" not in r.stderr


def test_unopenable_db_path_is_one_line(tmp_path, memsafe_proc):
    blocker = tmp_path / "plainfile"
    blocker.write_text("x")
    r = memsafe_proc("--db", str(blocker / "x" / "memory.db"), "remember", "hello")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1


def test_lone_surrogate_bytes_in_argv(db_path):
    """Invalid UTF-8 in argv arrives as lone surrogates; it is stored as U+FFFD, not a crash."""
    cmd = [sys.executable.encode(), b"-m", b"memsafe", b"--db", str(db_path).encode(), b"remember", b"bad \xff byte"]
    r = subprocess.run(cmd, capture_output=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    with api.open_store(str(db_path)).store as store:
        assert api.get(store, 1).content == "bad \ufffd byte"


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_legacy_console_encoding_never_crashes(db_path, memsafe_proc, encoding):
    env = {"PYTHONIOENCODING": encoding}
    r = memsafe_proc("--db", str(db_path), "remember", "Müller → 日本語 🚀 naïve", env=env)
    assert r.returncode == 0, r.stderr
    r = memsafe_proc("--db", str(db_path), "recall", "日本語", env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    r = memsafe_proc("--db", str(db_path), "recall", "日本語", "--json", env=env)
    assert json.loads(r.stdout)["results"][0]["content"] == "Müller → 日本語 🚀 naïve"


def test_token_counting_works_offline(db_path, memsafe_proc, tmp_path):
    env = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"), "HOME": str(tmp_path / "fresh-home")}
    assert memsafe_proc("--db", str(db_path), "remember", "alpha beta gamma", env=env).returncode == 0
    r = memsafe_proc("--db", str(db_path), "recall", "alpha", "--budget", "50", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["tokens"] == 3  # real cl100k count, not the estimate


# -- projects ------------------------------------------------------------------------------------


def test_project_keys_are_stable_across_spellings():
    assert settings.project_key("/home/someone/My Projects/web/") == "/home/someone/My Projects/web"
    win = settings.project_key(r"C:\Users\First Last\src\web")
    assert win == settings.project_key("c:/Users/First Last/src/web") == "c:/Users/First Last/src/web"
    assert win != settings.project_key("/home/someone/My Projects/web")
    assert settings.project_key("/a/b/../web") == "/a/web"


def test_projects_never_leak_into_each_other(cli):
    web, web2 = "/home/someone/My Projects/web", "/home/someone/My Projects/web2"
    cli("remember", "Use Redux for state management", "--project-path", web)
    cli("remember", "Use Pinia for state management", "--project-path", web2)
    cli("remember", "Keep state management out of UI components", "--global")

    def ids(*args):
        return [r["content"] for r in json.loads(cli("recall", "state management", "--json", *args).stdout)["results"]]

    got = ids("--project-path", web + "/")
    assert "Use Redux for state management" in got and "Use Pinia for state management" not in got
    assert "Keep state management out of UI components" in got  # global memories are always included
    both = ids("--all-projects")
    assert {"Use Redux for state management", "Use Pinia for state management"} <= set(both)
    only_global = ids()  # cwd is not a repository: global memories only
    assert only_global == ["Keep state management out of UI components"]


def test_project_defaults_to_the_git_root(tmp_path, monkeypatch, cli):
    repo = tmp_path / "repo"
    (repo / "pkg-a").mkdir(parents=True)
    (repo / "pkg-b").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo / "pkg-a")
    r = cli("remember", "pkg-a uses the shared eslint config", "--json")
    assert json.loads(r.stdout)["project"] == str(repo)
    monkeypatch.chdir(repo / "pkg-b")
    doc = json.loads(cli("recall", "eslint config", "--json").stdout)
    assert doc["results"][0]["content"].startswith("pkg-a uses")
    status = json.loads(cli("status", "--json").stdout)
    assert status["project"] == str(repo) and status["project_rule"].startswith("git-root")
    monkeypatch.chdir(tmp_path)
    assert json.loads(cli("recall", "eslint config", "--json").stdout)["results"] == []


# -- one scope rule on every read path ----------------------------------------

#: Commands that print memory text, entity names or relations: each follows recall's scope.
SCOPED_READS = {"recall", "get", "history", "list", "graph show", "graph entities", "graph list", "export"}
#: Commands that print no memory content (counts, settings, health) or write.
NOT_SCOPED_READS = {
    "bench", "confidence", "config get", "config list", "config reset", "config set", "confirm", "consolidate",
    "decay", "decrypt", "doctor", "embed", "encrypt", "forget", "graph add-entity", "graph relate",
    "graph unrelate", "graph rename", "graph merge", "graph alias", "graph unalias", "graph delete",
    "graph unlink", "hook backfill", "hook install", "hook run", "hook status", "hook uninstall", "import",
    "init", "purge", "rekey", "remember", "restore", "serve", "status", "update",
    "ui",  # prints only its URL; the page shows every project, as its owner asked for the whole store
    "agent captures", "agent plugin", "agent undo",  # session ids and counts, a folder, a write
    "agent hook",  # shows its event's cwd's project and global memories (recall's scope): tests/test_agent_hooks.py
}


def _commands() -> set[str]:
    import typer.main

    from memsafe.cli import app

    def walk(command, prefix=""):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{prefix}{name} ") if hasattr(sub, "commands") else [prefix + name]

    return set(walk(typer.main.get_command(app)))


def two_projects(tmp_path, monkeypatch, cli) -> dict:
    """Repositories A and B and a global memory; A's memory names AlphaVault, which a relation
    ties to SharedLib (named by B's and the global memory). Returns ids and repo paths; cwd is B."""
    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    for repo in (a, b):
        (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(a)
    ida = json.loads(cli("remember", "AlphaVault keeps the deploy keys under /srv/alpha-vault", "--json").stdout)["id"]
    assert cli("update", str(ida), "--content", "AlphaVault keeps the deploy keys under /srv/alpha-vault/keys"
               ).exit_code == 0  # a history version too
    cli("remember", "SharedLib logs every request", "--global")
    assert cli("graph", "relate", "SharedLib", "used_by", "AlphaVault").exit_code == 0
    monkeypatch.chdir(b)
    idb = json.loads(cli("remember", "BetaQueue retries jobs through SharedLib", "--json").stdout)["id"]
    return {"a": a, "b": b, "ida": ida, "idb": idb}


def test_every_read_command_has_recalls_scope(tmp_path, monkeypatch, cli):
    """From repository B, no read command shows A's text, A's entity names or relations to them;
    --all-projects widens each; `get`/`history` of A's id say how to widen."""
    assert SCOPED_READS | NOT_SCOPED_READS == _commands(), "classify the new command: does it print memory text?"
    s = two_projects(tmp_path, monkeypatch, cli)
    ida = str(s["ida"])
    reads = {
        "recall": ["recall", "deploy keys SharedLib", "--json"],
        "get": ["get", ida, "--json"],
        "history": ["history", ida, "--json"],
        "list": ["list", "--all", "--json"],
        "graph show": ["graph", "show", "SharedLib", "--json"],
        "graph entities": ["graph", "entities", "--json"],
        "graph list": ["graph", "list", "--json"],
        "export": ["export", "--include-forgotten"],
    }
    assert set(reads) == SCOPED_READS
    for name, args in reads.items():
        scoped = cli(*args)
        shown = (scoped.stdout + scoped.stderr).casefold()
        assert "alphavault" not in shown and "alpha-vault" not in shown, (name, shown)
        if name in ("get", "history"):  # with --json the error is a JSON document on stdout
            assert scoped.exit_code == 1 and "--all-projects" in json.loads(scoped.stdout)["error"]["message"], name
        else:
            assert scoped.exit_code == 0, (name, scoped.stderr)
            assert "sharedlib" in shown, name  # the global memory or its entity is in scope
        widened = cli(*args, "--all-projects")
        assert widened.exit_code == 0, (name, widened.stderr)
        assert "alphavault" in widened.stdout.casefold(), name
    # the graph: A's entity is unknown from B, and a name from A is not walked through
    hidden = cli("graph", "show", "AlphaVault")
    assert hidden.exit_code == 1 and "--all-projects" in hidden.stderr
    # from A itself, A's memory and the relation are there
    monkeypatch.chdir(s["a"])
    assert cli("get", ida).exit_code == 0
    assert "alphavault" in cli("graph", "show", "SharedLib").stdout.casefold()
    # outside any repository: global memories only
    monkeypatch.chdir(tmp_path)
    assert cli("get", str(s["idb"])).exit_code == 1
    assert json.loads(cli("list", "--json").stdout)[0]["content"] == "SharedLib logs every request"



def _id_commands() -> set[str]:
    """Commands with a memory-id argument (ID or ID...)."""
    import typer.main

    from memsafe.cli import app

    def walk(command, prefix=""):
        for name, sub in getattr(command, "commands", {}).items():
            if hasattr(sub, "commands"):
                yield from walk(sub, f"{prefix}{name} ")
            elif any(p.name in ("memory_id", "memory_ids") for p in sub.params):
                yield prefix + name

    return set(walk(typer.main.get_command(app)))


def _memory_state(store, memory_id: int) -> tuple:
    events = list(store.conn.execute("SELECT at, action, detail FROM events WHERE memory_id = ? ORDER BY id",
                                     (memory_id,)))
    return store.raw_row(memory_id), store.tags_of([memory_id]).get(memory_id), store.versions(memory_id), events


def test_every_command_taking_an_id_has_gets_scope(tmp_path, monkeypatch, cli, db_path):
    """From repository B, every command that takes a memory id refuses A's memory exactly as it
    refuses an id that does not exist (no oracle), prints none of A's text and changes nothing of
    A's; --all-projects (and --project A) reach it, as with `get`."""
    s = two_projects(tmp_path, monkeypatch, cli)
    ida, idb = str(s["ida"]), str(s["idb"])
    monkeypatch.chdir(s["a"])
    gone = json.loads(cli("remember", "AlphaVault rotates its keys monthly", "--json").stdout)["id"]
    assert cli("forget", str(gone)).exit_code == 0
    monkeypatch.chdir(s["b"])
    missing = "987654"

    def walk(target: str, forgotten: str) -> dict[str, list[str]]:
        """Each id command with arguments that succeed on a memory it may reach."""
        return {
            "get": ["get", target], "history": ["history", target],
            "update": ["update", target, "--content", "hijacked by project B", "--tag", "pwned"],
            "confirm": ["confirm", target], "confidence": ["confidence", target, "0.9"],
            "restore": ["restore", forgotten], "forget": ["forget", target, "--reason", "from B"],
            "graph unlink": ["graph", "unlink", target, "AlphaVault"],
            "purge": ["purge", idb, target, "--yes"],  # all or nothing: B's own memory stays too
        }

    assert set(walk(ida, ida)) == _id_commands(), "a new command takes an id: add it to this walk"
    opened = api.open_store(str(db_path))
    before = {i: _memory_state(opened.store, i) for i in (s["ida"], gone)}
    for name, args in walk(ida, str(gone)).items():
        theirs, nothing = cli(*args), cli(*walk(missing, missing)[name])
        line = one_line_error(theirs)
        assert theirs.exit_code == nothing.exit_code == 1 and not theirs.stdout, (name, theirs.stdout)
        assert "alphavault" not in line.casefold() and "repo-a" not in line, (name, line)
        target = str(gone) if name == "restore" else ida
        assert line == one_line_error(nothing).replace(missing, target), (name, line)
        assert "--all-projects" in line and f"in project {s['b']}" in line, line
    assert {i: _memory_state(opened.store, i) for i in (s["ida"], gone)} == before
    assert opened.store.get_memory(s["idb"]).status == "active"
    # widened: every command reaches A's memories (purge last)
    for name, args in walk(ida, str(gone)).items():
        widen = ["--all-projects"] if name in ("update", "purge") else ["--project", str(s["a"])]
        done = cli(*(a for a in args if a != idb), *widen)
        assert done.exit_code == 0, (name, done.stderr)
    assert opened.store.get_memory(s["ida"]) is None and opened.store.get_memory(s["idb"]) is not None
    opened.store.close()

def test_project_paths_resolve_symlinks_and_subfolders(tmp_path, monkeypatch, cli):
    """A symlink to the repository and a subfolder of it are the repository's project, on every
    way a path is given (--project-path, --project, detection from the working directory)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "pkg").mkdir(parents=True)
    link = tmp_path / "link-to-repo"
    link.symlink_to(repo)
    monkeypatch.chdir(repo / "src")
    inside = json.loads(cli("remember", "The repo pins Node 20", "--json").stdout)
    assert inside["project"] == str(repo)
    for args in (["--project-path", str(link)], ["--project-path", str(repo / "src" / "pkg")],
                 ["--project-path", str(link / "src")], ["--project", str(link)], ["--project", "./pkg"]):
        doc = json.loads(cli("recall", "Node version", "--json", *args).stdout)
        assert [r["id"] for r in doc["results"]] == [inside["id"]], args
        stored = json.loads(cli("remember", f"note via {' '.join(args)}", "--json", *args).stdout)
        assert stored["project"] == str(repo), args
    monkeypatch.chdir(link / "src" / "pkg")  # a working directory reached through the symlink
    assert json.loads(cli("status", "--json").stdout)["project"] == str(repo)
    # a path that does not exist here (another machine's) is keyed as written
    assert settings.project_for_path("/nowhere/My Projects/web/") == "/nowhere/My Projects/web"
    assert settings.project_for_path(r"C:\Users\A B\web") == "c:/Users/A B/web"


def test_control_characters_become_spaces_on_every_input_path(db_path, embedder, tmp_path):
    """`printf 'retry\\0backoff policy' | memsafe remember -` stored `retrybackoff policy`, so
    neither word was found. Every input path keeps the words apart."""
    from memsafe import transfer

    proc = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(db_path), "remember", "-"],
                          input=b"retry\x00backoff policy", capture_output=True)
    assert proc.returncode == 0, proc.stderr
    store = api.open_store(str(db_path)).store
    assert api.get(store, 1).content == "retry backoff policy"
    for word in ("retry", "backoff"):
        assert [h.memory.id for h in api.recall(store, word, mode="lexical").hits] == [1], word
    tagged = api.remember(store, "tabs\tand\nnewlines stay; ESC\x1b[31m and DEL\x7f go", tags=["ops\x00prod"])
    assert tagged.content == "tabs\tand\nnewlines stay; ESC [31m and DEL  go" and tagged.tags == ["ops prod"]
    assert api.add_entity(store, "Foo\x00Bar").name == "Foo Bar"
    assert api.relate(store, "Foo Bar", "depends\x00on", "Baz", create=True).relation == "depends on"
    from test_server import call, inproc

    srv = inproc(db_path, cwd=str(tmp_path))  # no warm thread left running after the test

    call(srv, "remember", {"content": "cache\x00eviction runs hourly"})
    assert any(m.content == "cache eviction runs hourly" for m in api.list_memories(store))
    at = "2026-01-02T00:00:00+00:00"
    path = tmp_path / "in.jsonl"
    path.write_text("".join(transfer.dump_line(r) for r in [
        transfer.header(exported_at=at, memsafe_version="0", schema_version=1, project=None, include_forgotten=False),
        {"type": "memory", "uid": "n1", "content": "queue\x00depth alarm", "created_at": at, "updated_at": at},
        {"type": "end", "counts": {"memory": 1}},
    ]), encoding="utf-8")
    api.import_file(store, path)
    sm = tmp_path / "memory.jsonl"
    sm.write_text('{"type":"entity","name":"Ops\\u0000Team","entityType":"team","observations":["owns\\u0000deploys"]}\n',
                  encoding="utf-8")
    api.import_file(store, sm)
    contents = {m.content for m in api.list_memories(store)}
    assert {"queue depth alarm", "Ops Team: owns deploys"} <= contents
    assert "Ops Team" in {e.name for e in api.graph_entities(store)}
    assert api.add_entity(store, "ops team").created is False  # the same key as the imported name
    # a command-line argument (no NUL possible there: other controls) and an update, CLI and MCP
    arg = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(db_path), "remember", "disk\x1bquota\x7fwarning",
                          "--json"], capture_output=True)
    assert arg.returncode == 0, arg.stderr
    assert json.loads(arg.stdout)["content"] == "disk quota warning"
    updated = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(db_path), "update", "1", "--content",
                              "retry\x1bbackoff policy v2"], capture_output=True)
    assert updated.returncode == 0, updated.stderr
    assert api.get(store, 1).content == "retry backoff policy v2"
    call(srv, "update_memory", {"id": 1, "content": "retry\x00jitter policy"})
    assert api.get(store, 1).content == "retry jitter policy"
    assert [h.memory.id for h in api.recall(store, "jitter", mode="lexical").hits] == [1]
    store.close()


def _json_commands():
    """(command words, required argument count) of every command that takes --json."""
    import typer

    from memsafe.cli import app

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        elif any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            yield path, sum(p.param_type_name == "argument" and p.required for p in cmd.params)

    return list(walk(typer.main.get_command(app), []))


def test_every_json_command_reports_errors_as_one_json_document(tmp_path, embedder):
    """With --json, errors were still plain text on stderr. Each command that takes
    --json is run against a store that cannot open (a directory): the error is one document
    {"error": {"type", "message"}} on stdout, with the exit code of the plain run, whose error
    stays one line on stderr. bench and hook are covered below (they never open the store)."""
    from typer.testing import CliRunner

    from memsafe.cli import app

    runner = CliRunner()
    failed = []
    for words, required in _json_commands():
        if words[0] in ("bench", "hook"):
            continue
        args = ["--db", str(tmp_path), *words, *["1"] * required, *(["--yes"] if words == ["purge"] else [])]
        plain = runner.invoke(app, args)
        as_json = runner.invoke(app, [*args, "--json"])
        assert plain.exit_code != 0, (words, plain.stdout)
        assert as_json.exit_code == plain.exit_code, (words, as_json.stdout, as_json.stderr)
        doc = json.loads(as_json.stdout)
        assert set(doc) == {"error"} and set(doc["error"]) == {"type", "message"}, words
        assert doc["error"]["message"] and "\n" not in doc["error"]["message"]
        assert as_json.stderr == "" and plain.stdout == "" and plain.stderr.startswith("Error: "), words
        failed.append(words)
    assert len(failed) >= 25


def test_json_errors_carry_the_error_type_for_usage_and_hook_errors(tmp_path, memsafe_proc):
    usage = memsafe_proc("--db", str(tmp_path / "m.db"), "get", "abc", "--json")
    assert usage.returncode == 2 and usage.stderr == ""
    assert json.loads(usage.stdout)["error"]["type"] == "UsageError"
    missing = memsafe_proc("--db", str(tmp_path / "m.db"), "get", "7", "--json")
    scoped = ("no memory with id 7 among global memories (no project here); --all-projects "
              "(MCP: all_projects=true on the read tools) looks in every project")  # missing or elsewhere: alike
    assert missing.returncode == 1 and json.loads(missing.stdout) == {"error": {"type": "NotFound", "message": scoped}}
    hook = memsafe_proc("hook", "status", "--repo", str(tmp_path), "--json")
    assert hook.returncode != 0 and json.loads(hook.stdout)["error"]["message"], hook.stdout + hook.stderr
    text = memsafe_proc("--db", str(tmp_path / "m.db"), "get", "7")
    assert text.returncode == 1 and text.stdout == "" and text.stderr.strip() == f"Error: {scoped}"


def test_weights_cannot_both_be_zero_from_the_real_cli(db_path):
    assert run_memsafe("--db", str(db_path), "config", "set", "weight_vector", "0").returncode == 0
    proc = run_memsafe("--db", str(db_path), "config", "set", "--", "weight_lexical", "-0.0")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot both be 0" in proc.stderr


def test_version_flag_prints_the_version(tmp_path):
    # `memsafe --version` said "Error: Missing command." and exited 2
    r = run_memsafe("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"memsafe {__version__}"
    assert r.stderr == ""


def test_config_commands_take_json(cli):
    # README: "commands that print data take --json"; config get/set/reset did not
    r = cli("config", "get", "token_budget", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 2000}
    r = cli("config", "set", "token_budget", "3000", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 3000}
    r = cli("config", "reset", "token_budget", "--json")
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 2000}
    r = cli("config", "get", "db", "--json")
    assert json.loads(r.stdout)["key"] == "db" and json.loads(r.stdout)["value"].endswith("memory.db")


def test_config_type_error_reads_well(cli):
    r = cli("config", "set", "token_budget", "abc")
    assert r.exit_code == 2
    assert "must be an integer" in r.stderr
def test_project_names_and_paths_are_bounded_on_every_path(tmp_path, cli):
    """A project name or path longer than PATH_MAX is one line and nothing stored, from
    --project, --project-path and an import record; a path with a component longer than the
    file system allows (ENAMETOOLONG) is keyed as written, not a traceback; control characters
    in --project-path become spaces, as everywhere."""
    huge = "p" * (api.MAX_PROJECT_CHARS + 1)
    for args in (["--project", huge], ["--project-path", huge], ["--project", "/srv/" + huge]):
        line = one_line_error(cli("remember", "a note on a huge project", *args))
        assert "at most 4,096" in line and huge not in line, line
        assert cli("recall", "note", *args).exit_code == 2
    long_name = str(tmp_path / ("z" * 300))  # no such folder can exist: NAME_MAX is 255
    for option in ("--project", "--project-path"):
        stored = cli("remember", f"kept under an over-long name via {option}", option, long_name, "--json")
        assert stored.exit_code == 0, stored.stderr
        assert json.loads(stored.stdout)["project"] == long_name
    found = json.loads(cli("recall", "over-long name", "--project-path", long_name, "--json").stdout)
    assert len(found["results"]) == 2
    ctrl = json.loads(cli("remember", "control chars in a path", "--project-path", "/srv/we\x1bb", "--json").stdout)
    assert ctrl["project"] == "/srv/we b"
    # an import record naming a huge project is an invalid record: nothing imported
    assert cli("export", "--all-projects", "-o", str(tmp_path / "out.jsonl")).exit_code == 0
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line).get("type") == "memory")
    record = json.loads(lines[at])
    record.update(uid="f" * 32, id=None, project="/srv/" + huge, content="imported into a huge project")
    lines[at] = json.dumps(record)  # in place: the end counts still match
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    refused = cli("import", str(tmp_path / "bad.jsonl"))
    assert refused.exit_code == 1 and "at most 4,096" in refused.stderr and huge not in refused.stderr
    assert "huge project" not in cli("list", "--all-projects", "--json").stdout


def test_help_groups_every_command_in_panels_daily_use_first():
    """`memsafe --help` shows the commands in panels (daily use, curation, maintenance,
    integration, development), each command in exactly one, none left in a catch-all panel."""
    from typer.main import get_command

    from memsafe.cli import full

    names = set(get_command(full.app).commands)
    placed = [name for group in full.PANELS.values() for name in group]
    assert sorted(placed) == sorted(names), set(placed) ^ names
    text = run_memsafe("--help", env={"COLUMNS": "100", "MEMSAFE_CLI_CACHE": "0"}).stdout
    starts = [text.index(f"─ {panel} ") for panel in full.PANELS]
    assert starts == sorted(starts) and "─ Commands " not in text
    assert text.index("│ remember ") < starts[1] < text.index("│ history ") < starts[2] < text.index("│ decay ")
