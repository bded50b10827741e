"""Responsibility: the vector half of recall: the embedder a store can use, filling pending vectors
(`backfill`: what a recall, `memsafe embed`, `serve` and the detached embedder run), the query's
vector (embedded on a worker thread, the last ones kept per process), and the KNN search of the
stored vectors, or of the texts as they were at an instant (`past_search`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from memsafe import embed, settings, tokens
from memsafe.embed import embed_within
from memsafe.errors import IndexDamaged, StoreUnavailable, repair_hint
from memsafe.models import Scope, admits
from memsafe.plural import count_of
from memsafe.recall import terms
from memsafe.store import Store

if TYPE_CHECKING:
    from concurrent.futures import Future


BACKFILL_BATCH = 256  # pending memories a recall embeds at most (attempts, written or skipped)
RECALL_EMBED_SECONDS = 2.0  # ... and for at most this long, then answers from what it has
WRITE_GRACE_MS = 250  # least wait for the write lock of a time-bounded fill (about one SQLite commit under load)
AS_OF_EMBED_MAX = 256  # past texts embedded exactly per time-travel query before narrowing to candidates


MODEL_KEY = "embed_model"  # the store's config key naming the registry model of its vectors


def store_model(store: Store) -> str:
    """The registry name (`embed.MODELS`) of the model this store's vectors are made with: its
    `embed_model` config key, set by `memsafe embed --model` and when a first vector table is
    made; DEFAULT_MODEL for a store that never set it (its vectors are the default model's)."""
    return (store.config_get(MODEL_KEY) or embed.DEFAULT_MODEL).strip().lower()


def model_for(store: Store) -> str:
    """The model a process uses with this store: MEMSAFE_EMBED_MODEL when set, else `store_model`."""
    return embed.selected_model() if settings.env().embed_model else store_model(store)


def model_conflict(store: Store) -> str | None:
    """One line when MEMSAFE_EMBED_MODEL asks for another model than the one that made this
    store's vectors (vectors of two models cannot be compared), else None."""
    if not settings.env().embed_model:
        return None
    asked, kept = embed.selected_model(), store_model(store)
    if asked == kept or not store.vector_table_exists():
        return None
    return (f"this store's vectors were made by {kept} but MEMSAFE_EMBED_MODEL asks for {asked}: "
            f"`memsafe embed --model {asked}` re-embeds every memory with it, or unset MEMSAFE_EMBED_MODEL")


def embedder_for(store: Store, name: str | None = None) -> embed.Embedder | None:
    """The shared embedder of the model for this store (`name`, else `model_for(store)`) when
    vectors can be used with it, else None (`unavailable_reason` says why). With `name` given it
    runs no SQL, so it may be called on another thread than the store's."""
    if not store.vector_available:
        return None
    if name is None:
        if model_conflict(store):
            return None
        name = model_for(store)
    return embed.get_embedder(name=name)


def ensure_table(store: Store, embedder: embed.Embedder) -> None:
    """`store.ensure_vector_table` for this embedder's vectors, recording its model's name
    (`store_model`) beside its id. Call inside `write()`."""
    store.ensure_vector_table(embedder.model_id, embedder.dim)
    if store.config_get(MODEL_KEY) != embedder.name:
        store.config_set(MODEL_KEY, embedder.name)


def unavailable_reason(store: Store, name: str | None = None) -> str:
    """Why `embedder_for(store)` gave None, in one line."""
    return (store.vector_error or model_conflict(store) or embed.load_error(name or model_for(store))
            or "model unavailable")


def vector_bytes(vec) -> bytes:
    """A (dim,) vector as the store keeps it: float32, native byte order."""
    return vec.astype("float32").tobytes()


def backfill(store: Store, *, limit: int | None = BACKFILL_BATCH, batch_size: int = embed.BATCH_SIZE,
             max_seconds: float | None = None, newest_first: bool = False,
             progress: Callable[[int], None] | None = None, unsaved: dict | None = None) -> int:
    """Fill pending vectors (deferred embeddings) in batches. Returns how many were written.

    One walk over the pending memories, oldest first (or newest first: what was just remembered
    is what a recall is likely asked about). Each batch is embedded outside any transaction, then
    written in one short transaction; a memory changed meanwhile (an update, a decay step) is
    skipped: it stays pending for a later call and is not retried in this one (the walk goes on
    past it). So the work is bounded whatever other processes do:

    - `limit` counts the memories embedded (written or skipped), not only those written;
    - `max_seconds` (wall clock) stops before a new batch once it has passed; after the first
      batch (embed.TIMED_FIRST_BATCH texts) each batch is sized to the time left at the rate
      measured so far (`embed.timed_batch`), so the overrun is about one text's embedding. Its
      writes wait for another writer's lock (a decay's, an import's) only for the time left (at
      least WRITE_GRACE_MS), and a lock that is not free by then ends it: the batch stays pending.

    `progress(count)` is called after each inference batch: the vectors written so far plus those
    of the transaction being embedded (so it may count a few that are then skipped). `unsaved`, when given, receives
    {memory id: (dim,) vector} of the memories embedded but not written for want of the lock, so
    a recall can still use them.

    Raises:
        StoreUnavailable: without `max_seconds`, another writer held the lock for 30 s.
    """
    embedder = embedder_for(store)
    if embedder is None:
        return 0
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds

    def write(most_ms: int = 30_000):  # a time-bounded fill waits for the write lock only as long as it has time
        left_ms = most_ms if deadline is None else min(most_ms, int((deadline - time.monotonic()) * 1000))
        return store.write(wait_ms=max(WRITE_GRACE_MS, left_ms))

    if not store.vectors_ready(embedder.model_id):
        try:
            with write(30_000 if deadline is None else WRITE_GRACE_MS):
                ensure_table(store, embedder)
        except StoreUnavailable:
            if deadline is None:
                raise
            write = _no_write  # no vector table yet and no lock in time: embed, keep in `unsaved`
    done = attempted = 0
    cursor: int | None = None  # the last id walked
    # rows per transaction; embedded in length-sorted batches of `batch_size`
    take_max = max(batch_size, BACKFILL_BATCH) if deadline is None else batch_size
    while limit is None or attempted < limit:
        take = take_max
        if deadline is not None:
            now = time.monotonic()
            take = embed.timed_batch(attempted, now - started, deadline - now, take_max)
            if not take:
                break
        if limit is not None:
            take = min(take, limit - attempted)
        if newest_first:
            rows = store.pending_embeddings(take, newest_first=True, before_id=cursor)
        else:
            rows = store.pending_embeddings(take, after_id=cursor or 0)
        if not rows:
            break
        attempted += len(rows)
        cursor = rows[-1][0]
        # the bar moves with each inference batch, not only with each transaction (256 commit
        # notes took 6-15 s to embed on two cores: a bar standing still that long looks hung)
        moved: Callable[[int], None] | None = None
        if progress is not None:
            def moved(n: int, base: int = done, report: Callable[[int], None] = progress) -> None:
                report(base + n)
        vectors = embedder.embed([content for _, content in rows], batch_size=batch_size, progress=moved)
        tokens.keep_counts([content for _, content in rows])  # a CLI recall of them needs no tokenizer
        try:
            with write():
                current = {m.id: m.content for m in store.get_memories([i for i, _ in rows]).values()}
                for (memory_id, content), vec in zip(rows, vectors):
                    if current.get(memory_id) == content:
                        store.put_vector(memory_id, vector_bytes(vec))
                        done += 1
        except StoreUnavailable:
            if deadline is None:
                raise
            if unsaved is not None:
                unsaved.update((memory_id, vec) for (memory_id, _), vec in zip(rows, vectors))
            break  # out of time while another writer held the lock: this batch stays pending
        if progress is not None:
            progress(done)
        if len(rows) < take:
            break
    return done


def _no_write(most_ms: int = 0) -> NoReturn:
    """What `backfill` writes with once the lock was not free in time: nothing (`most_ms` as `write`'s)."""
    raise StoreUnavailable("no time left to wait for the write lock")


def search(store: Store, query_vector: Future, mode: str, scope: Scope, depth: int, notes: list[str]
            ) -> tuple[list[tuple[int, float]], str]:
    """([(id, cosine similarity)] best first, mode used) from the query's embedding job: `mode`, or
    'lexical' with a note when vectors are unavailable or the model fails. Fills pending vectors first."""
    try:
        embedder, qvec = query_vector.result()
    except embed.ModelUnavailable as exc:
        notes.append(f"vector search failed ({exc}); lexical results only")
        return [], "lexical"
    if embedder is None:
        notes.append(f"vector search unavailable ({unavailable_reason(store)}); lexical results only")
        return [], "lexical"
    hits: list[tuple[int, float]] = []
    unsaved: dict[int, object] = {}
    fill = bool(store.pending_count()) or not store.vectors_ready(embedder.model_id)
    try:
        if fill:
            # bounded; newest first, so a memory just remembered is found by meaning
            backfill(store, max_seconds=RECALL_EMBED_SECONDS, newest_first=True,  # also after a model change
                     unsaved=unsaved)
        if store.vectors_ready(embedder.model_id):
            hits = [(i, 1.0 - d) for i, d in store.vector_search(vector_bytes(qvec), scope, depth)]
        if unsaved:
            hits = _with_unsaved(store, hits, unsaved, qvec, scope, depth)
    except embed.ModelUnavailable as exc:
        notes.append(f"vector search failed ({exc}); lexical results only")
        mode = "lexical"
    except IndexDamaged as exc:
        notes.append(f"the vector index is damaged ({exc.detail}); recall answers by keywords meanwhile; "
                     f"{repair_hint(store)}")
        return [], "lexical"
    pending = store.pending_count() if fill else 0  # what the fill left
    if pending:
        notes.append(f"{count_of(pending, 'memory')} still waiting for embedding, found by keywords only (a recall "
                     f"embeds at most {BACKFILL_BATCH} of them, for at most {RECALL_EMBED_SECONDS:g} s, newest "
                     "first; `memsafe embed` does the rest)")
    return hits, mode


def _with_unsaved(store: Store, hits: list[tuple[int, float]], unsaved: dict, qvec, scope: Scope, depth: int
                  ) -> list[tuple[int, float]]:
    """`hits` plus the memories in `scope` among `unsaved` (embedded by this recall, not stored: a
    writer held the lock), by their cosine similarity to `qvec` (unit vectors: the dot product):
    the `depth` best, best first. So the memory just remembered is found by meaning even while a
    decay keeps the store locked."""
    seen = {i for i, _ in hits}
    memories = store.get_memories([i for i in unsaved if i not in seen])
    extra = [(i, float(unsaved[i] @ qvec)) for i, m in memories.items()
             if m.status in scope.statuses and admits(scope, m)]
    return sorted([*hits, *extra], key=lambda h: -h[1])[:depth]


def query_text(store: Store, text: str) -> str:
    """The query text the vector half embeds: without the words half the store holds
    (`terms.common_words`, `terms.vector_text`). One count per query term in the word index."""
    n, df, _ = store.fts_term_stats(terms.fts_terms(text), [])
    return terms.vector_text(text, terms.common_words(df, n))


_embed_pool = None
_embed_pool_lock = threading.Lock()


def _forget_embed_pool() -> None:
    """In a forked child: the parent's pool has no thread there, so work given to it never runs."""
    global _embed_pool, _embed_pool_lock
    _embed_pool, _embed_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_embed_pool)


