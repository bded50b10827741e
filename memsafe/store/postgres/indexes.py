"""Responsibility: the derived indexes of a PostgreSQL store checked against the memories and
rebuilt from them (a mixin of `PostgresStore`): the word index (`memory_fts`, a tsvector per
memory, and its GIN index), pg_trgm's index on the texts, pgvector's table and HNSW index. Nothing
here writes a memory's text, metadata or history.
"""

from __future__ import annotations

from memsafe.errors import IndexDamaged
from memsafe.plural import count_of
from memsafe.store.postgres.base import PostgresBase
from memsafe.store.postgres.fulltext import index_rows, stale_rows, text_batches

# The word index as migrations m001, m003 and m005 leave it (memsafe/store/postgres/migrations.py).
WORD_TABLE = """CREATE TABLE memory_fts (
    memory_id BIGINT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    tsv       tsvector NOT NULL,
    dl        INTEGER NOT NULL,
    tokenizer text NOT NULL,
    folded    text NOT NULL
)"""
# (index, its table, what a person calls it, its definition: migrations m001 and m005, the vectors' table)
INDEXES = (
    ("memory_fts_tsv", "memory_fts", "the word index's GIN index",
     "CREATE INDEX memory_fts_tsv ON memory_fts USING gin (tsv)"),
    ("memory_fts_folded", "memory_fts", "the trigram index",
     "CREATE INDEX memory_fts_folded ON memory_fts USING gin (folded gin_trgm_ops)"),
    ("memory_vectors_hnsw", "memory_vectors", "the vectors' HNSW index",
     "CREATE INDEX memory_vectors_hnsw ON memory_vectors USING hnsw (embedding vector_cosine_ops)"),
)


