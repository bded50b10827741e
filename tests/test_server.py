"""The MCP server (`memsafe serve`): tools through a real stdio client and a real subprocess,
stdout hygiene at the descriptor level, non-UTF-8 locales, large replies
to a slow reader, lone surrogates, several servers and the CLI on one file, project
scope; plus in-process checks of the tool list (annotations, token cost, optional tools)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from typer.testing import CliRunner

from memsafe import api, framing, tokens
from memsafe.bench.mcp import RawClient, tools_list_tokens
from memsafe.cli import app
from memsafe.mcp import tools as server

CORE_TOOLS = {"remember", "recall", "get_memory", "forget", "status", "configure", "update_memory", "transfer"}
GRAPH_TOOLS = {"relate_entities", "query_graph"}
UNICODE = "Müller → 日本語 🚀 naïve"

# How long a test waits for the server to exit after a signal: it first lets the warm thread
# finish the model load or the batch it is in (exiting inside onnxruntime aborts), and on a busy
# machine that alone can take well over 10 s (Ctrl-C still works).
STOP_WAIT_S = 60


def text_of(result) -> str:
    """The text of a CallToolResult (SDK object or raw dict)."""
    content = result["content"] if isinstance(result, dict) else result.content
    return "\n".join(c["text"] if isinstance(c, dict) else c.text for c in content)


def is_error(result) -> bool:
    return bool(result["isError"] if isinstance(result, dict) else result.is_error)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {"MEMSAFE_HOME": str(home)}
    env.update(extra)
    return env


async def with_session(db: Path, cwd: Path, home: Path, errlog: Path, body, env: dict | None = None,
                       args: tuple[str, ...] = ()):
    """Spawn `python -m memsafe --db DB serve` through the SDK's stdio client and run body(session)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve", *args],
        env={**server_env(home), **(env or {})}, cwd=str(cwd),
    )
    with open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def cli(db: Path, *args: str):
    return CliRunner().invoke(app, ["--db", str(db), *args])


@pytest.fixture
def paths(tmp_path):
    work = tmp_path / "srv"
    work.mkdir()
    return {"db": tmp_path / "db" / "memory.db", "cwd": work, "home": tmp_path / "home",
            "err": tmp_path / "server.err"}


# ---------------------------------------------------------------------------------------------
# Real stdio client: every tool, errors as tool errors


def test_every_tool_through_a_real_stdio_client(paths, embedder):
    async def body(s: ClientSession):
        listed = await s.list_tools()
        names = {t.name for t in listed.tools}
        out: dict = {"names": names, "tools": {t.name: t for t in listed.tools}}
        call = s.call_tool
        out["remember"] = await call("remember", {"content": "We deploy with blue-green switches", "kind": "decision",
                                                  "tags": ["ops"]})
        out["duplicate"] = await call("remember", {"content": "We deploy with  blue-green switches"})
        out["bad_kind"] = await call("remember", {"content": "x", "kind": "rumour"})
        out["empty"] = await call("remember", {"content": "   "})
        out["missing_arg"] = await call("remember", {})
        out["global"] = await call("remember", {"content": "The user prefers tabs", "kind": "preference",
                                                "is_global": True})
        # a recall loads the model at normal priority: the warning below then waits only for its
        # embedding, not for the low-priority warm thread's model load (on a loaded
        # machine that load outlasted a call's wait, and the warning came one call late)
        await call("recall", {"query": "tabs"})
        out["near"] = await call("remember", {"content": "The user prefers tabs.", "is_global": True})
        out["recall"] = await call("recall", {"query": "how do we deploy?", "budget": 500, "limit": 5,
                                              "kind": "decision", "tags": ["ops"]})
        out["recall_as_of"] = await call("recall", {"query": "deploy", "as_of": "2026-01-01T00:00:00Z"})
        out["recall_bad_as_of"] = await call("recall", {"query": "deploy", "as_of": "the day after never"})
        out["recall_both_scopes"] = await call("recall", {"query": "deploy", "project": "web", "all_projects": True})
        out["update"] = await call("update_memory", {"id": 1, "content": "We deploy with blue-green switches on k8s"})
        out["history"] = await call("get_memory", {"id": 1, "history": True})
        out["export"] = await call("transfer", {"path": "backup.jsonl", "direction": "export", "all_projects": True})
        out["import"] = await call("transfer", {"path": "backup.jsonl", "direction": "import"})
        out["import_missing"] = await call("transfer", {"path": "nope.jsonl", "direction": "import"})
        out["get"] = await call("get_memory", {"id": 1})
        out["get_missing"] = await call("get_memory", {"id": 999})
        out["forget"] = await call("forget", {"id": 1, "reason": "superseded"})
        out["forget_again"] = await call("forget", {"id": 1})
        out["recall_after_forget"] = await call("recall", {"query": "blue-green deploy"})
        out["restore"] = await call("forget", {"id": 1, "undo": True})
        out["recall_after_restore"] = await call("recall", {"query": "blue-green deploy"})
        out["purge_unconfirmed"] = await call("forget", {"id": 2, "purge": True})
        await call("forget", {"id": 2})
        out["purge"] = await call("forget", {"id": 2, "purge": True})
        out["get_purged"] = await call("get_memory", {"id": 2})
        out["status"] = await call("status", {})
        out["health"] = await call("status", {"check": True})
        out["unknown_tool"] = await call("no_such_tool", {})
        out["ping"] = await s.send_ping()
        return out

    r = anyio.run(with_session, paths["db"], paths["cwd"], paths["home"], paths["err"], body)

    assert CORE_TOOLS <= r["names"]
    assert all(r["tools"][n].description for n in r["names"])
    assert not is_error(r["remember"]) and "#1" in text_of(r["remember"])
    # errors are tool errors with actionable text, never success-looking strings
    assert is_error(r["duplicate"]) and "memory 1" in text_of(r["duplicate"])
    assert is_error(r["bad_kind"]) and "decision" in text_of(r["bad_kind"])
    assert is_error(r["empty"]) and "empty" in text_of(r["empty"])
    assert is_error(r["missing_arg"]) and "content" in text_of(r["missing_arg"])
    assert not is_error(r["global"]) and "global" in text_of(r["global"])
    # remember replies before embedding; the near-duplicate reaches the agent on the next call
    assert not is_error(r["near"]) and "#3" in text_of(r["near"])
    assert "Note: memory #3 is nearly the same as #2" in text_of(r["near"]) + text_of(r["recall"])
    recalled = text_of(r["recall"])
    assert not is_error(r["recall"])
    assert "#1 decision" in recalled and "src=agent" in recalled and "tokens" in recalled
    assert "blue-green" in recalled and "tabs" not in recalled  # kind filter applied
    assert not is_error(r["recall_as_of"]) and text_of(r["recall_as_of"]).startswith("0 memories")  # before it
    assert is_error(r["recall_bad_as_of"])
    assert is_error(r["recall_both_scopes"]) and "not both" in text_of(r["recall_both_scopes"])
    assert not is_error(r["update"]) and text_of(r["update"]).startswith("Updated [#1 decision")
    assert "on k8s" not in text_of(r["update"])  # a write acknowledges, never echoes the body
    history = text_of(r["history"])
    assert "2 versions" in history and "update" in history and "switches on k8s" in history
    assert not is_error(r["export"]) and (paths["cwd"] / "backup.jsonl").exists()
    assert not is_error(r["import"]) and "0 added" in text_of(r["import"])  # merging by uid: nothing new
    assert is_error(r["import_missing"])
    assert "on k8s" in text_of(r["get"]) and "project=" not in text_of(r["get"])
    assert is_error(r["get_missing"]) and "999" in text_of(r["get_missing"])
    assert not is_error(r["forget"]) and is_error(r["forget_again"]) and "restore" in text_of(r["forget_again"])
    assert text_of(r["restore"]) == "Restored #1"
    assert "#1 " not in text_of(r["recall_after_forget"])
    assert not is_error(r["restore"]) and "#1 " in text_of(r["recall_after_restore"])
    assert is_error(r["purge_unconfirmed"]) and "forget it first" in text_of(r["purge_unconfirmed"])
    assert not is_error(r["purge"]) and "#2" in text_of(r["purge"])
    assert is_error(r["get_purged"])
    assert str(paths["db"]) in text_of(r["status"]) and "memories" in text_of(r["status"])
    assert "health: ok" in text_of(r["health"]) and "health" not in text_of(r["status"])
    assert is_error(r["unknown_tool"])
    # the same file, read by the CLI, holds what the server wrote
    opened = api.open_store(str(paths["db"]))
    try:
        assert api.get(opened.store, 1).source == "agent"
    finally:
        opened.store.close()


# ---------------------------------------------------------------------------------------------
# Raw stdout holds only JSON-RPC; a lone surrogate is stored as U+FFFD


def test_stdout_is_only_jsonrpc_and_lone_surrogates_become_fffd(paths, embedder):
    env = server_env(paths["home"], PYTHONWARNINGS="always", MEMSAFE_LOG_LEVEL="DEBUG")
    with RawClient(paths["db"], env=env, cwd=paths["cwd"]) as c:
        init = c.initialize()
        listed = c.request("tools/list")["result"]
        # the escape is written literally into the JSON text, as a careless client would
        c.write_raw('{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"remember",'
                    '"arguments":{"content":"deploy ok \\ud83d truncated \\ud83d\\ude80"}}}')
        stored = c.receive(900)["result"]
        recalled = c.call("recall", {"query": "deploy ok truncated"})  # loads the model
        status = c.call("status", {})
        pong = c.request("ping")
        code = c.close()
    assert "instructions" in init and listed["tools"]
    assert not is_error(stored), text_of(stored)
    assert "deploy ok \ufffd truncated 🚀" in text_of(recalled)
    assert "model" in text_of(status) and pong["result"] == {}
    assert code == 0
    assert c.lines, "no output at all"
    for line in c.lines:
        message = json.loads(line.decode("utf-8"))  # every stdout line is JSON …
        assert message.get("jsonrpc") == "2.0", line  # … and JSON-RPC 2.0
    assert b"DEBUG" in bytes(c.stderr)  # the logs exist, on stderr


