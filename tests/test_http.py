"""`memsafe serve --transport http`: a real server process, spoken to by the MCP SDK's own client
over streamable HTTP and by plain HTTP requests (tokens, 401s, Host/Origin, /healthz, logs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import httpx2
import pytest

from memsafe import api
from memsafe.bench.http import HttpServer, connect
from memsafe.errors import InvalidInput
from memsafe.mcp.http import MIN_TOKEN_CHARS, TOKENS_ENV, is_loopback, load_tokens

TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-fedcba9876543210"}
WRONG = "mallory-token-00000000000000"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PROTOCOL = "2025-11-25"


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """One server for the module: tokens of alice and bob, DEBUG logs (access log included), an
    extra allowed Host name. Yields (server, db path)."""
    folder = tmp_path_factory.mktemp("team")
    db = folder / "team.db"
    env = {"MEMSAFE_HOME": str(folder / "home"), "MEMSAFE_LOG_LEVEL": "DEBUG"}
    with HttpServer(db, tokens=TOKENS, env=env, cwd=folder, args=("--allow-host", "memory.team.example")) as server:
        yield server, db


def count(db: Path) -> int:
    opened = api.open_store(str(db))
    try:
        return opened.store.counts()["total"]
    finally:
        opened.store.close()


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def run(body):
    return anyio.run(body)


def session(url: str, token: str) -> dict:
    """Open an MCP session by hand (initialize + initialized); returns the headers that go on with it."""
    auth = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    reply = httpx2.post(url, headers=auth, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    assert reply.status_code == 200, reply.text
    headers = {**auth, "mcp-session-id": reply.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
    assert httpx2.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                       ).status_code == 202
    return headers


def remember_call(content: str, request_id: int = 2) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": content}}}


# ---------------------------------------------------------------------------------------------
# Through the SDK's client


def test_remember_over_http_is_recalled_by_a_teammate(team, embedder):
    server, _db = team

    async def body():
        async with connect(server.url, TOKENS["alice"]) as alice:
            result = await alice.call_tool("remember", {"content": "The staging deploy freezes every Friday at 15:00"})
            assert not result.is_error, text_of(result)
            listed = {t.name for t in (await alice.list_tools()).tools}
        async with connect(server.url, TOKENS["bob"]) as bob:
            found = await bob.call_tool("recall", {"query": "when does the staging deploy freeze?"})
            return listed, text_of(found), bob.instructions

    listed, found, instructions = run(body)
    assert "Friday at 15:00" in found
    assert "recall" in listed and "remember" in listed
    assert "transfer" not in listed  # its paths would be the server's files
    assert "team" in instructions and "this machine" not in instructions


def test_calls_at_once_on_kept_connections_recall_what_changed_since(team, embedder):
    """The server keeps SQLite connections between calls, each keeping the
    rows its recalls read while the file is unchanged (`SQLiteStore.recall_rows`). Calls at once
    (two clients, several recalls each) after each change another connection made, however the
    kept connections are shared out among them, all see the change."""
    server, db = team
    query = {"query": "which harbour crane lifts the containers", "all_projects": True}

    async def recall(client, texts: list[str]) -> None:
        texts.append(text_of(await client.call_tool("recall", query)))

    async def body():
        seen = []
        async with connect(server.url, TOKENS["alice"]) as alice, connect(server.url, TOKENS["bob"]) as bob:
            made = await alice.call_tool("remember", {"content": "Crane 7 lifts the containers at the north harbour."})
            memory_id = int(text_of(made).split("#")[1].split()[0])
            for rev in range(1, 4):
                other = api.open_store(str(db)).store
                try:
                    api.update(other, memory_id, content=f"Crane {7 + rev} lifts the containers at the north harbour.")
                finally:
                    other.close()
                texts: list[str] = []
                async with anyio.create_task_group() as tg:
                    for client in (alice, bob, alice, bob):
                        tg.start_soon(recall, client, texts)
                seen.append((rev, texts))
        return seen

    for rev, texts in run(body):
        assert len(texts) == 4 and all(f"Crane {7 + rev} lifts" in t for t in texts), (rev, texts)


def test_every_memory_written_over_http_records_its_tokens_user(team, embedder, tmp_path, memsafe_proc):
    """alice remembers, bob updates: `get_memory`, the CLI's `get` and `history`, and `export`
    name who wrote each state."""
    run_memsafe = memsafe_proc
    server, db = team

    async def body():
        async with connect(server.url, TOKENS["alice"]) as alice:
            made = text_of(await alice.call_tool("remember", {"content": "Nightly backups of the wiki run at 02:00"}))
            number = int(made.split("#")[1].split()[0])
            shown = text_of(await alice.call_tool("get_memory", {"id": number}))
        async with connect(server.url, TOKENS["bob"]) as bob:
            updated = await bob.call_tool("update_memory", {"id": number, "content": "Nightly backups of the wiki "
                                                                                     "run at 03:00 since the move"})
            assert not updated.is_error, text_of(updated)
            history = text_of(await bob.call_tool("get_memory", {"id": number, "history": True}))
            glued = text_of(await bob.call_tool("remember", {"content": "retry\x00backoff policy for the wiki"}))
            assert "#" in glued, glued  # a control character becomes a space on this path too
            found = text_of(await bob.call_tool("recall", {"query": "backoff"}))
            assert "retry backoff policy for the wiki" in found, found
        return number, shown, history

    number, shown, history = run(body)
    assert "by=alice" in shown
    assert "by=alice" in history and "by=bob" in history
    env = {"MEMSAFE_HOME": str(tmp_path / "home")}
    got = run_memsafe("--db", str(db), "get", str(number), "--json", env=env)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["author"] == "bob"
    past = run_memsafe("--db", str(db), "history", str(number), "--json", env=env)
    assert past.returncode == 0, past.stderr
    assert [v.get("author") for v in json.loads(past.stdout)["versions"]][-2:] == ["alice", "bob"]
    out = tmp_path / "team.jsonl"
    done = run_memsafe("--db", str(db), "export", "-o", str(out), "--all-projects", env=env)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    memory = next(r for r in records if r.get("type") == "memory" and "wiki" in r.get("content", ""))
    assert memory["author"] == "bob"
    assert {v.get("author") for v in memory.get("versions", [])} >= {"alice"}


def test_a_near_duplicate_is_told_to_its_writer_only(team, embedder):
    """On a shared server a remember's near-duplicate warning is in its own reply (the model is
    loaded: the remember embeds before replying), never carried over to another user's call."""
    server, _db = team

    async def body():
        async with connect(server.url, TOKENS["alice"]) as alice, connect(server.url, TOKENS["bob"]) as bob:
            await alice.call_tool("recall", {"query": "warm the model"})
            first = await alice.call_tool("remember", {"content": "The billing service retries webhooks five "
                                                                  "times with exponential backoff"})
            second = await bob.call_tool("remember", {"content": "The billing service retries webhooks five "
                                                                 "times, with exponential backoff."})
            after = await alice.call_tool("recall", {"query": "billing webhooks retries"})
            return text_of(first), text_of(second), text_of(after)

    first, second, after = run(body)
    number = first.split("#")[1].split()[0]
    assert f"nearly the same as #{number}" in second
    assert "Note:" not in after and "nearly the same" not in after