# The query vectors a process embedded last, by (model id, query text): an agent asks the same
# question again and again in one session, and a query's vector depends on nothing in the store.
# 256 vectors of 384 float32: 0.4 MB.
QUERY_VECTORS_KEPT = 256
_query_vectors: OrderedDict = OrderedDict()
_query_vectors_lock = threading.Lock()


def _known_query_vector(embedder: embed.Embedder, text: str):
    """The vector `query_vector` gave for `text` with this model lately, else None."""
    with _query_vectors_lock:
        key = (embedder.model_id, text)
        vector = _query_vectors.get(key)
        if vector is not None:
            _query_vectors.move_to_end(key)
        return vector


def query_vector(embedder: embed.Embedder, text: str):
    """(dim,) float32, L2-normalised, read-only: `embedder.embed_one(text)`, from the last
    QUERY_VECTORS_KEPT queries when asked before (a new query costs the model ~5 ms of CPU).

    Raises:
        embed.ModelUnavailable: the model fails.
    """
    vector = _known_query_vector(embedder, text)
    if vector is None:
        vector = embedder.embed_one(text, query=True)
        vector.setflags(write=False)
        with _query_vectors_lock:
            _query_vectors[(embedder.model_id, text)] = vector
            if len(_query_vectors) > QUERY_VECTORS_KEPT:
                _query_vectors.popitem(last=False)
    return vector


