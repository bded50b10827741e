"""Responsibility: vectors in a PostgreSQL store: a pgvector `vector(dim)` column in
`memory_vectors` with an HNSW index for cosine distance (a mixin of `PostgresStore`).

A scoped search is one `ORDER BY embedding <=> query LIMIT k` over the memories in scope; with
pgvector ≥ 0.8 `hnsw.iterative_scan = strict_order` keeps walking the graph until k rows pass the
scope filter, so filters never starve the result, and the planner scans exactly
where a scope is small. `hnsw.ef_search` is raised to k (up to pgvector's 1,000) so the index
looks at least as far as asked. Ties are broken by id, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

from memsafe.models import Scope
from memsafe.store.postgres.base import PostgresBase

EF_SEARCH_MIN, EF_SEARCH_MAX = 40, 1000  # pgvector's default and upper bound of hnsw.ef_search


def vector_text(vector_bytes: bytes) -> str:
    """A float32 vector (bytes) as pgvector's text input `[x,y,…]`; each value's repr parses back
    to the same float32, so storing is lossless."""
    import numpy as np

    return "[" + ",".join(repr(x) for x in np.frombuffer(vector_bytes, dtype=np.float32).tolist()) + "]"


def vector_bytes(values: Sequence[float]) -> bytes:
    """pgvector's `embedding::real[]` (a list of floats) back as float32 bytes."""
    import numpy as np

    return np.asarray(values, dtype=np.float32).tobytes()


class PostgresVectors(PostgresBase):
    """See the module docstring."""

    def vector_table_exists(self) -> bool:
        return self._has_table("memory_vectors")

    def ensure_vector_table(self, model_id: str, dim: int) -> None:
        stored = self.config_get("_embedding_model")
        if stored == model_id and self.vector_table_exists():
            return
        self.conn.execute("DROP TABLE IF EXISTS memory_vectors")
        self.conn.execute(
            "CREATE TABLE memory_vectors (memory_id BIGINT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE, "
            f"embedding vector({int(dim)}) NOT NULL)"
        )
        self.conn.execute("CREATE INDEX memory_vectors_hnsw ON memory_vectors USING hnsw (embedding vector_cosine_ops)")
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
        self.config_set("_embedding_model", model_id)
        self.config_set("_embedding_dim", str(int(dim)))

    def put_vector(self, memory_id: int, vector_bytes: bytes) -> None:
        self.conn.execute(
            "INSERT INTO memory_vectors(memory_id, embedding) VALUES (?, ?::vector) "
            "ON CONFLICT (memory_id) DO UPDATE SET embedding = excluded.embedding",
            (memory_id, vector_text(vector_bytes)),
        )
        self.conn.execute("UPDATE memories SET embedded = 1 WHERE id = ?", (memory_id,))

    def delete_vector(self, memory_id: int) -> None:
        if not self.vector_table_exists():
            return
        self.conn.execute("DELETE FROM memory_vectors WHERE memory_id = ?", (memory_id,))
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE id = ?", (memory_id,))

    def get_vector(self, memory_id: int) -> bytes | None:
        return self.get_vectors([memory_id]).get(memory_id)

    def get_vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        if not ids or not self.vector_table_exists():
            return {}
        rows = self.conn.execute(
            "SELECT memory_id, embedding::real[] FROM memory_vectors WHERE memory_id = ANY(?)", (list(ids),))
        return {memory_id: vector_bytes(values) for memory_id, values in rows}

    def vector_count(self) -> int:
        if not self.vector_table_exists():
            return 0
        return self.conn.execute("SELECT count(*) FROM memory_vectors").fetchone()[0]

    def prepare_vector_search(self, query_bytes: bytes, scope: Scope | None = None, k: int = 0) -> None:
        """See `Vectors.prepare_vector_search`: nothing to prepare, the search runs in the server."""

    def vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        if k <= 0 or not self.vector_table_exists():
            return []
        where, params = self._scope_sql(scope)
        ef = max(EF_SEARCH_MIN, min(EF_SEARCH_MAX, int(k)))
        with self._local(f"hnsw.ef_search = {ef}", "hnsw.iterative_scan = strict_order"):
            rows = self.conn.execute(
                "SELECT v.memory_id, v.embedding <=> ?::vector AS d FROM memory_vectors v "
                f"JOIN memories m ON m.id = v.memory_id WHERE m.embedded = 1 AND {where} ORDER BY d LIMIT ?",
                [vector_text(query_bytes), *params, k],
            ).fetchall()
        # a stored vector that is zero has no distance (NaN): it cannot rank
        return sorted(((i, d) for i, d in rows if d is not None and d == d), key=lambda r: (r[1], r[0]))

    @contextmanager
    def _local(self, *settings: str):
        """Run the body with `SET LOCAL` settings: inside the current transaction, or a read-only
        one of its own."""
        own = not self.conn.in_transaction
        if own:
            self.conn.execute("BEGIN READ ONLY")
        try:
            for setting in settings:
                self.conn.execute(f"SET LOCAL {setting}")
            yield
        finally:
            if own:
                self._roll_back()
