"""Responsibility: the derived indexes of a SQLite store checked against the memories and rebuilt
from them (a mixin of `SQLiteStore`): the FTS5 word and trigram indexes, their sync triggers, and
the sqlite-vec vectors' bookkeeping. Nothing here reads or writes a memory's text, metadata or
history: every repair writes only tables derived from `memories`.

The indexes as this code makes them are read from a scratch in-memory database that the
migrations build (`canonical_schema`), so a table or trigger re-created here is exactly the one a
fresh store has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache

import apsw

from memsafe.errors import IndexDamaged, StoreUnavailable
from memsafe.plural import count_of
from memsafe.store.common import tokenizer
from memsafe.store.common.sql import scalar
from memsafe.store.sqlite import migrations
from memsafe.store.sqlite.base import SQLiteBase

# The FTS5 indexes of `memories` (m004, m006, m007): table -> (what a person calls it, shadow
# tables FTS5 keeps for it, the sync triggers on `memories` that feed it).
FTS_INDEXES = {
    "memories_fts": ("word index", ("data", "idx", "docsize", "config"),
                     ("memories_fts_ai", "memories_fts_ad", "memories_fts_au")),
    "memories_tri": ("trigram index", ("data", "idx", "docsize", "config"),
                     ("memories_tri_ai", "memories_tri_ad", "memories_tri_au")),
}
TRIGRAM_VOCAB = "memories_tri_vocab"  # fts5vocab over memories_tri (m004)
REPAIR = "`memsafe doctor --repair` rebuilds it from the memories"
# How long (ms) the FTS5 integrity-check waits for another writer's lock (it is a write command)
# before the check goes without it: a remember holds the lock for milliseconds, an import longer.
DEEP_CHECK_WAIT_MS = 5000
_DECLARED_DIM = re.compile(r"float\[(\d+)\]")


@lru_cache(maxsize=1)
def canonical_schema() -> dict[str, str]:
    """{name: CREATE statement} of every table, view and trigger that the migrations make, read
    from an empty in-memory database built by them (the indexes' definitions, without copying them
    from the migrations)."""
    conn = apsw.Connection(":memory:")
    try:
        tokenizer.register(conn)
        with conn:
            for _name, fn in migrations.MIGRATIONS:
                fn(conn)
        return {name: sql for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND type IN ('table', 'view', 'trigger')")}
    finally:
        conn.close()


def derived_failure(exc: BaseException) -> bool:
    """True when `exc`, raised by SQLite while reading or writing a derived index, says that index
    is damaged or missing (FTS5 corruption, a missing FTS5 or vec0 table or shadow table, a vector
    of another size) rather than that the store as a whole cannot be used (locked, full, read-only)."""
    if isinstance(exc, (apsw.BusyError, apsw.FullError, apsw.ReadOnlyError, apsw.IOError)):
        return False
    text = str(exc)
    if isinstance(exc, apsw.CorruptError) or "fts5" in text or "malformed" in text:
        return True
    names = (*FTS_INDEXES, TRIGRAM_VOCAB, "vec_memories", "memories_tri_text")
    return isinstance(exc, apsw.SQLError) and (
        any(name in text for name in names) or "SQL logic error" in text or "Dimension mismatch" in text
        or "vector" in text.lower())


class SQLiteIndexes(SQLiteBase):
    """See the module docstring."""

    @contextmanager
    def _savepoint(self, name: str) -> Iterator[None]:
        """A named savepoint (inside the caller's transaction): rolled back to when the body
        raises. SQL savepoints, not apsw's `with conn:`, which refuses to go on once SQLite itself
        ended a statement's work on an error."""
        self.conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute(f"ROLLBACK TO {name}")
                self.conn.execute(f"RELEASE {name}")
            raise
        self.conn.execute(f"RELEASE {name}")

    def _names(self) -> dict[str, str]:
        """{name: type} of everything in the schema."""
        return dict(self.conn.execute("SELECT name, type FROM sqlite_master"))

    def word_index_damage(self, *, deep: bool = True) -> dict[str, list[str]]:
        """{FTS5 table: [what is wrong with it]} for each damaged word or trigram index ({} when
        both are sound): the table, a shadow table, a sync trigger or the trigram vocabulary
        missing; FTS5's own 'integrity-check' (with rank=1: the index against the memories) failing;
        an entry count other than the memories'; secure-delete (purged text zeroed in the index)
        switched off. `deep=False` skips the checks that read the whole index (no write lock)."""
        names = self._names()
        rows = scalar(self.conn.execute("SELECT count(*) FROM memories"))
        out: dict[str, list[str]] = {}
        for table, (what, shadows, triggers) in FTS_INDEXES.items():
            found: list[str] = []
            if table not in names:
                found.append(f"the {what} ({table}) is missing")
            else:
                gone = [f"{table}_{s}" for s in shadows if f"{table}_{s}" not in names]
                if gone:
                    found.append(f"the {what} has lost its table{'s' if len(gone) > 1 else ''} {', '.join(gone)}")
            lost = [t for t in triggers if t not in names]
            if lost:
                found.append(f"the {what}'s sync trigger{'s' if len(lost) > 1 else ''} {', '.join(lost)} "
                             f"{'are' if len(lost) > 1 else 'is'} missing: new texts are not indexed")
            if table == "memories_tri" and TRIGRAM_VOCAB not in names:
                found.append(f"the {what}'s vocabulary ({TRIGRAM_VOCAB}) is missing")
            if not found:
                found += self._fts_contents(table, what, rows, deep)
            if found:
                out[table] = found
        return out

    def _fts_contents(self, table: str, what: str, rows: int, deep: bool) -> list[str]:
        """What is wrong inside an FTS5 index whose tables all exist."""
        found: list[str] = []
        setting = indexed = None
        try:
            setting = self.conn.execute(f"SELECT v FROM {table}_config WHERE k = 'secure-delete'").fetchone()
            indexed = scalar(self.conn.execute(f"SELECT count(*) FROM {table}_docsize"))
            if deep:
                try:
                    with self.write(wait_ms=DEEP_CHECK_WAIT_MS):
                        self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
                except StoreUnavailable:  # locked, or a full disk: what PRAGMA integrity_check (a read) finds
                    found = [line for (line,) in self.conn.execute("PRAGMA integrity_check") if f'"{table}"' in line]
                    if found:
                        return [f"the {what} does not match the memories ({found[0][:200]})"]
        except apsw.Error as exc:
            if not derived_failure(exc):
                raise
            found.append(f"the {what} does not match the memories (FTS5 integrity-check: {exc})")
            if setting is None or indexed is None:
                return found
        if rows != indexed:
            found.append(f"{count_of(rows, 'memory')} but {count_of(indexed, 'entry')} in the {what}")
        if not setting or str(setting[0]) != "1":
            found.append(f"the {what} keeps purged text in its pages (secure-delete is off)")
        return found

    def vector_damage(self) -> list[str]:
        """What is wrong with the vectors' bookkeeping ([] when sound): a vector table of another
        size than its model's, unreadable vectors, vectors of missing memories, memories marked
        embedded without a vector (never found by meaning) or the other way round."""
        if not self.vector_available:
            return []
        if not self.vector_table_exists():
            if scalar(self.conn.execute("SELECT count(*) FROM memories WHERE embedded = 1")):
                return ["memories marked embedded but there is no vector table"]
            return []
        declared, expected = self._vector_dim(), self.config_get("_embedding_dim")
        if expected and declared != int(expected):
            return [f"the vector table holds vectors of {declared} dimensions, its model "
                    f"{self.config_get('_embedding_model')} makes {expected}"]
        problems: list[str] = []
        try:
            self.conn.execute("SELECT memory_id, length(embedding) FROM vec_memories").fetchall()
        except apsw.Error as exc:
            if not derived_failure(exc):
                raise
            return [f"the vectors cannot be read ({exc})"]
        checks = (  # (SQL counting rows in the wrong state, noun, what is wrong with them)
            ("SELECT count(*) FROM vec_memories v "
             "WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id)",
             "vector", "for missing memories"),
            ("SELECT count(*) FROM memories m WHERE m.embedded = 1 AND NOT EXISTS "
             "(SELECT 1 FROM vec_memories v WHERE v.memory_id = m.id)",
             "memory", "marked embedded without a vector"),
            ("SELECT count(*) FROM vec_memories v JOIN memories m ON m.id = v.memory_id WHERE m.embedded = 0",
             "vector", "for memories marked not embedded"),
        )
        for sql, noun, wrong in checks:
            count = scalar(self.conn.execute(sql))
            if count:
                problems.append(f"{count_of(count, noun)} {wrong}")
        return problems

    def _vector_dim(self) -> int | None:
        """The dimension the vec0 table was declared with, or None without one."""
        row = self.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'vec_memories'").fetchone()
        found = _DECLARED_DIM.search(row[0] or "") if row else None
        return int(found.group(1)) if found else None

    def index_damage(self, *, deep: bool = True) -> list[str]:
        """See `Store.index_damage`."""
        return [line for lines in self.word_index_damage(deep=deep).values() for line in lines] + self.vector_damage()

    def _unlink_index(self, table: str, shadows: Sequence[str]) -> None:
        """Remove an FTS5 index whose pages SQLite cannot read (so DROP TABLE, which walks them to
        free them, fails) from the schema without reading them: its entries in sqlite_master are
        deleted under `writable_schema` (https://sqlite.org/pragma.html#pragma_writable_schema)
        and the schema reloaded. Its pages are left unused in the file until the VACUUM that
        `repair_indexes` runs after its commit (`_vacuum_after`) rewrites the file without them."""
        names = [table, *(f"{table}_{s}" for s in shadows)]
        self.conn.execute("PRAGMA writable_schema = ON")
        try:
            self.conn.execute(f"DELETE FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})", names)
        finally:
            self.conn.execute("PRAGMA writable_schema = RESET")
        self._vacuum_after = True

    _vacuum_after = False

    def rebuild_word_index(self, table: str) -> str:
        """Rebuild one FTS5 index (`FTS_INDEXES`) from the memories, inside the caller's `write()`:
        FTS5's 'rebuild' command when its tables are all there, else the table dropped and made
        anew from `canonical_schema`; missing sync triggers (and the trigram vocabulary)
        re-created; secure-delete switched on. Returns what was done, one line. Raises apsw.Error when even a
        new table cannot be built (the memories themselves cannot be read)."""
        what, shadows, triggers = FTS_INDEXES[table]
        schema, names = canonical_schema(), self._names()
        whole = table in names and all(f"{table}_{s}" in names for s in shadows)
        done = f"rebuilt the {what} from the memories"
        rebuilt = False
        if whole:
            try:
                with self._savepoint("memsafe_rebuild"):  # a failed rebuild leaves the table as it was
                    self.conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
                    self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
                rebuilt = True
            except apsw.Error as exc:
                if not derived_failure(exc):
                    raise
        if not rebuilt:
            if table in names:
                self.conn.execute(f"DROP TABLE {table}")
            for shadow in shadows:  # those a failed drop left behind
                self.conn.execute(f"DROP TABLE IF EXISTS {table}_{shadow}")
            self.conn.execute(schema[table])
            self.conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
            done = f"made the {what} anew from the memories"
        self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('secure-delete', 1)")
        names = self._names()
        made = [t for t in triggers if t not in names]
        for trigger in made:
            self.conn.execute(schema[trigger])
        if table == "memories_tri" and TRIGRAM_VOCAB not in names:
            self.conn.execute(schema[TRIGRAM_VOCAB])
        if made:
            done += f" and re-created its sync trigger{'s' if len(made) > 1 else ''} {', '.join(made)}"
        return done

    def repair_vectors(self) -> list[str]:
        """Bring the vectors back in step with the memories, inside the caller's `write()`: a table
        of the wrong size or unreadable is dropped (every memory then waits for a vector), vectors
        of missing memories are deleted, and each memory's `embedded` flag is set to whether it
        has a vector. The vectors themselves are recomputed by the next backfill (`memsafe embed`,
        a recall). Returns what was done, a line each."""
        if not self.vector_available:
            return []
        done: list[str] = []
        damage = self.vector_damage()
        if not self.vector_table_exists():
            if damage:
                self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
                done.append("marked every memory as waiting for a vector (there is no vector table)")
                self._log_vector(0)
            return done
        if any(line.startswith(("the vector table holds", "the vectors cannot")) for line in damage):
            self.conn.execute("DROP TABLE vec_memories")
            self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
            self.conn.execute("DELETE FROM config WHERE key IN ('_embedding_model', '_embedding_dim')")
            self._log_vector(0)
            return ["dropped the damaged vector table: every memory waits for a vector"]
        orphans = [r[0] for r in self.conn.execute(
            "SELECT memory_id FROM vec_memories v "
            "WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id)")]
        for memory_id in orphans:
            self.conn.execute("DELETE FROM vec_memories WHERE memory_id = ?", (memory_id,))
            self._log_vector(memory_id)
        if orphans:
            done.append(f"deleted {count_of(len(orphans), 'vector')} of missing memories")
        missing = [r[0] for r in self.conn.execute(
            "SELECT id FROM memories m WHERE m.embedded = 1 AND NOT EXISTS "
            "(SELECT 1 FROM vec_memories v WHERE v.memory_id = m.id)")]
        if missing:
            self.conn.execute(f"UPDATE memories SET embedded = 0 WHERE id IN ({','.join(map(str, missing))})")
            done.append(f"marked {count_of(len(missing), 'memory')} without a vector as waiting for one")
        unmarked = self.conn.execute(
            "UPDATE memories SET embedded = 1 WHERE embedded = 0 AND id IN (SELECT memory_id FROM vec_memories) "
            "RETURNING id").fetchall()
        if unmarked:
            done.append(f"marked {count_of(len(unmarked), 'memory')} with a vector as embedded")
        return done

    def requeue_missing_vectors(self) -> int:
        """See `Store.requeue_missing_vectors`. The vectors' ids are read from vec0's rowid table
        (one b-tree scan; a vec0 lookup per memory costs a scan of its chunks), or from the
        virtual table when this sqlite-vec keeps them otherwise."""
        if not (self.vector_available and self.vector_table_exists()):
            return 0
        with self.write():
            try:
                held = "SELECT rowid FROM vec_memories_rowids"
                self.conn.execute(f"{held} LIMIT 1").fetchall()
            except apsw.SQLError:
                held = "SELECT memory_id FROM vec_memories"
            rows = self.conn.execute(f"UPDATE memories SET embedded = 0 WHERE embedded = 1 AND id NOT IN ({held}) "
                                     "RETURNING id").fetchall()
        return len(rows)

    def repair_indexes(self, *, vectors: bool = True) -> list[str]:
        """See `Store.repair_indexes` (`vectors=False`: the word and trigram indexes only). An
        index whose pages SQLite cannot read, even to drop it, is taken out of the schema
        (`_unlink_index`) in a second transaction, and the file is then rewritten without those
        pages (VACUUM), so it passes `PRAGMA integrity_check` again."""
        done: list[str] = []
        self._vacuum_after = False
        damaged = self.word_index_damage()
        try:
            with self.write():
                for table in damaged:
                    done.append(self.rebuild_word_index(table))
                if vectors:
                    done += self.repair_vectors()
        except apsw.CorruptError:  # pages of an index that cannot be read, even to drop it
            done = []
            with self.write():
                for table in damaged:
                    self._unlink_index(table, FTS_INDEXES[table][1])
                    done.append(self.rebuild_word_index(table))
                if vectors:
                    done += self.repair_vectors()
        if self._vacuum_after:  # the unreadable pages of an unlinked index: rewritten out of the file
            self._vacuum_after = False
            self.conn.execute("VACUUM")
            done.append("rewrote the file without the unreadable pages (VACUUM)")
        return done

    def heal_word_index(self, exc: BaseException) -> bool:
        """After `exc` from a statement that fed the word or trigram index (a sync trigger) inside
        the caller's `write()`: when a derived index is damaged or missing, rebuild it from the
        memories (`rebuild_word_index`) and return True, so the statement can run again; False
        when `exc` is not about a derived index or nothing was found damaged."""
        if not derived_failure(exc):
            return False
        damaged = self.word_index_damage(deep=False) or {
            t: [] for t in FTS_INDEXES if self._fts_unreadable(t)}
        for table in damaged:
            self.rebuild_word_index(table)
        return bool(damaged)

    def _fts_unreadable(self, table: str) -> bool:
        """True when FTS5's integrity-check of `table` (index against the memories) fails."""
        try:
            with self._savepoint("memsafe_check"):
                self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        except apsw.Error as exc:
            if derived_failure(exc):
                return True
            raise
        return False

    def index_damaged(self, what: str, exc: BaseException) -> IndexDamaged:
        """The IndexDamaged a failed read of the `what` index ('word', 'trigram', 'vector') raises."""
        return IndexDamaged(what, str(exc).splitlines()[0][:200])
