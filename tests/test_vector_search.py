"""Store.vector_search is exact within any scope (FIELD-CASES F12) on each of its paths — a tiny
scope scored row by row, a partial scope through the rowid-filtered vec0 KNN, and no filter —
checked against a numpy brute force over the same vectors."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pytest

from memsafe import api
from memsafe.models import Scope
from memsafe.store import SQLiteStore

SIZES = {"big": 600, "mid": 150, "tiny": 5}


@pytest.fixture(params=["sql", "in-memory"])
def vec_store(tmp_path, monkeypatch, request):
    """Both search engines: vec0 SQL, and the in-memory copy a long-lived process builds."""
    from memsafe.store.sqlite import vectors as store_module

    monkeypatch.setattr(store_module, "CACHE_MIN_VECTORS", 0 if request.param == "in-memory" else 10**9)
    rng = np.random.default_rng(42)
    store = SQLiteStore(tmp_path / "v.db")
    vectors: dict[int, np.ndarray] = {}
    projects: dict[int, str | None] = {}
    with store.write():
        store.ensure_vector_table("test-model", 384)
        n = 0
        for project, count in [*SIZES.items(), (None, 20)]:
            for _ in range(count):
                v = rng.normal(size=384).astype(np.float32)
                v /= np.linalg.norm(v)
                mid = store.insert_memory(
                    {"uid": f"u{n}", "content": f"m{n}", "project": project, "created_at": "2026-01-01T00:00:00Z",
                     "updated_at": "2026-01-01T00:00:00Z", "content_updated_at": "2026-01-01T00:00:00Z",
                     "content_hash": f"h{n}"},
                    ["rare"] if n % 97 == 0 else [],
                )
                store.put_vector(mid, v.tobytes())
                vectors[mid], projects[mid] = v, project
                n += 1
        store.update_memory(3, {"status": "forgotten"})
    yield store, vectors, projects
    store.close()


def _truth(vectors, allowed, query, k):
    ids = [i for i in vectors if allowed(i)]
    dist = {i: 1.0 - float(vectors[i] @ query) for i in ids}
    return sorted(ids, key=lambda i: dist[i])[:k]


@pytest.mark.parametrize(
    ("projects", "tags", "statuses"),
    [
        (["tiny"], [], ["active"]),  # 25 of 775 vectors: scored row by row
        (["mid"], [], ["active"]),  # rowid-filtered KNN
        (["big"], [], ["active"]),
        (["big", "mid"], [], ["active"]),
        (None, [], ["active"]),  # all but the forgotten one: rowid-filtered KNN
        (None, ["rare"], ["active"]),
        (None, [], ["active", "archived", "forgotten"]),  # everything: plain KNN
    ],
)
def test_vector_search_is_exact_in_scope(vec_store, projects, tags, statuses):
    store, vectors, project_of = vec_store
    scope = Scope(projects=projects, include_global=True, kinds=[], tags=tags, since=None, statuses=statuses)
    tagged = {r[0] for r in store.conn.execute("SELECT memory_id FROM memory_tags WHERE tag = 'rare'")}

    def allowed(i):
        if i == 3 and "forgotten" not in statuses:
            return False
        if tags and i not in tagged:
            return False
        return projects is None or project_of[i] in projects or project_of[i] is None

    rng = np.random.default_rng(7)
    for k in (1, 10, 50):
        q = rng.normal(size=384).astype(np.float32)
        q /= np.linalg.norm(q)
        got = [i for i, _ in store.vector_search(q.tobytes(), scope, k)]
        want = _truth(vectors, allowed, q, k)
        assert got == want
        assert len(got) == min(k, sum(1 for i in vectors if allowed(i)))  # never starved


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=384).astype(np.float32)
    return v / np.linalg.norm(v)


def _row(n: int) -> dict:
    return {"uid": f"u{n}", "content": f"m{n}", "project": None, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "content_updated_at": "2026-01-01T00:00:00Z",
            "content_hash": f"h{n}"}


def test_one_copy_serves_every_connection_and_never_another_file(tmp_path):
    """The MCP server opens a connection per call: from the process's second search on, every
    connection to the file searches the one in-memory copy. A new store created at the same path
    (same ids, same log positions, other vectors) is searched by its own vectors, never the copy's."""
    from memsafe.store.sqlite import vectors as store_module

    path = tmp_path / "s.db"
    scope = Scope(projects=None, include_global=True, kinds=[], tags=[], since=None)

    def build(uid: str, shift: int) -> None:
        store = SQLiteStore(path)
        with store.write():
            store.ensure_vector_table("m1", 384)
            for n in range(1, 31):
                store.insert_memory({**_row(n), "uid": f"{uid}{n}"}, [])
                store.put_vector(n, _unit(n + shift).tobytes())
        store.close()

    def nearest_per_call(v) -> int:  # as the server does: open, search, close
        store = SQLiteStore(path)
        try:
            return store.vector_search(v.tobytes(), scope, 1)[0][0]
        finally:
            store.close()

    build("a", 0)
    assert nearest_per_call(_unit(4)) == 4
    assert nearest_per_call(_unit(5)) == 5
    copy = store_module._copies.get(os.path.realpath(path))
    assert copy is not None and len(copy.ids) == 30  # built by the second call's connection
    assert nearest_per_call(_unit(6)) == 6
    assert store_module._copies.get(os.path.realpath(path)) is copy  # the third call reused it

    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink(missing_ok=True)
    build("b", 100)  # another store, same path, same ids and log positions
    assert nearest_per_call(_unit(104)) == 4
    assert store_module._copies[os.path.realpath(path)].mark == "b1"