def test_the_sdk_client_with_a_wrong_token_gets_nowhere(team):
    server, db = team
    before = count(db)

    async def body():
        async with connect(server.url, WRONG) as client:
            await client.call_tool("remember", {"content": "written with a wrong token"})

    with pytest.raises(Exception):  # noqa: B017 (the SDK's error for a 401 handshake)
        run(body)
    assert count(db) == before


# ---------------------------------------------------------------------------------------------
# Plain HTTP: tokens, refusals, health


def test_a_call_without_its_token_is_401_and_writes_nothing(team):
    """In a session alice opened, the same tools/call with a wrong, missing or non-bearer
    credential is refused with 401 and stores nothing; with alice's token it stores."""
    server, db = team
    headers = session(server.url, TOKENS["alice"])
    before = count(db)
    for auth in (f"Bearer {WRONG}", None, f"Basic {TOKENS['alice']}", "Bearer", f"Bearer {TOKENS['alice'][:-1]}"):
        sent = {k: v for k, v in headers.items() if k != "Authorization"}
        if auth is not None:
            sent["Authorization"] = auth
        reply = httpx2.post(server.url, headers=sent, json=remember_call("the 401 path stores nothing"))
        assert reply.status_code == 401, (auth, reply.status_code, reply.text)
        assert reply.headers["www-authenticate"].startswith("Bearer")
    assert count(db) == before
    reply = httpx2.post(server.url, headers=headers, json=remember_call("the 401 path stores nothing"))
    assert reply.status_code == 200 and '"isError":false' in reply.text
    assert count(db) == before + 1


def test_another_users_token_cannot_take_over_a_session(team):
    server, db = team
    headers = session(server.url, TOKENS["alice"])
    before = count(db)
    reply = httpx2.post(server.url, headers={**headers, "Authorization": f"Bearer {TOKENS['bob']}"},
                        json=remember_call("bob writing in alice's session"))
    assert reply.status_code in (403, 404), reply.text
    assert count(db) == before