def test_malformed_lines_get_jsonrpc_error_replies_and_the_server_stays_up(paths):
    """JSON-RPC 2.0 section 5.1: a line that is not JSON gets -32700 (id null); JSON that is not a
    request gets -32600 (with its id when it has one). The SDK alone would never answer them."""

    def next_error(c):
        for _ in range(10):
            message = c.receive(None, timeout=30)
            if "error" in message:
                return message
        raise AssertionError("no error reply")

    with RawClient(paths["db"], env=server_env(paths["home"]), cwd=paths["cwd"]) as c:
        c.initialize()
        c.write_raw("this is not json")
        parse = next_error(c)
        c.write_raw("[]")
        empty_batch = next_error(c)
        c.write_raw('{"jsonrpc":"2.0","id":77,"method":"tools/call","params":"remember this"}')
        bad_params = c.receive(77, timeout=30)
        c.write_raw('\ufeff{"jsonrpc":"2.0","id":78,"method":"ping"}')  # a byte-order mark first
        bom_ping = c.receive(78, timeout=30)
        c.write_raw("")
        pong = c.request("ping")
        code = c.close()
    assert parse["error"]["code"] == -32700 and parse["id"] is None
    assert empty_batch["error"]["code"] == -32600 and empty_batch["id"] is None
    assert bad_params["error"]["code"] == -32600
    assert bom_ping["result"] == {}
    assert pong["result"] == {} and code == 0


def test_the_server_exits_cleanly_when_the_client_leaves_while_the_model_loads(paths):
    """Why the test above failed now and then under load: stdin closed while the warm-up thread
    was still loading the model, and the interpreter's shutdown raced onnxruntime's threads
    ("terminate called without an active exception", exit -6). The server now ends with
    os._exit once every reply is written, whatever the warm-up thread is doing."""
    for wait in (0.05, 0.2, 0.4, 0.6):
        with RawClient(paths["db"], env=server_env(paths["home"]), cwd=paths["cwd"]) as c:
            c.initialize()
            time.sleep(wait)
            code = c.close()
        assert code == 0 and b"terminate called" not in bytes(c.stderr), (wait, bytes(c.stderr)[-500:])


def test_claimed_stdio_sends_native_writes_and_prints_to_stderr(tmp_path):
    """fd 1 itself is redirected, so a native library writing to it cannot reach the wire."""
    script = (
        "import os, sys\n"
        "from memsafe.mcp.tools import _claim_stdio\n"
        "wire_in, wire_out = _claim_stdio()\n"
        "os.write(1, b'native noise on fd 1\\n')\n"
        "print('stray print', flush=True)\n"
        "print('caf\\u00e9 \\u65e5\\u672c', flush=True)\n"
        "os.write(wire_out, b'{\"jsonrpc\":\"2.0\",\"method\":\"ok\"}\\n')\n"
        "print(repr(sys.stdin.read()), flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], input=b"protocol bytes\n", capture_output=True,
                          timeout=60, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b'{"jsonrpc":"2.0","method":"ok"}\n'
    assert b"native noise" in proc.stderr and b"stray print" in proc.stderr
    assert b"''" in proc.stderr  # fd 0 reads /dev/null, not the protocol


# ---------------------------------------------------------------------------------------------
# Nothing heavy before the handshake; pending embeddings are filled in the background


def test_initialize_touches_nothing_and_backfill_runs_after_the_handshake(paths, tmp_path):
    fresh = tmp_path / "fresh" / "memory.db"
    with RawClient(fresh, env=server_env(paths["home"]), cwd=paths["cwd"]) as c:
        c.initialize()
        c.request("tools/list")
        assert not fresh.exists()  # no open, no migration before a tool needs the store
        assert not is_error(c.call("status", {"check": True}))
        assert fresh.exists()

    opened = api.open_store(str(paths["db"]))
    try:
        for i in range(60):
            api.remember(opened.store, f"pending memory {i} about subsystem {i % 7}", embed_now=False)
    finally:
        opened.store.close()

    def pending() -> int:
        store = api.open_store(str(paths["db"])).store
        try:
            return store.pending_count()
        finally:
            store.close()

    with RawClient(paths["db"], env=server_env(paths["home"]), cwd=paths["cwd"]) as c:
        c.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "1"}})
        assert pending() == 60  # answered without embedding anything
        c.send("notifications/initialized", notify=True)
        deadline = time.monotonic() + 90
        while pending() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pending() == 0  # the warm-up thread filled them, no tool call needed
        assert c.request("ping")["result"] == {}


# ---------------------------------------------------------------------------------------------
# Legacy locales


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_non_utf8_locale_round_trips_code_points(paths, embedder, encoding):
    env = {"PYTHONIOENCODING": encoding, "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}

    async def body(s: ClientSession):
        stored = await s.call_tool("remember", {"content": UNICODE})
        recalled = await s.call_tool("recall", {"query": "Müller"})
        got = await s.call_tool("get_memory", {"id": 1})
        return stored, recalled, got

    stored, recalled, got = anyio.run(with_session, paths["db"], paths["cwd"], paths["home"], paths["err"], body,
                                      env)
    assert not is_error(stored), text_of(stored)
    assert UNICODE in text_of(recalled)
    assert framing.texts_of(text_of(got)) == {1: UNICODE}
    opened = api.open_store(str(paths["db"]))
    try:
        assert api.get(opened.store, 1).content == UNICODE
    finally:
        opened.store.close()


# ---------------------------------------------------------------------------------------------
# A reply over 250 KB to a reader that waits, with stderr never read


def test_large_reply_reaches_a_slow_reader_and_the_server_stays_up(paths):
    opened = api.open_store(str(paths["db"]))
    try:
        for i in range(400):
            api.remember(opened.store, f"note {i} " + ("lorem ipsum dolor " * 36)[:630], embed_now=False)
    finally:
        opened.store.close()
    env = server_env(paths["home"], MEMSAFE_NO_MODEL="1")
    with RawClient(paths["db"], env=env, cwd=paths["cwd"], drain_stderr=False) as c:
        c.initialize()
        recall_id = c.send("tools/call", {"name": "recall",
                                          "arguments": {"query": "note", "budget": 200000, "limit": 400}})
        time.sleep(3)  # the client is busy; the server must not hang or drop the reply
        recalled = c.receive(recall_id, timeout=60)
        big = c.call("remember", {"content": "x" * 200_000 + " end"})
        get_id = c.send("tools/call", {"name": "get_memory", "arguments": {"id": 401}})
        time.sleep(3)
        part = c.receive(get_id, timeout=60)
        pong = c.request("ping", timeout=30)
        code = c.close()
    size = max(len(line) for line in c.lines)
    assert size > 65_536  # more than a pipe holds (macOS)
    text = text_of(recalled["result"])
    assert not is_error(recalled["result"]) and re.match(r"\d+ memories", text) and "budget lowered" in text
    assert tokens.count(text) <= server.REPLY_TOKENS
    assert not is_error(big), text_of(big)
    assert not is_error(part["result"]) and "get_memory id=401 offset=" in text_of(part["result"])
    assert pong["result"] == {} and code == 0


# ---------------------------------------------------------------------------------------------
# Many servers and the CLI on one file: no stale per-process state


def test_two_servers_and_the_cli_share_one_file(paths, embedder):
    db = paths["db"]

    async def both():
        params = [
            StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve"],
                                  env=server_env(paths["home"]), cwd=str(paths["cwd"]))
            for _ in range(2)
        ]
        with open(paths["err"], "a", encoding="utf-8") as err:
            async with stdio_client(params[0], errlog=err) as (ra, wa), stdio_client(params[1], errlog=err) as (rb, wb):
                async with ClientSession(ra, wa) as a, ClientSession(rb, wb) as b:
                    await a.initialize()
                    await b.initialize()
                    out = {}
                    out["a_remember"] = await a.call_tool("remember", {"content": "The staging DB rotates Fridays"})
                    out["b_recall"] = await b.call_tool("recall", {"query": "staging database rotation"})
                    out["cli_recall"] = cli(db, "recall", "staging database rotation", "--json")
                    out["b_forget"] = await b.call_tool("forget", {"id": 1})
                    out["a_recall_after"] = await a.call_tool("recall", {"query": "staging database rotation"})
                    out["a_lexical_after"] = await a.call_tool("recall", {"query": "Fridays"})
                    out["cli_recall_after"] = cli(db, "recall", "staging database rotation", "--json")
                    out["cli_remember"] = cli(db, "remember", "Releases are cut on Tuesdays", "--global")
                    out["b_sees_cli"] = await b.call_tool("recall", {"query": "when are releases cut"})
                    out["a_purge"] = await a.call_tool("forget", {"id": 1, "purge": True})
                    out["b_get_purged"] = await b.call_tool("get_memory", {"id": 1})
                    return out

    r = anyio.run(both)
    assert "#1 " in text_of(r["b_recall"])
    assert [m["id"] for m in json.loads(r["cli_recall"].stdout)["results"]] == [1]
    assert not is_error(r["b_forget"])
    assert "#1 " not in text_of(r["a_recall_after"]) and "#1 " not in text_of(r["a_lexical_after"])
    assert json.loads(r["cli_recall_after"].stdout)["results"] == []
    assert r["cli_remember"].exit_code == 0
    assert "Tuesdays" in text_of(r["b_sees_cli"])
    assert not is_error(r["a_purge"]) and is_error(r["b_get_purged"])


