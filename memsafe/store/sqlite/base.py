"""Responsibility: what the SQLite mixins (`SQLiteFullText`, `SQLiteVectors`) rely on from
`SQLiteStore`, declared once: its apsw connection, its file path, and the helpers the store or a
sibling mixin provides (see `memsafe.store.common.base`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path

import apsw

from memsafe.store.common.base import SQLStoreBase


class SQLiteBase(SQLStoreBase):
    """The base of every SQLite-only mixin; see the module docstring."""

    conn: apsw.Connection
    path: Path

    @abstractmethod
    def _file_state(self) -> tuple[int, int] | None:
        """What changes whenever the file may have (`SQLiteStore._file_state`); None inside a transaction."""

    @abstractmethod
    def _fits_page_cache(self) -> bool:
        """Whether the main file fits this connection's page cache (`SQLiteStore._fits_page_cache`)."""

    @abstractmethod
    def _vector_dim(self) -> int | None:
        """The dimension the vec0 table was declared with (`SQLiteIndexes._vector_dim`)."""

    @abstractmethod
    def _log_vector(self, memory_id: int) -> None:
        """Record a vector change for in-memory copies (`SQLiteVectors._log_vector`)."""

    @abstractmethod
    def _in_scope(self, ids: Sequence[int], where: str, params: list, embedded: bool = False) -> set[int]:
        """Those of `ids` whose rows meet `where` (`SQLiteFullText._in_scope`)."""