def embed_query_async(store: Store, text: str, scope: Scope | None = None, k: int = 0) -> Future:
    """Embed a query on the shared worker thread (`query_vector`), then prepare there the
    search of its `k` nearest in `scope` (`Store.prepare_vector_search`). The future gives (embedder,
    (dim,) float32 vector), or (None, None) when vectors cannot be used here; it raises
    embed.ModelUnavailable if the model fails. A query embedded lately by the loaded model is
    answered at once, without the worker: handing it over and back cost up to a few ms while this
    thread held the GIL."""
    global _embed_pool

    name = None if not store.vector_available or model_conflict(store) else model_for(store)
    if name is not None and embed.loaded(name):
        embedder = embed.get_embedder(name=name)
        vector = _known_query_vector(embedder, text) if embedder is not None else None
        if vector is not None:
            from concurrent.futures import Future

            done: Future = Future()
            done.set_result((embedder, vector))
            return done

    def job():
        embedder = embedder_for(store, name) if name else None  # reads only attributes set when the store was opened
        if embedder is None:
            return None, None
        vector = query_vector(embedder, text)
        store.prepare_vector_search(vector_bytes(vector), scope, k)  # overlaps this thread's BM25 search
        return embedder, vector

    with _embed_pool_lock:
        if _embed_pool is None:
            from concurrent.futures import ThreadPoolExecutor  # with logging: ~10 ms a lexical command skips

            _embed_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsafe-embed")
    return _embed_pool.submit(job)