def test_a_kept_connection_follows_the_file_at_the_path_and_its_schema(paths, tmp_path):
    """The server keeps its SQLite connection open between tool calls (no open per call).
    A kept connection must never write to a file no longer at the path, nor use a schema another
    memsafe migrated past this one: the file replaced by another store is the one the next call
    reads and writes; a removed file is created anew as on a first open; a newer schema is refused
    with the usual message, the file left unchanged."""
    import apsw

    from memsafe.store.sqlite import migrations

    db = paths["db"]
    other = tmp_path / "other.db"
    assert cli(other, "remember", "The other store knows about the lighthouse", "--global").exit_code == 0
    env = server_env(paths["home"], MEMSAFE_SERVE_WARM="0", MEMSAFE_NO_MODEL="1")
    with RawClient(db, env=env, cwd=paths["cwd"]) as c:
        c.initialize()
        assert text_of(c.call("remember", {"content": "The first store knows about the harbour"})).startswith(
            "Remembered #1")
        assert "harbour" in text_of(c.call("recall", {"query": "harbour"}))

        os.replace(other, db)  # another store moved over the path while the server runs
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{db}{suffix}")
        seen = text_of(c.call("recall", {"query": "lighthouse"}))
        written = text_of(c.call("remember", {"content": "Written after the swap: the pier"}))

        c.call("status", {})
        os.remove(db)  # removed: the next call creates a new store there, as a first open does
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{db}{suffix}")
        recreated = text_of(c.call("remember", {"content": "Written after the removal: the quay"}))

        conn = apsw.Connection(str(db))
        conn.execute(f"PRAGMA user_version = {migrations.latest() + 1}")  # a newer memsafe migrated it
        conn.close()
        newer = c.call("recall", {"query": "quay"})
        assert c.close() == 0
    assert "lighthouse" in seen, seen
    assert written.startswith("Remembered #2"), written  # the other store's second memory
    assert recreated.startswith("Remembered #1"), recreated
    assert is_error(newer) and "newer than this memsafe understands" in text_of(newer)
    conn = apsw.Connection(str(db))
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations.latest() + 1
        assert [r[0] for r in conn.execute("SELECT content FROM memories")] == ["Written after the removal: the quay"]
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# In-process (SDK in-memory client): tool list shape, scope, optional tools


def inproc(db: Path, **kw):
    """An in-process server without the background warm-up (the test session shares one model)."""
    srv = server.build_server(None if db is None else str(db), **kw)
    srv.memsafe.start_warmup = lambda: None
    return srv


def call(srv, name: str, arguments: dict | None = None):
    from mcp import Client

    async def go():
        async with Client(srv) as client:
            return await client.call_tool(name, arguments or {})

    return anyio.run(go)


def list_tools(srv) -> dict:
    async def go():
        return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in await srv.list_tools()]

    return {"tools": anyio.run(go)}


def test_tool_list_annotations_instructions_and_token_cost(db_path):
    srv = inproc(db_path)
    listing = list_tools(srv)
    tools = {t["name"]: t for t in listing["tools"]}
    assert set(tools) == CORE_TOOLS | GRAPH_TOOLS
    for name in ("recall", "status", "get_memory", "query_graph"):
        assert tools[name]["annotations"].get("readOnlyHint") is True, name
    assert tools["forget"]["annotations"]["destructiveHint"] is True  # purge=true deletes for good
    for name in ("remember", "update_memory", "transfer", "relate_entities", "configure"):
        assert tools[name]["annotations"]["destructiveHint"] is False, name
    recall_args = tools["recall"]["inputSchema"]["properties"]
    wanted = {"query", "as_of", "project", "kind", "tags", "budget", "limit", "all_projects", "source"}
    assert wanted <= set(recall_args)
    assert "title" not in json.dumps(listing)
    cost = tools_list_tokens(listing)
    assert cost["whole"] <= 1000 and cost["core"] < cost["whole"]
    assert "recall" in srv.instructions and "not instructions" in srv.instructions
    assert not db_path.exists()  # building the server opened nothing


def test_graph_tools_call_the_graph_handlers(db_path, tmp_path, embedder):
    srv = inproc(db_path, project="alpha", cwd=str(tmp_path))
    listing = list_tools(srv)
    assert {t["name"] for t in listing["tools"]} == CORE_TOOLS | GRAPH_TOOLS
    ghost = call(srv, "relate_entities", {"relations": [["Ghost_A", "knows", "Ghost_B"]]})
    assert is_error(ghost) and "Ghost_A" in text_of(ghost)  # never a silent dangling edge
    related = call(srv, "relate_entities", {"relations": [["api", "uses", "postgres"]], "create": True})
    assert not is_error(related) and text_of(related) == "Related: api uses postgres"
    shown = text_of(call(srv, "query_graph", {"entity": "API", "depth": 1}))  # names match case-insensitively
    assert "api -uses-> postgres" in shown
    missing = call(srv, "query_graph", {"entity": "nowhere"})
    assert is_error(missing)
    cost = tools_list_tokens(listing)
    assert cost["tools"] == 10 and cost["whole"] <= 1000  # the whole tool set

def test_project_scope_is_the_servers_plus_global(db_path, tmp_path, embedder):
    alpha = inproc(db_path, project="alpha")
    beta = inproc(db_path, project="beta")
    assert "project alpha" in text_of(call(alpha, "remember", {"content": "Use Redux for state management"}))
    call(beta, "remember", {"content": "Use Pinia for state management"})
    call(alpha, "remember", {"content": "State management libraries are chosen per repo", "is_global": True})
    in_beta = text_of(call(beta, "recall", {"query": "state management"}))
    assert "Pinia" in in_beta and "per repo" in in_beta and "Redux" not in in_beta
    widened = text_of(call(beta, "recall", {"query": "state management", "all_projects": True}))
    assert "Pinia" in widened and "Redux" in widened
    named = text_of(call(beta, "recall", {"query": "state management", "project": "alpha"}))
    assert "Redux" in named and "Pinia" not in named
    # without --project, the project comes from the server's working directory (git root by default)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    detected = inproc(db_path, cwd=str(repo / "pkg"))
    assert f"project {repo}" in text_of(call(detected, "remember", {"content": "Detected from the cwd"}))
    assert f"project       {repo}" in text_of(call(detected, "status"))


def test_serve_project_through_a_symlink_or_subfolder_is_the_repository(db_path, tmp_path, embedder):
    """`serve --project <symlink to the repo>` (or a subfolder) serves the repository's own project."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    link = tmp_path / "link"
    link.symlink_to(repo)
    from_cwd = inproc(db_path, cwd=str(repo))
    assert f"project {repo}" in text_of(call(from_cwd, "remember", {"content": "The repo pins Node 20"}))
    for project in (str(link), str(repo / "pkg"), str(link / "pkg")):
        srv = inproc(db_path, project=project)
        assert f"project {repo}" in text_of(call(srv, "remember", {"content": f"noted through {project}"}))
        assert "Node 20" in text_of(call(srv, "recall", {"query": "Node version"}))


def test_status_names_where_the_database_came_from(tmp_path, monkeypatch, embedder):
    """A database set by MEMSAFE_DB was labelled "(--db)"."""
    monkeypatch.setenv("MEMSAFE_DB", str(tmp_path / "env.db"))
    from_env = text_of(call(inproc(None, project="p"), "status"))
    assert f"{tmp_path / 'env.db'}  (MEMSAFE_DB)" in from_env
    from_flag = text_of(call(inproc(tmp_path / "flag.db", project="p"), "status"))
    assert f"{tmp_path / 'flag.db'}  (--db)" in from_flag


def test_store_problems_are_tool_errors_and_degraded_health(tmp_path, db_path, monkeypatch):
    broken = inproc(tmp_path)  # a directory, not a database file
    result = call(broken, "status")
    assert result.is_error and "directory" in text_of(result)
    monkeypatch.setenv("MEMSAFE_NO_VEC", "1")
    health = text_of(call(inproc(db_path), "status", {"check": True}))
    assert "health: problems found" in health and "error sqlite-vec: disabled by MEMSAFE_NO_VEC" in health


def test_bench_measures_tokens_and_cold_start(db_path, embedder):
    from memsafe.bench.mcp import measure

    opened = api.open_store(str(db_path))
    try:
        api.remember(opened.store, "We deploy on Tuesdays after the release review")
    finally:
        opened.store.close()
    report = measure(db_path, runs=1)
    listing = report["tools_list"]
    assert listing["tools"] == len(CORE_TOOLS | GRAPH_TOOLS) and 0 < listing["core"] < listing["whole"] <= 1000
    assert set(listing["per_tool"]) == CORE_TOOLS | GRAPH_TOOLS
    assert 0 < report["spawn_to_initialize_s"] < report["spawn_to_first_recall_s"]
    assert report["runs"] == 1


def test_serve_rejects_an_empty_project_with_one_line(db_path, memsafe_proc):
    result = cli(db_path, "serve", "--project", "  ")  # through the Typer app
    assert result.exit_code == 2 and "empty" in result.stderr and "Traceback" not in result.stderr
    fast = memsafe_proc("--db", str(db_path), "serve", "--project", "  ")  # the direct path of __main__
    assert fast.returncode == 2 and fast.stdout == "" and fast.stderr.strip() == "Error: empty project"
    helped = memsafe_proc("serve", "--help")
    assert helped.returncode == 0 and "--project" in helped.stdout


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["serve"], (None, None)),
        (["--db", "a.db", "serve", "--project", "web"], ("a.db", "web")),
        (["--db=a.db", "serve", "-p", "web"], ("a.db", "web")),
        (["serve", "--help"], None),
        (["--version"], None),
        (["recall", "serve"], None),
        (["serve", "--project"], None),
    ],
)
def test_main_sends_only_plain_serve_lines_past_typer(argv, expected):
    from memsafe.__main__ import _serve_args

    assert _serve_args(argv) == expected


def test_piped_requests_are_all_answered_before_the_server_exits(paths):
    """`memsafe serve < requests.jsonl`: stdin closes right after the last request, which is still
    being computed (a recall that loads the model); its reply must still be written."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}}
    lines = [json.dumps(init), '{"jsonrpc":"2.0","method":"notifications/initialized"}']
    lines += [json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}) for i in range(1, 21)]
    lines += ["not json", json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {
        "name": "recall", "arguments": {"query": "anything at all"}}})]
    r = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(paths["db"]), "serve"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120,
                       env={**os.environ, **server_env(paths["home"])}, cwd=paths["cwd"])
    assert r.returncode == 0, r.stderr[-2000:]
    ids = sorted(str(json.loads(line).get("id")) for line in r.stdout.splitlines())
    assert ids == sorted([str(i) for i in range(21)] + ["99", "None"])


