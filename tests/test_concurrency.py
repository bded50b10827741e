"""Concurrency with real processes: several writer processes — api loops with
and without embeddings, one CLI process per memory, and an MCP client of `memsafe serve` —
remember at once while recalls run; the
count is exact, every acknowledged id is there, nobody sees "database is locked", and the file,
its FTS index and its vectors are consistent. The full 8 x 250 run is `scripts/stress.py`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from memsafe import api

STRESS = Path(__file__).resolve().parents[1] / "scripts" / "stress.py"


def test_concurrent_writers_lose_nothing(tmp_path):
    db = tmp_path / "shared" / "stress.db"  # does not exist yet: every process races to create it
    r = subprocess.run(
        [sys.executable, str(STRESS), "run", "--db", str(db), "--writers", "3", "--count", "50",
         "--cli-writers", "2", "--cli-count", "5", "--serve-writers", "1", "--recallers", "1", "--json"],
        capture_output=True, text=True, timeout=600,
    )
    summary = json.loads(r.stdout)
    assert summary["errors"] == [] and summary["locked_errors"] == 0
    assert summary["memories"] == summary["expected"] == 3 * 50 + 2 * 5 + 1 * 50
    assert summary["serve_writers"] == 1  # one writer is a `memsafe serve` process over MCP stdio
    assert summary["acknowledged"] == summary["expected"] and summary["acknowledged_missing"] == []
    assert summary["problems"] == []
    assert summary["recalls"] > 0
    # embedding writers wrote vectors; recall backfilled the rest: one vector per embedded row.
    assert summary["vectors"] == summary["embedded_rows"] > 0
    assert r.returncode == 0, r.stderr


OPENER = """
import sys, time
from memsafe import api
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
opened = api.open_store(sys.argv[1])
api.remember(opened.store, "first start " + sys.argv[3], embed_now=False)
print(opened.store.schema_version())
"""


def test_simultaneous_first_open_of_a_new_file(tmp_path):
    """Many processes (MCP servers started by several clients) open a file that does not exist
    yet at the same instant: all succeed, the schema is created once."""
    db = tmp_path / "new" / "memory.db"
    start = time.time() + 1.5
    procs = [
        subprocess.Popen([sys.executable, "-c", OPENER, str(db), str(start), str(i)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(6)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert err == ""
    opened = api.open_store(str(db))
    assert opened.store.counts()["total"] == 6
    assert opened.store.consistency_problems() == []
    opened.store.close()
    # the schema is created in one transaction: no opener saw a half-made file and "backed it up"
    assert not list(db.parent.glob("memory.db.bak-v*"))


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
