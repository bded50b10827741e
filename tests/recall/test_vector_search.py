"""Store.vector_search is exact within any scope on each of its paths — a tiny
scope scored row by row, a partial scope through the rowid-filtered vec0 KNN, and no filter —
checked against a numpy brute force over the same vectors."""

from __future__ import annotations

import io
import json
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
        (None, [], ["active", "archived", "forgotten"]),  # EVERYTHING: plain KNN
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


EVERYTHING = Scope(projects=None, include_global=True, kinds=[], tags=[], since=None)


def _filled(store: SQLiteStore, last: int) -> SQLiteStore:
    """`store` with memories 1..last (`_row`), each with the vector `_unit(its id)`, model m1."""
    with store.write():
        store.ensure_vector_table("m1", 384)
        for n in range(1, last + 1):
            store.insert_memory(_row(n), [])
            store.put_vector(n, _unit(n).tobytes())
    return store


def test_one_copy_serves_every_connection_and_never_another_file(tmp_path):
    """The MCP server opens a connection per call: from the process's second search on, every
    connection to the file searches the one in-memory copy. A new store created at the same path
    (same ids, same log positions, other vectors) is searched by its own vectors, never the copy's."""
    from memsafe.store.sqlite import vectors as store_module

    path = tmp_path / "s.db"
    scope = EVERYTHING

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
    writes the restore undid, so it must not be taken for this file's (memory 31's
    new text was searched with the vector of the text the restore removed)."""
    import shutil

    path = tmp_path / "s.db"
    scope = EVERYTHING

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
    server, writer = _filled(SQLiteStore(tmp_path / "s.db"), 50), None
    writer = SQLiteStore(tmp_path / "s.db")
    scope = EVERYTHING

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
    store = _filled(SQLiteStore(tmp_path / "c.db"), 1499)
    with store.write():
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
    """The server's warm thread looks up the near-duplicates of a batch in one pass over
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
    from memsafe.store.sqlite import vectors as store_module

    store.nearest_each(queries, where, exclude)  # by now the process keeps a copy of the vectors:
    assert store_module._copies.get(os.path.realpath(store.path)) is not None
    warm = store.nearest_each(queries, where, exclude)  # answered from it, scopes included
    assert [g and g[0] for g in warm] == [g and g[0] for g in batch]
    assert all(g is None or math.isclose(g[1], b[1], abs_tol=1e-6) for g, b in zip(warm, batch))


SCOPES = {  # the common scopes the in-memory copy answers itself, and one it leaves to SQL
    "alpha": Scope(projects=["alpha"], include_global=True),
    "beta": Scope(projects=["beta"], include_global=True),
    "gamma only": Scope(projects=["gamma"], include_global=False),
    "global only": Scope(projects=[], include_global=True),
    "every project": Scope(projects=None),
    "archived too": Scope(projects=None, statuses=["active", "archived"]),
    "forgotten": Scope(projects=None, statuses=["forgotten"]),
    "decisions": Scope(projects=None, kinds=["decision"]),  # kinds: asks SQL
}


def _via_copy_and_sql(store, monkeypatch, query: bytes, scope: Scope, k: int = 50):
    """vector_search through the process's warm in-memory copy, then through SQL alone."""
    from memsafe.store.sqlite import vectors as store_module

    via_copy = store.vector_search(query, scope, k)
    if os.path.realpath(store.path) not in store_module._copies:  # the first search reads vec0 only
        via_copy = store.vector_search(query, scope, k)
    assert store_module._copies.get(os.path.realpath(store.path)) is not None  # the copy answered
    with monkeypatch.context() as m:
        m.setattr(store_module, "CACHE_MIN_VECTORS", 10**9)  # vec0 and SQL only
        via_sql = store.vector_search(query, scope, k)
    return via_copy, via_sql


def _same_as_sql(store, monkeypatch) -> dict[str, set[int]]:
    """Every memory's own vector asked in every scope: the copy's answer is the SQL path's (ids in
    the same order, distances within float error). Returns the ids each scope finds."""
    vectors = store.get_vectors([r[0] for r in store.conn.execute("SELECT memory_id FROM vec_memories")])
    found: dict[str, set[int]] = {}
    for name, scope in SCOPES.items():
        found[name] = set()
        for query in vectors.values():
            via_copy, via_sql = _via_copy_and_sql(store, monkeypatch, query, scope)
            assert [i for i, _ in via_copy] == [i for i, _ in via_sql], name
            assert all(math.isclose(a, b, abs_tol=1e-5) for (_, a), (_, b) in zip(via_copy, via_sql)), name
            found[name].update(i for i, _ in via_copy)
    return found