def test_healthz_answers_without_a_token(team):
    server, _db = team
    reply = httpx2.get(f"{server.base}/healthz")
    assert reply.status_code == 200
    assert reply.json()["status"] == "ok"
    assert httpx2.post(server.url, headers=MCP_HEADERS, json={}).status_code == 401  # the MCP path is guarded


def test_a_store_that_cannot_open_stops_the_start_and_later_makes_healthz_503(tmp_path, memsafe_proc):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be", encoding="utf-8")
    refused = memsafe_proc("--db", str(blocker / "team.db"), "serve", "--transport", "http", "--port", "0",
                           timeout=60)
    assert refused.returncode == 1 and refused.stderr.strip().count("\n") == 0, refused.stderr
    db = tmp_path / "team.db"
    with HttpServer(db, cwd=tmp_path) as server:
        assert httpx2.get(f"{server.base}/healthz").status_code == 200
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(b"not a database " * 512)
        reply = httpx2.get(f"{server.base}/healthz")
        assert reply.status_code == 503
        assert reply.json() == {"status": "unavailable"}  # the reason is in the log, not for anonymous callers
        server.wait_for("healthz: store unavailable")


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"Host": "evil.example"}, 421),
        ({"Host": "evil.example:80"}, 421),
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "https://memory.team.example.evil.example"}, 403),
        ({"Host": "memory.team.example"}, 200),  # --allow-host
        ({"Host": "memory.team.example", "Origin": "https://memory.team.example"}, 200),
        ({"Origin": "http://localhost"}, 200),
    ],
)
def test_host_and_origin_are_checked_against_dns_rebinding(team, extra, status):
    server, _db = team
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKENS['bob']}", **extra}
    reply = httpx2.post(server.url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": PROTOCOL, "capabilities": {},
                                   "clientInfo": {"name": "raw", "version": "1"}}})
    assert reply.status_code == status, reply.text


def test_logs_never_show_a_token(team):
    """At DEBUG with the access log on, after good, wrong and malformed credentials (this test's
    own requests and every earlier test's), no token appears in the server's log."""
    server, _db = team
    headers = session(server.url, TOKENS["bob"])
    httpx2.post(server.url, headers={**headers, "Authorization": f"Bearer {WRONG}"}, json=remember_call("x"))
    httpx2.post(server.url, headers={**headers, "Authorization": f"Bearer {WRONG} {TOKENS['alice']}"},
                json=remember_call("x"))
    httpx2.get(f"{server.base}/healthz", headers={"Authorization": f"Bearer {TOKENS['alice']}"})
    httpx2.get(f"{server.base}/healthz?last-request-of-this-test")
    log = server.wait_for("/healthz?last-request-of-this-test")  # the access log of every request above is in
    assert '"POST /mcp HTTP/1.1" 401' in log and "DEBUG" in log  # the log is really at its most verbose
    for token in [*TOKENS.values(), WRONG]:
        assert token not in log
        assert token[:MIN_TOKEN_CHARS] not in log


def test_loopback_without_tokens_serves_this_machine_and_stops_on_sigterm(tmp_path, embedder):
    db = tmp_path / "solo.db"
    server = HttpServer(db, cwd=tmp_path)
    try:
        async def body():
            async with connect(server.url) as client:
                return text_of(await client.call_tool("remember", {"content": "solo server note about the cache"}))

        assert run(body).startswith("Remembered #1")
        assert "no tokens" in server.stderr
    finally:
        code = server.stop()
    assert code == 143 and "Traceback" not in server.stderr  # 128 + SIGTERM, as over stdio
    assert count(db) == 1


# ---------------------------------------------------------------------------------------------
# Start-up refusals and the tokens file


def test_a_bind_other_than_loopback_needs_tokens(memsafe_proc, db_path):
    env = {k: v for k, v in os.environ.items() if k != TOKENS_ENV}
    result = memsafe_proc("--db", str(db_path), "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0",
                          env={**env, TOKENS_ENV: ""}, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and TOKENS_ENV in lines[0] and "0.0.0.0" in lines[0], result.stderr
    assert not db_path.exists()  # refused before the store was opened


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("alice\n", 1, "two fields"),
        ("# team\n\nalice a-token-long-enough-0001 extra\n", 3, "two fields"),
        ("alice short\n", 1, f"shorter than {MIN_TOKEN_CHARS}"),
        ("# a\n" + "x" * 201 + " a-token-long-enough-0001\n", 2, "author is 201 characters"),
        ("alice same-token-long-enough-01\nbob same-token-long-enough-01\n", 2, "same token as line 1"),
    ],
)
def test_a_bad_tokens_file_line_is_named_and_its_token_never_shown(tmp_path, text, line, words):
    path = tmp_path / "tokens"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as caught:
        load_tokens(path)
    message = str(caught.value)
    assert f"line {line}:" in message and words in message and "\n" not in message
    assert "token-long-enough" not in message and "short" not in message.replace("shorter", "")


