"""Opportunistic embedding (`api.backfill`: what a recall, the detached embedder and `memsafe embed`
run) is bounded in attempts and in time, even while another process keeps rewriting the pending
rows, and a memory just remembered is still found by meaning on the first recall (a
recall during `decay --apply` embedded 8,705 texts, because rows changed meanwhile were skipped
and retried without end).

The other process is a real decay: `api.decay` (the handler of `memsafe decay --apply`) run as
nightly would, a year apart each pass, over memories created long ago; each pass then restores
what it compressed, so the next pass rewrites the same rows again. It runs without the model
(MEMSAFE_NO_MODEL), so every row it rewrites goes back to pending, as on a machine where the
cron job cannot load the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memsafe import api
from memsafe.recall import vectors

pytestmark = pytest.mark.backends("sqlite", "postgres")

OLD = 300  # more than a recall may embed (vectors.BACKFILL_BATCH), so oldest-first never reaches the new one
NEW = "Production deploys are frozen on Friday afternoons."
BY_MEANING = "Which day are releases blocked?"  # no word in common with NEW

CHURN = textwrap.dedent("""
    import os, sys
    from memsafe import api, settings
    opened = api.open_store(sys.argv[1])
    for year in range(1991, 2020):  # a nightly decay, each pass a year after the last
        os.environ["MEMSAFE_NOW"] = f"{year}-01-01T00:00:00Z"
        settings.reload()
        report = api.decay(opened.store)
        for change in report.changes:  # undo it, so the next pass rewrites the same rows again
            api.restore(opened.store, change.id)
        print(year, len(report.changes), flush=True)
