"""Responsibility: what the PostgreSQL mixins (`PostgresFullText`, `PostgresVectors`) rely on from
`PostgresStore`, declared once: its connection and the helpers it provides (see
`memsafe.store.common.base`)."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from memsafe.store.common.base import SQLStoreBase

if TYPE_CHECKING:  # the store's package imports its mixins, so its connection class is named lazily
    from memsafe.store.postgres import PgConnection


class PostgresBase(SQLStoreBase):
    """The base of every PostgreSQL-only mixin; see the module docstring."""

    conn: PgConnection

    @abstractmethod
    def _has_table(self, name: str) -> bool:
        """True when `name` is a table of the store's schema (`PostgresStore._has_table`)."""

    @abstractmethod
    def _roll_back(self) -> None:
        """Roll back this store's transaction (`PostgresStore._roll_back`)."""