def test_a_script_piped_into_serve_reads_its_own_writes(paths):
    """As `memsafe serve < requests.jsonl` scripts run it: remember, recall, forget,
    recall, all in one file read at once. Each call takes effect in the order written: the first
    recall finds the new memory, the second (after the forget) does not, and the replies come in
    that order. Before: the recall was answered first, without the memory (5 runs of 5)."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "script", "version": "1"}}}
    fact = "The staging database is rebuilt every Sunday at 02:00 UTC"
    calls = [("remember", {"content": fact}), ("recall", {"query": "when is the staging database rebuilt"}),
             ("forget", {"id": 1}), ("recall", {"query": "when is the staging database rebuilt"})]
    lines = [json.dumps(init), '{"jsonrpc":"2.0","method":"notifications/initialized"}']
    lines += [_call_line(i, name, arguments) for i, (name, arguments) in enumerate(calls, 1)]
    r = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(paths["db"]), "serve"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=180,
                       env={**os.environ, **server_env(paths["home"])}, cwd=paths["cwd"])
    assert r.returncode == 0, r.stderr[-2000:]
    replies = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["id"] for x in replies] == [0, 1, 2, 3, 4]
    texts = [text_of(x["result"]) for x in replies[1:]]
    assert texts[0].startswith("Remembered #1") and fact in texts[1]
    assert texts[2].startswith("Forgot #1") and fact not in texts[3]


# ---------------------------------------------------------------------------------------------
# One scope rule on every read tool

#: Tools that return memory text, entity names or relations; each follows recall's scope.
SCOPED_READ_TOOLS = {"recall", "get_memory", "get_memory history", "query_graph", "transfer export"}


def test_every_read_tool_has_recalls_scope_even_when_started_in_root(tmp_path, embedder, monkeypatch):
    """A server started outside any repository (a desktop client starts it in /) answers from
    global memories only, on every read tool; from repository B it never shows A's text or
    names; all_projects widens each."""
    db, home = tmp_path / "db" / "memory.db", tmp_path / "home"
    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    for repo in (a, b):
        (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(a)
    ida = json.loads(cli(db, "remember", "AlphaVault keeps the deploy keys under /srv/alpha-vault", "--json"
                         ).stdout)["id"]
    cli(db, "remember", "SharedLib logs every request", "--global")
    assert cli(db, "graph", "relate", "SharedLib", "used_by", "AlphaVault").exit_code == 0
    monkeypatch.chdir(b)
    cli(db, "remember", "BetaQueue retries jobs through SharedLib")
    read_only = {t["name"] for t in list_tools(inproc(db))["tools"] if t["annotations"].get("readOnlyHint")}
    assert read_only - {"status"} | {"transfer"} == {name.split()[0] for name in SCOPED_READ_TOOLS}

    def reads(tag: str) -> dict[str, tuple[str, dict]]:
        return {
            "recall": ("recall", {"query": "deploy keys SharedLib"}),
            "get_memory": ("get_memory", {"id": ida}),
            "get_memory history": ("get_memory", {"id": ida, "history": True}),
            "query_graph": ("query_graph", {"entity": "SharedLib"}),
            "transfer export": ("transfer", {"path": str(tmp_path / f"{tag}.jsonl"), "direction": "export"}),
        }

    async def body(s: ClientSession, tag: str):
        out = {}
        for name, (tool, args) in reads(tag).items():
            scoped = await s.call_tool(tool, args)
            if tool == "transfer":
                scoped_text = (tmp_path / f"{tag}.jsonl").read_text(encoding="utf-8")
                args = {**args, "path": str(tmp_path / f"{tag}-all.jsonl")}
            else:
                scoped_text = text_of(scoped)
            widened = await s.call_tool(tool, {**args, "all_projects": True})
            wide_text = (tmp_path / f"{tag}-all.jsonl").read_text(encoding="utf-8") \
                if tool == "transfer" else text_of(widened)
            out[name] = (is_error(scoped), scoped_text, is_error(widened), wide_text)
        out["query_graph A"] = await s.call_tool("query_graph", {"entity": "AlphaVault"})
        return out

    assert set(reads("x")) == SCOPED_READ_TOOLS
    for cwd, tag in ((Path("/"), "root"), (b, "b")):
        got = anyio.run(with_session, db, cwd, home, tmp_path / "err.log", lambda s, t=tag: body(s, t))
        for name in SCOPED_READ_TOOLS:
            failed, text, wide_failed, wide = got[name]
            assert "alphavault" not in text.casefold() and "alpha-vault" not in text.casefold(), (tag, name, text)
            assert failed == (name in ("get_memory", "get_memory history")), (tag, name, text)
            assert not wide_failed and "alphavault" in wide.casefold(), (tag, name, wide)
        assert is_error(got["query_graph A"]) and "all_projects" in text_of(got["query_graph A"])
# Strict clients. The published tools/list of a real server is checked against the
# rules of OpenAI strict function calling and of Gemini function declarations.

# OpenAI, "Structured Outputs: supported schemas" (platform.openai.com/docs/guides/structured-outputs):
# the root is an object (not anyOf); every object has additionalProperties false and lists all its
# properties in required; an optional field is a union with null; only these keywords; at most
# 5,000 properties and 10 levels of nesting; enum values at most 1,000; function names
# ^[a-zA-Z0-9_-]{1,64}$.
OPENAI_KEYWORDS = {
    "type", "description", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
    "$ref", "$defs", "pattern", "format", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "minItems", "maxItems",
}
OPENAI_TYPES = {"string", "number", "boolean", "integer", "object", "array", "null"}
OPENAI_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
# Gemini API, FunctionDeclaration.parameters: a `Schema`, "a select subset of an OpenAPI 3.0 schema
# object" (ai.google.dev/api/caching#Schema): only its fields; `type` is one value of its Type enum
# (an array of types is not accepted); an OBJECT has non-empty properties ("properties: should be
# non-empty for OBJECT type"); enum is for strings; a string format is "enum" or "date-time";
# function names start with a letter or underscore, [a-zA-Z0-9_.:-], at most 64.
GEMINI_KEYWORDS = {
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems", "properties", "required",
    "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "example", "anyOf", "propertyOrdering",
    "default", "items", "minimum", "maximum", "additionalProperties",
}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def openai_strict_problems(schema: dict, where: str = "", depth: int = 1) -> list[str]:
    problems = [f"{where}: {k} not supported" for k in schema if k not in OPENAI_KEYWORDS]
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    problems += [f"{where}: type {t}" for t in types if t not in OPENAI_TYPES]
    if depth > 10:
        problems.append(f"{where}: nested deeper than 10")
    if "format" in schema and schema["format"] not in OPENAI_FORMATS:
        problems.append(f"{where}: format {schema['format']}")
    if len(schema.get("enum", [])) > 1000:
        problems.append(f"{where}: enum over 1,000 values")
    if "object" in types:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties is not false")
        if sorted(schema.get("required", [])) != sorted(props):
            problems.append(f"{where}: required {schema.get('required')} is not every property {list(props)}")
        for name, sub in props.items():
            problems += openai_strict_problems(sub, f"{where}.{name}", depth + 1)
    if "array" in types:
        problems += openai_strict_problems(schema.get("items", {}), f"{where}[]", depth + 1)
    for i, sub in enumerate(schema.get("anyOf", [])):
        problems += openai_strict_problems(sub, f"{where}|{i}", depth)
    if not types and "anyOf" not in schema and "enum" not in schema and "const" not in schema:
        problems.append(f"{where}: no type")
    return problems


def gemini_problems(schema: dict, where: str = "") -> list[str]:
    problems = [f"{where}: {k} not in Schema" for k in schema if k not in GEMINI_KEYWORDS]
    kind = schema.get("type")
    if "anyOf" not in schema and (not isinstance(kind, str) or kind.lower() not in GEMINI_TYPES):
        problems.append(f"{where}: type {kind!r} is not one Type value")
    if kind == "object":
        props = schema.get("properties") or {}
        if not props:
            problems.append(f"{where}: properties should be non-empty for OBJECT type")
        problems += [f"{where}: required {r} is no property" for r in schema.get("required", []) if r not in props]
        for name, sub in props.items():
            problems += gemini_problems(sub, f"{where}.{name}")
    if kind == "array":
        problems += gemini_problems(schema["items"], f"{where}[]") if "items" in schema else [f"{where}: no items"]
    if "enum" in schema and (kind != "string" or not all(isinstance(v, str) for v in schema["enum"])):
        problems.append(f"{where}: enum of non-strings")
    if kind == "string" and schema.get("format") not in (None, "enum", "date-time"):
        problems.append(f"{where}: string format {schema['format']}")
    for i, sub in enumerate(schema.get("anyOf", [])):
        problems += gemini_problems(sub, f"{where}|{i}")
    return problems


def test_checkers_catch_what_strict_clients_reject():
    """The rule checks themselves, on the schemas that failed."""
    loose = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 5}},
             "required": ["q"]}
    assert {p.split(": ", 1)[1].split(" ")[0] for p in openai_strict_problems(loose)} >= {
        "default", "additionalProperties", "required"}
    assert gemini_problems({"type": "object", "properties": {}}) == [": properties should be non-empty for OBJECT type"]
    assert gemini_problems({"type": ["integer", "null"]})
    nullable = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert not openai_strict_problems(nullable) and not gemini_problems(nullable)


def test_strict_clients_accept_every_tool_schema_and_can_call_with_nulls(paths):
    env = server_env(paths["home"], MEMSAFE_NO_MODEL="1")
    with RawClient(paths["db"], env=env, cwd=paths["cwd"]) as c:
        c.initialize()
        listed = c.request("tools/list")["result"]
        # a strict client sends every argument, null for "not given"
        stored = c.call("remember", {"content": "Retries use exponential backoff", "kind": "decision", "tags": [],
                                     "importance": None, "is_global": False, "redact": False})
        recalled = c.call("recall", {"query": "retries backoff", "limit": None, "budget": None, "kind": None,
                                     "tags": [], "project": None, "all_projects": False, "as_of": None})
        updated = c.call("update_memory", {"id": 1, "content": "Retries use exponential backoff with jitter",
                                           "kind": None, "tags": None, "importance": None})
        forgot = c.call("forget", {"id": 1, "reason": None, "undo": False})
        restored = c.call("forget", {"id": 1, "reason": None, "undo": True})
        # a lenient client may also send null where the schema has a plain type: its default
        plain = c.call("get_memory", {"id": 1, "history": None})
        unknown = c.call("recall", {"query": "retries", "until": "2026-01-01"})
        two_unknown = c.call("status", {"verbose": True, "check": False, "format": "json"})
        missing = c.call("recall", {"query": None})
        assert c.close() == 0
    tools = listed["tools"]
    assert {t["name"] for t in tools} == CORE_TOOLS | GRAPH_TOOLS
    problems = []
    for t in tools:
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}", t["name"]), t["name"]
        schema = t["inputSchema"]
        assert schema["type"] == "object" and "anyOf" not in schema
        problems += [f"openai {t['name']}{p}" for p in openai_strict_problems(schema)]
        problems += [f"gemini {t['name']}{p}" for p in gemini_problems(schema)]
    assert problems == []
    recall_args = next(t for t in tools if t["name"] == "recall")["inputSchema"]["properties"]
    assert recall_args["budget"]["anyOf"][1] == {"type": "null"}  # optionals stay nullable
    assert cost_ok(tools_list_tokens(listed))
    for result in (stored, recalled, updated, forgot, restored, plain):
        assert not is_error(result), text_of(result)
    assert "with jitter" in text_of(recalled) or "backoff" in text_of(recalled)
    assert text_of(updated).startswith("Updated [#1 decision")  # kind null: unchanged
    assert text_of(restored) == "Restored #1" and "versions" not in text_of(plain)
    assert is_error(unknown) and text_of(unknown).startswith("unknown argument until; recall takes query, limit")
    assert is_error(two_unknown) and text_of(two_unknown).startswith("unknown arguments verbose, format;")
    assert "\n" not in text_of(unknown) + text_of(two_unknown)
    assert is_error(missing) and text_of(missing).startswith("invalid arguments: query")


def cost_ok(cost: dict) -> bool:
    return cost["whole"] <= 1000


# ---------------------------------------------------------------------------------------------
# Order within one connection, and cancellation


def _call_line(request_id: int, tool: str, arguments: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})


def _cancel_line(request_id: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": request_id, "reason": "user pressed stop"}})


def test_pipelined_calls_take_effect_in_the_order_sent(paths):
    """A remember and a recall written at once: the recall sees the memory, and the replies come
    in the order sent (without that ordering, the recall was answered first, without the memory,
    in 5 runs of 5)."""
    with RawClient(paths["db"], env=server_env(paths["home"]), cwd=paths["cwd"]) as c:
        c.initialize()
        for round_ in range(3):
            fact = f"Release train {round_} leaves on Thursdays"
            c.write_raw("\n".join([
                _call_line(100 + round_ * 10, "remember", {"content": fact}),
                _call_line(101 + round_ * 10, "recall", {"query": f"release train {round_} Thursdays"}),
                _call_line(102 + round_ * 10, "forget", {"id": round_ + 1}),
                _call_line(103 + round_ * 10, "get_memory", {"id": round_ + 1}),
            ]))
            replies = [c.receive(100 + round_ * 10 + i) for i in range(4)]
            assert fact in text_of(replies[1]["result"]), text_of(replies[1]["result"])
            assert "forgotten" in text_of(replies[3]["result"])
        ids = [json.loads(line).get("id") for line in c.lines]
        assert c.close() == 0
    calls = [i for i in ids if isinstance(i, int) and i >= 100]
    assert calls == sorted(calls)


def test_a_burst_of_remembers_is_embedded_in_batches_and_searchable_after_it(paths):
    """The warm thread embedded each remember of a burst on its own (one model run and
    one write each, taking CPU and the write lock from the replies). Twelve remembers in a row
    are embedded in a few batches; the recall after them finds one by meaning."""
    env = server_env(paths["home"], MEMSAFE_LOG_LEVEL="DEBUG")
    topics = ["kafka retention", "nginx timeouts", "redis eviction", "postgres vacuum", "celery retries",
              "s3 lifecycle", "dns ttl", "jwt expiry", "cron drift", "tls renewal", "oom killer", "git lfs"]
    with RawClient(paths["db"], env=env, cwd=paths["cwd"]) as c:
        c.initialize()
        assert not is_error(c.call("recall", {"query": "warm the model up"}))
        for i, topic in enumerate(topics):  # one after another, as an agent loop sends them
            assert text_of(c.call("remember", {"content": f"Runbook note {i}: how we handle {topic}"})
                           ).startswith("Remembered #")
        found = text_of(c.call("recall", {"query": "how we handle tls renewal", "limit": 3}))
        assert c.close() == 0
    assert "Runbook note 9" in found.splitlines()[0] or "Runbook note 9" in found.split("\n\n")[0], found
    passes = [int(n) for n in re.findall(r"background embedding: (\d+) vectors", bytes(c.stderr).decode())]
    # before: about one pass per remember on a quiet machine (a loaded one batched them by delay)
    assert sum(passes) == len(topics) and len(passes) <= len(topics) // 3, passes


def test_a_cancelled_call_waiting_its_turn_never_runs_and_a_running_one_completes(paths):
    """Before: a remember queued behind a slow call and cancelled is never stored.
    After: a remember cancelled once it has started is stored whole, and the log says so; no reply
    is sent for it either way (MCP: the receiver does not answer a cancelled request)."""
    env = server_env(paths["home"], MEMSAFE_SERVE_WARM="0", MEMSAFE_LOG_LEVEL="DEBUG")
    with RawClient(paths["db"], env=env, cwd=paths["cwd"]) as c:
        c.initialize()
        # status with check=true loads the model (warm-up is off): the remember waits behind it
        c.write_raw("\n".join([_call_line(10, "status", {"check": True}),
                               _call_line(11, "remember", {"content": "cancelled while waiting"}),
                               _cancel_line(11)]))
        assert not is_error(c.receive(10)["result"])
        c.write_raw(_call_line(12, "remember", {"content": "cancelled while running"}))
        deadline = time.monotonic() + 60
        while b"tool remember" not in bytes(c.stderr) and time.monotonic() < deadline:
            time.sleep(0.002)
        c.write_raw(_cancel_line(12))
        listed = c.call("recall", {"query": "cancelled while", "limit": 5})
        ids = [json.loads(line).get("id") for line in c.lines]
        assert c.close() == 0
    log = bytes(c.stderr).decode()
    assert "cancelled while running" in text_of(listed) and "cancelled while waiting" not in text_of(listed)
    assert 11 not in ids
    assert "call 11 cancelled by the client before it ran: not done" in log
    if 12 not in ids:  # the cancel came before the reply: the log tells what was done
        assert re.search(r"call 12 was cancelled (while running and completed anyway|after it completed).*"
                         r"remember: done: Remembered #1", log), log[-3000:]


# ---------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_signal_stops_the_server_without_losing_the_write_in_flight(paths, signum, code):
    env = server_env(paths["home"], MEMSAFE_NO_MODEL="1")
    with RawClient(paths["db"], env=env, cwd=paths["cwd"]) as c:
        c.initialize()
        assert not is_error(c.call("remember", {"content": "acknowledged before the signal"}))
        c.send("tools/call", {"name": "remember", "arguments": {"content": "in flight at the signal"}})
        time.sleep(0.05)
        sent = time.monotonic()
        c.proc.send_signal(signum)
        assert c.proc.wait(STOP_WAIT_S) == code
        elapsed = time.monotonic() - sent
        time.sleep(0.2)  # the stdout reader thread gets the last lines
        replies = {json.loads(line).get("id") for line in c.lines}
    assert elapsed < 2.0
    assert "Traceback" not in bytes(c.stderr).decode()
    stored = {m.content for m in _memories(paths["db"])}
    assert "acknowledged before the signal" in stored
    assert (3 in replies) == ("in flight at the signal" in stored)  # acknowledged exactly when stored


def _memories(db: Path) -> list:
    """Every memory in the file (ids 1..9; these tests store fewer)."""
    from memsafe.errors import NotFound

    opened = api.open_store(str(db))
    found = []
    try:
        for memory_id in range(1, 10):
            with contextlib.suppress(NotFound):
                found.append(api.get(opened.store, memory_id))
    finally:
        opened.store.close()
    return found


def _on_a_terminal(argv: list[str], paths, send: bool = True) -> tuple[int | None, str, str, float]:
    """Run `argv` with a terminal as stdin; once it has written its first stderr line, send it
    SIGINT (unless `send` is false: it signals itself). Returns (exit code, first line, the rest of
    stderr, seconds from then to the exit). A process still running STOP_WAIT_S later gets
    SIGABRT (its Python stacks then end the returned stderr) and code None."""
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=paths["cwd"],
                            env={**os.environ, **server_env(paths["home"]), "PYTHONFAULTHANDLER": "1"})
    os.close(secondary)
    try:
        first = proc.stderr.readline().decode()
        sent = time.monotonic()
        if send:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:  # say where it hangs (faulthandler dumps every thread)
            proc.send_signal(signal.SIGABRT)
            proc.wait(30)
            code = None
        elapsed = time.monotonic() - sent
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout.read() == b""
    return code, first, proc.stderr.read().decode(errors="replace"), elapsed


def test_serve_on_a_terminal_says_it_waits_for_a_client_and_ctrl_c_stops_it(paths):
    code, first, rest, _ = _on_a_terminal([sys.executable, "-m", "memsafe", "--db", str(paths["db"]), "serve"], paths)
    assert "waiting for a client" in first and "Ctrl-C" in first
    assert code == 130, rest[-6000:]
    assert "Traceback" not in rest and "still running" not in rest, rest[-6000:]


# `serve` on a terminal must exit on Ctrl-C; in full test runs it sometimes did not. Two ways a
# signal could be lost were found; each is forced here (the start-up is patched in a wrapper
# script), and both hung before.
_SIGNAL_CASES = {
    # a library that swallows the KeyboardInterrupt raised in one of the start-up's imports
    "swallowed during start-up": """
