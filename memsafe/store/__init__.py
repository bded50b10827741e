"""Responsibility: the storage layer. Every SQL statement in memsafe lives in this package.

`Store` (in `interface`) is what the `memsafe.api` handlers code against; `connect` opens one.
Today the backend is SQLite (`sqlite`: one file, apsw, FTS5, sqlite-vec).
"""

from __future__ import annotations

from pathlib import Path

from memsafe.store.interface import LexicalHits, Store
from memsafe.store.sqlite import SQLiteStore, file_sizes

__all__ = ["Store", "LexicalHits", "SQLiteStore", "connect", "file_sizes"]


def connect(path: Path, *, create: bool = True) -> Store:
    """Open (and migrate if needed) the store at `path`: an absolute SQLite file path.

    Args:
        path: the database file.
        create: create it (and its folder, mode 0700) when missing.

    Raises:
        StoreUnavailable: it cannot be opened or created, or is not a memsafe store.
        SchemaTooNew: its schema is newer than this memsafe; it is left untouched.
    """
    return SQLiteStore(path, create=create)