def test_a_restored_copy_of_the_file_is_not_searched_through_the_copy_of_its_lost_future(tmp_path):
    """A copy of the file put back at its path (a backup restored, an export re-imported: the
    same oldest memory, so the same mark), then as many vector writes as the file had seen, the
    last one naming the same memory: the process's in-memory copy still holds the vectors of the
    writes the restore undid, so it must not be taken for this file's (break-it 7: memory 31's
    new text was searched with the vector of the text the restore removed)."""
    import shutil

    path = tmp_path / "s.db"
    scope = Scope(projects=None, include_global=True, kinds=[], tags=[], since=None)

    def write(*vectors: tuple[int, int], reset: bool = False) -> None:
        store = SQLiteStore(path)
        with store.write():
            if reset:
                store.ensure_vector_table("m1", 384)
            for memory_id, seed in vectors:
                store.insert_memory({**_row(memory_id), "uid": f"u{memory_id}-{seed}"}, [])
                store.put_vector(memory_id, _unit(seed).tobytes())
        store.close()

    def nearest_per_call(v) -> int:
        store = SQLiteStore(path)
        try:
            return store.vector_search(v.tobytes(), scope, 1)[0][0]
        finally:
            store.close()

    write(*((n, n) for n in range(1, 31)), reset=True)
    shutil.copy(path, tmp_path / "saved.db")  # closed: the WAL is in the file
    write((31, 200))
    assert nearest_per_call(_unit(200)) == 31
    assert nearest_per_call(_unit(200)) == 31  # the second search built the copy
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink(missing_ok=True)
    shutil.copy(tmp_path / "saved.db", path)
    write((31, 300))  # memory 31 again, another text, at the same log position
    assert nearest_per_call(_unit(300)) == 31
    assert nearest_per_call(_unit(200)) != 31