orig = server.build_server
def patched(*args, **kwargs):
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    return orig(*args, **kwargs)
server.build_server = patched
""",
    # the event loop runs, the thread reading the terminal is blocked, the listener is not open
    # yet: asyncio's own SIGINT handler cancelled the loop's task, which then waited for that
    # thread for ever
    "before the loop listens": """
orig = server._stop_on_signal
async def patched(answers):
    import anyio
    await anyio.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)
    await anyio.sleep(0.5)
    return await orig(answers)
server._stop_on_signal = patched
""",
}


@pytest.mark.parametrize("case", sorted(_SIGNAL_CASES))
def test_a_signal_at_any_moment_of_the_start_up_stops_serve_on_a_terminal(paths, case):
    script = paths["cwd"] / "wrapped.py"
    script.write_text("import os, signal, sys, time\nfrom memsafe.mcp import tools as server\n" + _SIGNAL_CASES[case]
                      + "\nserver.serve(sys.argv[1], None)\n")
    code, first, rest, _ = _on_a_terminal([sys.executable, str(script), str(paths["db"])], paths, send=False)
    assert "waiting for a client" in first
    assert code == 130 and "still running" not in rest and "Traceback" not in rest, rest[-6000:]


def test_serve_that_hangs_after_ctrl_c_still_ends_by_the_deadline_and_says_where_it_hung(paths):
    """Whatever hangs after a stop signal (here: stopping the warm thread never returns), the
    process ends STOP_DEADLINE_S later with exit 130, printing every thread's stack."""
    from memsafe.mcp.stdio import STOP_DEADLINE_S

    script = paths["cwd"] / "wrapped.py"
    script.write_text("import sys, time\nfrom memsafe.mcp import tools as server\n"
                      "server.ServerState.stop = lambda self, timeout=0: time.sleep(1000)\n"
                      "server.serve(sys.argv[1], None)\n")
    code, first, rest, elapsed = _on_a_terminal([sys.executable, str(script), str(paths["db"])], paths)
    assert code == 130 and elapsed >= STOP_DEADLINE_S, rest[-3000:]
    assert f"still running {STOP_DEADLINE_S:g} s after the stop signal; ending it now" in rest
    assert "in <lambda>" in rest  # the stack of the thread that hung


