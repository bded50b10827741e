"""Hostile tests, session 2 (break-b): recall's post-filtered search paths and the graph hop,
and `memsafe serve` replies to malformed JSON-RPC lines. Real processes, real SQLite files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memsafe.bench.mcp import RawClient


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
    """FIELD-CASES F03 again: each malformed line logged a warning to stderr; a client that never
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


# ---------------------------------------------------------------------------------------------
# Graph hop: the per-entity cap


def _row(n: int, content: str, project: str | None = None) -> dict:
    at = "2026-01-01T00:00:00Z"
    return {"uid": f"u{n}", "content": content, "project": project, "created_at": at, "updated_at": at,
            "content_updated_at": at, "content_hash": f"h{n}"}


def test_graph_hop_never_takes_a_memory_that_names_the_query_entity(tmp_path):
    """The hop's 'direct' set (memories naming the queried entity, which the hop must leave out)
    was cut to that entity's newest 50: an older memory naming both the queried entity and a
    related one then got the hop boost as if it were only one relation away."""
    from memsafe.api import graph as graph_api
    from memsafe.models import Scope
    from memsafe.store import Store

    store = Store(tmp_path / "g.db")
    at = "2026-01-01T00:00:00Z"
    with store.write():
        a = store.insert_entity("Alpha", "alpha", "concept", at)
        b = store.insert_entity("Beta", "beta", "concept", at)
        store.upsert_relation(a, "uses", b, 1.0, at)
        both = store.insert_memory(_row(0, "alpha uses beta"), [])
        store.link_memory_entities(both, [a, b])
        only_b = store.insert_memory(_row(1, "beta alone"), [])
        store.link_memory_entities(only_b, [b])
        for n in range(2, 2 + graph_api.HOP_PER_ENTITY + 10):  # newer memories naming alpha only
            store.link_memory_entities(store.insert_memory(_row(n, f"alpha note {n}"), []), [a])
    hops, _direct = graph_api.one_hop(store, [a], Scope())
    store.close()
    assert only_b in hops
    assert both not in hops


# ---------------------------------------------------------------------------------------------
# Recall: the query embedded on a worker thread


FORK_SCRIPT = r"""
import os, sys, signal
from memsafe import api
db = sys.argv[1]
o = api.open_store(db)
api.remember(o.store, "we squash commits before merging")
assert api.recall(o.store, "how do we merge").hits
o.store.close()
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a hung child dies of SIGALRM instead of hanging the test
    o = api.open_store(db)
    r = api.recall(o.store, "how do we merge")
    os._exit(0 if r.hits and r.mode == "hybrid" else 3)
_, status = os.waitpid(pid, 0)
print("child", status)
"""


def test_recall_in_a_forked_child_after_a_recall_in_the_parent(tmp_path, embedder):
    """A program using memsafe.api that forks (multiprocessing's default on Linux) after a recall:
    the child inherited the parent's embedding thread pool without its thread, so the child's
    recall waited forever for a query vector."""
    proc = subprocess.run([sys.executable, "-c", FORK_SCRIPT, str(tmp_path / "f.db")],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "child 0", proc.stdout  # 14: killed by SIGALRM (hung); 768: no hits
