"""Responsibility: the SQLite backend (the embedded default): one file, opened with apsw.

`SQLiteStore` is one apsw connection: WAL, a busy timeout, `BEGIN IMMEDIATE` for writes,
foreign keys on, `secure_delete` on (freed pages are zeroed, so purged text leaves the file).
sqlite-vec is loaded when available; without it the store still works lexically and
`vector_error` says why. Its SQL is split by concern into mixins: those shared with PostgreSQL
(`memsafe.store.common`: memories, graph, history, config, browse) and its own `fulltext` (FTS5)
and `vectors` (sqlite-vec); this module opens, migrates (`migrations`), and holds the
transactions and file-level checks.

Callers group writes with `with store.write(): ...`; reads need no transaction.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from memsafe import settings
from memsafe.errors import IndexHealed, SchemaTooNew, StoreUnavailable
from memsafe.store.common import tokenizer
from memsafe.store.common.browse import SQLBrowse
from memsafe.store.common.config import SQLConfig
from memsafe.store.common.graph import SQLGraph
from memsafe.store.common.history import SQLHistory
from memsafe.store.common.memories import SQLMemories
from memsafe.store.common.sql import chunked, scalar
from memsafe.store.interface import Store
from memsafe.store.sqlite import encryption

if TYPE_CHECKING:
    from memsafe.models import Memory
from memsafe.store.sqlite import migrations
from memsafe.store.sqlite.fulltext import SQLiteFullText
from memsafe.store.sqlite.indexes import FTS_INDEXES, SQLiteIndexes, derived_failure
from memsafe.store.sqlite.vectors import SQLiteVectors

BUSY_TIMEOUT_MS = 30_000
# Below this many free bytes on its file system a store counts as on a full disk: one write takes
# tens of KiB (its row, word-index and vector pages, then as many WAL frames), and a WAL index
# that grows needs 32 KiB more of shared memory (https://sqlite.org/walformat.html#shm).
DISK_FULL_BYTES = 1024 * 1024
PAGE_CACHE_KIB = 65_536  # PRAGMA cache_size of every connection, KiB (64 MiB)
MMAP_BYTES = 268_435_456  # PRAGMA mmap_size of a plain (not encrypted) store: 256 MiB


def _sqlite_vec_path() -> str:
    """Path of the sqlite-vec loadable extension (without suffix, as `sqlite_vec.loadable_path()`
    gives it), found without importing the package: its `__init__` imports numpy, which costs every
    command ~40 ms and, imported from two threads at once (a server's tool call while the model
    loads), can fail. Raises ImportError when sqlite-vec is not installed."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the sqlite-vec package is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


class DiskFull(StoreUnavailable):
    """A write failed because the file system holding the store is full; it was rolled back."""


def free_bytes(path: Path) -> int | None:
    """Bytes free for this user on the file system holding `path` (its folder when the file
    does not exist; links followed), or None when that cannot be told (no such folder)."""
    target = os.path.realpath(path)
    folder = target if os.path.isdir(target) else os.path.dirname(target)
    try:
        found = os.statvfs(folder)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        import shutil

        try:
            return shutil.disk_usage(folder).free
        except OSError:
            return None
    return found.f_bavail * found.f_frsize


def disk_is_full(path: Path) -> bool:
    """True when the file system holding `path` has under DISK_FULL_BYTES free."""
    free = free_bytes(path)
    return free is not None and free < DISK_FULL_BYTES


def out_of_space(path: Path, exc: BaseException) -> bool:
    """True when `exc`, raised by SQLite on the store at `path`, means its disk is full: SQLITE_FULL,
    or an I/O error (growing the WAL index fails so) while the disk is full (`disk_is_full`)."""
    return isinstance(exc, apsw.FullError) or (isinstance(exc, apsw.IOError) and disk_is_full(path))


def disk_full_message(path: Path) -> str:
    """One line: the disk holding `path` is full, how much is left, and what to do."""
    free = free_bytes(path)
    if free is not None and free >= DISK_FULL_BYTES:
        # SQLITE_FULL with room on the disk: a page limit (PRAGMA max_page_count) or a file-size
        # limit (ulimit -f, a quota) stopped the file growing
        return (f"{os.path.realpath(path)} cannot grow: SQLite reports it full although its disk has "
                f"{free // 1024:,} KiB free (a file-size limit or quota?); nothing was written "
                "(reading still works)")
    left = "" if free is None else f" ({free // 1024:,} KiB free)"
    return (f"the disk holding {os.path.realpath(path)} is full{left}; nothing was written. "
            "Free some space and try again (reading still works)")


