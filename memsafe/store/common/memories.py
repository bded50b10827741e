"""Responsibility: memory rows and their tags, and the SQL of a `Scope`: the SQL both backends
run as it is (a mixin of `SQLiteStore` and `PostgresStore`; see `memsafe.store.common`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memsafe import clock
from memsafe.models import Memory, Scope, Status
from memsafe.store.common.base import SQLStoreBase
from memsafe.store.common.sql import chunked

_MEMORY_COLUMNS = (
    "id, uid, content, kind, project, source, importance, confidence, created_at, updated_at, "
    "last_accessed_at, access_count, decay_level, status, status_reason, embedded, author, happened_at, "
    "supersedes, superseded_by"
)


def _with_event_time(row: dict) -> dict:
    """`row` with `happened_at` = its `created_at` when it names no event time (an import of a
    file without one, a row built by a caller that knows no better)."""
    if row.get("happened_at") or "created_at" not in row:
        return row
    return {**row, "happened_at": row["created_at"]}


class SQLMemories(SQLStoreBase):
    """See the module docstring."""

    _ROWS_PER_INSERT = 100  # rows of one multi-row INSERT (× ≤ 23 columns: far under either engine's limit)

    def insert_memory(self, row: dict, tags: Sequence[str]) -> int:
        row = _with_event_time(row)
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        memory_id = self.conn.execute(f"INSERT INTO memories({columns}) VALUES ({marks}) RETURNING id",
                                      tuple(row.values())).fetchone()[0]
        if "id" in row:
            self._id_given(memory_id)
        self._index_words([(memory_id, row["content"])])
        self.set_tags(memory_id, tags)
        return memory_id

    def insert_memories(self, items: Sequence[tuple[dict, Sequence[str]]]) -> list[int]:
        by_uid: dict[str, int] = {}
        start = 0
        while start < len(items):  # runs of rows with the same columns, at most _ROWS_PER_INSERT each
            columns = tuple(_with_event_time(items[start][0]))
            end = start
            while end < len(items) and end - start < self._ROWS_PER_INSERT and tuple(items[end][0]) == columns:
                end += 1
            rows = [_with_event_time(row) for row, _ in items[start:end]]
            marks = ", ".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(rows))
            returned = self.conn.execute(  # RETURNING's order is not promised: rows are matched by uid
                f"INSERT INTO memories({', '.join(columns)}) VALUES {marks} RETURNING id, uid",
                [row[c] for row in rows for c in columns]).fetchall()
            by_uid.update((uid, memory_id) for memory_id, uid in returned)
            if "id" in columns:
                self._id_given(max(row["id"] for row in rows))
            start = end
        ids = [by_uid[row["uid"]] for row, _ in items]
        self._index_words([(memory_id, row["content"]) for memory_id, (row, _) in zip(ids, items)])
        self.conn.executemany("INSERT INTO memory_tags(memory_id, tag) VALUES (?, ?) ON CONFLICT DO NOTHING",
                              [(memory_id, t) for memory_id, (_, tags) in zip(ids, items) for t in tags])
        return ids

    def update_memory(self, memory_id: int, changes: dict) -> None:
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.conn.execute(
            f"UPDATE memories SET {assignments} WHERE id = ?", (*changes.values(), memory_id)
        )
        if "content" in changes:
            self._index_words([(memory_id, changes["content"])])

    def rename_project(self, old: str, new: str) -> int:
        statuses = [s.value for s in Status]  # every status: the (status, project) index answers
        marks = ",".join("?" * len(statuses))
        held = (f"SELECT EXISTS (SELECT 1 FROM memories WHERE status IN ({marks}) AND project = ?) "
                "OR EXISTS (SELECT 1 FROM entities WHERE project = ?)")
        if not self.conn.execute(held, (*statuses, old, old)).fetchone()[0]:
            return 0
        with self.write():
            self.conn.execute("UPDATE memories SET project = ? WHERE project = ?", (new, old))
            moved = self.conn.changes()
            self.conn.execute("UPDATE memory_versions SET project = ? WHERE project = ?", (new, old))
            self.move_project_entities(old, new, clock.now_iso())
        return moved

    def set_tags(self, memory_id: int, tags: Iterable[str]) -> None:
        self.conn.execute("DELETE FROM memory_tags WHERE memory_id = ?", (memory_id,))
        self.conn.executemany(
            "INSERT INTO memory_tags(memory_id, tag) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(memory_id, t) for t in tags],
        )

    def get_memories(self, ids: Sequence[int], *, tags: bool = True, kind: str | None = None) -> dict[int, Memory]:
        if not ids:
            return {}
        out: dict[int, Memory] = {}
        of_kind = "" if kind is None else " AND kind = ?"
        for chunk, marks in chunked(ids):
            for r in self.conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id IN ({marks}){of_kind}",
                                       chunk if kind is None else [*chunk, kind]):
                # positionally, in the order of Memory's fields (a test holds them to
                # _MEMORY_COLUMNS): a third of the time of keywords, ~130 rows a recall at 10,000
                out[r[0]] = Memory(r[0], r[1], r[2], r[3], r[4], r[5], [], r[6], r[7], r[8], r[9], r[10], r[11],
                                   r[12], r[13], r[14], bool(r[15]), r[16], r[17], r[18], r[19])
        if tags:
            self.fill_tags(list(out.values()))
        return out

    def fill_tags(self, memories: Sequence[Memory]) -> None:
        by_id = {m.id: m for m in memories}
        for m in by_id.values():
            m.tags = []
        for chunk, marks in chunked(list(by_id)):
            for memory_id, tag in self.conn.execute(
                f"SELECT memory_id, tag FROM memory_tags WHERE memory_id IN ({marks}) ORDER BY tag", chunk
            ):
                by_id[memory_id].tags.append(tag)

    def raw_row(self, memory_id: int) -> dict | None:
        rows = self._dict_rows("SELECT * FROM memories WHERE id = ?", (memory_id,))
        return rows[0] if rows else None

    def find_duplicate(self, content_hash: str, project: str | None) -> int | None:
        row = self.conn.execute(
            "SELECT id FROM memories WHERE content_hash = ? AND project IS NOT DISTINCT FROM ? "
            "AND status != 'forgotten' ORDER BY id LIMIT 1",
            (content_hash, project),
        ).fetchone()
        return row[0] if row else None

    def touch(self, ids: Sequence[int], at: str) -> None:
        self.conn.executemany(
            "UPDATE memories SET last_accessed_at = ?, access_count = access_count + 1 WHERE id = ?",
            [(at, i) for i in ids],
        )

    def delete_memories(self, ids: Sequence[int]) -> int:
        versions = 0
        for memory_id in ids:
            versions += self.conn.execute(
                "SELECT count(*) FROM memory_versions WHERE memory_id = ? OR origin_id = ?", (memory_id, memory_id)
            ).fetchone()[0]
            # copies merged into another memory's history (consolidate) go too
            self.conn.execute("DELETE FROM memory_versions WHERE origin_id = ?", (memory_id,))
            self.delete_vector(memory_id)
            self.conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        return versions

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in ("active", "archived", "forgotten")}
        out.update(dict(self.conn.execute("SELECT status, count(*) FROM memories GROUP BY status")))
        out["total"] = sum(out[s] for s in ("active", "archived", "forgotten"))
        out["versions"] = self.conn.execute("SELECT count(*) FROM memory_versions").fetchone()[0]
        out["entities"] = self.conn.execute("SELECT count(*) FROM entities").fetchone()[0]
        out["relations"] = self.conn.execute("SELECT count(*) FROM relations").fetchone()[0]
        return out

    @staticmethod
    def _project_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        """The project part of a scope alone: `1` for every project."""
        if scope.projects is None:
            return "TRUE", []
        parts, params = [], list(scope.projects)
        if scope.projects:
            parts.append(f"{alias}.project IN ({','.join('?' * len(scope.projects))})")
        if scope.include_global:
            parts.append(f"{alias}.project IS NULL")
        return "(" + " OR ".join(parts or ["FALSE"]) + ")", params

    @staticmethod
    def _scope_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        clauses: list[str] = []
        params: list = []
        marks = ",".join("?" * len(scope.statuses))
        clauses.append(f"{alias}.status IN ({marks})")
        params.extend(scope.statuses)
        if scope.projects is not None:
            where, more = SQLMemories._project_sql(scope, alias)
            clauses.append(where)
            params.extend(more)
        if scope.kinds:
            clauses.append(f"{alias}.kind IN ({','.join('?' * len(scope.kinds))})")
            params.extend(scope.kinds)
        if scope.sources:
            clauses.append(f"{alias}.source IN ({','.join('?' * len(scope.sources))})")
            params.extend(scope.sources)
        if scope.exclude_sources:
            clauses.append(f"{alias}.source NOT IN ({','.join('?' * len(scope.exclude_sources))})")
            params.extend(scope.exclude_sources)
        for tag in scope.tags:
            # driven from the tag's index: a rare tag (pinned) is found without walking every row
            clauses.append(f"{alias}.id IN (SELECT t.memory_id FROM memory_tags t WHERE t.tag = ?)")
            params.append(tag)
        if scope.since:
            clauses.append(f"{alias}.happened_at >= ?")
            params.append(scope.since)
        if scope.until:
            clauses.append(f"{alias}.happened_at < ?")
            params.append(scope.until)
        return " AND ".join(clauses), params

    def count_in_scope(self, scope: Scope, embedded_only: bool = False) -> int:
        where, params = self._scope_sql(scope)
        if embedded_only:
            where += " AND m.embedded = 1"
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]

    def export_memory_rows(self, after_id: int, limit: int, statuses: Sequence[str], scope: Scope | None
                           ) -> list[dict]:
        marks = ",".join("?" * len(statuses))
        projects, params = self._project_sql(scope) if scope is not None else ("TRUE", [])
        sql = f"SELECT * FROM memories m WHERE m.id > ? AND m.status IN ({marks}) AND {projects}"
        return self._dict_rows(sql + " ORDER BY m.id LIMIT ?", [after_id, *statuses, *params, limit])

    def pending_embeddings(self, limit: int, after_id: int = 0, *, newest_first: bool = False,
                           before_id: int | None = None, embedded_too: bool = False) -> list[tuple[int, str]]:
        sql = ("SELECT id, content FROM memories WHERE " + ("" if embedded_too else "embedded = 0 AND ")
               + "status != 'forgotten' AND ")
        if newest_first:
            sql, bound = sql + "id < ? ORDER BY id DESC LIMIT ?", (1 << 62) if before_id is None else before_id
        else:
            sql, bound = sql + "id > ? ORDER BY id LIMIT ?", after_id
        return [tuple(r) for r in self.conn.execute(sql, (bound, limit))]

    def pending_count(self) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM memories WHERE embedded = 0 AND status != 'forgotten'"
        ).fetchone()[0]

    def _id_given(self, memory_id: int) -> None:
        """An import inserted `memory_id` explicitly: new ids must come after it (hook; SQLite's
        AUTOINCREMENT already does, PostgreSQL moves its identity sequence)."""

    def tags_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {i: [] for i in ids}
        for chunk, marks in chunked(out):
            for memory_id, tag in self.conn.execute(
                f"SELECT memory_id, tag FROM memory_tags WHERE memory_id IN ({marks}) ORDER BY tag", chunk
            ):
                out[memory_id].append(tag)
        return out

    def memory_by_uid(self, uid: str) -> dict | None:
        row = self.conn.execute("SELECT id FROM memories WHERE uid = ?", (uid,)).fetchone()
        return self.raw_row(row[0]) if row else None

    def memory_id_taken(self, memory_id: int, uid: str | None = None) -> bool:
        if self.conn.execute("SELECT 1 FROM memories WHERE id = ?", (memory_id,)).fetchone():
            return True
        if not self.conn.execute("SELECT 1 FROM events WHERE memory_id = ? LIMIT 1", (memory_id,)).fetchone():
            return False
        return uid is None or not self.conn.execute(
            "SELECT 1 FROM events WHERE memory_id = ? AND action = 'purge' AND detail = ?", (memory_id, f"uid={uid}")
        ).fetchone()

    def decay_rows(self) -> list[dict]:
        rows = self._dict_rows(
            "SELECT id, content, kind, importance, confidence, access_count, created_at, happened_at, updated_at, "
            "content_updated_at, last_accessed_at, decay_level, decay_bank, decay_checked_at, stability, status "
            "FROM memories WHERE status = 'active' ORDER BY id"
        )
        ids = [r["id"] for r in rows]
        tags = self.tags_of(ids)
        degrees = self.connected_entity_counts(ids)
        for r in rows:
            r["tags"] = tags.get(r["id"], [])
            r["degree"] = degrees.get(r["id"], 0)
        return rows

    def bank_decay(self, memory_id: int, bank: float, checked_at: str, expect_checked: str | None,
                   expect_accessed: str | None) -> bool:
        self.conn.execute(
            "UPDATE memories SET decay_bank = ?, decay_checked_at = ? WHERE id = ? AND status = 'active' "
            "AND decay_checked_at IS NOT DISTINCT FROM ? AND last_accessed_at IS NOT DISTINCT FROM ?",
            (bank, checked_at, memory_id, expect_checked, expect_accessed),
        )
        return self.conn.changes() > 0

    def created_between(self, scope: Scope, start: str, end: str, limit: int) -> list[int]:
        where, params = self._scope_sql(scope)
        return [r[0] for r in self.conn.execute(
            f"SELECT m.id FROM memories m WHERE {where} AND m.happened_at >= ? AND m.happened_at < ? "
            "ORDER BY m.happened_at DESC, m.id DESC LIMIT ?", [*params, start, end, limit])]

    def list_ids(self, scope: Scope, limit: int | None) -> list[int]:
        where, params = self._scope_sql(scope)
        sql = f"SELECT m.id FROM memories m WHERE {where} ORDER BY m.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [r[0] for r in self.conn.execute(sql, params)]
