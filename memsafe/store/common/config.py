"""Responsibility: the `config` key/value table (a mixin of both stores; see `memsafe.store.common`).
"""

from __future__ import annotations

from memsafe.store.common.base import SQLStoreBase


class SQLConfig(SQLStoreBase):
    """See the module docstring."""

    def config_items(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM config"))

    def config_get(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def config_set(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO config(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def config_delete(self, key: str) -> None:
        self.conn.execute("DELETE FROM config WHERE key = ?", (key,))