def _vec_disabled_reason() -> str | None:
    if settings.env().no_vec:
        return "disabled by MEMSAFE_NO_VEC"
    return None


class SQLiteStore(SQLMemories, SQLiteFullText, SQLiteVectors, SQLiteIndexes, SQLGraph, SQLHistory, SQLConfig, SQLBrowse,
                  Store):
    """An open memsafe SQLite database.

    Args:
        path: absolute path of the SQLite file.
        create: create the file (and its folder, mode 0700) if missing; the file is made 0600.

    Raises:
        StoreUnavailable: the path cannot be opened, created, or is not a memsafe database,
            or a needed migration cannot be written.
        SchemaTooNew: the file's schema version is newer than this code; it is left untouched.
    """

    NOT_INDEXED = " NOT INDEXED"  # walk rows in id order instead of an index (see SQLBrowse._browse_from)

    def __init__(self, path: Path, *, create: bool = True):
        self.path = Path(path)
        self.created = False
        self.backup_path: Path | None = None
        self.vector_error: str | None = None
        self.key: encryption.Key | None = None
        self._vec_checked = False
        self.disk_was_full = False  # opened without shared memory: a full disk left no room for `-shm`
        self.read_only = False  # opened to read only: the file or its folder cannot be written here
        self.conn = self._connect(create)
        try:
            self._identity: tuple[int, int] | None = self._file_identity()  # what `still_current` compares with
        except OSError:  # gone already (removed by another process): never reused
            self._identity = None
        try:
            self._migrate()
            self._load_vec()
        except BaseException:
            self.conn.close()
            raise

    def _connect(self, create: bool) -> apsw.Connection:
        # Opening can meet SQLITE_BUSY without the busy handler being consulted (switching a brand-new
        # file to WAL while another first opener creates the schema), so opening itself is retried.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                return self._open(create)
            except apsw.BusyError as exc:
                if time.monotonic() > deadline:
                    raise StoreUnavailable(f"cannot open {self.path}: {exc}; another process keeps it locked") from None
                time.sleep(0.05)
            except (OSError, ValueError) as exc:  # e.g. a file name too long for the file system
                raise StoreUnavailable(f"cannot open {self.path}: {getattr(exc, 'strerror', None) or exc}") from None

    def _open(self, create: bool) -> apsw.Connection:
        path = self.path
        if path.is_dir():
            raise StoreUnavailable(f"{path} is a directory, not a database file; pass a file path with --db")
        if not path.exists():
            if not create:
                raise StoreUnavailable(f"no database at {path}")
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise StoreUnavailable(f"cannot create folder {path.parent}: {exc.strerror or exc}") from None
            self.created = True
        candidates = self._keys_for(path)
        old_umask = os.umask(0o077)
        conn = None
        try:
            flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
            for attempt, key in enumerate(candidates or [None], start=1):
                conn = apsw.Connection(str(path), flags=flags)
                conn.setbusytimeout(BUSY_TIMEOUT_MS)
                if key is not None:
                    encryption.apply(conn, key)
                try:
                    try:
                        version, tables = self._header(conn)
                    except (apsw.FullError, apsw.IOError) as exc:
                        if not out_of_space(path, exc):
                            raise
                        conn.close()
                        conn = self._open_on_full_disk(path, key)
                        version, tables = self._header(conn)
                        self.disk_was_full = True
                except apsw.NotADBError:
                    conn.close()
                    if attempt < len(candidates):
                        continue  # a key file or keyring entry holds the next key first during `rekey`
                    if key is not None:
                        raise StoreUnavailable(
                            f"cannot open {path}: wrong key or not a memsafe store (key from {key.source}); "
                            "the file was not changed"
                        ) from None
                    raise StoreUnavailable(f"{path} is not a SQLite database; point --db at a memsafe file") from None
                self.key = key
                break
            assert conn is not None  # `candidates or [None]` holds a key (or None) to try at least
            # Refuse foreign files before anything writes to them (switching to WAL would).
            if version < 0 or (version > 0 and "memories" not in tables) or (version == 0 and tables):
                conn.close()
                raise StoreUnavailable(f"{path} is a SQLite file but not a memsafe database; it was not changed")
            if version > migrations.latest():
                conn.close()
                raise SchemaTooNew(
                    f"{path} has schema version {version}, newer than this memsafe understands "
                    f"({migrations.latest()}); upgrade memsafe. The file was not changed."
                )
            if conn.readonly("main") and not self.disk_was_full:  # a file it may not write: opened to read
                self.read_only = True
            # The word index's tokenizer (`memories_fts`, since migration m007). After the key: apsw
            # asks SQLite for FTS5's API with a statement, which cannot run on a file it cannot read.
            tokenizer.register(conn)
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")
            if self.key is not None:
                conn.execute("PRAGMA temp_store = MEMORY")  # no plain-text temporary file, ever
            mode = scalar(conn.execute("PRAGMA journal_mode"))
            if mode.lower() != "wal" and not self.disk_was_full and not self.read_only:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            # Page cache of this connection: up to 64 MiB, allocated only as pages are read (SQLite's
            # default is 2 MiB). Recall reads pages all over the file (candidate rows by primary
            # key, the word index's doclists): at 10,000 memories (30 MB) the default cache missed on
            # nearly every read, and 750 scope checks by id took 6.1 ms instead of 0.6 ms.
            conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
            if self.key is None:  # SQLite3 Multiple Ciphers maps no encrypted file
                # The file read through a read-only memory map: a connection's first reads cost no
                # I/O call. The MCP server opens a connection per call; at 10,000 memories its
                # recall took 22.4 ms of CPU instead of 29.3. SQLite remaps when
                # another process grows or shrinks the file; an I/O error becomes a signal.
                conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        except (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError) as exc:
            if conn is not None:
                conn.close()
            if not self.created and path.exists() and os.access(path, os.R_OK):
                read_only = self._open_read_only(path)
                if read_only is not None:
                    return read_only
            raise StoreUnavailable(
                f"cannot open {path}: the file or its folder is read-only or not accessible ({exc}); "
                "memsafe needs write access to it. The file was not changed"
            ) from None
        except apsw.BusyError:
            if conn is not None:
                conn.close()
            raise
        except apsw.Error as exc:
            if conn is not None:
                conn.close()
            if out_of_space(path, exc):
                if self.created:  # the empty files this open made
                    for made in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
                        if made.exists() and made.stat().st_size <= 32768:
                            made.unlink()
                if self.created or not path.exists() or path.stat().st_size == 0:
                    raise DiskFull(f"cannot create {path}: the disk holding it is full; free some space "
                                   "and try again") from None
                raise DiskFull(f"cannot open {path}: {disk_full_message(path)}") from None
            raise StoreUnavailable(f"cannot open {path}: {exc}") from None
        finally:
            os.umask(old_umask)
        return conn

    def _open_read_only(self, path: Path) -> apsw.Connection | None:
        """A connection that reads a store this process cannot write (a read-only file, folder or
        mount), or None when it cannot be read either. Without WAL frames the main file holds
        everything committed, read as it is (`immutable`: no lock, no `-shm`); with frames, SQLite
        reads them through the existing `-shm` (`mode=ro`). Every write then fails with one line
        (`write`), so reads answer and bookkeeping (access counts) is skipped."""
        from urllib.parse import quote

        wal = Path(f"{path}-wal")
        frames = wal.exists() and wal.stat().st_size > 0
        uri = f"file:{quote(str(path))}?{'mode=ro' if frames else 'immutable=1'}"
        keys: list[encryption.Key | None] = [*self._keys_for(path)] or [None]
        for key in keys:
            conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            try:
                conn.setbusytimeout(BUSY_TIMEOUT_MS)
                if key is not None:
                    encryption.apply(conn, key)
                version, tables = self._header(conn)
                if version <= 0 or "memories" not in tables or version > migrations.latest():
                    conn.close()
                    return None  # refused as a writable open refuses it
                tokenizer.register(conn)
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
                if key is None:
                    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            except apsw.NotADBError:
                conn.close()
                continue
            except apsw.Error:
                conn.close()
                return None
            self.key, self.read_only = key, True
            return conn
        return None

    @staticmethod
    def _open_on_full_disk(path: Path, key: encryption.Key | None) -> apsw.Connection:
        """A connection that reads the store without its WAL index in shared memory (`-shm`), which
        every WAL connection maps and a full disk cannot hold. It exists only while no process has
        the store open (an open one keeps `-shm`), so the file holds everything committed unless
        a WAL is left: then the main file is read as it is (`immutable`: no lock, no write, so
        nothing waits for this reader), else the WAL is read into this connection's own memory in
        exclusive locking mode (https://sqlite.org/wal.html#noshm), which locks others out until
        it closes. Writes fail on either (`write` says the disk is full)."""
        from urllib.parse import quote

        wal = Path(f"{path}-wal")
        frames = wal.exists() and wal.stat().st_size > 0
        if frames:
            conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
        else:
            conn = apsw.Connection(f"file:{quote(str(path))}?immutable=1",
                                   flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        if key is not None:
            encryption.apply(conn, key)
        if frames:
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)  # a reader leaves the files as they are
        return conn

    @staticmethod
    def _header(conn: apsw.Connection) -> tuple[int, set[str]]:
        """(PRAGMA user_version, table names) read from one snapshot: a concurrent first opener
        commits both at once. The first read of the file: it fails when the key is wrong."""
        conn.execute("BEGIN")
        try:
            version = scalar(conn.execute("PRAGMA user_version"))
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            if conn.in_transaction:  # an error (a full disk, a wrong key) may have ended it
                conn.execute("COMMIT")
        return version, tables

    @staticmethod
    def _keys_for(path: Path) -> list[encryption.Key]:
        """The keys to try on `path`, in order: none for a plain store; the configured keys for an
        encrypted one, or for a new store while a key is set in the environment.

        Raises:
            KeyUnavailable: the file is encrypted and no key is configured, or a key is set in the
                environment for a plain store (both say what to do; the file is not changed).
        """
        if encryption.is_encrypted(path):
            keys = encryption.find_keys(path)
            if not keys:
                raise encryption.KeyUnavailable(encryption.no_key_message(path))
            return keys
        keys = encryption.explicit_keys()
        if keys and path.exists() and path.stat().st_size > 0:
            raise encryption.KeyUnavailable(
                f"{path} is a plain (unencrypted) store but {keys[0].source} is set; run `memsafe encrypt` "
                f"to encrypt it with that key, or unset {keys[0].variable}"
            )
        return keys[:1]  # a new store is created encrypted when a key is set

    @property
    def encrypted(self) -> bool:
        """True when the file is encrypted (see `memsafe.store.sqlite.encryption`)."""
        return self.key is not None

    def _migrate(self) -> None:
        """Bring the file to `migrations.latest()` in ONE write transaction: concurrent first
        openers never see (or back up) a half-migrated file. An existing file is copied to a
        backup first, under the same lock, so no other process migrates it meanwhile."""
        target = migrations.latest()
        if self.schema_version() == target:
            return
        if self.read_only:
            raise StoreUnavailable(f"cannot migrate {self.path} from schema {self.schema_version()} to {target}: "
                                   "the file or its folder is read-only; memsafe needs write access to it. "
                                   "The file was not changed")
        version = None
        # Foreign keys are off while migrating (they cannot change inside a transaction): a table
        # rebuild drops the old table, which would otherwise cascade deletes into its children
        # (https://sqlite.org/lang_altertable.html#otheralter). Migrations check them themselves.
        self.conn.execute("PRAGMA foreign_keys = OFF")
        try:
            with self.write():
                version = self.schema_version()  # another process may have migrated meanwhile
                if version >= target:
                    return
                if version == 0 and scalar(self.conn.execute("SELECT count(*) FROM sqlite_master")):
                    # checked under the write lock: a concurrent first opener may have just created it
                    raise StoreUnavailable(f"{self.path} is a SQLite file but not a memsafe database")
                if version != 0:
                    self._backup(version)
                for number, (_name, fn) in enumerate(migrations.MIGRATIONS, start=1):
                    if number > version:
                        fn(self.conn)
                        self.conn.execute(f"PRAGMA user_version = {number}")
        except apsw.Error as exc:
            if out_of_space(self.path, exc):
                raise DiskFull(f"cannot migrate {self.path} from schema {version} to {target}: "
                               f"{disk_full_message(self.path)}") from None
            hint = " (the file or its folder is read-only)" if isinstance(exc, apsw.ReadOnlyError) else ""
            raise StoreUnavailable(
                f"cannot migrate {self.path} from schema {version} to {target}{hint}: {exc}"
                + (f"; the file is unchanged, a backup is at {self.backup_path}" if self.backup_path else "")
            ) from None
        finally:
            self.conn.execute("PRAGMA foreign_keys = ON")

    def _backup(self, version: int) -> None:
        """Copy the file (through SQLite's backup API, so WAL content is included) before migrating,
        beside the file itself when the path is a symbolic link (where `encrypt` looks for it)."""
        real = Path(os.path.realpath(self.path))
        dest = real.with_name(f"{real.name}.bak-v{version}")
        n = 1
        while dest.exists():
            n += 1
            dest = real.with_name(f"{real.name}.bak-v{version}.{n}")
        try:
            # Read through a second connection: this one holds the write lock of the migration
            # (SQLite cannot back up from a connection inside a write transaction); readers still
            # see the last committed state, which is what is being replaced.
            source = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
            target = apsw.Connection(str(dest))
            try:
                if self.key is not None:  # an encrypted store's backup is encrypted with the same key
                    encryption.apply(source, self.key)
                    encryption.apply(target, self.key)
                with target.backup("main", source, "main") as b:
                    while not b.done:
                        b.step(1000)
                target.execute("PRAGMA journal_mode = DELETE")  # the backup is one self-contained file
            finally:
                target.close()
                source.close()
            os.chmod(dest, 0o600)
        except (apsw.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot write a backup of {self.path} before migrating: {exc}") from None
        self.backup_path = dest

    def _load_vec(self) -> None:
        reason = _vec_disabled_reason()
        if reason is None:
            try:
                self.conn.enable_load_extension(True)
                self.conn.load_extension(_sqlite_vec_path())
                self.conn.enable_load_extension(False)
            except (ImportError, apsw.ExtensionLoadingError) as exc:  # not installed, or no build for here
                from memsafe import platforms

                reason = platforms.vec_unavailable(exc)
            except Exception as exc:  # AttributeError: an apsw without extension loading
                reason = f"{type(exc).__name__}: {exc}"
        self.vector_error = reason

    @property
    def vector_available(self) -> bool:
        return self.vector_error is None

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self, wait_ms: int = BUSY_TIMEOUT_MS) -> Iterator[None]:
        """One short write transaction (`BEGIN IMMEDIATE`; retried while another writer holds the lock).

        Raises:
            StoreUnavailable: another writer held the lock for longer than `wait_ms` milliseconds.
            DiskFull: the disk holding the store is full (`out_of_space`); the transaction was
                rolled back. A StoreUnavailable too, so bookkeeping that skips a busy store skips this.
        """
        if self.conn.in_transaction:
            yield
            return
        if self.read_only:
            raise StoreUnavailable(f"{self.path} is read-only here (the file or its folder): this needs write "
                                   "access to it. Nothing was changed")
        if self.disk_was_full:
            raise (DiskFull(disk_full_message(self.path)) if disk_is_full(self.path)
                   else StoreUnavailable(f"{self.path} was opened while its disk was full, to read only; "
                                         "run the command again"))
        deadline = time.monotonic() + wait_ms / 1000
        self.conn.setbusytimeout(min(wait_ms, BUSY_TIMEOUT_MS))
        try:
            while True:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    break
                except apsw.BusyError:
                    if time.monotonic() > deadline:
                        raise StoreUnavailable(
                            f"{self.path} stayed locked by another writer for {wait_ms / 1000:g}s; try again"
                        ) from None
                    time.sleep(0.05)
                except apsw.Error as exc:
                    if out_of_space(self.path, exc):
                        raise DiskFull(disk_full_message(self.path)) from None
                    raise
        finally:
            self.conn.setbusytimeout(BUSY_TIMEOUT_MS)
        self._heal_pending = False
        try:
            yield
            self.conn.execute("COMMIT")  # a full disk may fail it: rolled back below like the body
        except BaseException as exc:
            if self.conn.in_transaction:  # SQLite rolls back itself on some errors (a full disk)
                self.conn.execute("ROLLBACK")
            if out_of_space(self.path, exc):
                raise DiskFull(disk_full_message(self.path)) from None
            if self._heal_pending:  # set by `_healing`: a write of memories met a damaged index
                self._heal_pending = False
                self._heal_after(exc)
            raise

    def schema_version(self) -> int:
        return scalar(self.conn.execute("PRAGMA user_version"))

    def sqlite_version(self) -> str:
        return apsw.sqlite_lib_version()

    def vec_version(self) -> str | None:
        if not self.vector_available:
            return None
        return scalar(self.conn.execute("SELECT vec_version()"))

    def integrity_check(self) -> str:
        return "; ".join(r[0] for r in self.conn.execute("PRAGMA integrity_check"))

    def checkpoint(self) -> None:
        """Copy the WAL into the main file and truncate it (best effort while others read)."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except apsw.BusyError:
            pass

    def backup_files(self) -> list[Path]:
        """The copies of this database memsafe itself wrote: migration backups (`<db>.bak-v<N>`,
        `<db>.bak-v<N>.<n>`) and the `<db>.convert-tmp` of a conversion killed before its rename
        (`encryption.convert`), with any journal or WAL beside them, sorted: beside the file and,
        when the path is a symbolic link, beside the link too."""
        found: set[Path] = set()
        for base in {Path(os.path.realpath(self.path)), Path(os.path.abspath(self.path))}:
            name = glob.escape(base.name)
            found.update([*base.parent.glob(f"{name}.bak-v*"), *base.parent.glob(f"{name}.convert-tmp*")])
        return sorted(p for p in found if p.is_file())  # a -journal or -wal beside a copy holds its pages too

    def backups_holding(self, uids: Sequence[str]) -> list[Path]:
        return [path for path in self.backup_files() if self._may_hold(path, uids)]

    def _may_hold(self, path: Path, uids: Sequence[str]) -> bool:
        """False only when `path` opens (with this store's key, else without one: a copy left plain)
        and none of its memories has one of `uids`."""
        for key in ([self.key, None] if self.key is not None else [None]):
            try:
                conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
                try:
                    if key is not None:
                        encryption.apply(conn, key)
                    return any(conn.execute(f"SELECT 1 FROM memories WHERE uid IN ({marks}) LIMIT 1", chunk)
                               .fetchone() for chunk, marks in chunked(uids))
                finally:
                    conn.close()
            except apsw.Error:
                continue
        return True

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every read inside sees one consistent state (WAL snapshot)."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:  # see `write`: an error may have ended it
                self.conn.execute("COMMIT")

    def latest_schema(self) -> int:
        return migrations.latest()

    def sizes(self) -> tuple[int, int]:
        return file_sizes(self.path)

    def _file_state(self) -> tuple[int, int] | None:
        """What changes whenever the file may have: (`PRAGMA data_version`, which moves when another
        connection commits, `total_changes()`, which moves with each of this connection's writes,
        rolled back or not). None inside a transaction: what is read there may roll back while
        the state stays. One pragma; what a connection keeps keyed by it (term counts, the
        vector copy found current) holds while the file is unchanged."""
        if self.conn.in_transaction:
            return None
        return scalar(self.conn.execute("PRAGMA data_version")), self.conn.total_changes()

    # What `recall_rows` read, valid while the file is unchanged (`_file_state`): an agent's
    # recalls come back to the same memories (80% of the candidates of `bench --scale 10000`'s
    # queries had been read by an earlier one). At most ROWS_KEPT memories holding
    # ROWS_KEPT_CHARS characters of text in all (~20 MB: a memory may hold up to 1,000,000; 787
    # memories of 40,000 characters, kept by 200 recalls, added 29 MB to a process);
    # beyond either, a call starts again.
    _rows: dict[int, tuple] | None = None
    _rows_state: tuple[int, int] | None = None
    _rows_chars = 0
    ROWS_KEPT = 20_000
    ROWS_KEPT_CHARS = 20_000_000

    def recall_rows(self, ids: Sequence[int], *, kind: str | None = None) -> tuple[dict[int, Memory], dict[int, int]]:
        """See `Store.recall_rows`: kept by this connection while the file is unchanged, none
        inside a transaction, within ROWS_KEPT and ROWS_KEPT_CHARS. A memory absent from the
        file is not kept (it may be written next)."""
        state = self._file_state()
        if state is None:
            return super().recall_rows(ids, kind=kind)
        if state != self._rows_state or self._rows is None:  # (None only with its state None)
            self._rows, self._rows_state, self._rows_chars = {}, state, 0
        kept = self._rows
        missing = [i for i in ids if i not in kept]
        if missing:
            read = self.get_memories(missing, tags=False)
            degrees = self.entity_degrees(list(read))
            for i, m in read.items():
                kept[i] = (m, degrees.get(i, 0))
                self._rows_chars += len(m.content)
        memories: dict[int, Memory] = {}
        degrees = {}
        for i in ids:
            row = kept.get(i)
            if row is not None and (kind is None or row[0].kind == kind):
                memories[i], degrees[i] = row
        if len(kept) > self.ROWS_KEPT or self._rows_chars > self.ROWS_KEPT_CHARS:
            self._rows, self._rows_state, self._rows_chars = None, None, 0  # too much kept: the next call starts again
        return memories, degrees

    def _fits_page_cache(self) -> bool:
        """Whether the main file (pages × page size, bytes) fits this connection's page cache
        (`PAGE_CACHE_KIB`): then a read by primary key costs no I/O call. Two header reads."""
        pages = scalar(self.conn.execute("PRAGMA page_count"))
        return pages * scalar(self.conn.execute("PRAGMA page_size")) <= PAGE_CACHE_KIB * 1024

    def memory_columns(self) -> list[str]:
        return [r[1] for r in self.conn.execute("PRAGMA table_info(memories)")]

    def version_columns(self) -> list[str]:
        return [r[1] for r in self.conn.execute("PRAGMA table_info(memory_versions)")]

    def _dict_rows(self, sql: str, params: Sequence = ()) -> list[dict]:
        """Rows as dicts keyed by column name (also when there are no rows)."""
        cur = self.conn.cursor()
        names: list[str] = []

        def tracer(cursor, row):
            if not names:
                names.extend(d[0] for d in cursor.getdescription())
            return dict(zip(names, row))

        cur.row_trace = tracer
        return list(cur.execute(sql, params))

    def no_checkpoint_on_close(self, on: bool = True) -> None:
        """Do not checkpoint the WAL into the main file when this connection closes (read-only runs);
        `on=False`: do (SQLite's default when it is the last connection)."""
        self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1 if on else 0)

    def still_current(self) -> bool:
        """See `Store.still_current`: no transaction open, the same file (device and inode) at the
        path, the schema this code writes. False when the file is gone or cannot be read, and for a
        connection opened on a full disk (`_open_on_full_disk`), which cannot write."""
        if self.disk_was_full or self.read_only:
            return False
        try:
            return not self.conn.in_transaction and self._file_identity() == self._identity \
                and self.schema_version() == migrations.latest()
        except (OSError, apsw.Error):
            return False

    def _file_identity(self) -> tuple[int, int]:
        """(device, inode) of the file now at the path. Raises OSError when there is none."""
        found = os.stat(self.path)
        return found.st_dev, found.st_ino

    def consistency_problems(self) -> list[str]:
        """Everything that would make the file untrustworthy; [] when it is sound.

        Checks: `PRAGMA integrity_check` and `PRAGMA foreign_key_check` (the memories, history and
        graph), then the derived indexes against the memories (`index_damage`: both FTS5 indexes
        with their sync triggers, the vectors). What integrity_check finds inside an FTS5 index is
        reported once, as that index's damage. Runs the FTS5 check as a command, so it takes the
        write lock briefly.
        """
        problems = self.primary_damage()
        return problems + self.index_damage()

    def primary_damage(self) -> list[str]:
        """What `PRAGMA integrity_check` and `PRAGMA foreign_key_check` find in the tables that hold
        the memories, their history and the graph ([] when sound), checked table by table
        (`integrity_check(TABLE)`): the derived indexes (the FTS5 and vec0 tables and their shadow
        tables) are left to `index_damage`, so damage there, even a page SQLite cannot read, is
        never taken for damage to the memories."""
        problems: list[str] = []
        derived = tuple(f"{name}_" for name in (*FTS_INDEXES, "vec_memories"))
        tables = [name for name, sql in self.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
                  if not name.startswith(derived) and not name.startswith("sqlite_")
                  and not (sql or "").upper().startswith("CREATE VIRTUAL")]
        for table in tables:
            try:
                found = [r[0] for r in self.conn.execute(f'PRAGMA integrity_check("{table}")') if r[0] != "ok"]
            except apsw.Error as exc:
                found = [str(exc)]
            if found:
                problems.append(f"integrity_check({table}): {'; '.join(found)[:200]}")
        problems += self._file_damage(derived)
        fk = self.conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            problems.append(f"foreign_key_check: {len(fk)} dangling rows")
        return problems

    def _file_damage(self, derived: tuple[str, ...]) -> list[str]:
        """What the whole-file `PRAGMA integrity_check` finds outside every table's own tree (pages
        never used, the freelist) and in no derived index's tree ("Tree N": the tree whose root is
        page N). [] when it cannot run: FTS5's own check inside it fails on a damaged index,
        which `index_damage` reports."""
        roots = dict(self.conn.execute("SELECT rootpage, name FROM sqlite_master WHERE rootpage > 0"))
        try:
            lines = [r[0] for r in self.conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
        except apsw.Error:
            return []
        kept = []
        for line in lines:
            tree = re.match(r"Tree (\d+) ", line)
            name = roots.get(int(tree.group(1)), "") if tree else ""
            if "fts5" in line or name.startswith(derived) or name in (*FTS_INDEXES, "vec_memories") \
                    or any(f'"{t}' in line for t in (*FTS_INDEXES, "vec_memories")):
                continue
            kept.append(line)
        return [f"integrity_check: {'; '.join(kept)[:300]}"] if kept else []

    def _healing(self, write, *args):
        """Run `write(*args)` (a statement that fires the word and trigram indexes' sync triggers)
        inside the caller's `write()`, in a savepoint; when it fails because one of those indexes
        is damaged or missing, rebuild that index from the memories (`heal_word_index`) and run it
        once more. Anything else propagates unchanged."""
        try:
            with self._savepoint("memsafe_write"):
                return write(*args)
        except apsw.Error as exc:
            if not derived_failure(exc):
                raise
            if self.conn.in_transaction:
                try:
                    healed = self.heal_word_index(exc)
                except apsw.Error:
                    healed = False
                if healed:
                    with self._savepoint("memsafe_write"):
                        return write(*args)
            self._heal_pending = True  # FTS5 gave up on this transaction: `write` heals after rolling back
            raise

    _heal_pending = False

    def _heal_after(self, exc: BaseException) -> None:
        """After a write rolled back on `exc`, a damaged word or trigram index: rebuild each
        damaged one from the memories in a transaction of its own, then raise IndexHealed (the
        write can run again). Nothing is rebuilt, and `exc` stands, when the rebuild fails."""
        try:
            rebuilt = self.repair_indexes(vectors=False)
        except (apsw.Error, StoreUnavailable):
            return
        if rebuilt:
            raise IndexHealed("; ".join(rebuilt)) from None

    def insert_memory(self, row: dict, tags: Sequence[str]) -> int:
        return self._healing(super().insert_memory, row, tags)

    def insert_memories(self, items: Sequence[tuple[dict, Sequence[str]]]) -> list[int]:
        return self._healing(super().insert_memories, items)

    def update_memory(self, memory_id: int, changes: dict) -> None:
        return self._healing(super().update_memory, memory_id, changes)

    def delete_memories(self, ids: Sequence[int]) -> int:
        return self._healing(super().delete_memories, ids)

    def fts_search(self, match, scope, limit, exact=()):
        """See `Store.fts_search`. Raises IndexDamaged when the word or trigram index cannot be read."""
        try:
            return super().fts_search(match, scope, limit, exact)
        except apsw.Error as exc:
            raise self._read_failure(exc) from None

    def fts_term_stats(self, terms, ids):
        """See `Store.fts_term_stats`. Raises IndexDamaged when the word index cannot be read."""
        try:
            return super().fts_term_stats(terms, ids)
        except apsw.Error as exc:
            raise self._read_failure(exc) from None

    def vector_search(self, query_bytes: bytes, scope, k: int) -> list[tuple[int, float]]:
        """See `Store.vector_search`. Raises IndexDamaged when the vectors cannot be read."""
        try:
            return super().vector_search(query_bytes, scope, k)
        except apsw.Error as exc:
            raise self._read_failure(exc, "vector") from None

    def _read_failure(self, exc: apsw.Error, index: str | None = None) -> BaseException:
        """`exc` from reading a derived index: IndexDamaged naming the index when it says the
        index is damaged (`derived_failure`), else `exc` itself."""
        if not derived_failure(exc):
            return exc
        if index is None:
            index = "trigram" if "memories_tri" in str(exc) else "word"
        return self.index_damaged(index, exc)


def file_sizes(path: Path) -> tuple[int, int]:
    """(main file bytes, WAL bytes); 0 for a missing file."""

    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except OSError:
            return 0

    return size(path), size(path.with_name(path.name + "-wal"))