@pytest.fixture
def srv(tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "srv"
    work.mkdir()
    env = {"MEMSAFE_HOME": str(home), "MEMSAFE_SERVE_WARM": "0"}
    return {"db": tmp_path / "db" / "memory.db", "cwd": work, "env": env}


def _reply_to_bad_line(c: RawClient, line: str) -> dict:
    """Write `line`, then a ping; returns the one reply that came before the pong (fails if none)."""
    before = len(c.lines)
    c.write_raw(line)
    pong = c.request("ping", timeout=30)
    assert pong["result"] == {}
    replies = [json.loads(x) for x in c.lines[before:]]
    others = [r for r in replies if r.get("id") != pong["id"]]
    assert len(others) == 1, (line[:80], replies)
    return others[0]


def test_serve_survives_deeply_nested_json_lines(srv):
    """`[[[[…]]]]` 100k deep made json.loads raise RecursionError inside the line reader: the
    server died with a traceback. Such a line is answered -32700 and the server stays up."""
    deep = [
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        '{"x":"\\ud800","y":' + "[" * 100_000 + "]" * 100_000 + "}",  # goes through the surrogate fixer too
        '{"x":"\\ud800","y":' + "[" * 900 + "]" * 900 + "}",  # json.loads copes; the fixer's _scrub did not
    ]
    with RawClient(srv["db"], env=srv["env"], cwd=srv["cwd"]) as c:
        c.initialize()
        errors = [_reply_to_bad_line(c, line) for line in deep]
        code = c.close()
    assert [e["error"]["code"] for e in errors] == [-32700, -32700, -32700, -32600]
    assert all(e["id"] is None for e in errors)
    assert code == 0
    assert b"Traceback" not in bytes(c.stderr)


@pytest.mark.parametrize("bad_id", ["null", "1.5", "true", "false", "[1]", '{"a":1}', "NaN", "1e400"])
def test_serve_answers_a_request_whose_id_is_not_a_string_or_integer(srv, bad_id):
    """`{"id": 1.5, "method": "ping"}` validated as a *notification* (the id was ignored) and got
    no reply at all, leaving the client waiting; a message with an id member and a method is a
    request, so a bad id gets -32600 with id null (JSON-RPC 2.0 section 5)."""
    with RawClient(srv["db"], env=srv["env"], cwd=srv["cwd"]) as c:
        c.initialize()
        error = _reply_to_bad_line(c, '{"jsonrpc":"2.0","id":' + bad_id + ',"method":"ping"}')
        c.close()
    assert error["error"]["code"] == -32600 and error["id"] is None


def test_serve_huge_integer_id_is_an_invalid_request_not_a_parse_error(srv):
    """A 5000-digit id is valid JSON (Python's int-digit limit made it 'Parse error: not JSON')."""
    with RawClient(srv["db"], env=srv["env"], cwd=srv["cwd"]) as c:
        c.initialize()
        error = _reply_to_bad_line(c, '{"jsonrpc":"2.0","id":' + "9" * 5000 + ',"method":"ping"}')
        c.close()
    assert error["error"]["code"] == -32600 and error["id"] is None


def test_serve_many_malformed_lines_with_an_undrained_stderr(srv):
    """Each malformed line logged a warning to stderr; a client that never
    reads stderr filled the pipe after ~1,000 of them and the server blocked forever."""
    with RawClient(srv["db"], env=srv["env"], cwd=srv["cwd"], drain_stderr=False) as c:
        c.initialize()
        for i in range(3000):  # ~36 KB: fits the stdin pipe even if the server stops reading
            c.write_raw(f"garbage {i}")
        pong = c.request("ping", timeout=30)
        errors = [line for line in c.lines if b'"code":-32700' in line]
        c.proc.kill()
    assert pong["result"] == {}
    assert len(errors) == 3000


def test_serve_with_stdout_to_a_file_and_stderr_to_a_pipe(tmp_path):
    """`memsafe serve < requests > replies.jsonl` from a shell: fd 1 was a seekable file when
    Python opened it, then pointed at the (unseekable) stderr; reconfiguring sys.stdout raised
    OSError 'Illegal seek' and the server died before reading anything."""
    out = tmp_path / "replies.jsonl"
    requests = "\n".join([
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
        "not json",
        '{"jsonrpc":"2.0","id":2,"method":"ping"}',
    ]) + "\n"
    env = {**os.environ, "MEMSAFE_HOME": str(tmp_path / "home"), "MEMSAFE_SERVE_WARM": "0"}
    with out.open("wb") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "memsafe", "--db", str(tmp_path / "m.db"), "serve"],
            input=requests.encode(), stdout=fh, stderr=subprocess.PIPE, env=env, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    replies = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(str(r.get("id")) for r in replies) == ["1", "2", "None"]
    assert b"Traceback" not in proc.stderr


