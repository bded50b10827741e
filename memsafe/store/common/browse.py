"""Responsibility: the read-only SQL behind browsing and charts (`memsafe ui`): keyset
pages of memories, facet counts, store aggregates and a memory's audit trail (a mixin of both
stores; see `memsafe.store.common`). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from memsafe.models import Scope
from memsafe.store.common.base import SQLStoreBase


class SQLBrowse(SQLStoreBase):
    """Read-only browsing queries; see the module docstring."""

    @staticmethod
    def _narrowed(scope: Scope, created_before: str | None) -> bool:
        """A kind, tag or age filter: no index narrows these, so counting means reading rows."""
        return bool(scope.kinds or scope.tags or scope.since or scope.sources or scope.exclude_sources
                    or created_before)

    def _browse_from(self, scope: Scope, created_before: str | None) -> str:
        """The FROM clause of a page: walk the rows in id order, newest first, and stop at the
        page's end (SQLite: NOT INDEXED) when the matching rows are common among the newest: with
        a kind, tag or age filter, and when active memories (most of a store) are listed across
        every project. The (status, project) index would make SQLite collect and sort every row of
        that status first (at 100,000 memories: 0.6 s with a kind filter vs ~20 ms; 25 ms for the
        first page vs 0.1 ms). A project, or archived or forgotten memories alone, keep the index."""
        common = scope.projects is None and "active" in scope.statuses
        return "memories m" + (self.NOT_INDEXED if common or self._narrowed(scope, created_before) else "")

    def browse_ids(self, scope: Scope, *, after_id: int | None = None, created_before: str | None = None,
                   limit: int = 50) -> list[int]:
        where, params = self._scope_sql(scope)
        if after_id is not None:
            where += " AND m.id < ?"
            params.append(after_id)
        if created_before:
            where += " AND m.happened_at < ?"
            params.append(created_before)
        sql = f"SELECT m.id FROM {self._browse_from(scope, created_before)} WHERE {where} ORDER BY m.id DESC LIMIT ?"
        return [r[0] for r in self.conn.execute(sql, [*params, limit])]

    def count_browse(self, scope: Scope, *, created_before: str | None = None, cap: int = 1000) -> tuple[int, bool]:
        """(how many memories `browse_ids` walks through for this filter, whether the count
        stopped at `cap`). Exact for status and project filters (an index count); with a kind,
        tag or age filter counting means reading every row, so it stops after `cap`."""
        where, params = self._scope_sql(scope)
        if created_before:
            where += " AND m.happened_at < ?"
            params.append(created_before)
        if not self._narrowed(scope, created_before):
            return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0], False
        n = self.conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM memories m{self.NOT_INDEXED} WHERE {where} "
                              "LIMIT ?) AS page", [*params, cap + 1]).fetchone()[0]
        return min(n, cap), n > cap

    def project_counts(self) -> list[tuple[str | None, int]]:
        """[(project, memories of any status)], most first, then by name (global, None, first).
        Counted per (status, project), the order of the (status, project) index, so no row is
        sorted (16 ms at 100,000 memories, vs 60–100 ms grouping by project alone)."""
        counts: dict[str | None, int] = {}
        for _, project, n in self.conn.execute(
                "SELECT status, project, count(*) FROM memories GROUP BY status, project"):
            counts[project] = counts.get(project, 0) + n
        return sorted(counts.items(), key=lambda pn: (-pn[1], pn[0] is not None, pn[0] or ""))

    def tag_counts(self, limit: int = 200) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT tag, count(*) AS n FROM memory_tags GROUP BY tag ORDER BY n DESC, tag LIMIT ?", (limit,))]

    def status_counts(self) -> dict[str, int]:
        """{status: memories} (an index count)."""
        return dict(self.conn.execute("SELECT status, count(*) FROM memories GROUP BY status"))

    def active_profile(self, edges: Sequence[str]) -> list[tuple[str, int, int, int]]:
        """Active memories counted by (kind, decay level, age bin), in one pass over the table.
        Age bins follow `edges` (UTC ISO-8601 event times, newest first): bin 0 happened at
        or after edges[0], bin i in [edges[i], edges[i-1]), bin len(edges) before the last edge."""
        cases = " ".join(f"WHEN happened_at >= ? THEN {i}" for i in range(len(edges)))
        return [(r[0], r[1], r[2], r[3]) for r in self.conn.execute(
            f"SELECT kind, decay_level, CASE {cases} ELSE {len(edges)} END AS b, count(*) FROM memories "
            "WHERE status = 'active' GROUP BY kind, decay_level, b", list(edges))]

    def last_access_days(self, since: str) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT substr(last_accessed_at, 1, 10) AS d, count(*) FROM memories "
            "WHERE last_accessed_at >= ? GROUP BY d ORDER BY d", (since,))]

    def event_days(self, since: str) -> list[tuple[str, str, int]]:
        return [(r[0], r[1], r[2]) for r in self.conn.execute(
            "SELECT substr(at, 1, 10) AS d, action, count(*) FROM events WHERE at >= ? "
            "GROUP BY d, action ORDER BY d, action", (since,))]

    def memory_events(self, memory_id: int, limit: int = 200) -> list[dict]:
        rows = self.conn.execute(
            "SELECT at, action, detail FROM events WHERE memory_id = ? ORDER BY id DESC LIMIT ?", (memory_id, limit))
        return [{"at": r[0], "action": r[1], "detail": r[2]} for r in rows][::-1]

    def entity_names_like(self, prefix: str, limit: int = 20) -> list[str]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return [r[0] for r in self.conn.execute(
            "SELECT name FROM entities WHERE key LIKE ? ESCAPE '\\' ORDER BY key LIMIT ?", (escaped + "%", limit))]

    def top_entities(self, limit: int = 24) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT e.name, count(*) AS n FROM entities e JOIN memory_entities me ON me.entity_id = e.id "
            "JOIN memories m ON m.id = me.memory_id AND m.status = 'active' "
            "GROUP BY e.id ORDER BY n DESC, e.key LIMIT ?", (limit,))]