def test_a_bad_tokens_file_stops_serve_with_one_line(tmp_path, memsafe_proc, db_path):
    path = tmp_path / "tokens"
    path.write_text("alice a-token-long-enough-0001\nbob\n", encoding="utf-8")
    result = memsafe_proc("--db", str(db_path), "serve", "--transport", "http", "--port", "0",
                          env={TOKENS_ENV: str(path)}, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "line 2" in result.stderr
    missing = memsafe_proc("--db", str(db_path), "serve", "--transport", "http", "--port", "0",
                           env={TOKENS_ENV: str(tmp_path / "nope")}, timeout=60)
    assert missing.returncode == 1 and "nope" in missing.stderr and missing.stderr.strip().count("\n") == 0


def test_tokens_file_maps_each_token_to_its_user(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# who\nalice a-token-long-enough-0001\n\n  bob\tb-token-long-enough-0002  \n"
                    "alice a-token-long-enough-0003\n", encoding="utf-8")
    table = load_tokens(path)
    assert table.user_of("a-token-long-enough-0001") == "alice"
    assert table.user_of("a-token-long-enough-0003") == "alice"
    assert table.user_of("b-token-long-enough-0002") == "bob"
    assert table.user_of("a-token-long-enough-000") is None
    assert table.user_of("") is None
    assert table.users == ["alice", "bob"]
    assert "a-token" not in repr(table)


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True),
                                                ("::1", True), ("[::1]", True), ("0.0.0.0", False),
                                                ("10.0.0.5", False), ("::", False), ("team.example", False)])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_stdio_takes_no_http_options(memsafe_proc, db_path):
    result = memsafe_proc("--db", str(db_path), "serve", "--port", "8765", timeout=60)
    assert result.returncode == 2 and "--transport http" in result.stderr


def test_bench_http_stores_exactly_what_the_clients_sent(tmp_path, embedder):
    from memsafe.bench.http import run_http

    report = run_http(db=str(tmp_path / "bench.db"), clients=3, remembers=4, recallers=1, latency_at=0)
    load = report["load"]
    assert load["errors"] == 0, load["error_samples"]
    assert load["memories_after"] == 12 and load["exact"] and report["ok"]
    assert json.loads(json.dumps(report)) == report


def test_the_listening_socket_sets_tcp_nodelay():
    """Accepted connections inherit it: without it every keep-alive reply waited ~40 ms for the
    client's delayed ACK (uvicorn writes headers and body separately)."""
    import socket

    from memsafe.mcp.http import _listen

    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        sock.close()


def test_the_team_path_on_postgresql(pg_server, embedder, tmp_path):
    """The same server on PostgreSQL: alice's memory is recalled by bob and records alice as its
    author; a wrong token is refused and writes nothing."""
    url = pg_server.new_database()
    try:
        with HttpServer(url, tokens=TOKENS, cwd=tmp_path, env={"MEMSAFE_HOME": str(tmp_path / "home")}) as server:
            async def body():
                async with connect(server.url, TOKENS["alice"]) as alice:
                    made = text_of(await alice.call_tool("remember", {"content": "Release candidates are cut on "
                                                                                 "Wednesdays after the sync"}))
                async with connect(server.url, TOKENS["bob"]) as bob:
                    found = text_of(await bob.call_tool("recall", {"query": "when are release candidates cut?"}))
                    number = int(made.split("#")[1].split()[0])
                    shown = text_of(await bob.call_tool("get_memory", {"id": number}))
                return number, found, shown

            number, found, shown = run(body)
            headers = session(server.url, TOKENS["bob"])
            refused = httpx2.post(server.url, headers={**headers, "Authorization": f"Bearer {WRONG}"},
                                  json=remember_call("a wrong token on PostgreSQL"))
            assert refused.status_code == 401
        assert "Wednesdays" in found and "by=alice" in shown
        assert count(url) == 1
        opened = api.open_store(url)
        try:
            assert api.get(opened.store, number).author == "alice"
        finally:
            opened.store.close()
    finally:
        pg_server.drop(url)
