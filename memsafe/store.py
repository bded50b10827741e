"""Responsibility: the SQLite file. Every SQL statement in memsafe lives here.

One `Store` is one apsw connection: WAL, a busy timeout, `BEGIN IMMEDIATE` for writes,
foreign keys on, `secure_delete` on (freed pages are zeroed, so purged text leaves the file).
sqlite-vec is loaded when available; without it the store still works lexically and
`vector_error` says why.

Callers group writes with `with store.write(): ...`; reads need no transaction.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import apsw

from memsafe import encryption, migrations, retrieve
from memsafe.errors import SchemaTooNew, StoreUnavailable
from memsafe.models import Memory, Scope
from memsafe.render import count_of
from memsafe.store_browse import BrowseQueries

BUSY_TIMEOUT_MS = 30_000
KNN_MAX_K = 4096  # sqlite-vec's upper bound on `k` in a KNN query (v0.1.x)
CACHE_MIN_VECTORS = 2000  # from this many vectors, a process's second search loads them into memory
EXACT_SCAN_RATIO = 24  # score a scope row by row when it holds under 1/24 of the vectors (see vector_search)
# Post-filtering (fts_search, the in-memory vector search): rank everything, take the best
# max(limit × OVERFETCH, OVERFETCH_MIN), keep those in scope by primary key. If `limit` of them are
# in scope, they are exactly the best `limit` in scope (nothing outside the fetched set ranks
# higher); else the scope is narrow and is applied first instead. At 100k memories this made
# BM25 search 3x faster than joining every match to its row (scripts/recall_phases.py).
OVERFETCH, OVERFETCH_MIN = 10, 500
# A 1-2 character CJK query term is shorter than a trigram: it is looked up as the OR of the indexed
# trigrams it starts, at most this many (the ones in most memories first).
MAX_TRIGRAMS_PER_TERM = 128

_MEMORY_COLUMNS = (
    "id, uid, content, kind, project, source, importance, confidence, created_at, updated_at, "
    "last_accessed_at, access_count, decay_level, status, status_reason, embedded"
)


def _chunked(ids: Iterable, size: int = 500) -> Iterator[tuple[list, str]]:
    """The distinct `ids`, in order, in chunks of `size` (under SQLite's bound-parameter limit),
    each with its `?,?,…` placeholder list for an `IN (…)` clause."""
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), size):
        chunk = unique[start : start + size]
        yield chunk, ",".join("?" * len(chunk))


def _sqlite_vec_path() -> str:
    """Path of the sqlite-vec loadable extension (without suffix, as `sqlite_vec.loadable_path()`
    gives it), found without importing the package: its `__init__` imports numpy, which costs every
    command ~40 ms and, imported from two threads at once (a server's tool call while the model
    loads), can fail. Raises ImportError when sqlite-vec is not installed."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the sqlite-vec package is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


def _vec_disabled_reason() -> str | None:
    if os.environ.get("MEMSAFE_NO_VEC"):
        return "disabled by MEMSAFE_NO_VEC"
    return None


class Store(BrowseQueries):
    """An open memsafe database.

    Args:
        path: absolute path of the SQLite file.
        create: create the file (and its folder, mode 0700) if missing; the file is made 0600.

    Raises:
        StoreUnavailable: the path cannot be opened, created, or is not a memsafe database,
            or a needed migration cannot be written.
        SchemaTooNew: the file's schema version is newer than this code; it is left untouched.
    """

    def __init__(self, path: Path, *, create: bool = True):
        self.path = Path(path)
        self.created = False
        self.backup_path: Path | None = None
        self.vector_error: str | None = None
        self.key: encryption.Key | None = None
        self._vec_checked = False
        self._vcache: _VectorCache | None = None
        self._vsearches = 0
        self.conn = self._connect(create)
        try:
            self._migrate()
            self._load_vec()
        except BaseException:
            self.conn.close()
            raise

    # -- opening -------------------------------------------------------------------------------

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
                    # version and tables from one snapshot: a concurrent first opener commits both at once
                    conn.execute("BEGIN")
                    try:
                        version = conn.execute("PRAGMA user_version").fetchone()[0]
                        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                    finally:
                        conn.execute("COMMIT")
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
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")
            if self.key is not None:
                conn.execute("PRAGMA temp_store = MEMORY")  # no plain-text temporary file, ever
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        except (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError) as exc:
            raise StoreUnavailable(
                f"cannot open {path}: the file or its folder is read-only or not accessible ({exc}); "
                "memsafe needs write access to it. The file was not changed"
            ) from None
        except apsw.BusyError:
            if conn is not None:
                conn.close()
            raise
        except apsw.Error as exc:
            raise StoreUnavailable(f"cannot open {path}: {exc}") from None
        finally:
            os.umask(old_umask)
        return conn

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
        """True when the file is encrypted (see `memsafe.encryption`)."""
        return self.key is not None

    def _migrate(self) -> None:
        """Bring the file to `migrations.latest()` in ONE write transaction: concurrent first
        openers never see (or back up) a half-migrated file. An existing file is copied to a
        backup first, under the same lock, so no other process migrates it meanwhile."""
        target = migrations.latest()
        if self.schema_version() == target:
            return
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
                if version == 0 and self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                    # checked under the write lock: a concurrent first opener may have just created it
                    raise StoreUnavailable(f"{self.path} is a SQLite file but not a memsafe database")
                if version != 0:
                    self._backup(version)
                for number, (_name, fn) in enumerate(migrations.MIGRATIONS, start=1):
                    if number > version:
                        fn(self.conn)
                        self.conn.execute(f"PRAGMA user_version = {number}")
        except apsw.Error as exc:
            hint = " (the file or its folder is read-only)" if isinstance(exc, apsw.ReadOnlyError) else ""
            raise StoreUnavailable(
                f"cannot migrate {self.path} from schema {version} to {target}{hint}: {exc}"
                + (f"; the file is unchanged, a backup is at {self.backup_path}" if self.backup_path else "")
            ) from None
        finally:
            self.conn.execute("PRAGMA foreign_keys = ON")

    def _backup(self, version: int) -> None:
        """Copy the file (through SQLite's backup API, so WAL content is included) before migrating."""
        dest = self.path.with_name(f"{self.path.name}.bak-v{version}")
        n = 1
        while dest.exists():
            n += 1
            dest = self.path.with_name(f"{self.path.name}.bak-v{version}.{n}")
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
            except Exception as exc:  # ImportError, apsw.ExtensionLoadingError, AttributeError
                reason = f"{type(exc).__name__}: {exc}"
        self.vector_error = reason

    @property
    def vector_available(self) -> bool:
        return self.vector_error is None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def write(self, wait_ms: int = BUSY_TIMEOUT_MS) -> Iterator[None]:
        """One short write transaction (`BEGIN IMMEDIATE`; retried while another writer holds the lock).

        Raises:
            StoreUnavailable: another writer held the lock for longer than `wait_ms` milliseconds.
        """
        if self.conn.in_transaction:
            yield
            return
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
        finally:
            self.conn.setbusytimeout(BUSY_TIMEOUT_MS)
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    # -- general -------------------------------------------------------------------------------

    def schema_version(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    def sqlite_version(self) -> str:
        return apsw.sqlite_lib_version()

    def vec_version(self) -> str | None:
        if not self.vector_available:
            return None
        return self.conn.execute("SELECT vec_version()").fetchone()[0]

    def integrity_check(self) -> str:
        return "; ".join(r[0] for r in self.conn.execute("PRAGMA integrity_check"))

    def checkpoint(self) -> None:
        """Copy the WAL into the main file and truncate it (best effort while others read)."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except apsw.BusyError:
            pass

    # -- config --------------------------------------------------------------------------------

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

    # -- memories ------------------------------------------------------------------------------

    def insert_memory(self, row: dict, tags: Sequence[str]) -> int:
        """Insert one memory row (keys = column names) and its tags; returns the new id."""
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT INTO memories({columns}) VALUES ({marks})", tuple(row.values()))
        memory_id = self.conn.last_insert_rowid()
        self.set_tags(memory_id, tags)
        return memory_id

    def update_memory(self, memory_id: int, changes: dict) -> None:
        """Set the given columns of one memory."""
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.conn.execute(
            f"UPDATE memories SET {assignments} WHERE id = ?", (*changes.values(), memory_id)
        )

    def set_tags(self, memory_id: int, tags: Iterable[str]) -> None:
        self.conn.execute("DELETE FROM memory_tags WHERE memory_id = ?", (memory_id,))
        self.conn.executemany(
            "INSERT OR IGNORE INTO memory_tags(memory_id, tag) VALUES (?, ?)",
            [(memory_id, t) for t in tags],
        )

    def get_memories(self, ids: Sequence[int]) -> dict[int, Memory]:
        """Memories by id (any status), with tags. Missing ids are absent from the result."""
        if not ids:
            return {}
        out: dict[int, Memory] = {}
        for chunk, marks in _chunked(ids):
            for r in self.conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", chunk):
                out[r[0]] = Memory(
                    id=r[0], uid=r[1], content=r[2], kind=r[3], project=r[4], source=r[5],
                    importance=r[6], confidence=r[7], created_at=r[8], updated_at=r[9],
                    last_accessed_at=r[10], access_count=r[11], decay_level=r[12], status=r[13],
                    status_reason=r[14], embedded=bool(r[15]), tags=[],
                )
            for memory_id, tag in self.conn.execute(
                f"SELECT memory_id, tag FROM memory_tags WHERE memory_id IN ({marks}) ORDER BY tag", chunk
            ):
                out[memory_id].tags.append(tag)
        return out

    def get_memory(self, memory_id: int) -> Memory | None:
        return self.get_memories([memory_id]).get(memory_id)

    def raw_row(self, memory_id: int) -> dict | None:
        """Every column of one memory row, as a dict (for history snapshots and export)."""
        cur = self.conn.execute("SELECT * FROM memories WHERE id = ?", (memory_id,))
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.getdescription()], row))

    def find_duplicate(self, content_hash: str, project: str | None) -> int | None:
        """Id of an active or archived memory with this content hash in this exact project."""
        row = self.conn.execute(
            "SELECT id FROM memories WHERE content_hash = ? AND project IS ? AND status != 'forgotten' "
            "ORDER BY id LIMIT 1",
            (content_hash, project),
        ).fetchone()
        return row[0] if row else None

    def touch(self, ids: Sequence[int], at: str) -> None:
        """Access bookkeeping for the memories actually returned by a recall."""
        self.conn.executemany(
            "UPDATE memories SET last_accessed_at = ?, access_count = access_count + 1 WHERE id = ?",
            [(at, i) for i in ids],
        )

    def delete_memories(self, ids: Sequence[int]) -> int:
        """Hard-delete memories with their tags, versions, links, vectors and FTS entries.
        Returns the number of history versions removed."""
        versions = 0
        for memory_id in ids:
            versions += self.conn.execute(
                "SELECT count(*) FROM memory_versions WHERE memory_id = ? OR origin_id = ?", (memory_id, memory_id)
            ).fetchone()[0]
            # copies merged into another memory's history (consolidate) go too
            self.conn.execute("DELETE FROM memory_versions WHERE origin_id = ?", (memory_id,))
            self.delete_vector(memory_id)
            self.conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        return versions

    def entity_degrees(self, ids: Sequence[int]) -> dict[int, int]:
        """Number of graph entities each memory mentions (the ranking's graph signal, tuned on the bench)."""
        out: dict[int, int] = {}
        for chunk, marks in _chunked(ids):
            out.update(self.conn.execute(
                f"SELECT memory_id, count(*) FROM memory_entities WHERE memory_id IN ({marks}) GROUP BY memory_id",
                chunk,
            ))
        return out

    def connected_entity_counts(self, ids: Sequence[int]) -> dict[int, int]:
        """Decay's graph signal: how many of each memory's entities are connected to the rest of the graph
        (in a relation, or mentioned by another memory). A name only this memory mentions does not count,
        so automatic entity extraction alone does not slow a memory's decay."""
        out: dict[int, int] = {}
        for chunk, marks in _chunked(ids):
            out.update(self.conn.execute(
                f"SELECT me.memory_id, count(*) FROM memory_entities me WHERE me.memory_id IN ({marks}) AND ("
                "EXISTS (SELECT 1 FROM relations r WHERE r.source_id = me.entity_id OR r.target_id = me.entity_id) "
                "OR EXISTS (SELECT 1 FROM memory_entities o WHERE o.entity_id = me.entity_id "
                "AND o.memory_id != me.memory_id)) GROUP BY me.memory_id",
                chunk,
            ))
        return out

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in ("active", "archived", "forgotten")}
        out.update(dict(self.conn.execute("SELECT status, count(*) FROM memories GROUP BY status")))
        out["total"] = sum(out[s] for s in ("active", "archived", "forgotten"))
        out["versions"] = self.conn.execute("SELECT count(*) FROM memory_versions").fetchone()[0]
        out["entities"] = self.conn.execute("SELECT count(*) FROM entities").fetchone()[0]
        out["relations"] = self.conn.execute("SELECT count(*) FROM relations").fetchone()[0]
        return out

    # -- history and audit ---------------------------------------------------------------------

    def add_version(self, snapshot: dict, tags: Sequence[str], valid_to: str, cause: str) -> None:
        """Keep the state `snapshot` (a `raw_row`) as a version valid until `valid_to`."""
        self.conn.execute(
            "INSERT INTO memory_versions(memory_id, content, kind, project, tags, importance, confidence, "
            "decay_level, status, valid_from, valid_to, cause) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                snapshot["id"], snapshot["content"], snapshot["kind"], snapshot["project"],
                json.dumps(list(tags), ensure_ascii=False), snapshot["importance"], snapshot["confidence"],
                snapshot["decay_level"], snapshot["status"], snapshot["content_updated_at"], valid_to, cause,
            ),
        )

    def add_event(self, at: str, action: str, memory_id: int | None = None, detail: str | None = None) -> None:
        """Append a content-free audit event (action, id, short reason; never memory text)."""
        self.conn.execute(
            "INSERT INTO events(at, action, memory_id, detail) VALUES (?, ?, ?, ?)", (at, action, memory_id, detail)
        )

    # -- scope ---------------------------------------------------------------------------------

    @staticmethod
    def _project_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        """The project part of a scope alone: `1` for every project."""
        if scope.projects is None:
            return "1", []
        parts, params = [], list(scope.projects)
        if scope.projects:
            parts.append(f"{alias}.project IN ({','.join('?' * len(scope.projects))})")
        if scope.include_global:
            parts.append(f"{alias}.project IS NULL")
        return "(" + " OR ".join(parts or ["0"]) + ")", params

    @staticmethod
    def _scope_sql(scope: Scope, alias: str = "m") -> tuple[str, list]:
        clauses: list[str] = []
        params: list = []
        marks = ",".join("?" * len(scope.statuses))
        clauses.append(f"{alias}.status IN ({marks})")
        params.extend(scope.statuses)
        if scope.projects is not None:
            where, more = Store._project_sql(scope, alias)
            clauses.append(where)
            params.extend(more)
        if scope.kinds:
            clauses.append(f"{alias}.kind IN ({','.join('?' * len(scope.kinds))})")
            params.extend(scope.kinds)
        for tag in scope.tags:
            clauses.append(f"EXISTS (SELECT 1 FROM memory_tags t WHERE t.memory_id = {alias}.id AND t.tag = ?)")
            params.append(tag)
        if scope.since:
            clauses.append(f"{alias}.created_at >= ?")
            params.append(scope.since)
        return " AND ".join(clauses), params

    def count_in_scope(self, scope: Scope, embedded_only: bool = False) -> int:
        where, params = self._scope_sql(scope)
        if embedded_only:
            where += " AND m.embedded = 1"
        return self.conn.execute(f"SELECT count(*) FROM memories m WHERE {where}", params).fetchone()[0]

    # -- lexical -------------------------------------------------------------------------------

    def fts_search(self, match: str | None, scope: Scope, limit: int, exact: Sequence[str] = ()) -> LexicalHits:
        """BM25 search, with exact matches first. `match` must be a safe FTS5 expression for the
        word index (see `retrieve.fts_query`; None: none), `exact` terms from `retrieve.exact_terms`.

        Returns a `LexicalHits`: [(memory id, score)] best first; score is SQLite's bm25 (negative,
        lower is better). Memories holding exact terms (`exact_search`) come first, most terms
        held first, with a score below every other hit's: best bm25 × (1 + held / len(exact)).
        The rest follow by bm25 (ties by id): the exact top `limit` within the scope,
        post-filtered when the scope is broad (see OVERFETCH). The evidence is kept on the
        result (`held`, `exact`) for fusion and term coverage.
        """
        found = self.exact_search(exact, scope, max(limit * OVERFETCH, OVERFETCH_MIN)) if exact and limit > 0 else {}
        words = self._bm25_search(match, scope, limit) if match is not None else []
        held: dict[int, int] = {}
        for _df, ids in found.values():
            for i in ids:
                held[i] = held.get(i, 0) + 1
        if not held:
            return LexicalHits(words, {}, found)
        bm25 = dict(words)
        best = min([*bm25.values(), -1.0])
        first = sorted(held, key=lambda i: (-held[i], bm25.get(i, 0.0), i))
        hits = [(i, best * (1.0 + held[i] / len(exact))) for i in first]
        hits += [(i, s) for i, s in words if i not in held]
        return LexicalHits(hits[:limit], held, found)

    def exact_search(self, terms: Sequence[str], scope: Scope, limit: int) -> dict[str, tuple[int, set[int]]]:
        """Memories in scope holding each term exactly as typed (`retrieve.holds_exact`):
        {term: (document frequency over the whole store, {ids in scope holding it})}.

        Each term is looked up in the trigram index (`memories_tri`, case-insensitive, no
        positions) as the AND of its trigrams, then checked against each candidate's text, at
        most `limit` candidates per term (best trigram bm25 first); its document frequency counts
        the candidates, an upper bound. A 1-2 character term (CJK: below trigram length) is looked
        up as the OR of the indexed trigrams it starts (`memories_tri_vocab`, at most
        MAX_TRIGRAMS_PER_TERM, commonest first); the index is fed the text plus a space, so a word
        at the very end of a memory still starts one. Indexed lookups only, no scan of the texts.
        """
        out: dict[str, tuple[int, set[int]]] = {}
        if not terms or limit <= 0:
            return out
        where, params = self._scope_sql(scope)
        for term in terms:
            if len(term) >= 3:  # no positions (detail='none'): every trigram, then check the text
                match = " AND ".join(dict.fromkeys('"' + term[i : i + 3].replace('"', '""') + '"'
                                                   for i in range(len(term) - 2)))
            else:  # shorter than a trigram: the indexed trigrams it starts (the text ends with a space)
                starts = [r[0] for r in self.conn.execute(
                    "SELECT term FROM memories_tri_vocab WHERE term >= ? AND term < ? ORDER BY doc DESC LIMIT ?",
                    (term, term + "\U0010ffff", MAX_TRIGRAMS_PER_TERM),
                )]
                if not starts:
                    out[term] = (0, set())
                    continue
                match = " OR ".join('"' + t.replace('"', '""') + '"' for t in starts)
            (df,) = self.conn.execute("SELECT count(*) FROM memories_tri WHERE memories_tri MATCH ?", (match,)
                                      ).fetchone()
            rows = self.conn.execute(
                "SELECT m.id, m.content FROM memories_tri JOIN memories m ON m.id = memories_tri.rowid "
                f"WHERE memories_tri MATCH ? AND {where} ORDER BY bm25(memories_tri), m.id LIMIT ?",
                [match, *params, limit],
            )
            out[term] = (df, {i for i, text in rows if retrieve.holds_exact(text, term)})
        return out

    def _bm25_search(self, match: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
        """[(memory id, bm25)] of the word index, best first: see `fts_search`."""
        if limit <= 0:
            return []
        where, params = self._scope_sql(scope)
        fetch = max(limit * OVERFETCH, OVERFETCH_MIN)
        rows = list(self.conn.execute(
            "SELECT rowid, bm25(memories_fts) AS s FROM memories_fts WHERE memories_fts MATCH ? "
            "ORDER BY s, rowid LIMIT ?", (match, fetch)
        ))
        keep = self._in_scope([r[0] for r in rows], where, params)
        hits = [(i, s) for i, s in rows if i in keep]
        if len(hits) >= limit or len(rows) < fetch:
            return hits[:limit]
        sql = (
            "SELECT m.id, bm25(memories_fts) AS s FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
            f"WHERE memories_fts MATCH ? AND {where} ORDER BY s, m.id LIMIT ?"
        )
        return [(r[0], r[1]) for r in self.conn.execute(sql, [match, *params, limit])]

    def _in_scope(self, ids: Sequence[int], where: str, params: list, embedded: bool = False) -> set[int]:
        """The ids among `ids` whose memory is in scope (`where` from `_scope_sql`), by primary key."""
        out: set[int] = set()
        extra = " AND m.embedded = 1" if embedded else ""
        for chunk, marks in _chunked(ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT m.id FROM memories m NOT INDEXED WHERE m.id IN ({marks}){extra} AND {where}",
                [*chunk, *params],
            ))
        return out

    # -- vectors -------------------------------------------------------------------------------

    def vector_table_exists(self) -> bool:
        return bool(
            self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_memories'").fetchone()
        )

    def ensure_vector_table(self, model_id: str, dim: int) -> None:
        """Create the vec0 table for this model, or rebuild it (all vectors pending) if the stored
        vectors came from another model. Call inside `write()`."""
        stored = self.config_get("_embedding_model")
        if stored == model_id and self.vector_table_exists():
            return
        if self.vector_table_exists():
            self.conn.execute("DROP TABLE vec_memories")
        self.conn.execute(
            f"CREATE VIRTUAL TABLE vec_memories USING vec0("
            f"memory_id INTEGER PRIMARY KEY, embedding float[{int(dim)}] distance_metric=cosine)"
        )
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE embedded = 1")
        self._log_vector(0)
        self.config_set("_embedding_model", model_id)
        self.config_set("_embedding_dim", str(int(dim)))

    def vectors_ready(self, model_id: str) -> bool:
        return (
            self.vector_available
            and self.vector_table_exists()
            and self.config_get("_embedding_model") == model_id
        )

    def put_vector(self, memory_id: int, vector_bytes: bytes) -> None:
        """Set a memory's vector: DELETE then INSERT (vec0 ignores REPLACE/UPSERT). Call inside `write()`."""
        self.conn.execute("DELETE FROM vec_memories WHERE memory_id = ?", (memory_id,))
        self.conn.execute(
            "INSERT INTO vec_memories(memory_id, embedding) VALUES (?, ?)", (memory_id, vector_bytes)
        )
        self._log_vector(memory_id)
        self.conn.execute("UPDATE memories SET embedded = 1 WHERE id = ?", (memory_id,))

    def delete_vector(self, memory_id: int) -> None:
        if not self.vector_table_exists():
            return
        if not self.vector_available:
            raise StoreUnavailable(
                "this store has vectors but sqlite-vec cannot be loaded here "
                f"({self.vector_error}); purge needs it to remove them"
            )
        self.conn.execute("DELETE FROM vec_memories WHERE memory_id = ?", (memory_id,))
        self._log_vector(memory_id)
        self.conn.execute("UPDATE memories SET embedded = 0 WHERE id = ?", (memory_id,))

    def get_vector(self, memory_id: int) -> bytes | None:
        row = self.conn.execute(
            "SELECT embedding FROM vec_memories WHERE memory_id = ?", (memory_id,)
        ).fetchone()
        return row[0] if row else None

    def vector_count(self) -> int:
        if not (self.vector_available and self.vector_table_exists()):
            return 0
        try:  # vec0's rowid shadow table: a b-tree count instead of a scan of every vector chunk
            return self.conn.execute("SELECT count(*) FROM vec_memories_rowids").fetchone()[0]
        except apsw.SQLError:
            return self.conn.execute("SELECT count(*) FROM vec_memories").fetchone()[0]

    def pending_embeddings(self, limit: int, after_id: int = 0) -> list[tuple[int, str]]:
        """Memories (any status but forgotten) whose vector is missing, oldest first, ids > after_id."""
        return list(
            self.conn.execute(
                "SELECT id, content FROM memories WHERE embedded = 0 AND status != 'forgotten' AND id > ? "
                "ORDER BY id LIMIT ?",
                (after_id, limit),
            )
        )

    def pending_count(self) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM memories WHERE embedded = 0 AND status != 'forgotten'"
        ).fetchone()[0]

    def vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        """The k nearest memories in scope by cosine distance. Returns [(id, distance)] nearest first.

        Filters never starve the result (FIELD-CASES F12): a broad scope is one vec0 KNN whose
        rowids are restricted to the scope (`memory_id IN (subquery)`, sqlite-vec >= 0.1.6: exact
        top-k within the scope, one pass over the vectors); a scope holding under 1/EXACT_SCAN_RATIO
        of the vectors is scored row by row instead (a vec0 point lookup costs ~25 full-scan steps,
        measured with scripts/knn_scale.py). Older sqlite-vec without rowid filters falls back to
        over-fetching KNN.
        """
        if k <= 0:
            return []
        # a stored vector that is zero or not finite has no distance (NULL/NaN): it cannot rank
        return [(i, d) for i, d in self._vector_search(query_bytes, scope, k) if d is not None and d == d]

    def _vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        self._vsearches += 1
        total = self.vector_count()
        cache = self._vector_cache() if total >= CACHE_MIN_VECTORS else None
        where, params = self._scope_sql(scope)
        if cache is not None:
            return self._cached_search(cache, query_bytes, where, params, k)
        in_scope = self.count_in_scope(scope, embedded_only=True)
        if in_scope == 0:
            return []
        exact_sql = (
            "SELECT m.id, vec_distance_cosine(v.embedding, ?) AS d FROM memories m "
            f"JOIN vec_memories v ON v.memory_id = m.id WHERE m.embedded = 1 AND {where} ORDER BY d LIMIT ?"
        )
        if in_scope < total and in_scope * EXACT_SCAN_RATIO <= total:
            return [(r[0], r[1]) for r in self.conn.execute(exact_sql, [query_bytes, *params, k])]
        fetch = min(k, KNN_MAX_K)
        if in_scope >= total:
            sql = (
                "SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ? ORDER BY distance"
            )
            return [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch])]
        sql = (
            "SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ? "
            f"AND memory_id IN (SELECT m.id FROM memories m WHERE m.embedded = 1 AND {where}) ORDER BY distance"
        )
        try:
            return [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch, *params])]
        except apsw.SQLError:
            return self._vector_search_overfetch(query_bytes, where, params, in_scope, total, k, exact_sql)

    def _vector_search_overfetch(self, query_bytes, where, params, in_scope, total, k, exact_sql):
        """KNN over all vectors, over-fetching until k survive the scope filter (sqlite-vec < 0.1.6)."""
        fetch = min(KNN_MAX_K, max(k, int(k * total / in_scope * 2)))
        while True:
            sql = (
                "WITH knn AS (SELECT memory_id, distance FROM vec_memories WHERE embedding MATCH ? AND k = ?) "
                f"SELECT m.id, knn.distance FROM knn JOIN memories m ON m.id = knn.memory_id WHERE {where} "
                "ORDER BY knn.distance LIMIT ?"
            )
            rows = [(r[0], r[1]) for r in self.conn.execute(sql, [query_bytes, fetch, *params, k])]
            if len(rows) >= min(k, in_scope) or fetch >= total:
                return rows
            if fetch >= KNN_MAX_K:
                return [(r[0], r[1]) for r in self.conn.execute(exact_sql, [query_bytes, *params, k])]
            fetch = min(KNN_MAX_K, fetch * 4)

    # -- transfer (export/import, issue 6) -----------------------------------------------------

    def export_memory_rows(self, after_id: int, limit: int, statuses: Sequence[str], scope: Scope | None
                           ) -> list[dict]:
        """Full memory rows (every column) with id > after_id, in id order; only the projects of
        `scope` when given (its statuses are ignored: `statuses` says which)."""
        marks = ",".join("?" * len(statuses))
        projects, params = self._project_sql(scope) if scope is not None else ("1", [])
        sql = f"SELECT * FROM memories m WHERE m.id > ? AND m.status IN ({marks}) AND {projects}"
        cur = self.conn.execute(sql + " ORDER BY m.id LIMIT ?", [after_id, *statuses, *params, limit])
        names = None
        rows = []
        for r in cur:
            names = names or [d[0] for d in cur.getdescription()]
            rows.append(dict(zip(names, r)))
        return rows

    def tags_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        """Tags per memory id, each list sorted; every requested id is a key (possibly with [])."""
        out: dict[int, list[str]] = {i: [] for i in ids}
        for chunk, marks in _chunked(out):
            for memory_id, tag in self.conn.execute(
                f"SELECT memory_id, tag FROM memory_tags WHERE memory_id IN ({marks}) ORDER BY tag", chunk
            ):
                out[memory_id].append(tag)
        return out

    def entity_keys_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        """Keys of the entities each memory is linked to, sorted."""
        out: dict[int, list[str]] = {i: [] for i in ids}
        for chunk, marks in _chunked(out):
            for memory_id, key in self.conn.execute(
                "SELECT me.memory_id, e.key FROM memory_entities me JOIN entities e ON e.id = me.entity_id "
                f"WHERE me.memory_id IN ({marks}) ORDER BY me.memory_id, e.key",
                chunk,
            ):
                out[memory_id].append(key)
        return out

    def versions_of(self, ids: Sequence[int]) -> dict[int, list[dict]]:
        """History versions per memory id (every column but id and memory_id), oldest first."""
        out: dict[int, list[dict]] = {i: [] for i in ids}
        for chunk, marks in _chunked(out):
            cur = self.conn.execute(
                f"SELECT * FROM memory_versions WHERE memory_id IN ({marks}) ORDER BY memory_id, valid_from, id",
                chunk,
            )
            names = None
            for r in cur:
                names = names or [d[0] for d in cur.getdescription()]
                row = dict(zip(names, r))
                memory_id = row.pop("memory_id")
                row.pop("id")
                out[memory_id].append(row)
        return out

    def _exported_entities_sql(self, scope: Scope | None) -> tuple[str, list]:
        """Entities an export of `scope` carries: every one (None), else those named by a memory
        in the scope's projects (any status) or by no memory at all (made by hand: global)."""
        if scope is None or scope.projects is None:
            return "1", []
        projects, params = self._project_sql(scope)
        return (
            "(EXISTS (SELECT 1 FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
            f"WHERE me.entity_id = e.id AND {projects}) "
            "OR NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id))", params
        )

    def iter_entities(self, scope: Scope | None = None) -> Iterator[dict]:
        """Entities (id, name, key, type, created_at, aliases) by key: those an export of `scope`
        carries (`_exported_entities_sql`)."""
        where, params = self._exported_entities_sql(scope)
        sql = f"SELECT e.id, e.name, e.key, e.type, e.created_at FROM entities e WHERE {where} ORDER BY e.key"
        for entity_id, name, key, etype, created in list(self.conn.execute(sql, params)):
            aliases = [a for (a,) in self.conn.execute(
                "SELECT alias FROM entity_aliases WHERE entity_id = ? ORDER BY alias", (entity_id,))]
            yield {"id": entity_id, "name": name, "key": key, "type": etype, "created_at": created,
                   "aliases": aliases}

    def iter_relations(self, scope: Scope | None = None) -> Iterator[dict]:
        """Relations as entity keys, ordered by (source, relation, target): those whose two ends
        an export of `scope` carries."""
        sql = (
            "SELECT s.key, r.relation, t.key, r.weight, r.created_at, r.updated_at FROM relations r "
            "JOIN entities s ON s.id = r.source_id JOIN entities t ON t.id = r.target_id"
        )
        params: list = []
        if scope is not None and scope.projects is not None:
            where, more = self._exported_entities_sql(scope)
            sql += (f" WHERE r.source_id IN (SELECT e.id FROM entities e WHERE {where})"
                    f" AND r.target_id IN (SELECT e.id FROM entities e WHERE {where})")
            params = [*more, *more]
        for s, rel, t, weight, created, updated in self.conn.execute(sql + " ORDER BY s.key, r.relation, t.key",
                                                                     params):
            yield {"source": s, "relation": rel, "target": t, "weight": weight, "created_at": created,
                   "updated_at": updated}

    def purged_uids(self) -> dict[str, str]:
        """{uid: when it was purged} from the purge stubs of the audit log (detail `uid=<uid>`;
        stubs written before uids were kept carry none)."""
        return {detail[4:]: at for at, detail in self.conn.execute(
            "SELECT at, detail FROM events WHERE action = 'purge' AND detail LIKE 'uid=%' ORDER BY at")}

    def backup_files(self) -> list[Path]:
        """The copies of this database memsafe itself wrote: migration backups (`<db>.bak-v<N>`,
        `<db>.bak-v<N>.<n>`), sorted."""
        return sorted(p for p in self.path.parent.glob(f"{glob.escape(self.path.name)}.bak-v*") if p.is_file())

    def backups_holding(self, uids: Sequence[str]) -> list[Path]:
        """Those of `backup_files` that hold a memory with one of `uids` (opened read-only). A
        backup that cannot be read, or has no uid column, is listed too: it may hold them."""
        out = []
        for path in self.backup_files():
            try:
                conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
                try:
                    found = any(conn.execute(f"SELECT 1 FROM memories WHERE uid IN ({marks}) LIMIT 1", chunk).fetchone()
                                for chunk, marks in _chunked(uids))
                finally:
                    conn.close()
            except apsw.Error:
                found = True
            if found:
                out.append(path)
        return out

    def memory_by_uid(self, uid: str) -> dict | None:
        """The full row of the memory with this uid, or None."""
        row = self.conn.execute("SELECT id FROM memories WHERE uid = ?", (uid,)).fetchone()
        return self.raw_row(row[0]) if row else None

    def memory_id_taken(self, memory_id: int, uid: str | None = None) -> bool:
        """True if `memory_id` may not be given to the memory `uid`: a memory holds it, or it was
        handed out before (the audit log names it; a purged memory leaves a `purge` event) to
        another memory. The memory a purge stub names (`uid=...`) may come back under its own id
        (import --allow-purged). An import inserting explicit ids asks this, so it never reuses a
        purged id for another memory (issue 12 item 3); new ids come from AUTOINCREMENT."""
        if self.conn.execute("SELECT 1 FROM memories WHERE id = ?", (memory_id,)).fetchone():
            return True
        if not self.conn.execute("SELECT 1 FROM events WHERE memory_id = ? LIMIT 1", (memory_id,)).fetchone():
            return False
        return uid is None or not self.conn.execute(
            "SELECT 1 FROM events WHERE memory_id = ? AND action = 'purge' AND detail = ?", (memory_id, f"uid={uid}")
        ).fetchone()

    def replace_versions(self, memory_id: int, versions: Sequence[dict]) -> None:
        """Set a memory's history to exactly `versions` (dicts with the memory_versions columns;
        `tags` a list)."""
        self.conn.execute("DELETE FROM memory_versions WHERE memory_id = ?", (memory_id,))
        self.conn.executemany(
            "INSERT INTO memory_versions(memory_id, content, kind, project, tags, importance, confidence, "
            "decay_level, status, valid_from, valid_to, cause, origin_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (memory_id, v["content"], v["kind"], v["project"], json.dumps(list(v["tags"]), ensure_ascii=False),
                 v["importance"], v["confidence"], v["decay_level"], v["status"], v["valid_from"], v["valid_to"],
                 v["cause"], v.get("origin_id"))
                for v in versions
            ],
        )

    def entity_id_by_key(self, key: str) -> int | None:
        row = self.conn.execute("SELECT id FROM entities WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def entity_name(self, entity_id: int) -> str | None:
        row = self.conn.execute("SELECT name FROM entities WHERE id = ?", (entity_id,)).fetchone()
        return row[0] if row else None

    def add_entity_aliases(self, entity_id: int, aliases: Iterable[str]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO entity_aliases(entity_id, alias) VALUES (?, ?)", [(entity_id, a) for a in aliases]
        )

    def link_memory_entity(self, memory_id: int, entity_id: int) -> bool:
        """Link a memory to an entity; False if the link existed."""
        self.conn.execute(
            "INSERT OR IGNORE INTO memory_entities(memory_id, entity_id) VALUES (?, ?)", (memory_id, entity_id)
        )
        return self.conn.changes() > 0

    def add_relation(self, source_id: int, relation: str, target_id: int, weight: float, created_at: str,
                     updated_at: str) -> bool:
        """Insert a relation unless the (source, relation, target) triple exists; True if inserted."""
        self.conn.execute(
            "INSERT OR IGNORE INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (source_id, relation, target_id, weight, created_at, updated_at),
        )
        return self.conn.changes() > 0

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
            self.conn.execute("COMMIT")

    def memory_columns(self) -> list[str]:
        return [r[1] for r in self.conn.execute("PRAGMA table_info(memories)")]

    def version_columns(self) -> list[str]:
        return [r[1] for r in self.conn.execute("PRAGMA table_info(memory_versions)")]

    # -- lifecycle: history, time travel, decay, listing (issue 4) ------------------------------

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

    def versions(self, memory_id: int) -> list[dict]:
        """Every stored version of one memory (its own and those merged in), oldest end first.
        Each dict has the memory_versions columns; `tags` is decoded to a list."""
        out = self._dict_rows("SELECT * FROM memory_versions WHERE memory_id = ? ORDER BY valid_to, id", (memory_id,))
        for item in out:
            item["tags"] = json.loads(item["tags"])
        return out

    def add_foreign_version(self, memory_id: int, version: dict, cause: str, origin_id: int) -> None:
        """Copy one version (a `versions()` dict or a `raw_row` with `tags`, `valid_from`,
        `valid_to`) of memory `origin_id` into the history of `memory_id`."""
        self.conn.execute(
            "INSERT INTO memory_versions(memory_id, content, kind, project, tags, importance, confidence, "
            "decay_level, status, valid_from, valid_to, cause, origin_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                memory_id, version["content"], version["kind"], version["project"],
                json.dumps(list(version["tags"]), ensure_ascii=False), version["importance"],
                version["confidence"], version["decay_level"], version["status"], version["valid_from"],
                version["valid_to"], cause, origin_id,
            ),
        )

    def rows_created_until(self, at: str) -> list[dict]:
        """Every memory row (any status) created at or before `at` (UTC ISO-8601)."""
        return self._dict_rows("SELECT * FROM memories WHERE created_at <= ? ORDER BY id", (at,))

    def own_versions_ending_after(self, at: str) -> list[dict]:
        """A memory's own versions (not merged-in copies) still valid after `at`, ordered per
        memory by end time: the first one per memory is its state at `at`."""
        out = self._dict_rows(
            "SELECT * FROM memory_versions WHERE origin_id IS NULL AND valid_to > ? ORDER BY memory_id, valid_to, id",
            (at,),
        )
        for item in out:
            item["tags"] = json.loads(item["tags"])
        return out

    def status_events_until(self, at: str) -> list[tuple[int, str, str]]:
        """(memory id, action, at) of every status change (forget, restore, archive) at or before
        `at`, in the order they happened."""
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

    def get_vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        """Stored vectors by memory id (absent when pending or when vectors are unavailable)."""
        if not (self.vector_available and self.vector_table_exists()):
            return {}
        out: dict[int, bytes] = {}
        for chunk, marks in _chunked(ids):
            out.update(
                self.conn.execute(
                    f"SELECT memory_id, embedding FROM vec_memories WHERE memory_id IN ({marks})", chunk
                )
            )
        return out

    @staticmethod
    def scratch_bm25(docs: dict[int, str], match: str, limit: int) -> list[int]:
        """BM25 ranking of `docs` ({id: text}) for a safe FTS5 `match`, in a private in-memory
        FTS5 table with the same tokenizer as `memories_fts` (time travel ranks past texts this
        way). Touches no file. Returns ids best first."""
        if not docs:
            return []
        scratch = apsw.Connection(":memory:")
        try:
            scratch.execute(
                "CREATE VIRTUAL TABLE d USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')"
            )
            scratch.executemany("INSERT INTO d(rowid, content) VALUES (?, ?)", list(docs.items()))
            return [
                r[0]
                for r in scratch.execute(
                    "SELECT rowid FROM d WHERE d MATCH ? ORDER BY bm25(d) LIMIT ?", (match, limit)
                )
            ]
        finally:
            scratch.close()

    def decay_rows(self) -> list[dict]:
        """Every active memory with the columns the decay planner needs, plus `tags` and `degree`
        (number of its graph entities connected to the rest of the graph: `connected_entity_counts`)."""
        rows = self._dict_rows(
            "SELECT id, content, kind, importance, confidence, access_count, created_at, updated_at, "
            "content_updated_at, last_accessed_at, decay_level, decay_bank, decay_checked_at, stability, status "
            "FROM memories WHERE status = 'active' ORDER BY id"
        )
        ids = [r["id"] for r in rows]
        tags = self.tags_of(ids)
        degrees = self.connected_entity_counts(ids)
        for r in rows:
            r["tags"] = tags.get(r["id"], [])
            r["degree"] = degrees.get(r["id"], 0)
        return rows

    def entity_names(self, memory_id: int) -> list[str]:
        """Names of the graph entities a memory mentions, alphabetically."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT e.name FROM memory_entities me JOIN entities e ON e.id = me.entity_id "
                "WHERE me.memory_id = ? ORDER BY e.name",
                (memory_id,),
            )
        ]

    def bank_decay(self, memory_id: int, bank: float, checked_at: str, expect_checked: str | None,
                   expect_accessed: str | None) -> bool:
        """Store a memory's decay bank if nobody touched its decay state since it was read
        (optimistic check on decay_checked_at and last_accessed_at). Returns True if written."""
        self.conn.execute(
            "UPDATE memories SET decay_bank = ?, decay_checked_at = ? WHERE id = ? AND status = 'active' "
            "AND decay_checked_at IS ? AND last_accessed_at IS ?",
            (bank, checked_at, memory_id, expect_checked, expect_accessed),
        )
        return self.conn.changes() > 0

    def list_ids(self, scope: Scope, limit: int | None) -> list[int]:
        """Ids of the memories in `scope` (any of `scope.statuses`), newest first."""
        where, params = self._scope_sql(scope)
        sql = f"SELECT m.id FROM memories m WHERE {where} ORDER BY m.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [r[0] for r in self.conn.execute(sql, params)]

    def no_checkpoint_on_close(self) -> None:
        """Do not checkpoint the WAL into the main file when this connection closes (read-only runs)."""
        self.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)

    def nearest(self, vector_bytes: bytes, project: str | None, k: int) -> list[tuple[int, float]]:
        """The k nearest active memories in exactly this project (None = global only).
        Returns [(id, cosine distance)] nearest first."""
        scope = Scope(projects=[project] if project is not None else [], include_global=project is None)
        return self.vector_search(vector_bytes, scope, k)

    # -- knowledge graph and ranking (issue 3) ---------------------------------------------------

    def fts_term_stats(
        self, terms: Sequence[str], ids: Sequence[int]
    ) -> tuple[int, dict[str, int], dict[str, set[int]]]:
        """For each safe FTS5 term (see `retrieve.fts_terms`): its document frequency over the whole
        index, and which of `ids` match it. Returns (number of indexed memories, {term: df},
        {term: matching ids}). One pass over each term's doclist (the rowid filter inside it)."""
        n = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        df: dict[str, int] = {}
        matches: dict[str, set[int]] = {}
        wanted = json.dumps(list(ids))
        for term in terms:
            count, found = self.conn.execute(
                "SELECT count(*), group_concat(rowid) FILTER (WHERE rowid IN (SELECT value FROM json_each(?2))) "
                "FROM memories_fts WHERE memories_fts MATCH ?1", (term, wanted),
            ).fetchone()
            df[term] = count
            matches[term] = {int(x) for x in found.split(",")} if found else set()
        return n, df, matches

    def entities_by_keys(self, keys: Sequence[str]) -> dict[str, tuple[int, str, str]]:
        """{identity key: (entity id, display name, type)} for the keys that exist."""
        out: dict[str, tuple[int, str, str]] = {}
        for chunk, marks in _chunked(keys):
            for r in self.conn.execute(f"SELECT key, id, name, type FROM entities WHERE key IN ({marks})", chunk):
                out[r[0]] = (r[1], r[2], r[3])
        return out

    def insert_entity(self, name: str, key: str, type_: str, at: str) -> int:
        """Insert an entity (its display name is also its first alias); returns its id. Call inside `write()`."""
        self.conn.execute(
            "INSERT INTO entities(name, key, type, created_at) VALUES (?, ?, ?, ?)", (name, key, type_, at)
        )
        entity_id = self.conn.last_insert_rowid()
        self.add_alias(entity_id, name)
        return entity_id

    def add_alias(self, entity_id: int, alias: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO entity_aliases(entity_id, alias) VALUES (?, ?)", (entity_id, alias))

    def set_entity_type(self, entity_id: int, type_: str) -> None:
        self.conn.execute("UPDATE entities SET type = ? WHERE id = ?", (type_, entity_id))

    def link_memory_entities(self, memory_id: int, entity_ids: Iterable[int]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO memory_entities(memory_id, entity_id) VALUES (?, ?)",
            [(memory_id, e) for e in entity_ids],
        )

    def upsert_relation(self, source_id: int, relation: str, target_id: int, weight: float, at: str) -> None:
        """Add a typed relation, or update the weight of the same (source, relation, target)."""
        self.conn.execute(
            "INSERT INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(source_id, relation, target_id) "
            "DO UPDATE SET weight = excluded.weight, updated_at = excluded.updated_at",
            (source_id, relation, target_id, weight, at, at),
        )

    def delete_relations(self, source_id: int, relation: str | None, target_id: int) -> int:
        """Delete the relation (any relation type when `relation` is None); returns how many."""
        if relation is None:
            sql, params = "DELETE FROM relations WHERE source_id = ? AND target_id = ?", (source_id, target_id)
        else:
            sql = "DELETE FROM relations WHERE source_id = ? AND relation = ? AND target_id = ?"
            params = (source_id, relation, target_id)
        self.conn.execute(sql, params)
        return self.conn.changes()

    def entity_rows(self, ids: Sequence[int]) -> dict[int, dict]:
        """{id: {id, name, key, type, created_at, aliases}} for existing entity ids."""
        out: dict[int, dict] = {}
        for chunk, marks in _chunked(ids):
            for r in self.conn.execute(
                f"SELECT id, name, key, type, created_at FROM entities WHERE id IN ({marks})", chunk
            ):
                out[r[0]] = {"id": r[0], "name": r[1], "key": r[2], "type": r[3], "created_at": r[4], "aliases": []}
            for entity_id, alias in self.conn.execute(
                f"SELECT entity_id, alias FROM entity_aliases WHERE entity_id IN ({marks}) ORDER BY alias", chunk
            ):
                if alias != out[entity_id]["name"]:
                    out[entity_id]["aliases"].append(alias)
        return out

    def relations_touching(self, entity_ids: Sequence[int]) -> list[tuple[int, int, str, int, float]]:
        """Relations with either endpoint in `entity_ids`: [(id, source_id, relation, target_id, weight)]."""
        if not entity_ids:
            return []
        out: dict[int, tuple] = {}
        for chunk, marks in _chunked(entity_ids, 400):
            for r in self.conn.execute(
                "SELECT id, source_id, relation, target_id, weight FROM relations "
                f"WHERE source_id IN ({marks}) OR target_id IN ({marks}) ORDER BY id",
                [*chunk, *chunk],
            ):
                out[r[0]] = tuple(r)
        return [out[k] for k in sorted(out)]

    def all_relations(self) -> list[tuple[int, int, str, int, float]]:
        return [
            tuple(r)
            for r in self.conn.execute("SELECT id, source_id, relation, target_id, weight FROM relations ORDER BY id")
        ]

    def entity_memories(self, entity_ids: Sequence[int], scope: Scope, per_entity: int | None = None
                        ) -> dict[int, list[int]]:
        """{entity id: [memory ids in scope that mention it, newest first]}, at most `per_entity`
        each when given (None: all)."""
        if not entity_ids:
            return {}
        where, params = self._scope_sql(scope)
        out: dict[int, list[int]] = {}
        inner = (
            "SELECT me.entity_id, m.id AS memory_id, "
            "row_number() OVER (PARTITION BY me.entity_id ORDER BY m.id DESC) AS n "
            "FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
            "WHERE me.entity_id IN ({marks}) AND " + where
        )
        cap = 2**63 - 1 if per_entity is None else per_entity
        for chunk, marks in _chunked(entity_ids):
            sql = f"SELECT entity_id, memory_id FROM ({inner.format(marks=marks)}) WHERE n <= ? ORDER BY entity_id, n"
            for entity_id, memory_id in self.conn.execute(sql, [*chunk, *params, cap]):
                out.setdefault(entity_id, []).append(memory_id)
        return out

    def delete_orphan_entities(self, entity_ids: Iterable[int]) -> int:
        """Delete those of `entity_ids` no memory mentions and no relation uses (their names came
        from purged text). Returns how many were deleted. Call inside `write()`."""
        n = 0
        for entity_id in set(entity_ids):
            self.conn.execute(
                "DELETE FROM entities WHERE id = ? "
                "AND NOT EXISTS (SELECT 1 FROM memory_entities WHERE entity_id = ?) "
                "AND NOT EXISTS (SELECT 1 FROM relations WHERE source_id = ? OR target_id = ?)",
                (entity_id, entity_id, entity_id, entity_id),
            )
            n += self.conn.changes()
        return n

    def memory_entity_ids(self, memory_ids: Sequence[int]) -> dict[int, list[int]]:
        """{memory id: [entity ids it mentions]}."""
        out: dict[int, list[int]] = {}
        for chunk, marks in _chunked(memory_ids):
            for memory_id, entity_id in self.conn.execute(
                f"SELECT memory_id, entity_id FROM memory_entities WHERE memory_id IN ({marks}) ORDER BY entity_id",
                chunk,
            ):
                out.setdefault(memory_id, []).append(entity_id)
        return out

    @classmethod
    def _entity_visible_sql(cls, scope: Scope, alias: str = "e") -> tuple[str, list]:
        """Which entities a scope may see (the graph's scope rule, `api.graph` module docstring):
        an entity named by an active memory anywhere, or by no memory, or used by a relation;
        and, when the scope is not every project, named by a memory in the scope's projects (of
        any status) or by no memory at all, so a name taken from another project's text stays there."""
        any_active = (f"EXISTS (SELECT 1 FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
                      f"WHERE me.entity_id = {alias}.id AND m.status = 'active')")
        unlinked = f"NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = {alias}.id)"
        related = f"EXISTS (SELECT 1 FROM relations r WHERE r.source_id = {alias}.id OR r.target_id = {alias}.id)"
        where = f"({any_active} OR {unlinked} OR {related})"
        if scope.projects is None:
            return where, []
        projects, params = cls._project_sql(scope)
        in_scope = (f"EXISTS (SELECT 1 FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
                    f"WHERE me.entity_id = {alias}.id AND {projects})")
        return f"{where} AND ({in_scope} OR {unlinked})", params

    def visible_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` the scope may see (`_entity_visible_sql`)."""
        where, params = self._entity_visible_sql(scope)
        out: set[int] = set()
        for chunk, marks in _chunked(entity_ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT e.id FROM entities e WHERE e.id IN ({marks}) AND {where}", [*chunk, *params]))
        return out

    def list_entities(self, scope: Scope) -> list[dict]:
        """The entities `scope` may see (`_entity_visible_sql`), by key, each with the number of
        memories in the scope (its statuses) that mention it."""
        visible, v_params = self._entity_visible_sql(scope)
        where, params = self._scope_sql(scope)
        sql = (
            "SELECT e.id, e.name, e.type, (SELECT count(*) FROM memory_entities me JOIN memories m "
            f"ON m.id = me.memory_id WHERE me.entity_id = e.id AND {where}) FROM entities e "
            f"WHERE {visible} ORDER BY e.key"
        )
        return [{"id": r[0], "name": r[1], "type": r[2], "memories": r[3]}
                for r in self.conn.execute(sql, [*params, *v_params])]

    # -- in-memory vectors for long-lived processes (issue 7: scale) ---------------------------------
    # vec0's KNN is a brute-force pass over every stored float vector: ~10 ms per 10k vectors on the
    # 2-core dev box when it is quiet, ~150-170 ms at 100k (scripts/knn_scale.py). A process that
    # searches more than once (`memsafe serve`) instead keeps the vectors in a numpy matrix
    # (384 x 4 bytes per memory: 154 MB at 100k) and scores a query with one matrix-vector product
    # (~0.7 ms at 10k, ~24 ms at 100k single-threaded). The copy follows other processes' writes
    # through `vector_log` (one row per vector put/delete, written in the same transaction): each
    # search reads the log rows after its last seen seq and reloads only those vectors; a reset
    # marker (0) or a pruned gap reloads everything. One-shot CLI processes never build it.

    def _log_vector(self, memory_id: int) -> None:
        """Record a vector change for in-memory copies (inside `write()`); prunes the log now and then."""
        if not self._has_vector_log():
            return
        self.conn.execute("INSERT INTO vector_log(memory_id) VALUES (?)", (memory_id,))
        seq = self.conn.last_insert_rowid()
        if seq % 1000 == 0:
            self.conn.execute("DELETE FROM vector_log WHERE seq <= ?", (seq - VECTOR_LOG_KEEP,))

    def _has_vector_log(self) -> bool:
        return bool(self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vector_log'").fetchone())

    def _vector_log_tail(self) -> int:
        return self.conn.execute("SELECT coalesce(max(seq), 0) FROM vector_log").fetchone()[0]

    def _vector_cache(self) -> _VectorCache | None:
        """The in-memory copy, synced with the log; None while the process has searched only once."""
        if self._vsearches < 2 or not self._has_vector_log():
            return None
        import numpy as np

        with self.snapshot():
            tail = self._vector_log_tail()
            cache = self._vcache
            if cache is not None and tail == cache.seq:
                return cache
            if cache is not None:
                first = self.conn.execute(
                    "SELECT min(seq) FROM vector_log WHERE seq > ?", (cache.seq - 1,)
                ).fetchone()[0]
                changed = [
                    r[0] for r in self.conn.execute(
                        "SELECT DISTINCT memory_id FROM vector_log WHERE seq > ? AND seq <= ?", (cache.seq, tail)
                    )
                ]
                if first == cache.seq and 0 not in changed:
                    cache.update(changed, self._vectors_for(changed), tail)
                    return cache
            self._vcache = None
            n = self.vector_count()
            dim = int(self.config_get("_embedding_dim") or 0)
            if not n or not dim:
                return None
            # filled row by row into one preallocated array: peak memory = the matrix itself
            ids = np.empty(n, dtype=np.int64)
            matrix = np.empty((n, dim), dtype=np.float32)
            filled = 0
            for memory_id, blob in self.conn.execute("SELECT memory_id, embedding FROM vec_memories"):
                if filled == n:
                    break
                ids[filled] = memory_id
                matrix[filled] = np.frombuffer(blob, dtype=np.float32)
                filled += 1
            self._vcache = _VectorCache(ids[:filled], matrix[:filled], tail)
            return self._vcache

    def _vectors_for(self, ids: list[int]) -> dict[int, bytes]:
        out = {}
        for memory_id in ids:
            blob = self.get_vector(memory_id) if memory_id else None
            if blob is not None:
                out[memory_id] = blob
        return out

    def _cached_search(self, cache, query_bytes, where, params, k) -> list[tuple[int, float]]:
        """Exact top k in scope from the in-memory vectors: one matrix-vector product over all of
        them, then post-filtering (see OVERFETCH); a narrow scope masks by its ids instead."""
        import numpy as np

        total = len(cache.ids)
        if not total:
            return []
        q = np.frombuffer(query_bytes, dtype=np.float32)
        distance = 1.0 - cache.matrix @ q  # vectors are L2-normalised: cosine distance
        fetch = min(total, max(k * OVERFETCH, OVERFETCH_MIN))
        top = np.argpartition(distance, fetch - 1)[:fetch] if fetch < total else np.arange(total)
        keep = self._in_scope([int(i) for i in cache.ids[top]], where, params, embedded=True)
        if len(keep) < k and fetch < total:  # narrow scope: mask every vector by the ids in it
            ids = np.fromiter(
                (r[0] for r in self.conn.execute(f"SELECT m.id FROM memories m WHERE m.embedded = 1 AND {where}",
                                                 params)), dtype=np.int64,
            )
            distance = np.where(np.isin(cache.ids, ids), distance, np.inf)
            top = np.argpartition(distance, min(k, total) - 1)[: min(k, total)] if k < total else np.arange(total)
            top = top[np.isfinite(distance[top])]
        else:
            top = top[np.isin(cache.ids[top], np.fromiter(keep, dtype=np.int64, count=len(keep)))]
        top = top[np.lexsort((cache.ids[top], distance[top]))][:k]
        return [(int(cache.ids[i]), float(distance[i])) for i in top]

    # -- consistency (issue 7: hardening) -------------------------------------------------------

    def consistency_problems(self) -> list[str]:
        """Everything that would make the file untrustworthy; [] when it is sound.

        Checks: `PRAGMA integrity_check`, `PRAGMA foreign_key_check`, both FTS5 indexes (words and
        trigrams) against their content (FTS5 'integrity-check' with rank=1, plus one index row
        per memory), and the vectors against the rows (no vector for a missing row,
        `embedded = 1` iff a vector exists).
        Runs the FTS5 check as a command, so it takes the write lock briefly.
        """
        problems: list[str] = []
        integrity = self.integrity_check()
        if integrity != "ok":
            problems.append(f"integrity_check: {integrity}")
        fk = self.conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            problems.append(f"foreign_key_check: {len(fk)} dangling rows")
        rows = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        for table, what in (("memories_fts", "full-text"), ("memories_tri", "trigram")):
            try:
                with self.write():
                    self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except apsw.Error as exc:
                problems.append(f"{what} index integrity-check: {exc}")
            indexed = self.conn.execute(f"SELECT count(*) FROM {table}_docsize").fetchone()[0]
            if rows != indexed:
                problems.append(f"{count_of(rows, 'memory')} but {count_of(indexed, what + ' entry')}")
        if self.vector_table_exists() and self.vector_available:
            orphans = self.conn.execute(
                "SELECT count(*) FROM vec_memories v "
                "WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id)"
            ).fetchone()[0]
            if orphans:
                problems.append(f"{count_of(orphans, 'vector')} for missing memories")
            missing = self.conn.execute(
                "SELECT count(*) FROM memories m WHERE m.embedded = 1 AND NOT EXISTS "
                "(SELECT 1 FROM vec_memories v WHERE v.memory_id = m.id)"
            ).fetchone()[0]
            if missing:
                problems.append(f"{count_of(missing, 'memory')} marked embedded without a vector")
            unmarked = self.conn.execute(
                "SELECT count(*) FROM vec_memories v JOIN memories m ON m.id = v.memory_id WHERE m.embedded = 0"
            ).fetchone()[0]
            if unmarked:
                problems.append(f"{count_of(unmarked, 'vector')} for memories marked not embedded")
        elif self.conn.execute("SELECT count(*) FROM memories WHERE embedded = 1").fetchone()[0]:
            if not self.vector_table_exists():
                problems.append("memories marked embedded but there is no vector table")
        return problems


class LexicalHits(list):
    """What `Store.fts_search` returns: a list of (memory id, bm25-like score) best first, plus the
    exact-match evidence behind its order: `held` {id: number of the query's exact terms it
    holds} and `exact` {term: (document frequency, ids in scope holding it)} (see `exact_search`)."""

    def __init__(self, hits: Iterable[tuple[int, float]], held: dict[int, int],
                 exact: dict[str, tuple[int, set[int]]]):
        super().__init__(hits)
        self.held = held
        self.exact = exact


VECTOR_LOG_KEEP = 50_000  # vector_log rows kept; a copy further behind reloads everything


class _VectorCache:
    """A process's in-memory copy of the vectors: ids (n,) int64, matrix (n, dim) float32, and the
    last vector_log seq it reflects."""

    def __init__(self, ids, matrix, seq: int):
        self.ids, self.matrix, self.seq = ids, matrix, seq

    def update(self, changed: list[int], vectors: dict[int, bytes], seq: int) -> None:
        import numpy as np

        keep = ~np.isin(self.ids, np.array(changed, dtype=np.int64))
        new_ids = np.array(list(vectors), dtype=np.int64)
        new_rows = np.frombuffer(b"".join(vectors.values()), dtype=np.float32).reshape(len(vectors), -1)
        if keep.all() and not len(new_ids):
            self.seq = seq
            return
        self.ids = np.concatenate([self.ids[keep], new_ids])
        self.matrix = np.concatenate([self.matrix[keep], new_rows.reshape(len(new_ids), self.matrix.shape[1])])
        self.seq = seq


def file_sizes(path: Path) -> tuple[int, int]:
    """(main file bytes, WAL bytes); 0 for a missing file."""

    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except OSError:
            return 0

    return size(path), size(path.with_name(path.name + "-wal"))