async def _mcp_calls(db, cwd, home, calls):
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve"],
                                   env={"MEMSAFE_HOME": str(home)}, cwd=str(cwd))
    out = []
    with open(home.parent / "server.err", "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for name, args in calls:
                    res = await session.call_tool(name, args)
                    out.append((res.is_error, "\n".join(c.text for c in res.content)))
    return out


def test_mcp_errors_name_tool_arguments_not_cli_flags(tmp_path, embedder):
    # update_memory without changes said only "give --content, --tag, ..."; relate_entities only
    # "(graph add-entity) or pass --create"; forget only "`restore 1` brings it back": CLI words an
    # agent cannot use. configure with a value and no key silently listed every setting; a bad
    # kind or id gave a multi-line pydantic dump with a URL
    cwd = tmp_path / "srv"
    cwd.mkdir()
    home = tmp_path / "home"
    calls = [
        ("remember", {"content": "We rebase feature branches onto main"}),
        ("update_memory", {"id": 1}),
        ("relate_entities", {"relations": [["Zoë", "owns", "payments"]]}),
        ("forget", {"id": 1}),
        ("forget", {"id": 1}),
        ("recall", {"query": "rebase", "until": "yesterday"}),
        ("remember", {"content": "x", "kind": "nope"}),
        ("get_memory", {"id": "abc"}),
    ]
    results = anyio.run(_mcp_calls, tmp_path / "m.db", cwd, home, calls)
    assert not results[0][0] and not results[3][0]
    for is_error, text in results[1:3] + results[4:]:
        assert is_error, text
        assert "\n" not in text and "pydantic" not in text, text
    assert "MCP/API: content, tags" in results[1][1]
    assert "create=true" in results[2][1]
    assert "undo=true" in results[4][1]
    assert results[5][1].startswith("unknown argument until; recall takes query, ")
    assert "kind: Input should be 'fact'" in results[6][1] and "'nope'" in results[6][1]
    assert "id: Input should be a valid integer" in results[7][1]


def test_true_or_false_where_a_tool_takes_a_number_is_refused_and_nothing_changes(tmp_path, embedder):
    # pydantic reads JSON true as 1, so `purge_memory {"ids": [true], "confirm": true}`
    # purged memory 1 for good, `forget {"id": true}` forgot it, and `recall {"budget": true}` cut
    # every memory to one token.
    cwd = tmp_path / "srv"
    cwd.mkdir()
    home = tmp_path / "home"
    bad = [
        ("forget", {"id": True, "purge": True}),
        ("forget", {"id": True}),
        ("update_memory", {"id": True, "content": "changed"}),
        ("update_memory", {"id": 1, "importance": True}),
        ("recall", {"query": "rebase", "budget": True}),
        ("recall", {"query": "rebase", "limit": False}),
        ("query_graph", {"entity": "main", "depth": True}),
    ]
    calls = [("remember", {"content": "We rebase feature branches onto main"}), *bad,
             ("recall", {"query": "rebase", "limit": "2"}), ("get_memory", {"id": 1})]
    results = anyio.run(_mcp_calls, tmp_path / "m.db", cwd, home, calls)
    for (name, args), (error, text) in zip(bad, results[1:-2]):
        wrong = next(k for k, v in args.items() if v is True or v is False or v == [True])
        assert error and text == f"invalid arguments: {wrong}: a number is needed, not {json.dumps(args[wrong])}", text
    # a number written as text still reads
    assert not results[-2][0] and "We rebase feature branches onto main" in results[-2][1]
    assert "We rebase feature branches onto main" in results[-1][1] and "status=" not in results[-1][1]
    with api.open_store(str(tmp_path / "m.db")).store as store:
        memory = api.get(store, 1)
        assert memory.status == "active" and memory.content == "We rebase feature branches onto main"


# ---------------------------------------------------------------------------------------------
# Tools that take an id reach the server's scope only (the write side)


def memory_state(db: Path, memory_id: int) -> tuple:
    """Everything stored about one memory: row, tags, versions, audit events (None if gone)."""
    opened = api.open_store(str(db))
    try:
        store = opened.store
        events = list(store.conn.execute("SELECT at, action, detail FROM events WHERE memory_id = ? ORDER BY id",
                                         (memory_id,)))
        return (store.raw_row(memory_id), store.tags_of([memory_id]).get(memory_id), store.versions(memory_id),
                events)
    finally:
        opened.store.close()


def test_tools_taking_an_id_never_read_or_change_another_projects_memory(tmp_path, embedder, monkeypatch):
    """From repository B, every tool that takes a memory id refuses A's memories exactly as it
    refuses an id that does not exist (no oracle), returns none of A's text, and leaves A's rows,
    tags, history and audit untouched; the same tools still work on B's own memory."""
    db, home = tmp_path / "db" / "memory.db", tmp_path / "home"
    a, b = tmp_path / "repo-a", tmp_path / "repo-b"
    for repo in (a, b):
        (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(a)
    active = json.loads(cli(db, "remember", "AlphaVault keeps the deploy keys under /srv/alpha-vault", "-t", "ops",
                            "--json").stdout)["id"]
    hidden = json.loads(cli(db, "remember", "AlphaVault rotates its keys monthly", "--json").stdout)["id"]
    assert cli(db, "forget", str(hidden)).exit_code == 0
    monkeypatch.chdir(b)
    own = json.loads(cli(db, "remember", "BetaQueue retries jobs three times", "--json").stdout)["id"]
    before = {i: memory_state(db, i) for i in (active, hidden)}
    missing = 987654

    def walk(target: int, gone: int) -> dict[str, tuple[str, dict]]:
        """Each id-taking tool (and mode) with arguments that would succeed on a memory of its scope."""
        return {
            "get_memory": ("get_memory", {"id": target}),
            "get_memory history": ("get_memory", {"id": target, "history": True}),
            "update_memory": ("update_memory", {"id": target, "content": "hijacked by project B", "tags": ["pwned"]}),
            "forget": ("forget", {"id": target, "reason": "from B"}),
            "restore_memory": ("forget", {"id": gone, "undo": True}),
            "purge": ("forget", {"id": target, "purge": True}),
        }

    async def body(s: ClientSession):
        taking_ids = {t.name for t in (await s.list_tools()).tools if {"id", "ids"} & set(t.input_schema["properties"])}
        got = {}
        for label, (name, args) in walk(active, hidden).items():
            got[label] = (await s.call_tool(name, args), await s.call_tool(name, walk(missing, missing)[label][1]))
        own_ok = [await s.call_tool(n, a) for n, a in (("update_memory", {"id": own, "importance": 0.9}),
                                                      ("forget", {"id": own}), ("forget", {"id": own, "undo": True}))]
        return taking_ids, got, own_ok

    taking_ids, got, own_ok = anyio.run(with_session, db, b, home, tmp_path / "err.log", body)
    assert taking_ids == {name for name, _ in walk(active, hidden).values()}, "a new tool takes an id: walk it"
    for name, (theirs, nothing) in got.items():
        text = text_of(theirs)
        assert is_error(theirs) and is_error(nothing), (name, text)
        for leak in ("alphavault", "alpha-vault", "rotates", "repo-a"):
            assert leak not in text.casefold(), (name, text)
        expected = text_of(nothing).replace(str(missing), str(hidden if name == "restore_memory" else active))
        assert text == expected, (name, text, text_of(nothing))
        assert f"in project {b}" in text, text
    assert not any(is_error(r) for r in own_ok), [text_of(r) for r in own_ok]
    assert {i: memory_state(db, i) for i in (active, hidden)} == before
    assert memory_state(db, own)[0]["status"] == "active"


# ---------------------------------------------------------------------------------------------
# `initialize` answered before the SDK is imported (memsafe.mcp.stdio)


def _piped(paths, lines: list[str], cache: Path, **env: str) -> list[dict]:
    """`memsafe serve` fed `lines` at once (one write), its stdout replies as JSON objects."""
    r = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(paths["db"]), "serve"],
                       input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=120,
                       env={**os.environ, **server_env(paths["home"]), "MEMSAFE_CACHE_DIR": str(cache), **env},
                       cwd=paths["cwd"])
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines()]


def _initialize(request_id, version: str = "2025-06-18", **params) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}, **params}})


def test_initialize_is_answered_early_with_the_sdks_own_answer_exactly_once(paths, tmp_path):
    """The first start keeps the SDK's answer; the next start writes it before the SDK loads and
    drops the SDK's own reply: one reply per request, the same answer, and the session works (the
    SDK saw the handshake). Another protocol version gets the SDK's own negotiation."""
    cache = tmp_path / "cache"

    def session(topic: str) -> list[str]:
        remember = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"content": f"the early handshake keeps the {topic} session whole"}}})
        return [_initialize(1), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
                '{"jsonrpc":"2.0","id":2,"method":"tools/list"}', remember]

    first = _piped(paths, session("billing"), cache)
    assert list(cache.glob("mcp-initialize-*.json")), "the SDK's answer was not kept"
    second = _piped(paths, session("gardening"), cache)
    for replies in (first, second):
        assert sorted(r["id"] for r in replies) == [1, 2, 3]  # nothing answered twice
        assert not any("error" in r or r.get("result", {}).get("isError") for r in replies)
    assert second[0] == first[0]  # the early answer is the SDK's own
    assert {t["name"] for t in second[1]["result"]["tools"]} == {t["name"] for t in first[1]["result"]["tools"]}
    other = _piped(paths, [_initialize(7, "2024-11-05")], cache)
    assert other[0]["id"] == 7 and other[0]["result"]["protocolVersion"] == "2024-11-05"


def test_a_stale_kept_answer_is_replaced_by_the_sdks(paths, tmp_path):
    """A kept answer the SDK no longer gives (a hand-edited or stale cache) is written once, then
    replaced by what the SDK answered, so the next start is right again."""
    cache = tmp_path / "cache"
    _piped(paths, [_initialize(1)], cache)
    [kept] = cache.glob("mcp-initialize-*.json")
    stored = json.loads(kept.read_text())
    truth = stored["2025-06-18"]
    kept.write_text(json.dumps({"2025-06-18": {**truth, "instructions": "stale"}}))
    assert _piped(paths, [_initialize(1)], cache)[0]["result"]["instructions"] == "stale"
    assert json.loads(kept.read_text())["2025-06-18"] == truth
    assert _piped(paths, [_initialize(1)], cache)[0]["result"] == truth


@pytest.mark.parametrize("first_line", [
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":7}}',  # invalid params
    '{"jsonrpc":"2.0","id":1,"method":"ping"}',  # not a handshake
    "not json at all",
])
def test_a_first_line_that_is_no_valid_initialize_is_left_to_the_sdk(paths, tmp_path, first_line):
    """Only a well-formed `initialize` is answered early; anything else gets exactly the reply the
    SDK gives without the early path (MEMSAFE_CLI_CACHE=0), and a kept answer changes nothing."""
    cache = tmp_path / "cache"
    _piped(paths, [_initialize(0)], cache)  # an answer is kept
    with_early = _piped(paths, [first_line, '{"jsonrpc":"2.0","id":5,"method":"ping"}'], cache)
    without = _piped(paths, [first_line, '{"jsonrpc":"2.0","id":5,"method":"ping"}'], cache, MEMSAFE_CLI_CACHE="0")
    assert with_early == without and len(with_early) == 2


