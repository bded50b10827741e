"""Responsibility: history and audit: earlier versions of memories, the content-free event log,
and the rows time travel reads (a mixin of both stores; see `memsafe.store.common`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from memsafe.store.common.base import SQLStoreBase
from memsafe.store.common.sql import chunked


class SQLHistory(SQLStoreBase):
    """See the module docstring."""

    _VERSION_COLUMNS = ("content", "kind", "project", "tags", "importance", "confidence", "decay_level", "status",
                        "valid_from", "valid_to", "cause", "origin_id", "author")

    def _insert_versions(self, memory_id: int, versions: Sequence[dict]) -> None:
        """Insert history rows of `memory_id` (dicts with `_VERSION_COLUMNS`; `tags` a list;
        `origin_id` and `author` may be absent)."""
        columns = self._VERSION_COLUMNS
        self.conn.executemany(
            f"INSERT INTO memory_versions(memory_id, {', '.join(columns)}) VALUES (?{',?' * len(columns)})",
            [(memory_id, *(json.dumps(list(v["tags"]), ensure_ascii=False) if c == "tags" else v.get(c)
                           for c in columns)) for v in versions],
        )

    def add_version(self, snapshot: dict, tags: Sequence[str], valid_to: str, cause: str) -> None:
        self._insert_versions(snapshot["id"], [{
            **snapshot, "tags": tags, "valid_from": snapshot["content_updated_at"], "valid_to": valid_to,
            "cause": cause, "origin_id": None,
        }])

    def add_event(self, at: str, action: str, memory_id: int | None = None, detail: str | None = None) -> None:
        self.conn.execute(
            "INSERT INTO events(at, action, memory_id, detail) VALUES (?, ?, ?, ?)", (at, action, memory_id, detail)
        )

    def versions_of(self, ids: Sequence[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {i: [] for i in ids}
        for chunk, marks in chunked(out):
            for row in self._dict_rows(
                f"SELECT * FROM memory_versions WHERE memory_id IN ({marks}) ORDER BY memory_id, valid_from, id",
                chunk,
            ):
                memory_id = row.pop("memory_id")
                row.pop("id")
                out[memory_id].append(row)
        return out

    def purged_uids(self) -> dict[str, str]:
        return {detail[4:]: at for at, detail in self.conn.execute(
            "SELECT at, detail FROM events WHERE action = 'purge' AND detail LIKE 'uid=%' ORDER BY at")}

    def export_paths(self) -> list[str]:
        out = []
        for (detail,) in self.conn.execute("SELECT detail FROM events WHERE action = 'export' AND detail LIKE 'path=%' "
                                           "ORDER BY id"):
            try:
                path = json.loads(detail[5:])
            except ValueError:
                continue
            if isinstance(path, str) and path not in out:
                out.append(path)
        return out

    def replace_versions(self, memory_id: int, versions: Sequence[dict]) -> None:
        self.conn.execute("DELETE FROM memory_versions WHERE memory_id = ?", (memory_id,))
        self._insert_versions(memory_id, versions)

    def versions(self, memory_id: int) -> list[dict]:
        out = self._dict_rows("SELECT * FROM memory_versions WHERE memory_id = ? ORDER BY valid_to, id", (memory_id,))
        for item in out:
            item["tags"] = json.loads(item["tags"])
        return out

    def add_foreign_version(self, memory_id: int, version: dict, cause: str, origin_id: int) -> None:
        self._insert_versions(memory_id, [{**version, "cause": cause, "origin_id": origin_id}])

    def rows_created_until(self, at: str) -> list[dict]:
        return self._dict_rows("SELECT * FROM memories WHERE created_at <= ? ORDER BY id", (at,))

    def own_versions_ending_after(self, at: str) -> list[dict]:
        out = self._dict_rows(
            "SELECT * FROM memory_versions WHERE origin_id IS NULL AND valid_to > ? ORDER BY memory_id, valid_to, id",
            (at,),
        )
        for item in out:
            item["tags"] = json.loads(item["tags"])
        return out

    def status_events_until(self, at: str) -> list[tuple[int, str, str]]:
        return list(
            self.conn.execute(
                "SELECT memory_id, action, at FROM events WHERE action IN ('forget', 'restore', 'archive') "
                "AND at <= ? AND memory_id IS NOT NULL ORDER BY at, id",
                (at,),
            )
        )

    def last_event_at(self, memory_id: int, action: str) -> str | None:
        row = self.conn.execute(
            "SELECT max(at) FROM events WHERE memory_id = ? AND action = ?", (memory_id, action)
        ).fetchone()
        return row[0] if row else None