def test_in_memory_copy_follows_other_processes_writes(tmp_path, monkeypatch):
    """A long-lived process's in-memory vectors follow every vector write made through another
    connection: new vectors, re-embeds, deletes (purge), a model reset, and a pruned log."""
    from memsafe.store.sqlite import vectors as store_module

    monkeypatch.setattr(store_module, "CACHE_MIN_VECTORS", 0)
    server, writer = SQLiteStore(tmp_path / "s.db"), None
    with server.write():
        server.ensure_vector_table("m1", 384)
        for n in range(1, 51):
            server.insert_memory(_row(n), [])
            server.put_vector(n, _unit(n).tobytes())
    writer = SQLiteStore(tmp_path / "s.db")
    scope = Scope(projects=None, include_global=True, kinds=[], tags=[], since=None)

    def nearest(v, k=1):
        return [i for i, _ in server.vector_search(v.tobytes(), scope, k)]

    assert nearest(_unit(7)) == [7]
    assert nearest(_unit(8)) == [8]
    assert store_module._copies.get(os.path.realpath(tmp_path / "s.db")) is not None  # second search built it
    with writer.write():  # new memory, re-embed of 9, purge of 10
        writer.insert_memory(_row(51), [])
        writer.put_vector(51, _unit(51).tobytes())
        writer.put_vector(9, _unit(999).tobytes())
        writer.delete_memories([10])
    assert nearest(_unit(51)) == [51]
    assert nearest(_unit(999)) == [9]
    dist9 = dict(server.vector_search(_unit(9).tobytes(), scope, 100))[9]
    assert dist9 == pytest.approx(1.0 - float(_unit(999) @ _unit(9)), abs=1e-5)  # the new vector, not the old
    assert 10 not in nearest(_unit(10), 50)
    assert len(nearest(_unit(1), 100)) == 50
    with writer.write():  # many changes, the log pruned past the copy's position: full reload
        for n in range(52, 1052):
            writer.insert_memory(_row(n), [])
            writer.put_vector(n, _unit(n).tobytes())
        writer.conn.execute("DELETE FROM vector_log WHERE seq < (SELECT max(seq) - 5 FROM vector_log)")
    assert nearest(_unit(1051)) == [1051]
    with writer.write():  # another model: every vector dropped
        writer.ensure_vector_table("m2", 384)
    assert nearest(_unit(1051)) == []
    assert server.consistency_problems() == []
    server.close()
    writer.close()


@pytest.mark.parametrize("cache_kib", [0, 65_536])
@pytest.mark.parametrize("overfetch_min", [20, 500])
def test_bm25_search_is_exact_in_scope(tmp_path, monkeypatch, overfetch_min, cache_kib):
    """fts_search joins each match to its row while the file fits the page cache; a larger store
    post-filters the global BM25 ranking by scope when the scope is broad and joins first when it
    is narrow. Every path must give exactly the join's answer (ties by id)."""
    from memsafe.store.common import sql as store_util

    monkeypatch.setattr(store_util, "OVERFETCH_MIN", overfetch_min)
    monkeypatch.setattr("memsafe.store.sqlite.PAGE_CACHE_KIB", cache_kib)  # 0: no file fits
    rng = np.random.default_rng(3)
    words = ["deploy", "billing", "retry", "cache", "search", "login", "queue", "index"]
    store = SQLiteStore(tmp_path / "f.db")
    with store.write():
        for n in range(400):
            project = "big" if n % 10 else ("small" if n % 20 else None)
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 12))))
            store.insert_memory({**_row(n), "content": f"{text} {n}", "project": project}, [])
    reference = (
        "SELECT m.id, bm25(memories_fts) AS s FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
        "WHERE memories_fts MATCH ? AND {where} ORDER BY s, m.id LIMIT ?"
    )
    for projects in (None, ["big"], ["small"], []):
        scope = Scope(projects=projects, include_global=True, kinds=[], tags=[], since=None, statuses=["active"])
        where, params = store._scope_sql(scope)
        for match in ('"deploy"', '"billing" OR "retry"', '"queue" OR "index" OR "cache"'):
            for limit in (1, 5, 50):
                want = [tuple(r) for r in store.conn.execute(reference.format(where=where), [match, *params, limit])]
                assert store.fts_search(match, scope, limit) == want
    store.close()


def test_entity_memories_caps_each_entity_to_its_newest(tmp_path):
    """The graph hop takes the newest `per_entity` memories of each entity, in scope, newest first."""
    store = SQLiteStore(tmp_path / "g.db")
    with store.write():
        busy = store.insert_entity("Busy", "busy", "thing", "2026-01-01T00:00:00Z")
        quiet = store.insert_entity("Quiet", "quiet", "thing", "2026-01-01T00:00:00Z")
        for n in range(80):
            mid = store.insert_memory({**_row(n), "project": "web" if n % 2 else "api"}, [])
            store.link_memory_entity(mid, busy)
            if n < 3:
                store.link_memory_entity(mid, quiet)
    web = Scope(projects=["web"], include_global=False, kinds=[], tags=[], since=None, statuses=["active"])
    capped = store.entity_memories([busy, quiet], web, per_entity=10)
    assert capped[busy] == list(range(80, 60, -2))  # ids 1..80; odd n (even id) are project web
    assert capped[quiet] == [2]
    assert len(store.entity_memories([busy], web)[busy]) == 40
    store.close()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no numpy warning on stderr either
