"""Responsibility: the PostgreSQL backend (for teams): psycopg 3 connections from a psycopg-pool
pool, the tsvector word index, pg_trgm, and pgvector.

`PostgresStore` is one pooled connection, in autocommit mode between memsafe's own explicit
transactions. A write transaction first takes one transaction-level advisory lock
(`WRITE_LOCK`), so memsafe's writers take turns exactly as SQLite's `BEGIN IMMEDIATE` makes them:
every read-check-write a handler does inside `store.write()` (a duplicate check, then an insert)
stays correct with many processes, and readers never wait (MVCC). A process keeps one pool per
URL (`POOL_MAX` connections), so an MCP server opening a store per tool call reuses connections.

The URL follows libpq's rules (`postgresql://user@host:port/dbname?...`); the password never
comes from memsafe: libpq reads `PGPASSWORD` or `~/.pgpass`. The SQL shared with SQLite lives in
`memsafe.store.common`; this package holds what differs: opening, migrations, transactions,
full text, vectors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from memsafe import settings
from memsafe.errors import InvalidInput, Refused, SchemaTooNew, StoreUnavailable
from memsafe.store.common.browse import SQLBrowse
from memsafe.store.common.config import SQLConfig
from memsafe.store.common.graph import SQLGraph
from memsafe.store.common.history import SQLHistory
from memsafe.store.common.memories import SQLMemories
from memsafe.store.interface import Store
from memsafe.store.postgres import migrations
from memsafe.store.postgres.fulltext import PostgresFullText
from memsafe.store.postgres.indexes import PostgresIndexes
from memsafe.store.postgres.vectors import PostgresVectors

if TYPE_CHECKING:  # psycopg is the optional `postgres` extra, imported when a store opens
    from psycopg_pool import ConnectionPool

URL_SCHEMES = ("postgresql://", "postgres://")
WRITE_LOCK = 0x6D656D73_6166651  # pg_advisory_xact_lock key every memsafe write transaction takes
BUSY_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_S = 10
POOL_MAX = 16  # connections per process and URL: a server's concurrent tool calls each hold one
_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()
_migrated: set[str] = set()


def is_url(target: str | Path) -> bool:
    """True when `target` (a `--db` value) names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


# the requirements of pyproject.toml's `postgres` extra, for the message when they are missing
DRIVER_REQUIREMENTS = "'psycopg[binary]>=3.2' 'psycopg-pool>=3.2'"


def require_driver() -> None:
    """Check that the PostgreSQL driver (psycopg and psycopg-pool, the `postgres` extra) imports.

    Raises:
        StoreUnavailable: it does not (memsafe installed without the extra); the message says how
            to add it to the environment memsafe runs in (a plain `pip install 'memsafe[postgres]'`
            fails: memsafe is installed from its folder, not from the package index).
    """
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise StoreUnavailable(
            f"a PostgreSQL store needs memsafe's postgres extra ({exc.name or 'psycopg'} is not installed); add it "
            f"where memsafe runs: `pipx inject memsafe {DRIVER_REQUIREMENTS}` (pipx), or "
            f"`pip install {DRIVER_REQUIREMENTS}` in memsafe's environment"
        ) from None


def check_url(url: str) -> dict:
    """The libpq parameters of `url` (`psycopg.conninfo.conninfo_to_dict`).

    Raises:
        InvalidInput: it is not a valid libpq URL, or it holds a password (memsafe stores the URL
            in its config and shows it in `status`: the password goes in PGPASSWORD or ~/.pgpass).
        StoreUnavailable: the driver is not installed (`require_driver`).
    """
    require_driver()
    from psycopg import conninfo

    try:
        params = conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq's own message
        raise InvalidInput(f"not a valid PostgreSQL URL: {str(exc).strip().splitlines()[0]}") from None
    if params.get("password"):
        raise Refused("the PostgreSQL URL holds a password; remove it and set PGPASSWORD or use ~/.pgpass")
    return params


def server_of(url: str) -> str:
    """`host:port` (or `socket-folder:port`) the URL connects to, for messages (libpq defaults)."""
    params = check_url(url)
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    return f"{host}:{port}"


def _pool(url: str):
    """The process's pool for `url`, opened (one direct connection first, for a clear reason when
    the server cannot be reached) on first use. Created and opened under one lock, so threads
    opening stores at once share one pool; a pool that failed to open is never kept.

    Raises: psycopg.OperationalError, psycopg_pool.PoolTimeout.
    """
    import logging

    from psycopg_pool import ConnectionPool

    # the pool's reconnection warnings go where the application's logging goes, never straight
    # to a terminal (a CLI error is one line; `serve` keeps stdout for the protocol)
    logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            _probe(url)
            pool = ConnectionPool(
                url, min_size=1, max_size=POOL_MAX, open=False, name="memsafe",
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S, "application_name": "memsafe"},
            )
            try:
                pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            except BaseException:
                pool.close()
                raise
            _pools[url] = pool
    return pool


