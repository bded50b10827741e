"""Responsibility: the storage layer. Every SQL statement in memsafe lives in this package.

`Store` (in `interface`) is what the `memsafe.api` handlers code against; `connect` opens one:
SQLite (`sqlite`: one file, apsw, FTS5, sqlite-vec; the embedded default) for a path, PostgreSQL
(`postgres`: psycopg, tsvector, pg_trgm, pgvector; for teams) for a `postgresql://` URL. The SQL
both run as it is lives in `common`.
"""

from __future__ import annotations

from pathlib import Path

from memsafe import settings
from memsafe.store.interface import LexicalHits, Store
from memsafe.store.sqlite import SQLiteStore, file_sizes

__all__ = ["Store", "LexicalHits", "SQLiteStore", "connect", "file_sizes"]


def connect(target: Path | str, *, create: bool = True) -> Store:
    """Open (and migrate if needed) the store at `target` (`settings.db_target`).

    Args:
        target: an absolute SQLite file path, or a PostgreSQL URL.
        create: SQLite: create the file (and its folder, mode 0700) when missing. PostgreSQL:
            the database must exist; its tables are created when missing.

    Raises:
        InvalidInput: a malformed URL, or one holding a password.
        StoreUnavailable: it cannot be opened, reached or created, or is not a memsafe store.
        SchemaTooNew: its schema is newer than this memsafe; it is left untouched.
    """
    if settings.is_db_url(target):
        from memsafe.store.postgres import PostgresStore

        return PostgresStore(str(target), create=create)
    return SQLiteStore(Path(target), create=create)