def test_lines_read_before_the_sdk_are_handed_on_whole():
    """`server._prefixed`: the text read early comes first, and a line it cut is joined to its end."""
    async def collect(prefix: str, rest: list[str]) -> list[str]:
        async def stream():
            for line in rest:
                yield line

        return [line async for line in server._prefixed(prefix, stream())]

    assert anyio.run(collect, '{"a":1}\n', ['{"b":2}\n']) == ['{"a":1}\n', '{"b":2}\n']
    assert anyio.run(collect, '{"a":1}\n{"b"', [':2}\n', '{"c":3}\n']) == ['{"a":1}\n', '{"b":2}\n', '{"c":3}\n']
    assert anyio.run(collect, '{"a"', []) == ['{"a"']


def _write_and_close(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)


def test_a_first_line_cut_at_its_bound_ends_on_a_whole_character():
    """`mcp_handshake._read_first_line` stops a line longer than MAX_FIRST_LINE at the end of a
    UTF-8 character: the rest is decoded apart (`Early.text`), and a character cut in two would
    reach the SDK as two U+FFFD. Before, only an ASCII byte could end it (a line of accented
    letters was read whole, byte by byte)."""
    from memsafe.mcp import stdio as mcp_handshake

    for head in ("", "x", "xy", "xyz"):
        text = head + "é€😀" * (mcp_handshake.MAX_FIRST_LINE // 4)
        read_fd, write_fd = os.pipe()
        writer = threading.Thread(target=_write_and_close, args=(write_fd, text.encode()))
        writer.start()
        try:
            got = mcp_handshake._read_first_line(read_fd)
            rest = b""
            while chunk := os.read(read_fd, 1 << 20):
                rest += chunk
        finally:
            writer.join()
            os.close(read_fd)
        assert mcp_handshake.MAX_FIRST_LINE <= len(got) < mcp_handshake.MAX_FIRST_LINE + 4
        assert got.decode("utf-8") + rest.decode("utf-8") == text


@pytest.mark.parametrize("kept", [{}, {"protocolVersion": 7}, "text", [1, 2]])
def test_a_kept_answer_of_the_wrong_shape_is_not_sent(paths, tmp_path, kept):
    """A cache file damaged into other JSON is not sent as the `initialize` result: the SDK answers
    (once), and its answer replaces the bad one."""
    cache = tmp_path / "cache"
    truth = _piped(paths, [_initialize(1)], cache)[0]
    [file] = cache.glob("mcp-initialize-*.json")
    file.write_text(json.dumps({"2025-06-18": kept}))
    assert _piped(paths, [_initialize(1)], cache) == [truth]
    assert json.loads(file.read_text())["2025-06-18"] == truth["result"]


@pytest.mark.parametrize("args", [["--project", ""], ["--project", "  "], ["--project", "x" * 5000]])
def test_serve_with_a_bad_argument_answers_no_initialize_before_refusing(paths, tmp_path, args):
    """With an answer kept, `serve --project ""` used to write the `initialize` result and then
    exit 1: the client saw a server that accepted the handshake and vanished. Now nothing reaches
    stdout; the error is one line on stderr."""
    cache = tmp_path / "cache"
    _piped(paths, [_initialize(1)], cache)
    r = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(paths["db"]), "serve", *args],
                       input=_initialize(1) + "\n", capture_output=True, text=True, timeout=120,
                       env={**os.environ, **server_env(paths["home"]), "MEMSAFE_CACHE_DIR": str(cache)},
                       cwd=paths["cwd"])
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "project" in r.stderr


def test_memsafe_gives_numpy_one_blas_thread_unless_told_otherwise():
    """OpenBLAS's thread pool made the server's small products 50x slower on a busy 2-core machine
    (and recall's query against the stored vectors 13x): importing memsafe sets
    OPENBLAS_NUM_THREADS=1 before numpy loads; the user's value wins."""
    import subprocess
    import sys

    probe = "import os, memsafe, numpy; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "OPENBLAS_NUM_THREADS": "2"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


def test_a_kept_connection_recalls_what_another_process_changed_since(paths, embedder):
    """The server keeps its SQLite connection between calls, and that
    connection keeps the rows its recalls read while the file is unchanged
    (`SQLiteStore.recall_rows`). Each change another process makes between two recalls (the CLI
    here) shows in the next one through a real stdio client: new text and tags, a new kind, a
    memory moved out of the server's scope and back, forgotten, restored, purged."""
    db = paths["db"]
    for text in ["Use the --frozen-lockfile flag with pnpm install in CI.",
                 "Production database backups run nightly at 02:00 UTC."]:
        assert cli(db, "remember", text, "--global").exit_code == 0
    query = {"query": "pnpm lockfile in CI"}
    steps = [
        ("updated", ["update", "1", "--content", "CI installs with pnpm install --frozen-lockfile; yarn: --immutable.",
                     "--tag", "ci"], query),
        ("kind", ["update", "1", "--kind", "decision"], {**query, "kind": "decision"}),
        ("moved", ["update", "1", "--project", "elsewhere"], query),
        ("back", ["update", "1", "--global", "--all-projects"], query),
        ("forgotten", ["forget", "1"], query),
        ("restored", ["restore", "1"], query),
        ("purged", ["purge", "1", "--yes"], query),
    ]

    async def body(s: ClientSession):
        out = {"first": text_of(await s.call_tool("recall", query))}
        for name, args, asked in steps:
            done = cli(db, *args)
            assert done.exit_code == 0, (name, done.output)
            out[name] = text_of(await s.call_tool("recall", asked))
        return out

    r = anyio.run(with_session, db, paths["cwd"], paths["home"], paths["err"], body)
    assert "#1 " in r["first"] and "--frozen-lockfile flag" in r["first"]
    assert "tags=ci]\n  CI installs" in r["updated"] and "--frozen-lockfile flag" not in r["updated"]
    assert "#1 " in r["kind"] and "#1 " not in r["moved"] and "#1 " in r["back"]
    assert "#1 " not in r["forgotten"] and "#1 " in r["restored"] and "#1 " not in r["purged"]


_WARM_PRIORITIES = r"""
import json, os, sys, threading, time
from memsafe import embed
from memsafe.mcp import tools

def nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)

at_load = []
real = embed.get_embedder
def watched(*args, **kwargs):  # the real load, noting the priority of the thread that asks for it
    at_load.append(nice(threading.get_native_id()))
    return real(*args, **kwargs)
embed.get_embedder = watched
before = {int(t) for t in os.listdir("/proc/self/task")}
srv = tools.build_server(sys.argv[1])
srv.memsafe.start_warmup()
deadline = time.monotonic() + 120
while not embed.loaded() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # past the load: the thread lowers its priority, then waits for work
warm = srv.memsafe._warm_thread.native_id
python = {t.native_id for t in threading.enumerate()}
native = {int(t) for t in os.listdir("/proc/self/task")} - before - python
print(json.dumps({"at_load": at_load, "warm": nice(warm), "main": nice(threading.get_native_id()),
                  "native": sorted(nice(t) for t in native)}))
srv.memsafe.stop()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are per thread on Linux only")
def test_the_warm_thread_loads_the_model_at_full_priority_then_steps_down(db_path):
    """The first recall waits for the model the warm thread loads, so the load runs at the
    server's own priority (at nice +10 beside busy processes it took seconds); afterwards the warm
    thread and the model's worker threads that the load started run at nice +10, so filling
    vectors never delays a reply. The main thread keeps its priority."""
    api.open_store(str(db_path)).store.close()
    done = subprocess.run([sys.executable, "-c", _WARM_PRIORITIES, str(db_path)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "MEMSAFE_EMBED_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    base = seen["main"]
    assert seen["at_load"][:1] == [base], seen
    assert seen["warm"] == min(19, base + 10), seen
    assert seen["native"] and all(n == min(19, base + 10) for n in seen["native"]), seen


def test_a_query_and_a_batch_embedded_at_once_give_the_vectors_they_give_alone(embedder):
    """The warm thread's batches and a call's query embedding share one model and run at the same
    time (a query never waits for a batch of the lower-priority thread): each gets the vectors it
    gets alone."""
    import numpy as np

    batch = [f"commit {i}: retry the upload of shard {i} after the storage node times out" * 3 for i in range(96)]
    queries = ["how do we retry uploads", "which node timed out", "storage shards"] * 4
    alone_batch, alone_queries = embedder.embed(batch), [embedder.embed_one(q) for q in queries]
    together: dict[str, object] = {}
    worker = threading.Thread(target=lambda: together.update(batch=embedder.embed(batch, batch_size=8)))
    worker.start()
    together["queries"] = [embedder.embed_one(q) for q in queries]
    worker.join()
    assert np.allclose(together["batch"], alone_batch, atol=1e-5)
    assert np.allclose(together["queries"], alone_queries, atol=1e-5)


def test_recall_tool_filters_by_source(db_path, tmp_path, embedder):
    srv = inproc(db_path, project="alpha", cwd=str(tmp_path))
    opened = api.open_store(str(db_path))
    try:
        note = api.remember(opened.store, "We decided to cache tiles in Redis", kind="decision", project="alpha",
                            source="user", embed_now=True).id
        api.remember(opened.store, "git commit 1a2b3c4 on main: cache tiles in Redis", project="alpha", source="git",
                     tags=["commit"], embed_now=True)
    finally:
        opened.store.close()
    shown = text_of(call(srv, "recall", {"query": "cache tiles in Redis", "source": "-git"}))
    assert f"#{note} " in shown and "git commit" not in shown
    only = text_of(call(srv, "recall", {"query": "cache tiles in Redis", "source": "git"}))
    assert "git commit 1a2b3c4" in only and "We decided" not in only
    bad = call(srv, "recall", {"query": "tiles", "source": "user,-github"})
    assert is_error(bad) and "unknown source" in text_of(bad)