def past_search(store: Store, embedder, text: str, visible: dict, depth: int, lexical: list[int],
                    notes: list[str]) -> list[tuple[int, float]]:
    """[(id, cosine similarity to `text`)] best first, for the texts as they were then.

    Unchanged texts use their stored vectors; changed (past) texts are embedded on the fly. When
    more than AS_OF_EMBED_MAX texts changed, only the likely ones are embedded: the BM25
    candidates plus the `depth` nearest by their current vector (a proxy: summaries and edits
    usually stay close to the original meaning); the others are left out of the vector ranking
    (they can still come from BM25), and a note says so. The embedding is bounded in time as a
    recall's backfill is (RECALL_EMBED_SECONDS), likeliest first (BM25 order, then
    nearest); what it did not reach is left out the same way, with a note.
    """
    import numpy as np  # lazily: the CLI must start without numpy

    ready = store.vectors_ready(embedder.model_id)
    stored = store.get_vectors([i for i in visible if visible[i].same_as_now and visible[i].embedded]) if ready else {}
    missing = [i for i in visible if i not in stored]
    query = embedder.embed_one(text, query=True).astype(np.float32)
    proxies = store.get_vectors(missing) if ready and missing else {}
    near = sorted(proxies, key=lambda i: -float(np.frombuffer(proxies[i], dtype=np.float32) @ query))
    likeliest = list(dict.fromkeys([*(i for i in lexical if i in visible), *near, *missing]))  # BM25, nearest, rest
    missing_set = set(missing)
    missing = [i for i in likeliest if i in missing_set]
    if len(missing) > AS_OF_EMBED_MAX:
        keep = set(near[:depth]) | set(lexical)
        notes.append(f"{len(missing)} texts changed since then; embedded the {len(keep & missing_set)} likeliest")
        missing = [i for i in missing if i in keep]
    fresh = embed_within(embedder, [visible[i].content for i in missing], RECALL_EMBED_SECONDS)
    if len(fresh) < len(missing):
        notes.append(f"{len(missing) - len(fresh)} of {len(missing)} texts as they were then not embedded in the "
                     f"{RECALL_EMBED_SECONDS:g} s a recall embeds for; found by keywords only")
        missing = missing[:len(fresh)]
    ids = [*stored, *missing]
    if not ids:
        return []
    matrix = np.zeros((len(ids), embedder.dim), dtype=np.float32)
    for n, i in enumerate(ids):
        if i in stored:
            matrix[n] = np.frombuffer(stored[i], dtype=np.float32)
    if missing:
        matrix[len(stored):] = fresh
    sims = matrix @ query
    order = np.argsort(-sims, kind="stable")[:depth]
    return [(ids[n], float(sims[n])) for n in order]
