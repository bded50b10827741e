"""Opportunistic embedding (`api.backfill`, what a recall runs first) is bounded in attempts and in
time, even while another process keeps changing the pending rows (issue 17.2: a recall during
`decay --apply` embedded 8,705 texts, because rows changed meanwhile were skipped and retried)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from memsafe import api, clock
from memsafe.api import core


class Spy:
    """Counts the texts the real model embeds (the model still runs)."""

    def __init__(self, embedder, monkeypatch):
        self.texts = 0
        original = embedder.embed

        def embed(texts, *args, **kwargs):
            self.texts += len(texts)
            return original(texts, *args, **kwargs)

        monkeypatch.setattr(embedder, "embed", embed)


def test_backfill_and_recall_are_bounded_while_decay_rewrites_the_rows(db_path, embedder, monkeypatch):
    opened = api.open_store(str(db_path))
    store = opened.store
    for i in range(300):
        api.remember(store, f"Note {i}: the billing queue retries {i} times. It backs off. Then it gives up.",
                     embed_now=False)
    for i in range(3):  # never decayed: the recall has something to answer from
        api.remember(store, f"Pinned {i}: the billing queue retries three times with jitter.", tags=["pinned"],
                     embed_now=False)
    # Another process: a real decay a year later, then it keeps rewriting every pending memory.
    changer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import itertools, sys
            from memsafe import api
            from memsafe.errors import MemsafeError
            opened = api.open_store({str(db_path)!r})
            api.decay(opened.store)
            print("ready", flush=True)
            for n in itertools.count():
                for memory_id, content in opened.store.pending_embeddings(1000):
                    try:
                        api.update(opened.store, memory_id, content=content + f" r{{n}}", embed_now=False)
                    except MemsafeError:
                        pass
            """)],
        stdout=subprocess.PIPE, text=True, env={**__import__("os").environ, "MEMSAFE_NOW": "2099-01-01T00:00:00Z"},
    )
    try:
        assert changer.stdout.readline().strip() == "ready"
        spy = Spy(embedder, monkeypatch)
        written = api.backfill(store, limit=64)
        assert spy.texts <= 64 and written <= 64  # attempts are bounded, not only what was saved

        spy.texts = 0
        result = api.recall(store, "how often does the billing queue retry?")
        assert result.hits  # it answers from what it has
        assert spy.texts <= core.BACKFILL_BATCH + 1  # at most one bounded backfill, plus the query
        if store.pending_count():
            assert any("waiting for embedding" in note for note in result.notes), result.notes
    finally:
        changer.kill()
        changer.wait()
        opened.store.close()
    assert clock.now()  # the test process's clock was not moved