""")


class Spy:
    """Counts the texts the real model embeds (the model still runs)."""

    def __init__(self, embedder, monkeypatch):
        self.texts = 0
        original = embedder.embed

        def embed(texts, *args, **kwargs):
            self.texts += len(texts)
            return original(texts, *args, **kwargs)

        monkeypatch.setattr(embedder, "embed", embed)


@pytest.fixture
def decaying(db_path, store, monkeypatch):
    """A store of OLD pending memories from 1990 plus NEW (pending, remembered now), while another
    process keeps decaying and restoring the old ones. Yields the store once the first pass is done."""
    monkeypatch.setenv("MEMSAFE_NOW", "1990-01-01T00:00:00Z")
    for i in range(OLD):
        api.remember(store, f"Note {i}: the billing queue retries {i} times. It backs off. Then it gives up.",
                     embed_now=False)
    for i in range(3):  # never decayed: the recall has something to answer from by keywords
        api.remember(store, f"Pinned {i}: the billing queue retries three times with jitter.", tags=["pinned"],
                     embed_now=False)
    monkeypatch.delenv("MEMSAFE_NOW")
    new = api.remember(store, NEW, embed_now=False)
    env = {k: v for k, v in os.environ.items() if k != "MEMSAFE_NOW"}
    churn = subprocess.Popen([sys.executable, "-c", CHURN, str(db_path)], stdout=subprocess.PIPE, text=True,
                             env={**env, "MEMSAFE_NO_MODEL": "1"})
    try:
        year, changed = churn.stdout.readline().split()
        assert int(changed) == OLD, "the decay pass rewrote every old memory"
        yield store, new
    finally:
        churn.kill()
        churn.wait()
        churn.stdout.close()


def test_backfill_and_recall_are_bounded_by_attempts_while_decay_rewrites_the_rows(decaying, embedder, monkeypatch):
    store, new = decaying
    spy = Spy(embedder, monkeypatch)
    written = api.backfill(store, limit=64)
    assert spy.texts <= 64 and written <= 64  # attempts are bounded, not only what was saved

    spy.texts = 0
    result = api.recall(store, "how often does the billing queue retry?")
    assert result.hits  # it answers from what it has
    assert spy.texts <= vectors.BACKFILL_BATCH + 1  # at most one bounded backfill, plus the query
    assert store.pending_count()  # the decay keeps rows pending: the recall says so
    assert any("still waiting for embedding, found by keywords only" in n for n in result.notes), result.notes


def test_the_first_recall_finds_a_new_memory_by_meaning_during_a_decay(decaying, embedder, monkeypatch):
    # The first-recall promise (README): a memory whose vector is pending is embedded by the next
    # recall. Newest first, so a decay rewriting hundreds of older rows does not starve it.
    store, new = decaying
    spy = Spy(embedder, monkeypatch)
    result = api.recall(store, BY_MEANING)
    hit = next((h for h in result.hits if h.memory.id == new.id), None)
    assert hit is not None and hit.vector_rank is not None, [h.memory.id for h in result.hits]
    assert spy.texts <= vectors.BACKFILL_BATCH + 1


@pytest.mark.backends("sqlite")  # the same handler as above; here through the real CLI process and MCP server
def test_cli_and_mcp_recalls_answer_with_a_note_during_a_decay(decaying, db_path, memsafe_proc, tmp_path):
    store, new = decaying
    r = memsafe_proc("--db", str(db_path), "recall", BY_MEANING, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert new.id in [h["id"] for h in data["results"]]
    assert any("still waiting for embedding" in n for n in data["notes"]), data["notes"]

    r = memsafe_proc("--db", str(db_path), "recall", "billing queue retries")
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert "Note: " in r.stderr and "still waiting for embedding" in r.stderr

    async def mcp_recall():
        params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db_path), "serve"],
                                       env={**os.environ, "MEMSAFE_SERVE_WARM": "0"}, cwd=str(tmp_path))
        with open(tmp_path / "server.err", "a", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("recall", {"query": BY_MEANING})

    result = anyio.run(mcp_recall)
    text = "\n".join(c.text for c in result.content)
    assert not result.is_error, text
    assert f"#{new.id} " in text and "still waiting for embedding" in text.splitlines()[0]


def test_pending_walks_newest_or_oldest_first(store):
    ids = [api.remember(store, f"pending note number {i}", embed_now=False).id for i in range(5)]
    assert [i for i, _ in store.pending_embeddings(2)] == ids[:2]
    assert [i for i, _ in store.pending_embeddings(2, after_id=ids[1])] == ids[2:4]
    assert [i for i, _ in store.pending_embeddings(2, newest_first=True)] == ids[:2:-1][:2]
    assert [i for i, _ in store.pending_embeddings(9, newest_first=True, before_id=ids[3])] == ids[2::-1]


def test_embed_fills_every_pending_vector_once_with_progress(store):
    for i in range(40):
        api.remember(store, f"deferred note {i} about the release train", embed_now=False)
    seen = []
    report = api.embed_pending(store, progress=lambda done, total: seen.append((done, total)))
    assert (report.embedded, report.pending) == (40, 0)
    assert seen and seen[-1] == (40, 40)


def test_time_bounded_embedding_stops_when_the_time_is_up(store, embedder, monkeypatch):
    # The time bound, made deterministic with no time at all: nothing is embedded but the query,
    # and the answer comes from what there is (BM25), with a note. recall --as-of embeds past
    # texts on the fly; it is bounded the same way.
    for i in range(20):
        api.remember(store, f"Note {i}: the billing queue retries {i} times, then it gives up.", embed_now=False)
    spy = Spy(embedder, monkeypatch)
    assert api.backfill(store, max_seconds=0.0) == 0 and spy.texts == 0
    monkeypatch.setattr(vectors, "RECALL_EMBED_SECONDS", 0.0)
    result = api.recall_as_of(store, "billing queue retries", as_of=api.get(store, 20).created_at)
    assert result.hits and spy.texts == 1  # the query only
    assert "20 of 20 texts as they were then not embedded" in " ".join(result.notes), result.notes
    assert all(h.vector_rank is None for h in result.hits)


def test_a_recall_while_another_writer_holds_the_lock_answers_and_finds_the_new_memory(db_path, store, embedder,
                                                                                          monkeypatch):
    # A decay holds the write lock in turns; a recall's own embedding waits for it only within its
    # time bound (it used to wait 30 s a write), and what it embedded but could not store still
    # counts for its answer: the memory just remembered is found by meaning.
    for i in range(40):
        api.remember(store, f"Note {i}: the billing queue retries {i} times, then it gives up.", embed_now=False)
    new = api.remember(store, NEW, embed_now=False)
    other = api.open_store(str(db_path))
    spy = Spy(embedder, monkeypatch)
    try:
        with other.store.write():  # held for the whole recall
            result = api.recall(store, BY_MEANING)
    finally:
        other.store.close()
    hit = next((h for h in result.hits if h.memory.id == new.id), None)
    assert hit is not None and hit.vector_rank is not None, [h.memory.id for h in result.hits]
    assert spy.texts <= vectors.BACKFILL_BATCH + 1
    assert store.pending_count() == 41  # nothing could be written
    assert any("still waiting for embedding" in n for n in result.notes), result.notes