def test_a_degenerate_stored_vector_does_not_break_recall(store):
    """A zero or non-finite vector already in a store (written by an earlier import) ranks nowhere,
    and recall still answers instead of failing with a traceback."""
    good = api.remember(store, "Postgres listens on port 5433 in the dev containers")
    bad = api.remember(store, "The build uses Bazel with remote caching")
    with store.write():
        store.put_vector(bad.id, struct.pack("<384f", *([0.0] * 384)))
    hits = api.recall(store, "postgres port").hits
    assert hits[0].memory.id == good.id
    with store.write():
        store.put_vector(bad.id, struct.pack("<384f", *([math.inf] * 384)))
    assert api.recall(store, "bazel build").hits[0].memory.id == bad.id  # found lexically still


def test_the_in_memory_copy_reads_vec0_chunks_exactly_as_the_virtual_table(tmp_path):
    """A fresh process loads every vector from sqlite-vec's chunks (much cheaper than a scan of the
    virtual table at 100,000 vectors): the same ids and bytes as the virtual table, after deletes
    (holes in a chunk's validity bitmap) and re-embeds, across more than one chunk."""
    store = SQLiteStore(tmp_path / "c.db")
    with store.write():
        store.ensure_vector_table("m1", 384)
        for n in range(1, 1500):
            store.insert_memory(_row(n), [])
            store.put_vector(n, _unit(n).tobytes())
        store.delete_memories([5, 6, 700, 1499])
        store.put_vector(9, _unit(999).tobytes())
    truth = dict(store.conn.execute("SELECT memory_id, embedding FROM vec_memories"))
    loaded = store._chunks_of(len(truth), 384)
    assert loaded is not None  # the chunk layout was recognised, not the slow fallback
    ids, columns = loaded  # the vectors as columns (dim, n)
    assert sorted(ids.tolist()) == sorted(truth)
    assert all(columns[:, k].tobytes() == truth[int(i)] for k, i in enumerate(ids))
    assert store._chunks_of(len(truth) + 1, 384) is None  # a count that disagrees: read the table instead
    store.close()


def test_nearest_each_answers_a_batch_as_nearest_does_query_by_query(vec_store):
    """Issue 13: the server's warm thread looks up the near-duplicates of a batch in one pass over
    the vectors (`nearest_each`) instead of one vec0 KNN per memory; the answers must be those of
    `nearest` query by query, in every project, with the memory itself excluded, forgotten
    memories never found, and a lone query (the query-by-query path) the same too."""
    store, vectors, projects = vec_store
    rng = np.random.default_rng(7)
    ids = sorted(vectors)
    picked = [ids[i] for i in rng.choice(len(ids), 24, replace=False)] + [3]  # 3 is forgotten
    queries = [vectors[i].tobytes() for i in picked]  # each nearest to itself: `exclude` must apply
    noisy = rng.normal(size=(6, 384)).astype(np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)  # unit vectors, as the embedder gives
    queries += [v.tobytes() for v in noisy]
    where = [projects[i] for i in picked] + ["big", "mid", "tiny", None, "nowhere", "big"]
    exclude = [*picked, None, None, None, None, None, ids[0]]
    batch = store.nearest_each(queries, where, exclude)
    for query, project, other, got in zip(queries, where, exclude, batch):
        hits = [h for h in store.nearest(query, project, 2) if h[0] != other]
        want = hits[0] if hits else None
        assert (got is None) == (want is None), (project, other, got, want)
        if want is not None:
            assert got[0] == want[0] and math.isclose(got[1], want[1], abs_tol=1e-5), (got, want)
    assert batch[where.index("nowhere")] is None
    assert all(got is None or got[0] != 3 for got in batch)
    (alone,) = store.nearest_each(queries[:1], where[:1], exclude[:1])
    assert alone[0] == batch[0][0] and math.isclose(alone[1], batch[0][1], abs_tol=1e-5)
