"""Responsibility: what the shared SQL mixins rely on from the store they are mixed into, declared
once: the connection (`conn`), the SQLite-only hint `NOT_INDEXED`, and the helpers each backend or
a sibling mixin provides. `memsafe.store.sqlite.base` and `memsafe.store.postgres.base` narrow it
to each backend's connection.

Every method here is implemented by a mixin (`SQLMemories`, a backend's full text) or by the
concrete store; declaring them abstract lets a type checker see them from any mixin, and makes a
store that forgets one fail when it is created rather than on first use.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from memsafe.models import Scope
from memsafe.store.interface import Store


class SQLConnection(Protocol):
    """The connection the shared SQL runs on: apsw's `Connection`, or `PgConnection` over psycopg.
    Both take `?` placeholders; a cursor's rows are tuples."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, seq: Any, /) -> Any: ...

    def changes(self) -> int: ...

    @property
    def in_transaction(self) -> bool: ...


class SQLStoreBase(Store):
    """The base of every shared SQL mixin; see the module docstring."""

    conn: SQLConnection
    NOT_INDEXED: str  # " NOT INDEXED" on SQLite (walk rows in id order), "" on PostgreSQL

    @abstractmethod
    def _dict_rows(self, sql: str, params: Sequence = ()) -> list[dict]:
        """The rows of `sql` as dicts keyed by column name."""

    @abstractmethod
    def _index_words(self, rows: Sequence[tuple[int, str]]) -> None:
        """Add [(memory id, content)] to the backend's word index."""

    @abstractmethod
    def _bm25_search(self, match: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
        """[(memory id, bm25-like score)] best first for a full-text `match` within `scope`."""

    @abstractmethod
    def _id_given(self, memory_id: int) -> None:
        """Note that a row was inserted with an explicit id (PostgreSQL moves its sequence past it)."""

    @staticmethod
    @abstractmethod
    def _project_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        """(SQL condition, parameters) selecting the projects of `scope`."""

    @staticmethod
    @abstractmethod
    def _scope_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        """(SQL condition, parameters) selecting the rows of `scope`."""