def test_the_in_memory_copy_follows_every_change_of_scope_without_a_new_vector(store, monkeypatch, tmp_path):
    """The in-memory copy answers a scope of statuses and projects from the status
    and project it holds per vector, without SQL. A memory's status, project or `embedded` flag
    changes without its vector changing; each such change (forget, restore, archive by decay,
    `update --project`, a project renamed, an edited text waiting for its vector, its re-embed,
    an import merging a newer state, purge) must reach the copy, so that a search with a warm
    copy finds exactly what the SQL path finds. Each step also checks that the change moved the
    memory (a copy that missed it fails)."""
    from datetime import timedelta

    from memsafe import clock

    texts = {
        "alpha": ["The deploy script pushes images to the staging registry",
                  "Alpha's API returns dates in UTC ISO-8601",
                  "Alpha keeps its feature flags in LaunchDarkly"],
        "beta": ["Beta's mobile app uses SQLite through Room",
                 "Beta releases every second Thursday"],
        None: ["Use ruff for linting in every repository", "Passwords live in the team vault"],
    }
    made = {text: api.remember(store, text, project=project, kind="fact")
            for project, group in texts.items() for text in group}
    brief = api.remember(store, "Lunch order for Friday: two pizzas", project="alpha", kind="ephemeral")
    decision = api.remember(store, "We decided to squash commits before merging", project="beta", kind="decision")
    ids = {text: m.id for text, m in made.items()}
    deploy, dates, flags = (ids[t] for t in texts["alpha"])
    mobile, releases = (ids[t] for t in texts["beta"])
    ruff = ids[texts[None][0]]
    assert store.pending_count() == 0

    found = _same_as_sql(store, monkeypatch)  # the first searches build the copy
    assert {deploy, dates, flags, brief.id, ruff} <= found["alpha"] and mobile not in found["alpha"]
    assert decision.id in found["decisions"]

    api.forget(store, dates)
    found = _same_as_sql(store, monkeypatch)
    assert dates not in found["alpha"] and dates in found["forgotten"]

    api.restore(store, dates)
    found = _same_as_sql(store, monkeypatch)
    assert dates in found["alpha"] and dates not in found["forgotten"]

    start = clock.now()
    monkeypatch.setenv("MEMSAFE_NOW", clock.to_iso(start + timedelta(days=400)))
    report = api.decay(store)  # 400 days on, the ephemeral note is archived
    assert brief.id in [c.id for c in report.changes if c.action == "archived"]
    found = _same_as_sql(store, monkeypatch)
    assert brief.id not in found["alpha"] and brief.id in found["archived too"]

    api.update(store, flags, project="beta")
    found = _same_as_sql(store, monkeypatch)
    assert flags not in found["alpha"] and flags in found["beta"]

    assert store.rename_project("beta", "gamma") == 4  # one UPDATE moves all four
    found = _same_as_sql(store, monkeypatch)
    assert {flags, mobile, releases, decision.id} <= found["gamma only"] and not found["beta"] - found["global only"]

    api.update(store, deploy, content="The deploy script pushes images to the production registry",
               embed_now=False)  # its vector waits; the old one is stale and must not be found
    found = _same_as_sql(store, monkeypatch)
    assert deploy not in found["alpha"] and deploy not in found["every project"]
    api.embed_pending(store)  # re-embedded: a new vector, found again
    found = _same_as_sql(store, monkeypatch)
    assert deploy in found["alpha"]

    vault = ids[texts[None][1]]  # an import merges a newer state of it: forgotten, in project alpha
    monkeypatch.setenv("MEMSAFE_NOW", clock.to_iso(start + timedelta(days=402)))
    buf = io.StringIO()
    api.export(store, buf, all_projects=True, include_forgotten=True)
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    for rec in records:
        if rec.get("type") == "memory" and rec["id"] == vault:
            rec.update(status="forgotten", project="alpha", updated_at=clock.to_iso(start + timedelta(days=401)))
    (tmp_path / "newer.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert api.import_file(store, tmp_path / "newer.jsonl").memories_updated == 1
    found = _same_as_sql(store, monkeypatch)
    assert vault not in found["global only"] and vault in found["forgotten"]

    api.purge(store, [ruff])
    found = _same_as_sql(store, monkeypatch)
    assert ruff not in found["every project"] and ruff not in found["global only"]
    assert store.consistency_problems() == []


def test_the_copy_learns_of_a_scope_change_made_by_another_process(tmp_path, monkeypatch):
    """The changes that move a memory in or out of a scope without touching its vector reach the
    vector log through triggers (m009), whoever writes them: here plain SQL through a second
    connection, as another memsafe version or a person with the sqlite3 shell would. Without the
    triggers the server's copy would keep finding a forgotten memory, or miss a moved one."""
    path = tmp_path / "s.db"
    server, writer = SQLiteStore(path), SQLiteStore(path)
    with server.write():
        server.ensure_vector_table("m1", 384)
        for n in range(1, 41):
            server.insert_memory({**_row(n), "project": ("old", "alpha", "beta", None)[n % 4]}, [])
            server.put_vector(n, _unit(n).tobytes())
    scopes = [Scope(projects=["alpha"]), Scope(projects=["beta"], include_global=False), Scope(projects=None),
              Scope(projects=["new"], include_global=False), Scope(projects=None, statuses=["archived"])]

    def check() -> None:
        for scope in scopes:
            for n in range(1, 41, 3):
                via_copy, via_sql = _via_copy_and_sql(server, monkeypatch, _unit(n).tobytes(), scope, 10)
                assert [i for i, _ in via_copy] == [i for i, _ in via_sql], (scope, n)

    def nearest_alpha(n: int) -> int | None:
        hits = server.vector_search(_unit(n).tobytes(), Scope(projects=["alpha"]), 1)
        return hits[0][0] if hits else None

    check()
    check()
    assert nearest_alpha(1) == 1
    for sql in ("UPDATE memories SET status = 'forgotten' WHERE id = 1",  # forget
                "UPDATE memories SET status = 'archived' WHERE id = 5",  # archive
                "UPDATE memories SET project = 'beta' WHERE id = 9",  # update --project
                "UPDATE memories SET project = 'new' WHERE project = 'old'",  # rename_project: ten rows
                "UPDATE memories SET embedded = 0 WHERE id = 2",  # a text edited, its vector pending
                "DELETE FROM memories WHERE id = 6"):  # a row gone, its vector left behind (an old purge)
        with writer.write():
            writer.conn.execute(sql)
        check()
    assert nearest_alpha(1) != 1 and nearest_alpha(5) != 5 and nearest_alpha(9) != 9
    with writer.write():  # a row arriving already embedded, for the vector left behind (an import's id)
        writer.insert_memory({**_row(6), "uid": "again6", "id": 6, "project": "alpha", "embedded": 1}, [])
    check()
    assert nearest_alpha(6) == 6
    with writer.write():
        writer.conn.execute("UPDATE memories SET status = 'active' WHERE id = 1")  # restore
    check()
    assert nearest_alpha(1) == 1
    server.close()
    writer.close()


def test_scope_changes_are_logged_once_per_memory_and_the_log_prunes_itself(tmp_path):
    """m009: a status, project or `embedded` change logs the memory's id flagged `scope_only`
    (one row per memory a statement changes; nothing when the value stays); a vector write logs
    as before; the log keeps its last 50,000 rows whoever writes it (triggers as well as
    `put_vector`), and running m009 again changes nothing."""
    from memsafe.store.sqlite import migrations

    store = SQLiteStore(tmp_path / "l.db")
    with store.write():
        store.ensure_vector_table("m1", 384)
        for n in range(1, 11):
            store.insert_memory({**_row(n), "project": "a"}, [])
            store.put_vector(n, _unit(n).tobytes())

    def logged_since(seq: int) -> list[tuple[int, int]]:
        return [tuple(r) for r in store.conn.execute(
            "SELECT memory_id, scope_only FROM vector_log WHERE seq > ? ORDER BY seq", (seq,))]

    tail = store._vector_log_tail()
    assert sorted(set(logged_since(0))) == sorted({(0, 0)} | {(n, 0) for n in range(1, 11)} | {
        (n, 1) for n in range(1, 11)})  # each vector, and each memory becoming embedded
    with store.write():
        store.conn.execute("UPDATE memories SET project = 'b' WHERE project = 'a'")
        store.conn.execute("UPDATE memories SET status = 'active', project = 'b'")  # no change: no row
        store.update_memory(3, {"importance": 0.9})  # not a scope: no row
        store.update_memory(4, {"status": "forgotten"})
    assert logged_since(tail) == [(n, 1) for n in range(1, 11)] + [(4, 1)]
    with store.write():
        migrations.m009_vector_log_scope(store.conn)  # again: nothing added, nothing doubled
        store.update_memory(5, {"embedded": 0})
    assert logged_since(tail)[-1:] == [(5, 1)] and len(logged_since(tail)) == 12
    with store.write():
        for _ in range(5100):  # 51,000 rows written by the triggers alone
            store.conn.execute("UPDATE memories SET status = CASE status WHEN 'active' THEN 'archived' "
                               "ELSE 'active' END")
    assert store.conn.execute("SELECT count(*) FROM vector_log").fetchone()[0] <= 50_000 + 1000
    store.close()


def test_a_prepared_product_is_used_only_for_its_query_and_its_copy(tmp_path, monkeypatch):
    """`prepare_vector_search` computes the query's product with the process's copy on the thread
    that embedded the query. A search uses it only for that very query and that very
    copy: another query, or a copy brought up to date since (a vector written meanwhile), is
    searched afresh; a query of another dimension (the model changed) prepares nothing."""
    from memsafe.store.sqlite import vectors as store_module

    monkeypatch.setattr(store_module, "CACHE_MIN_VECTORS", 0)
    store = _filled(SQLiteStore(tmp_path / "p.db"), 40)
    try:
        for _ in range(2):  # the second search of the process builds the copy
            store.vector_search(_unit(1).tobytes(), EVERYTHING, 5)
        store.prepare_vector_search(_unit(7).tobytes())
        assert store._prepared is not None
        assert store.vector_search(_unit(7).tobytes(), EVERYTHING, 1)[0][0] == 7  # its own query
        assert store.vector_search(_unit(9).tobytes(), EVERYTHING, 1)[0][0] == 9  # not another's
        store.prepare_vector_search(_unit(99).tobytes())
        with store.write():
            added = store.insert_memory(_row(99), [])
            store.put_vector(added, _unit(99).tobytes())  # a newer copy than the one prepared
        assert store.vector_search(_unit(99).tobytes(), EVERYTHING, 1)[0][0] == added
        store._prepared = None
        store.prepare_vector_search(np.ones(8, dtype=np.float32).tobytes())
        assert store._prepared is None
    finally:
        store.close()


def test_a_prepared_top_k_answers_only_its_own_scope_and_k(tmp_path, monkeypatch):
    """A recall prepares on the embedding thread not only the product but the top k of its scope
    (0.8 ms off the recall's own thread at 10,000 vectors). That answer is used only
    for the very scope object and k it was prepared for; any other scope or k is searched afresh,
    and each answer is the exact top k of its scope."""
    from memsafe.store.sqlite import vectors as store_module

    monkeypatch.setattr(store_module, "CACHE_MIN_VECTORS", 0)
    store = _filled(SQLiteStore(tmp_path / "k.db"), 40)
    try:
        with store.write():
            for n in range(1, 41, 2):  # odd ids in project "odd", even ids global
                store.update_memory(n, {"project": "odd"})
        for _ in range(2):  # the second search of the process builds the copy
            store.vector_search(_unit(1).tobytes(), EVERYTHING, 5)
        q = _unit(2) + _unit(3)  # nearest: 2 then 3
        q = (q / np.linalg.norm(q)).astype(np.float32).tobytes()
        only_odd = Scope(projects=["odd"], include_global=False, kinds=[], tags=[], since=None)
        also_odd = Scope(projects=["odd"], include_global=False, kinds=[], tags=[], since=None)
        store.prepare_vector_search(q, only_odd, 3)
        assert store._prepared[5] is not None  # answered on the preparing thread
        prepared = store.vector_search(q, only_odd, 3)
        assert prepared[0][0] == 3 and all(i % 2 for i, _ in prepared) and len(prepared) == 3
        for scope, k in ((EVERYTHING, 3), (also_odd, 3), (only_odd, 5)):
            store.prepare_vector_search(q, only_odd, 3)
            found = store.vector_search(q, scope, k)
            fresh = store.vector_search(q, scope, k)  # nothing prepared: computed here
            assert found == fresh and len(found) == k
        assert [i for i, _ in store.vector_search(q, EVERYTHING, 2)] == [2, 3]
        tagged = Scope(projects=None, include_global=True, kinds=[], tags=["t"], since=None)
        store.prepare_vector_search(q, tagged, 3)  # the copy holds no tags: only the product
        assert store._prepared[5] is None
    finally:
        store.close()


def test_an_idle_connection_keeps_no_replaced_copy_of_the_vectors_alive(tmp_path):
    """The process keeps one copy of a file's vectors (n × dim × 4 bytes: 150 MB at 100,000); a
    connection that searched it remembered that copy (found current, prepared product), so the
    server's idle connections each kept a copy alive after a write had replaced it, up to three
    copies in memory. They hold it weakly: once replaced, it is freed."""
    import gc
    import weakref

    from memsafe.store.sqlite import vectors as store_module

    path = tmp_path / "idle.db"
    idle, busy = SQLiteStore(path), _filled(SQLiteStore(path), 20)
    try:
        for _ in range(2):  # the second search of the process builds the copy
            idle.vector_search(_unit(1).tobytes(), EVERYTHING, 5)
        idle.prepare_vector_search(_unit(3).tobytes())  # a recall whose search never came
        replaced = weakref.ref(store_module._copies[os.path.realpath(path)])
        with busy.write():
            added = busy.insert_memory(_row(21), [])
            busy.put_vector(added, _unit(21).tobytes())
        assert busy.vector_search(_unit(21).tobytes(), EVERYTHING, 1)[0][0] == added  # a newer copy
        gc.collect()
        assert replaced() is None
        assert idle.vector_search(_unit(21).tobytes(), EVERYTHING, 1)[0][0] == added
    finally:
        idle.close()
        busy.close()
