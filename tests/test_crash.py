"""Crash safety: a process is killed with SIGKILL at random moments while it remembers (one by one,
or in import-style batches of one transaction), and while it backfills embeddings. After every kill
the file opens, passes integrity, holds every write that was acknowledged (the writer prints ids
only after their commit), and has no half-written memory: no row without its FTS entry, no vector
for a missing row, no `embedded = 1` without a vector (`Store.consistency_problems`)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from memsafe import api

WRITER = r"""
import sys
from memsafe import api
db, tag, mode = sys.argv[1], sys.argv[2], sys.argv[3]
store = api.open_store(db).store

def step(i):
    if mode == "batch":   # import-style: 40 memories per transaction, acknowledged after the commit
        with store.write():
            return [api.remember(store, f"batch {tag} item {i + j} about the deploy pipeline", embed_now=False).id
                    for j in range(40)]
    return [api.remember(store, f"stream {tag} item {i}: cache and retry notes", embed_now=(i % 2 == 0)).id]

# The first write loads the model and the credential scanner (seconds on a loaded machine): the
# kill window opens only after it, so kills land mid-stream among real writes.
ids = step(0)
i = len(ids)
print("ready", flush=True)
while True:
    print(" ".join(map(str, ids)), flush=True)
    ids = step(i)
    i += len(ids)
"""

BACKFILLER = r"""
import sys
from memsafe import api
store = api.open_store(sys.argv[1]).store
print("ready", flush=True)
print(api.backfill(store, limit=None, batch_size=32), flush=True)
"""


def _run_and_kill(args: list[str], rng: random.Random, max_delay: float, killed: list | None = None) -> set[int]:
    """Start a process, wait until it is ready, kill -9 it after a random delay; return the ids it
    acknowledged (everything it printed before dying). A process that finished first is fine
    (counted in `killed` only when the kill landed)."""
    proc = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    time.sleep(rng.uniform(0.05, max_delay))
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGKILL), err
    if killed is not None and proc.returncode == -signal.SIGKILL:
        killed.append(1)
    return {int(tok) for tok in out.split()}


def _check(db, acknowledged: set[int]) -> api.Opened:
    opened = api.open_store(str(db))
    store = opened.store
    ids = {r[0] for r in store.conn.execute("SELECT id FROM memories")}
    assert acknowledged <= ids, f"lost acknowledged writes: {sorted(acknowledged - ids)[:10]}"
    assert store.consistency_problems() == []
    return opened


@pytest.mark.parametrize("mode", ["stream", "batch"])
def test_kill_during_remembers(tmp_path, embedder, mode):
    db = tmp_path / "crash.db"
    rng = random.Random(7 if mode == "stream" else 11)
    acknowledged: set[int] = set()
    killed: list = []
    for round_ in range(5):
        acknowledged |= _run_and_kill([WRITER, str(db), f"r{round_}", mode], rng, max_delay=1.5, killed=killed)
        opened = _check(db, acknowledged)
        opened.store.close()
    assert len(acknowledged) > 5  # the kills did land mid-stream, after real work
    assert killed == [1] * 5, "a writer finished before its kill"


def test_kill_during_backfill(tmp_path, embedder):
    db = tmp_path / "backfill.db"
    opened = api.open_store(str(db))
    with opened.store.write():
        for i in range(1200):
            text = f"pending memory {i} on topic {i % 17} of the release train. " + "notes on the rollout plan " * 12
            api.remember(opened.store, text, embed_now=False)
    opened.store.close()
    rng = random.Random(5)
    killed: list = []
    for _ in range(4):
        _run_and_kill([BACKFILLER, str(db)], rng, max_delay=1.5, killed=killed)
        opened = _check(db, set(range(1, 1201)))
        opened.store.close()
    assert killed, "no kill landed during the backfill"
    # The re-run finishes without errors and leaves exactly one vector per memory.
    opened = api.open_store(str(db))
    store = opened.store
    api.backfill(store, limit=None)
    assert store.pending_count() == 0
    assert store.vector_count() == 1200 == store.counts()["total"]
    assert store.consistency_problems() == []
    opened.store.close()
