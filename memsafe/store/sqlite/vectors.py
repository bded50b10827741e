"""Responsibility: vectors in a SQLite store: the sqlite-vec `vec0` table, KNN within a scope,
pending (deferred) embeddings, and a long-lived process's in-memory copy (a mixin of `SQLiteStore`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import apsw

from memsafe.errors import StoreUnavailable
from memsafe.models import Scope
from memsafe.store.common import sql as shared
from memsafe.store.common.sql import chunked, scalar
from memsafe.store.sqlite.base import SQLiteBase

if TYPE_CHECKING:  # numpy is imported where vectors are used (it costs start-up time)
    import numpy as np

KNN_MAX_K = 4096  # sqlite-vec's upper bound on `k` in a KNN query (v0.1.x)
# From this many vectors, a process's second search loads them into memory (n × dim × 4 bytes). At
# 1,000 vectors a search there took 0.85 ms of CPU against 1.7 ms for vec0's KNN.
CACHE_MIN_VECTORS = 0
NEAREST_BATCH_MAX = 20_000  # vectors `nearest_each` reads at once (~30 MB at 384 dims); more: query by query
EXACT_SCAN_RATIO = 24  # score a scope row by row when it holds under 1/24 of the vectors (see vector_search)


class SQLiteVectors(SQLiteBase):
    """See the module docstring."""

    def vector_table_exists(self) -> bool:
        return bool(
            self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_memories'").fetchone()
        )

    def ensure_vector_table(self, model_id: str, dim: int) -> None:
        """Create the vec0 table for this model, or rebuild it (all vectors pending) if the stored
        vectors came from another model. Call inside `write()`."""
        stored = self.config_get("_embedding_model")
        if stored == model_id and self.vector_table_exists() and self._vector_dim() in (None, int(dim)):
            return
        if self.vector_table_exists():
            self.conn.execute("DROP TABLE vec_memories")
        self.conn.execute(
            f"CREATE VIRTUAL TABLE vec_memories USING vec0("
            f"memory_id INTEGER PRIMARY KEY, embedding float[{int(dim)}] distance_metric=cosine)"
        )
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
        self._log_vector(0)
        self.config_set("_embedding_model", model_id)
        self.config_set("_embedding_dim", str(int(dim)))

    def vectors_ready(self, model_id: str) -> bool:
        """See `Store.vectors_ready`; also False when the vector table was made for vectors of
        another size than its model's (another tool's, a damaged schema): the next backfill
        makes it anew and recomputes every vector."""
        if not super().vectors_ready(model_id):
            return False
        dim = self.config_get("_embedding_dim")
        return not dim or self._vector_dim() in (None, int(dim))

    def put_vector(self, memory_id: int, vector_bytes: bytes) -> None:
        """Set a memory's vector: DELETE then INSERT (vec0 ignores REPLACE/UPSERT). Call inside `write()`."""
        self.conn.execute("DELETE FROM vec_memories WHERE memory_id = ?", (memory_id,))
        self.conn.execute(
            "INSERT INTO vec_memories(memory_id, embedding) VALUES (?, ?)", (memory_id, vector_bytes)
        )
        self._log_vector(memory_id)
        self.conn.execute("UPDATE memories SET embedded = 1 WHERE id = ?", (memory_id,))

    def delete_vector(self, memory_id: int) -> None:
        if not self.vector_table_exists():
            return
        if not self.vector_available:
            raise StoreUnavailable(
                "this store has vectors but sqlite-vec cannot be loaded here "
                f"({self.vector_error}); purge needs it to remove them"
            )
        self.conn.execute("DELETE FROM vec_memories WHERE memory_id = ?", (memory_id,))
        self._log_vector(memory_id)
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE id = ?", (memory_id,))

    def get_vector(self, memory_id: int) -> bytes | None:
        row = self.conn.execute(
            "SELECT embedding FROM vec_memories WHERE memory_id = ?", (memory_id,)
        ).fetchone()
        return row[0] if row else None

    def vector_count(self) -> int:
        if not (self.vector_available and self.vector_table_exists()):
            return 0
        try:  # vec0's rowid shadow table: a b-tree count instead of a scan of every vector chunk
            return scalar(self.conn.execute("SELECT count(*) FROM vec_memories_rowids"))
        except apsw.SQLError:
            return scalar(self.conn.execute("SELECT count(*) FROM vec_memories"))

    def vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        """The k nearest memories in scope by cosine distance. Returns [(id, distance)] nearest first.

        Filters never starve the result: a broad scope is one vec0 KNN whose
        rowids are restricted to the scope (`memory_id IN (subquery)`, sqlite-vec >= 0.1.6: exact
        top-k within the scope, one pass over the vectors); a scope holding under 1/EXACT_SCAN_RATIO
        of the vectors is scored row by row instead (a vec0 point lookup costs ~25 full-scan steps,
        measured with scripts/knn_scale.py). Older sqlite-vec without rowid filters falls back to
        over-fetching KNN.
        """
        if k <= 0:
            return []
        # a stored vector that is zero or not finite has no distance (NULL/NaN): it cannot rank
        return [(i, d) for i, d in self._vector_search(query_bytes, scope, k) if d is not None and d == d]

    def _vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        use_copy = CACHE_MIN_VECTORS <= 0 or self.vector_count() >= CACHE_MIN_VECTORS
        cache = self._vector_cache() if use_copy else None
        if cache is not None:
            return self._cached_search(cache, query_bytes, scope, k)
        total = self.vector_count()
        where, params = self._scope_sql(scope)
        in_scope = self.count_in_scope(scope, embedded_only=True)
        if in_scope == 0:
            return []
        exact_sql = (
            "SELECT m.id, vec_distance_cosine(v.embedding, ?) AS d FROM memories m "
            f"JOIN vec_memories v ON v.memory_id = m.id WHERE m.embedded = 1 AND {where} ORDER BY d LIMIT ?"
        )
        if in_scope < total and in_scope * EXACT_SCAN_RATIO <= total:
            return [(r[0], r[1]) for r in self.conn.execute(exact_sql, [query_bytes, *params, k])]
        fetch = min(k, KNN_MAX_K)
        if in_scope >= total:
            sql = (
                "SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ? ORDER BY distance"
            )
            return [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch])]
        sql = (
            "SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ? "
            f"AND memory_id IN (SELECT m.id FROM memories m WHERE m.embedded = 1 AND {where}) ORDER BY distance"
        )
        try:
            return [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch, *params])]
        except apsw.SQLError:
            return self._vector_search_overfetch(query_bytes, where, params, in_scope, total, k, exact_sql)

    def _vector_search_overfetch(self, query_bytes, where, params, in_scope, total, k, exact_sql):
        """KNN over all vectors, over-fetching until k survive the scope filter (sqlite-vec < 0.1.6)."""
        fetch = min(KNN_MAX_K, max(k, int(k * total / in_scope * 2)))
        while True:
            sql = (
                "WITH knn AS (SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ?) "
                f"SELECT m.id, knn.distance FROM knn JOIN memories m ON m.id = knn.memory_id WHERE {where} "
                "ORDER BY knn.distance LIMIT ?"
            )
            rows = [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch, *params, k])]
            if len(rows) >= min(k, in_scope) or fetch >= total:
                return rows
            if fetch >= KNN_MAX_K:
                return [(r[0], r[1]) for r in self.conn.execute(exact_sql, [query_bytes, *params, k])]
            fetch = min(KNN_MAX_K, fetch * 4)

    def nearest_each(self, queries: Sequence[bytes], projects: Sequence[str | None],
                     exclude: Sequence[int | None]) -> list[tuple[int, float] | None]:
        """See `Store.nearest_each`. A batch is answered in one pass: every stored vector, from the
        process's in-memory copy (`_vector_cache`, with each memory's scope) or else read once
        straight from vec0's shadow tables (`_chunks_of`, ~1 µs a vector), is compared with
        all the queries in one matrix product; a vec0 KNN per query read them all once per query
        (1.3 ms a query at 1,000 vectors: a fifth of a server's embedding time per remember).
        One query, more than NEAREST_BATCH_MAX vectors (they are read whole, 1.5 KB
        each) or another sqlite-vec layout: `nearest` query by query. Ties go to the lower id."""
        import numpy as np

        fallback = super().nearest_each
        total = self.vector_count() if len(queries) > 1 else 0
        dim = int(self.config_get("_embedding_dim") or 0) if total else 0
        if not total or not dim or total > NEAREST_BATCH_MAX:
            return fallback(queries, projects, exclude)
        scopes = {project: Scope(projects=[project] if project is not None else [], include_global=project is None)
                  for project in dict.fromkeys(projects)}
        with self.snapshot():  # vectors and scopes from one state
            cache = self._vector_cache()  # the process's copy, when it keeps one: nothing to read
            if cache is not None:
                ids, columns = cache.ids, cache.columns
                members = {project: cache.in_scope(scope) for project, scope in scopes.items()}
            else:
                loaded = self._chunks_of(total, dim)
                if loaded is None:
                    return fallback(queries, projects, exclude)
                ids, columns = loaded  # (n,), (dim, n)
                members = {project: np.isin(ids, self._embedded_in_scope(*self._scope_sql(scope)))
                           for project, scope in scopes.items()}
        q = np.stack([np.frombuffer(b, dtype=np.float32) for b in queries])
        with np.errstate(divide="ignore", invalid="ignore"):
            # cosine similarity as vec_distance_cosine computes it (1 - distance); a zero or
            # non-finite vector has none (NaN), and ranks nowhere, as in `vector_search`
            similarity = (q @ columns) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(columns, axis=0))
        found: list[tuple[int, float] | None] = []
        for row, (project, other) in enumerate(zip(projects, exclude)):
            allowed = members[project] & np.isfinite(similarity[row])
            if other is not None:
                allowed &= ids != other
            if not allowed.any():
                found.append(None)
                continue
            scores = np.where(allowed, similarity[row], -np.inf)
            best = scores.max()
            winner = int(ids[(scores == best) & allowed].min())
            found.append((winner, float(1.0 - best)))
        return found

    def get_vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        if not (self.vector_available and self.vector_table_exists()):
            return {}
        out: dict[int, bytes] = {}
        for chunk, marks in chunked(ids):
            out.update(
                self.conn.execute(
                    f"SELECT memory_id, embedding FROM vec_memories WHERE memory_id IN ({marks})", chunk
                )
            )
        return out

    def _log_vector(self, memory_id: int) -> None:
        """Record a vector change for in-memory copies (inside `write()`; the log prunes itself, m009).
        Changes of a memory's scope alone are logged by triggers on `memories` (m009)."""
        if not self._has_vector_log():
            return
        # a random token per row (m008): the row at a copy's position is this file's, not a
        # restored copy's that reached the same position with another history (`_log_row`)
        self.conn.execute("INSERT INTO vector_log(memory_id, token) VALUES (?, random())", (memory_id,))

    def _has_vector_log(self) -> bool:
        return bool(self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vector_log'").fetchone())

    def _vector_log_tail(self) -> int:
        return scalar(self.conn.execute("SELECT coalesce(max(seq), 0) FROM vector_log"))

    # (query bytes, a weak reference to the copy, its `_distances`, the scope and k asked for, the
    # search's answer or None) from `prepare_vector_search`, for the next search: weak, so an idle
    # connection keeps no copy alive once a newer one replaced it
    _prepared: tuple | None = None

    def prepare_vector_search(self, query_bytes: bytes, scope: Scope | None = None, k: int = 0) -> None:
        """See `Vectors.prepare_vector_search`: the product of the query with the process's copy
        of this file's vectors, as it is now, and the top k of `scope` when the copy's own scope
        columns answer it (`_VectorCache.in_scope`). No SQL: the search checks the copy is current,
        and uses this only if it is the copy it found, for the same scope object and k. At 10,000
        vectors the product took 1.4 ms of the recall's own thread (15 MB read from memory),
        overlapping nothing, and the top k 0.8 ms more."""
        with _copies_lock:
            cache = _copies.get(self._copy_key())
        if cache is None or not len(cache.ids) or len(query_bytes) != 4 * cache.columns.shape[0]:
            return
        distance = _distances(cache, query_bytes)
        allowed = cache.in_scope(scope) if scope is not None and k > 0 else None
        ranked = _top(cache, distance, allowed, k) if allowed is not None else None
        self._prepared = (query_bytes, weakref.ref(cache), distance, scope, k, ranked)

    def _copy_key(self) -> str:
        """This file's key in `_copies`: its real path, resolved once per connection."""
        key = self.__dict__.get("_real_path")
        if key is None:
            key = self._real_path = os.path.realpath(self.path)
        return key

    def _vector_cache(self) -> _VectorCache | None:
        """The process's in-memory copy of this file's vectors and of their memories' scope
        (`_copies`, shared by every connection of the process to the file), synced with the log;
        None while the process has searched the file only once (a one-shot CLI recall does not load
        every vector). The log names each memory whose vector changed, and (m009, `scope_only`)
        each whose status, project or `embedded` flag changed: the copy re-reads those.

        Shared, not per connection: the MCP server opens a connection per call, and a copy per
        connection was rebuilt by every recall (at 10,000 vectors vec0's KNN took 16.6 ms against
        1.5 ms for the copy). A copy is used only for the file it was read from (`_mark`:
        the uid of its oldest memory, a random UUID) while the log's row at its `seq` is still the
        row it recorded (memory id and random token, `_log_row`): a new store at the same path, a
        restored copy of the file that has since seen other writes, or a pruned log, loads again.
        """
        key = self._copy_key()
        with _copies_lock:
            _searches[key] += 1
            if _searches[key] < 2:
                return None
            cache = _copies.get(key)
        state = self._file_state()
        current = self._copy_current
        if cache is not None and state is not None and current is not None and current[0] == state \
                and current[1]() is cache:
            return cache  # this connection found it current, and the file is unchanged since (one pragma)
        if not self._has_vector_log():
            return None
        cache = self._current_copy(key, cache)
        self._copy_current = (state, weakref.ref(cache)) if state is not None and cache is not None else None
        return cache

    # (`_file_state`, a weak reference to the copy) when this connection last found the copy current:
    # weak, as `_prepared`; a copy replaced by a newer one is gone from `_copies`, so never found current here
    _copy_current: tuple | None = None

    def _current_copy(self, key: str, cache: _VectorCache | None) -> _VectorCache | None:
        """`cache` (the process's copy of the file at `key`, or None) when the log says it is
        current, else the copy brought up to date, or loaded whole (see `_vector_cache`)."""
        import numpy as np

        with self.snapshot():
            tail, mark = self._vector_log_tail(), self._mark()
            if cache is not None and (cache.mark != mark or self._log_row(cache.seq) != cache.last):
                cache = None  # another file, or a log pruned past it: load again
            if cache is not None and tail == cache.seq:
                return cache
            if cache is not None:
                scope_only = dict(self.conn.execute(  # memory id: 1 when only its scope changed
                    "SELECT memory_id, min(scope_only) FROM vector_log WHERE seq > ? AND seq <= ? GROUP BY memory_id",
                    (cache.seq, tail)))
                if 0 not in scope_only:  # 0: every vector dropped (a model change)
                    revectored = [i for i, only in scope_only.items() if not only]
                    return _keep(key, cache.updated(revectored, self._vectors_for(revectored), list(scope_only),
                                                    self._scopes(list(scope_only)), tail, self._log_row(tail), mark))
            n = self.vector_count()
            dim = int(self.config_get("_embedding_dim") or 0)
            if not n or not dim:
                with _copies_lock:
                    _copies.pop(key, None)
                return None
            loaded = self._chunks_of(n, dim)
            if loaded is None:
                # filled vector by vector into one preallocated array: peak memory = the matrix itself
                ids = np.empty(n, dtype=np.int64)
                columns = np.empty((dim, n), dtype=np.float32)
                filled = 0
                for memory_id, blob in self.conn.execute("SELECT memory_id, embedding FROM vec_memories"):
                    if filled == n:
                        break
                    ids[filled] = memory_id
                    columns[:, filled] = np.frombuffer(blob, dtype=np.float32)
                    filled += 1
                loaded = ids[:filled], np.ascontiguousarray(columns[:, :filled])
            return _keep(key, _VectorCache.built(loaded[0], loaded[1], self._scopes(None), tail, self._log_row(tail),
                                                 mark))

    def _mark(self) -> str | None:
        """What tells this file from another at the same path: the uid of its oldest memory."""
        row = self.conn.execute("SELECT uid FROM memories ORDER BY id LIMIT 1").fetchone()
        return row[0] if row else None

    def _log_row(self, seq: int) -> tuple[int, int | None] | None:
        """(memory id, random token) of the vector_log row at `seq` (None: no such row, e.g.
        pruned). The token tells this file's row from the row a restored copy of the file wrote
        at the same position, maybe for the same memory (m008; NULL in rows written before)."""
        row = self.conn.execute("SELECT memory_id, token FROM vector_log WHERE seq = ?", (seq,)).fetchone()
        return (row[0], row[1]) if row else None

    def _chunks_of(self, n: int, dim: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(ids (n,) int64, vectors as columns (dim, n) float32) read straight from vec0's shadow tables, chunk
        by chunk (sqlite-vec 0.1.x: `vec_memories_chunks` holds per chunk a validity bitmap, bit i
        of byte i // 8 from the low bit, and its rowids as int64; `vec_memories_vector_chunks00`
        its vectors, float32 row-major). Reading the virtual table instead costs ~14 µs of CPU a
        row (1.4 s at 100,000 vectors) against ~1 µs here. None when the layout is not the one
        expected (another sqlite-vec version) or the count differs from `n`: the caller then
        reads the virtual table."""
        import numpy as np

        try:
            version = self.conn.execute(
                "SELECT value FROM vec_memories_info WHERE key = 'CREATE_VERSION'").fetchone()
            if not version or not str(version[0]).startswith("v0.1."):
                return None
            ids = np.empty(n, dtype=np.int64)
            columns = np.empty((dim, n), dtype=np.float32)
            filled = 0
            chunks = {chunk: (size, validity, rowids) for chunk, size, validity, rowids in self.conn.execute(
                "SELECT chunk_id, size, validity, rowids FROM vec_memories_chunks")}
            # two plain scans: a join would look each 1.5 MB vector chunk up through its
            # non-integer `rowid` column, rereading the table once per chunk
            for chunk, vectors in self.conn.execute("SELECT rowid, vectors FROM vec_memories_vector_chunks00"):
                if chunk not in chunks:
                    return None
                size, validity, rowids = chunks.pop(chunk)
                if len(validity) * 8 < size or len(rowids) != size * 8 or len(vectors) != size * dim * 4:
                    return None
                live = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[:size].astype(bool)
                count = int(live.sum())
                if filled + count > n:
                    return None
                whole = count == size
                ids[filled:filled + count] = np.frombuffer(rowids, dtype=np.int64) if whole else \
                    np.frombuffer(rowids, dtype=np.int64)[live]
                block = np.frombuffer(vectors, dtype=np.float32).reshape(size, dim)
                columns[:, filled:filled + count] = (block if whole else block[live]).T
                filled += count
        except apsw.SQLError:
            return None
        return (ids, columns) if filled == n else None

    def _vectors_for(self, ids: list[int]) -> dict[int, bytes]:
        out = {}
        for memory_id in ids:
            blob = self.get_vector(memory_id) if memory_id else None
            if blob is not None:
                out[memory_id] = blob
        return out

    def _scopes(self, ids: list[int] | None) -> list[tuple[str, str | None, np.ndarray]]:
        """[(status, project, memory ids (m,) int64)] of the embedded memories among `ids` (None:
        all), a group per scope: a memory not embedded, or gone, has no scope a search may find
        its vector in. Grouped by SQL (one scan of the covering index memories_scope_embedded):
        at 10,000 memories 4 ms of CPU against 16 for a row each."""
        import numpy as np

        sql = "SELECT status, project, group_concat(id) FROM memories WHERE embedded = 1{} GROUP BY status, project"
        rows: list[tuple]  # (status text, project text or NULL, group_concat's ids: text)
        if ids is None:
            rows = self.conn.execute(sql.format("")).fetchall()
        else:
            rows = [r for chunk, marks in chunked(ids)
                    for r in self.conn.execute(sql.format(f" AND id IN ({marks})"), chunk)]
        return [(status, project, np.array(listed.split(","), dtype=np.int64)) for status, project, listed in rows]

    def _embedded_in_scope(self, where: str, params: list):
        """The ids of the embedded memories in scope (`where` from `_scope_sql`): (m,) int64."""
        import numpy as np

        return np.fromiter((r[0] for r in self.conn.execute(
            f"SELECT m.id FROM memories m WHERE m.embedded = 1 AND {where}", params)), dtype=np.int64)

    def _cached_search(self, cache, query_bytes, scope: Scope, k) -> list[tuple[int, float]]:
        """Exact top k in scope from the in-memory vectors: one matrix-vector product over all of
        them, masked by the copy's own status and project of each vector (`_VectorCache.in_scope`:
        no SQL; at 10,000 vectors the ids in scope took two SQL queries, ~3 ms of CPU).
        A scope with kinds, tags or a since time asks SQL: post-filtering (see shared.OVERFETCH),
        or, for a narrow scope or a store holding under twice the ids post-filtering would check,
        masking by the ids in scope."""
        import numpy as np

        total = len(cache.ids)
        if not total:
            return []
        prepared, self._prepared = self._prepared, None  # for this search only
        if prepared is not None and prepared[1]() is cache and prepared[0] == query_bytes:
            # computed by `prepare_vector_search` on the embedding thread
            if prepared[3] is scope and prepared[4] == k and prepared[5] is not None:
                return prepared[5]
            distance = prepared[2]
        else:
            distance = _distances(cache, query_bytes)
        allowed = cache.in_scope(scope)
        if allowed is None:
            where, params = self._scope_sql(scope)
            fetch = min(total, max(k * shared.OVERFETCH, shared.OVERFETCH_MIN))
            if 2 * fetch < total:  # checking `fetch` ids is cheaper than reading the ids in scope
                top = np.argpartition(distance, fetch - 1)[:fetch]
                fetched = cache.ids[top].tolist()
                keep = self._in_scope(fetched, where, params, embedded=True)
                if len(keep) >= k:
                    top = top[np.fromiter((i in keep for i in fetched), dtype=bool, count=len(fetched))]
                    return _ranked(cache.ids, distance, top, k)
            allowed = np.isin(cache.ids, self._embedded_in_scope(where, params))
        return _top(cache, distance, allowed, k)


def _top(cache: _VectorCache, distance, allowed, k: int) -> list[tuple[int, float]]:
    """[(id, distance)] of the k nearest of `cache`'s vectors where `allowed` ((n,) bool), nearest
    first (ties: lower id), given each one's `distance` ((n,) float32; NaN never ranks)."""
    import numpy as np

    total = len(cache.ids)
    distance = np.where(allowed, distance, np.inf)
    top = np.argpartition(distance, k - 1)[:k] if k < total else np.arange(total)
    return _ranked(cache.ids, distance, top[np.isfinite(distance[top])], k)


def _distances(cache: _VectorCache, query_bytes: bytes):
    """Cosine distance (n,) float32 of the query (float32 bytes, L2-normalised) to each vector of
    `cache` (L2-normalised): one matrix-vector product; NaN for a non-finite stored vector."""
    import numpy as np

    q = np.frombuffer(query_bytes, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite stored vector: NaN, never ranked
        return 1.0 - q @ cache.columns


def _ranked(ids, distance, top, k: int) -> list[tuple[int, float]]:
    """[(id, distance)] of the positions `top`, nearest first (ties: lower id), at most k."""
    import numpy as np

    top = top[np.lexsort((ids[top], distance[top]))][:k]
    return [(int(ids[i]), float(distance[i])) for i in top]


COPIES_KEPT = 4  # files whose vectors a process keeps in memory, the last searched first

_copies: OrderedDict[str, _VectorCache] = OrderedDict()  # by the file's real path
_searches: Counter[str] = Counter()  # vector searches of each file in this process
_copies_lock = threading.Lock()


def _keep(key: str, cache: _VectorCache) -> _VectorCache:
    """Make `cache` the process's copy of the file at `key` (dropping the least recently kept
    beyond COPIES_KEPT) and return it."""
    with _copies_lock:
        _copies[key] = cache
        _copies.move_to_end(key)
        while len(_copies) > COPIES_KEPT:
            _copies.popitem(last=False)
    return cache


def forget_copies() -> None:
    """Drop every in-memory copy and search count of this process (tests; a forked child)."""
    with _copies_lock:
        _copies.clear()
        _searches.clear()


class _VectorCache:
    """An in-memory copy of a file's vectors, never changed once built (a search holds its own
    reference while another thread installs a newer copy): ids (n,) int64, the vectors as the
    columns of `columns` (dim, n) float32 C-contiguous, the last vector_log `seq` it reflects, the
    log's row there (`last`: memory id and token, `SQLiteVectors._log_row`) and the file's `mark`
    (`SQLiteVectors._mark`).

    Aligned with `ids`, each vector's memory's scope: `status` (n,) int32, a code of
    `status_codes` (NOT_EMBEDDED: the memory is not flagged embedded, or gone, so no search finds
    it, as `m.embedded = 1` in SQL) and `project` (n,) int32, a code of `project_codes` (GLOBAL:
    no project). Each copy has its own code tables.

    Columns, not rows: OpenBLAS's single-threaded sgemv over a row-major (n, dim) matrix took 6 ms
    at n = 10,000 (and threads contend with the query's embedding), `q @ columns` 0.5 ms
    (numpy 2 + scipy-openblas 0.3.31)."""

    NOT_EMBEDDED = 0  # codes of names count from 1
    GLOBAL = 0

    def __init__(self, ids, columns, status, project, status_codes: dict[str, int], project_codes: dict[str, int],
                 seq: int, last: tuple[int, int | None] | None, mark: str | None):
        self.ids, self.columns, self.seq, self.last, self.mark = ids, columns, seq, last, mark
        self.status, self.project, self.status_codes, self.project_codes = status, project, status_codes, project_codes

    @classmethod
    def built(cls, ids, columns, scopes: list[tuple[str, str | None, np.ndarray]], seq: int,
              last: tuple[int, int | None] | None, mark: str | None) -> _VectorCache:
        """A copy of the vectors `ids`/`columns` whose memories' scopes are `scopes` ((status,
        project, memory ids) of the embedded memories, `SQLiteVectors._scopes`)."""
        import numpy as np

        status = np.full(len(ids), cls.NOT_EMBEDDED, dtype=np.int32)
        project = np.full(len(ids), cls.GLOBAL, dtype=np.int32)
        copy = cls(ids, columns, status, project, {}, {}, seq, last, mark)
        copy._set_scopes(scopes)
        return copy

    def _set_scopes(self, scopes: list[tuple[str, str | None, np.ndarray]]) -> None:
        """Set the scope of each vector whose memory `scopes` names ((status, project, memory ids)),
        coding new names. Only while the copy is being built: copies in use never change."""
        import numpy as np

        if not scopes or not len(self.ids):
            return
        memory_ids = np.concatenate([group for _, _, group in scopes])
        sizes = [len(group) for _, _, group in scopes]
        status = np.repeat(np.array([self.status_codes.setdefault(s, len(self.status_codes) + 1) for s, _, _ in scopes],
                                    dtype=np.int32), sizes)
        project = np.repeat(np.array([self.GLOBAL if p is None else self.project_codes.setdefault(
            p, len(self.project_codes) + 1) for _, p, _ in scopes], dtype=np.int32), sizes)
        order = np.argsort(memory_ids)
        at = order[np.searchsorted(memory_ids, self.ids, sorter=order).clip(max=len(memory_ids) - 1)]
        found = memory_ids[at] == self.ids  # vector positions whose memory `scopes` names
        self.status[found], self.project[found] = status[at[found]], project[at[found]]

    def in_scope(self, scope: Scope):
        """(n,) bool: which vectors belong to memories in `scope`, exactly as `_scope_sql` with
        `m.embedded = 1` selects them; None when the scope names kinds, sources, tags or a since time
        (the copy does not hold those: ask SQL). Each test is a lookup in a table indexed by code."""
        import numpy as np

        if scope.kinds or scope.tags or scope.since or scope.sources or scope.exclude_sources:
            return None
        wanted = np.zeros(len(self.status_codes) + 1, dtype=bool)
        wanted[[self.status_codes[s] for s in scope.statuses if s in self.status_codes]] = True
        allowed = wanted[self.status]
        if scope.projects is not None:
            wanted = np.zeros(len(self.project_codes) + 1, dtype=bool)
            wanted[[self.project_codes[p] for p in scope.projects if p in self.project_codes]] = True
            wanted[self.GLOBAL] = scope.include_global
            allowed &= wanted[self.project]
        return allowed

    def updated(self, revectored: list[int], vectors: dict[int, bytes], named: list[int],
                scopes: list[tuple[str, str | None, np.ndarray]], seq: int, last: tuple[int, int | None] | None,
                mark: str | None) -> _VectorCache:
        """A new copy: the vectors of the `revectored` memory ids replaced by `vectors` (absent:
        deleted), and the scope of every memory the log `named` since this copy (`revectored`
        among them) as `scopes` says ((status, project, memory ids); absent: not embedded)."""
        import numpy as np

        keep = ~np.isin(self.ids, np.array(revectored, dtype=np.int64))
        new_ids = np.array(list(vectors), dtype=np.int64)
        dim = self.columns.shape[0]  # vectors may be empty: every changed id was deleted
        new_rows = np.frombuffer(b"".join(vectors.values()), dtype=np.float32).reshape(len(vectors), dim)
        if keep.all() and not len(new_ids):
            ids, columns = self.ids, self.columns
        else:
            ids = np.concatenate([self.ids[keep], new_ids])
            columns = np.ascontiguousarray(np.concatenate([self.columns[:, keep], new_rows.T], axis=1))
        filler = np.full(len(new_ids), self.NOT_EMBEDDED, dtype=np.int32)
        status = np.concatenate([self.status[keep], filler])
        status[np.isin(ids, np.array(named, dtype=np.int64))] = self.NOT_EMBEDDED  # until `scopes` says
        copy = _VectorCache(ids, columns, status, np.concatenate([self.project[keep], filler]),
                            dict(self.status_codes), dict(self.project_codes), seq, last, mark)
        copy._set_scopes(scopes)
        return copy


def _after_fork() -> None:
    """In a forked child: a fresh lock (another thread of the parent may have held it)."""
    global _copies_lock
    _copies_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