def roll_back(raw) -> None:
    """Roll back the transaction of `raw` (a psycopg connection). A signal can interrupt a command
    while the server still runs it, and psycopg then refuses every other command ("another command
    is already in progress": a SIGTERM during an import would end in a
    traceback and exit 1): that command is cancelled and the connection closed, which ends the
    transaction on the server, rolled back as every session that closes without a commit."""
    import psycopg
    from psycopg.pq import TransactionStatus

    if raw.info.transaction_status != TransactionStatus.ACTIVE:
        raw.rollback()
        return
    try:
        raw.cancel_safe(timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error:
        pass  # closing the connection below ends the command all the same
    finally:
        raw.close()


def close_pool(url: str) -> None:
    """Close this process's pool for `url`, if open (its connections go back to the server)."""
    with _pools_lock:
        pool = _pools.pop(url, None)
        _migrated.discard(url)
    if pool is not None:
        pool.close()


def close_pools() -> None:
    """Close every pool this process opened (tests, and servers at shutdown)."""
    for url in list(_pools):
        close_pool(url)


@contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """A new, empty schema in the database at `url` for a throwaway store (benchmarks): yields
    `url` bound to it (`options=-csearch_path=...`), and drops the schema with everything in it
    afterwards. The database's other schemas are not touched.

    Raises: InvalidInput (see `check_url`), StoreUnavailable (cannot connect or create it).
    """
    import secrets

    import psycopg

    check_url(url)
    name = f"memsafe_scratch_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            # the extensions go where the database's users find them, not into the scratch schema
            # (dropped with it, under another scratch store of the same database)
            for ext in ("vector", "pg_trgm"):
                try:
                    conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
                except psycopg.Error:
                    pass  # not allowed here: the store says what to run when it opens
            conn.execute(f"CREATE SCHEMA {name}")
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot create a scratch schema at {server_of(url)}: {_connect_reason(exc)}") from None
    bound = url + ("&" if "?" in url else "?") + f"options=-csearch_path%3D{name}%2Cpublic"
    try:
        yield bound
    finally:
        close_pool(bound)
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


class PgConnection:
    """A psycopg connection that speaks the SQL the shared store code writes: `?` placeholders
    (turned into psycopg's `%s`, a literal `%` doubled), apsw-like `execute`, `executemany`,
    `changes()` (rows the last statement touched) and `in_transaction`."""

    def __init__(self, raw):
        self.raw = raw
        self._changes = 0

    def execute(self, sql: str, params: Sequence = ()):
        cur = self.raw.execute(_pg_sql(sql), list(params))
        self._changes = max(cur.rowcount, 0)
        return cur

    def executemany(self, sql: str, seq) -> None:
        rows = [list(p) for p in seq]
        if not rows:
            self._changes = 0
            return
        with self.raw.cursor() as cur:
            cur.executemany(_pg_sql(sql), rows)
            self._changes = max(cur.rowcount, 0)

    def script(self, sql: str) -> None:
        """Run several `;`-separated statements, no parameters (migrations)."""
        self.raw.execute(sql)

    def changes(self) -> int:
        return self._changes

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def dict_rows(self, sql: str, params: Sequence = ()) -> list[dict]:
        from psycopg.rows import dict_row

        with self.raw.cursor(row_factory=dict_row) as cur:
            cur.execute(_pg_sql(sql), list(params))
            return cur.fetchall()


@lru_cache(maxsize=2048)
def _pg_sql(sql: str) -> str:
    """SQL with `?` placeholders as psycopg wants it: `%` doubled, each `?` a `%s` (memsafe's SQL
    has no `?` inside string literals)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresStore(SQLMemories, PostgresIndexes, PostgresFullText, PostgresVectors, SQLGraph, SQLHistory, SQLConfig,
                    SQLBrowse, Store):
    """An open memsafe PostgreSQL database.

    Args:
        url: a libpq URL (`postgresql://user@host:port/dbname`), see `check_url`.
        create: ignored beyond the schema: a database is never created, only its tables (the
            database and the `vector` extension are the administrator's: docs/team.md).

    Raises:
        InvalidInput: the URL is malformed or holds a password.
        StoreUnavailable: the server cannot be reached (naming host:port), the `vector` extension
            is missing (naming the SQL to run), or the database holds other tables named like ours.
        SchemaTooNew: the database's schema is newer than this memsafe; it is left untouched.
    """

    NOT_INDEXED = ""  # SQLite's "NOT INDEXED" hint has no PostgreSQL equivalent (the planner decides)

    def __init__(self, url: str, *, create: bool = True):
        self.url = url
        self.path = url  # what status and messages show
        self.created = False
        self.backup_path = None
        self.vector_error = "disabled by MEMSAFE_NO_VEC" if settings.env().no_vec else None
        self.key = None  # memsafe's at-rest encryption is SQLite-only
        self._server = server_of(url)
        try:
            pool = _pool(url)
            raw = pool.getconn(timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:  # psycopg.OperationalError, psycopg_pool.PoolTimeout (every connection busy)
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {self._server}: {_connect_reason(exc)}") from None
        self._pool = pool
        self._raw = raw
        self.conn = PgConnection(raw)
        try:
            if url not in _migrated:
                self._migrate()
                _migrated.add(url)
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Check the extensions, refuse a newer schema untouched, then run every pending migration
        in one transaction under `migrations.MIGRATION_LOCK`."""
        import psycopg

        target = migrations.latest()
        installed = {r[0] for r in self.conn.execute("SELECT extname FROM pg_extension")}
        for ext in ("vector", "pg_trgm"):
            if ext not in installed:
                self._create_extension(ext)
        version = self._stored_version()
        if version is not None and version > target:
            raise SchemaTooNew(
                f"PostgreSQL database at {self._server} has memsafe schema version {version}, newer than "
                f"this memsafe understands ({target}); upgrade memsafe. The database was not changed."
            )
        if version == target:
            return
        try:
            with self.write():
                self.conn.execute("SELECT pg_advisory_xact_lock(?)", (migrations.MIGRATION_LOCK,))
                self.conn.execute("CREATE TABLE IF NOT EXISTS memsafe_schema (version INTEGER NOT NULL)")
                version = self._stored_version() or 0  # another process may have migrated meanwhile
                if version >= target:
                    return
                if version == 0:
                    if self._has_table("memories"):
                        raise StoreUnavailable(
                            f"the PostgreSQL database at {self._server} has a `memories` table memsafe did not "
                            "make; point memsafe at its own database (or schema). Nothing was changed"
                        )
                    self.created = True
                for number, (_name, fn) in enumerate(migrations.MIGRATIONS, start=1):
                    if number > version:
                        fn(self.conn)
                self.conn.execute("DELETE FROM memsafe_schema")
                self.conn.execute("INSERT INTO memsafe_schema(version) VALUES (?)", (target,))
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot migrate the PostgreSQL database at {self._server} from schema {version} to {target}: "
                f"{_reason(exc)}; nothing was changed"
            ) from None

    def _has_table(self, name: str) -> bool:
        """True when `name` is a table of the current schema (the first of the search path): a
        memsafe store of another schema later in the path is not this one."""
        return self.conn.execute(
            "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", (name,)
        ).fetchone() is not None

    def _stored_version(self) -> int | None:
        if not self._has_table("memsafe_schema"):
            return None
        row = self.conn.execute("SELECT max(version) FROM memsafe_schema").fetchone()
        return row[0]

    def _create_extension(self, name: str) -> None:
        """Create a needed extension, or say exactly what to run when this role may not."""
        import psycopg

        try:
            self.conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
        except psycopg.Error as exc:
            db = self.conn.execute("SELECT current_database()").fetchone()[0]
            available = self.conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = ?", (name,)).fetchone()
            what = "pgvector" if name == "vector" else "the contrib module " + name
            install = "" if available else f" (install {what} on the server first)"
            raise StoreUnavailable(
                f"the PostgreSQL database {db} at {self._server} lacks the `{name}` extension{install}; "
                f"as a superuser run: psql -d {db} -c 'CREATE EXTENSION {name};' ({_reason(exc)})"
            ) from None

    @property
    def encrypted(self) -> bool:
        return False  # memsafe's at-rest encryption is SQLite-only; PostgreSQL has its own (TDE, disk)

    @property
    def vector_available(self) -> bool:
        return self.vector_error is None

    def close(self) -> None:
        raw, self._raw = getattr(self, "_raw", None), None
        if raw is not None:
            if not raw.closed and self.conn.in_transaction:
                roll_back(raw)
            self._pool.putconn(raw)  # the pool drops a closed connection

    def _roll_back(self) -> None:
        """Roll back this store's transaction (`roll_back`). When that had to close the connection
        (a signal landed while the server ran a command), a new one is taken from the pool, so the
        store still answers: an interrupted import then asks whether anything was committed
        (not "the connection is closed", a traceback and exit 1 instead of
        "nothing imported (rolled back)" and exit 130/143). If none can be had, the closed one stays
        and the next command says so."""
        roll_back(self._raw)
        if not self._raw.closed:
            return
        self._pool.putconn(self._raw)  # the pool drops a closed connection
        try:
            self._raw = self._pool.getconn(timeout=CONNECT_TIMEOUT_S)
        except Exception:  # psycopg.OperationalError, psycopg_pool.PoolTimeout: the server is gone or busy
            return
        self.conn.raw = self._raw

    # -- transactions ----------------------------------------------------------------------------

    @contextmanager
    def write(self, wait_ms: int = BUSY_TIMEOUT_MS) -> Iterator[None]:
        """One write transaction; first waits (at most `wait_ms`) for memsafe's write lock.

        Raises:
            StoreUnavailable: another writer held the lock for longer than `wait_ms` milliseconds.
        """
        import psycopg

        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            self.conn.execute(f"SET LOCAL lock_timeout = {int(wait_ms)}")
            try:
                self.conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            except psycopg.errors.LockNotAvailable:
                raise StoreUnavailable(
                    f"the PostgreSQL database at {self._server} stayed locked by another memsafe writer for "
                    f"{wait_ms / 1000:g}s; try again"
                ) from None
            self.conn.execute("SET LOCAL lock_timeout = 0")
            yield
        except BaseException:
            self._roll_back()
            raise
        else:
            self._raw.commit()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read-only REPEATABLE READ transaction: every read inside sees one state."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            self._roll_back()

    # -- general ---------------------------------------------------------------------------------

    def _dict_rows(self, sql: str, params: Sequence = ()) -> list[dict]:
        return self.conn.dict_rows(sql, params)

    def _id_given(self, memory_id: int) -> None:
        # setval never moves the identity backwards: an id handed out once (then purged) stays used
        self.conn.execute(
            "SELECT setval(q.s, greatest(?, coalesce(pg_sequence_last_value(q.s), 0))) "
            "FROM (SELECT pg_get_serial_sequence('memories', 'id')::regclass AS s) AS q", (memory_id,))

    def schema_version(self) -> int:
        return self._stored_version() or 0

    def latest_schema(self) -> int:
        return migrations.latest()

    def sqlite_version(self) -> str:
        return "PostgreSQL " + self.conn.execute("SHOW server_version").fetchone()[0]

    def vec_version(self) -> str | None:
        return self.conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]

    def integrity_check(self) -> str:
        return "ok"  # the server checks its own pages (data checksums, amcheck); nothing to ask per store

    def checkpoint(self) -> None:
        pass  # the server checkpoints its own WAL

    def no_checkpoint_on_close(self, on: bool = True) -> None:
        pass

    def backup_files(self) -> list[Path]:
        return []  # backups are pg_dump's or `memsafe export`'s (docs/team.md)

    def backups_holding(self, uids: Sequence[str]) -> list[Path]:
        return []

    def sizes(self) -> tuple[int, int]:
        tables = ("memories", "memory_fts", "memory_tags", "memory_versions", "events", "config", "entities",
                  "entity_aliases", "entity_alias_keys", "memory_entities", "relations", "memory_vectors")
        total = self.conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(quote_ident(current_schema()) || '.' || t))), 0) "
            "FROM unnest(?::text[]) AS t",
            (list(tables),)).fetchone()[0]
        return int(total), 0

    def memory_columns(self) -> list[str]:
        return self._columns("memories")

    def version_columns(self) -> list[str]:
        return self._columns("memory_versions")

    def _columns(self, table: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(quote_ident(current_schema()) || '.' || ?) "
            "AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum", (table,))]

    def consistency_problems(self) -> list[str]:
        return self.primary_damage() + self.index_damage()

    def fts_search(self, match, scope, limit, exact=()):
        """See `Store.fts_search`. Raises IndexDamaged when the word index's table is missing."""
        try:
            return super().fts_search(match, scope, limit, exact)
        except Exception as exc:
            raise self._read_failure(exc, "word") from None

    def fts_term_stats(self, terms, ids):
        """See `Store.fts_term_stats`. Raises IndexDamaged when the word index's table is missing."""
        try:
            return super().fts_term_stats(terms, ids)
        except Exception as exc:
            raise self._read_failure(exc, "word") from None


def _probe(url: str) -> None:
    """Connect once directly (raises psycopg.OperationalError with libpq's reason)."""
    import psycopg

    psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True).close()


def _connect_reason(exc: BaseException) -> str:
    """libpq's reason for a failed connection, without the address the message names already
    ('connection to server at "h", port 5432 failed: Connection refused' -> 'Connection refused')."""
    line = _reason(exc).removeprefix("connection failed: ")
    return " ".join(line.split(" failed: ", 1)[-1].split())


def _reason(exc: BaseException) -> str:
    """The first line of a driver error, without libpq's trailing detail."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
