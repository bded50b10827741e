"""Responsibility: the read-only SQL behind browsing and charts (`memsafe ui`, issue 15): keyset
pages of memories, facet counts, store aggregates and a memory's audit trail.

A mixin of `memsafe.store.Store` (it uses `self.conn` and `Store._scope_sql`), kept in its own
module so the storage layer's browsing queries sit together. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from memsafe.models import Scope

# Columns a chart may group memories by (the name is put into SQL, so only these are accepted).
GROUPABLE = ("kind", "decay_level", "status", "source")


class BrowseQueries:
    """Read-only browsing queries; see the module docstring."""

    def browse_ids(self, scope: Scope, *, after_id: int | None = None, created_before: str | None = None,
                   limit: int = 50) -> list[int]:
        """Ids of memories in `scope`, newest (highest id) first, at most `limit`, all below
        `after_id` when given (keyset pagination: the cost of a page does not grow with its
        position, unlike OFFSET). `created_before`: only memories created before this UTC
        ISO-8601 instant."""
        where, params = self._scope_sql(scope)
        if after_id is not None:
            where += " AND m.id < ?"
            params.append(after_id)
        if created_before:
            where += " AND m.created_at < ?"
            params.append(created_before)
        sql = f"SELECT m.id FROM memories m WHERE {where} ORDER BY m.id DESC LIMIT ?"
        return [r[0] for r in self.conn.execute(sql, [*params, limit])]

    def count_browse(self, scope: Scope, *, created_before: str | None = None) -> int:
        """How many memories `browse_ids` walks through in total for this filter."""
        where, params = self._scope_sql(scope)
        if created_before:
            where += " AND m.created_at < ?"
            params.append(created_before)
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]

    def project_counts(self) -> list[tuple[str | None, int]]:
        """[(project key or None for global, memories of any status)], largest first."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT project, count(*) AS n FROM memories GROUP BY project ORDER BY n DESC, project")]

    def tag_counts(self, limit: int = 200) -> list[tuple[str, int]]:
        """[(tag, memories carrying it)], most used first, at most `limit`."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT tag, count(*) AS n FROM memory_tags GROUP BY tag ORDER BY n DESC, tag LIMIT ?", (limit,))]

    def group_counts(self, column: str, statuses: Sequence[str]) -> list[tuple[object, int]]:
        """[(value, count)] of memories with one of `statuses`, grouped by `column` (one of
        GROUPABLE), ordered by value. Raises ValueError for another column."""
        if column not in GROUPABLE:
            raise ValueError(f"cannot group by {column!r}")
        marks = ",".join("?" * len(statuses))
        return [(r[0], r[1]) for r in self.conn.execute(
            f"SELECT {column}, count(*) FROM memories WHERE status IN ({marks}) GROUP BY {column} ORDER BY {column}",
            list(statuses))]

    def created_bins(self, edges: Sequence[str], statuses: Sequence[str]) -> list[int]:
        """Counts of memories (with one of `statuses`) created in each interval between
        consecutive `edges` (UTC ISO-8601, newest first): [edge0, +inf), [edge1, edge0), …,
        (-inf, edge_last). Returns len(edges) + 1 counts."""
        cases = " ".join(f"WHEN created_at >= ? THEN {i}" for i in range(len(edges)))
        marks = ",".join("?" * len(statuses))
        rows = dict(self.conn.execute(
            f"SELECT CASE {cases} ELSE {len(edges)} END AS b, count(*) FROM memories "
            f"WHERE status IN ({marks}) GROUP BY b", [*edges, *statuses]))
        return [rows.get(i, 0) for i in range(len(edges) + 1)]

    def last_access_days(self, since: str) -> list[tuple[str, int]]:
        """[(UTC day 'YYYY-MM-DD', memories whose latest recall fell on that day)] since `since`,
        oldest first. From `last_accessed_at`: each memory counts once, on its latest access."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT substr(last_accessed_at, 1, 10) AS d, count(*) FROM memories "
            "WHERE last_accessed_at >= ? GROUP BY d ORDER BY d", (since,))]

    def event_days(self, since: str) -> list[tuple[str, str, int]]:
        """[(UTC day, audit action, count)] of audit events since `since`, oldest day first."""
        return [(r[0], r[1], r[2]) for r in self.conn.execute(
            "SELECT substr(at, 1, 10) AS d, action, count(*) FROM events WHERE at >= ? "
            "GROUP BY d, action ORDER BY d, action", (since,))]

    def memory_events(self, memory_id: int, limit: int = 200) -> list[dict]:
        """A memory's audit events (content-free), oldest first, at most the latest `limit`."""
        rows = self.conn.execute(
            "SELECT at, action, detail FROM events WHERE memory_id = ? ORDER BY id DESC LIMIT ?", (memory_id, limit))
        return [{"at": r[0], "action": r[1], "detail": r[2]} for r in rows][::-1]

    def entity_names_like(self, prefix: str, limit: int = 20) -> list[str]:
        """Entity names whose identity key starts with `prefix` (already a key), by name."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return [r[0] for r in self.conn.execute(
            "SELECT name FROM entities WHERE key LIKE ? ESCAPE '\\' ORDER BY key LIMIT ?", (escaped + "%", limit))]

    def top_entities(self, limit: int = 24) -> list[tuple[str, int]]:
        """[(entity name, active memories mentioning it)] for the most mentioned entities."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT e.name, count(*) AS n FROM entities e JOIN memory_entities me ON me.entity_id = e.id "
            "JOIN memories m ON m.id = me.memory_id AND m.status = 'active' "
            "GROUP BY e.id ORDER BY n DESC, e.key LIMIT ?", (limit,))]