class PostgresIndexes(PostgresBase):
    """See the module docstring."""

    def _index_state(self, name: str) -> str | None:
        """'valid', 'invalid' (a failed or interrupted build: the planner skips it) or None (missing)."""
        row = self.conn.execute(
            "SELECT i.indisvalid AND i.indisready FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = ? AND c.relnamespace = current_schema()::regnamespace", (name,)).fetchone()
        return None if row is None else ("valid" if row[0] else "invalid")

    def _word_rows_damage(self) -> list[str]:
        rows = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        indexed = self.conn.execute("SELECT count(*) FROM memory_fts").fetchone()[0]
        problems = []
        if rows != indexed:
            problems.append(f"{count_of(rows, 'memory')} but {count_of(indexed, 'full-text entry')}")
        stale = sum(stale_rows(self.conn, batch) for batch in text_batches(self.conn))
        if stale:
            problems.append(f"{count_of(stale, 'stale full-text row')} (text changed, index not)")
        return problems

    def _vector_dim(self) -> int | None:
        row = self.conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(quote_ident(current_schema()) || "
            "'.memory_vectors') AND attname = 'embedding'").fetchone()
        return row[0] if row and row[0] > 0 else None

    def index_damage(self) -> list[str]:
        """See `Store.index_damage`."""
        problems: list[str] = []
        if not self._has_table("memory_fts"):
            problems.append("the word index (memory_fts) is missing")
        else:
            problems += self._word_rows_damage()
        vectors, words = self.vector_table_exists(), self._has_table("memory_fts")
        for name, table, what, _sql in INDEXES:
            if (table == "memory_fts" and not words) or (table == "memory_vectors" and not vectors):
                continue
            state = self._index_state(name)
            if state is None:
                problems.append(f"{what} ({name}) is missing")
            elif state == "invalid":
                problems.append(f"{what} ({name}) is invalid (a failed build)")
        if vectors:
            declared, expected = self._vector_dim(), self.config_get("_embedding_dim")
            if expected and declared != int(expected):
                problems.append(f"the vector table holds vectors of {declared} dimensions, its model "
                                f"{self.config_get('_embedding_model')} makes {expected}")
            missing = self.conn.execute(
                "SELECT count(*) FROM memories m WHERE m.embedded = 1 AND NOT EXISTS "
                "(SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id)").fetchone()[0]
            if missing:
                problems.append(f"{count_of(missing, 'memory')} marked embedded without a vector")
            unmarked = self.conn.execute(
                "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE m.embedded = 0"
            ).fetchone()[0]
            if unmarked:
                problems.append(f"{count_of(unmarked, 'vector')} for memories marked not embedded")
        elif self.conn.execute("SELECT count(*) FROM memories WHERE embedded = 1").fetchone()[0]:
            problems.append("memories marked embedded but there is no vector table")
        return problems

    def primary_damage(self) -> list[str]:
        """See `Store.primary_damage`: the server checks its own pages (data checksums, amcheck)."""
        return []

    def requeue_missing_vectors(self) -> int:
        """See `Store.requeue_missing_vectors`."""
        if not self.vector_table_exists():
            return 0
        with self.write():
            rows = self.conn.execute(
                "UPDATE memories m SET embedded = 0 WHERE m.embedded = 1 AND NOT EXISTS "
                "(SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id) RETURNING id").fetchall()
        return len(rows)

    def repair_indexes(self) -> list[str]:
        """See `Store.repair_indexes`."""
        done: list[str] = []
        with self.write():
            if not self._has_table("memory_fts"):
                self.conn.execute(WORD_TABLE)
                done.append("made the word index (memory_fts) anew")
            if done or self._word_rows_damage():
                self.conn.execute("DELETE FROM memory_fts")
                for batch in text_batches(self.conn):
                    index_rows(self.conn, batch)
                done.append("rebuilt the word index from the memories")
            if self.vector_table_exists():
                declared, expected = self._vector_dim(), self.config_get("_embedding_dim")
                if expected and declared != int(expected):
                    self.conn.execute("DROP TABLE memory_vectors")
                    self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
                    self.conn.execute("DELETE FROM config WHERE key IN ('_embedding_model', '_embedding_dim')")
                    done.append("dropped the vector table of the wrong size: every memory waits for a vector")
            vectors = self.vector_table_exists()
            for name, table, what, sql in INDEXES:
                if table == "memory_vectors" and not vectors:
                    continue
                state = self._index_state(name)
                if state is None:
                    self.conn.execute(sql)
                    done.append(f"re-created {what} ({name})")
                elif state == "invalid":
                    self.conn.execute(f"REINDEX INDEX {name}")
                    done.append(f"rebuilt {what} ({name})")
            if vectors:
                missing = self.conn.execute(
                    "UPDATE memories m SET embedded = 0 WHERE m.embedded = 1 AND NOT EXISTS "
                    "(SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id) RETURNING id").fetchall()
                if missing:
                    done.append(f"marked {count_of(len(missing), 'memory')} without a vector as waiting for one")
                unmarked = self.conn.execute(
                    "UPDATE memories SET embedded = 1 WHERE embedded = 0 AND id IN "
                    "(SELECT memory_id FROM memory_vectors) RETURNING id").fetchall()
                if unmarked:
                    done.append(f"marked {count_of(len(unmarked), 'memory')} with a vector as embedded")
            elif self.conn.execute("SELECT count(*) FROM memories WHERE embedded = 1").fetchone()[0]:
                self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
                done.append("marked every memory as waiting for a vector (there is no vector table)")
        return done

    def _index_words(self, rows) -> None:
        """See `PostgresFullText._index_words`, in a savepoint: when the word index's table is
        missing, it is made anew (with its GIN index) from every memory, this write's included."""
        import psycopg

        if not self.conn.in_transaction:
            return super()._index_words(rows)  # type: ignore[safe-super]  # PostgresFullText's, next in the MRO
        self.conn.execute("SAVEPOINT memsafe_words")
        try:
            super()._index_words(rows)  # type: ignore[safe-super]  # as above
        except psycopg.errors.UndefinedTable:
            self.conn.execute("ROLLBACK TO SAVEPOINT memsafe_words")
            self.conn.execute(WORD_TABLE)
            self.conn.execute(INDEXES[0][3])
            self.conn.execute(INDEXES[1][3])
            for batch in text_batches(self.conn):
                index_rows(self.conn, batch)
        self.conn.execute("RELEASE SAVEPOINT memsafe_words")

    def _read_failure(self, exc: BaseException, index: str) -> BaseException:
        """`exc` from reading a derived index: IndexDamaged naming it when the index's table is
        missing (`psycopg.errors.UndefinedTable`), else `exc` itself."""
        import psycopg

        if isinstance(exc, psycopg.errors.UndefinedTable):
            return IndexDamaged(index, str(exc).splitlines()[0][:200])
        return exc
