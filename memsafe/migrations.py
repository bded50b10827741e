"""Responsibility: the ordered schema history, applied forward on `PRAGMA user_version`.

Each migration is a function `mNNN_what(conn)` registered with `@migration`; it runs inside
the same transaction as the `user_version` bump, so both land or neither does. Before an
existing file is migrated, a backup copy is written next to it (`<db>.bak-v<old>`).
A file whose version is newer than `latest()` is refused and never written to.

Adding a schema change is one new decorated function, placed after the last one.

Vectors are not part of the schema: the `vec_memories` vec0 table is created by the store
when a process with the embedding model first writes a vector, sized for that model.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

MIGRATIONS: list[tuple[str, Callable[[apsw.Connection], None]]] = []


def migration(fn: Callable[[apsw.Connection], None]) -> Callable[[apsw.Connection], None]:
    """Register `fn` as the next migration (version = position + 1). Names must be unique."""
    if any(name == fn.__name__ for name, _ in MIGRATIONS):
        raise ValueError(f"duplicate migration {fn.__name__}")
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_initial(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE TABLE memories (
            id                  INTEGER PRIMARY KEY,
            uid                 TEXT NOT NULL UNIQUE,
            content             TEXT NOT NULL,
            kind                TEXT NOT NULL DEFAULT 'general',
            project             TEXT,
            source              TEXT NOT NULL DEFAULT 'user',
            importance          REAL NOT NULL DEFAULT 0.5,
            confidence          REAL NOT NULL DEFAULT 0.8,
            created_at          TEXT NOT NULL,
            updated_at          TEXT NOT NULL,
            content_updated_at  TEXT NOT NULL,
            last_accessed_at    TEXT,
            access_count        INTEGER NOT NULL DEFAULT 0,
            decay_level         INTEGER NOT NULL DEFAULT 0,
            decay_bank          REAL NOT NULL DEFAULT 0,
            decay_checked_at    TEXT,
            stability           REAL,
            status              TEXT NOT NULL DEFAULT 'active',
            status_reason       TEXT,
            status_changed_at   TEXT,
            content_hash        TEXT NOT NULL,
            embedded            INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX memories_scope ON memories(status, project);
        CREATE INDEX memories_hash ON memories(content_hash);
        CREATE INDEX memories_pending ON memories(embedded) WHERE embedded = 0;

        CREATE TABLE memory_tags (
            memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            tag       TEXT NOT NULL,
            PRIMARY KEY (memory_id, tag)
        ) WITHOUT ROWID;
        CREATE INDEX memory_tags_tag ON memory_tags(tag);

        CREATE VIRTUAL TABLE memories_fts USING fts5(
            content, content='memories', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        INSERT INTO memories_fts(memories_fts, rank) VALUES ('secure-delete', 1);
        CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END;
        CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
        END;

        -- Every earlier state of a memory: content and metadata, valid over [valid_from, valid_to).
        CREATE TABLE memory_versions (
            id          INTEGER PRIMARY KEY,
            memory_id   INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            content     TEXT NOT NULL,
            kind        TEXT NOT NULL,
            project     TEXT,
            tags        TEXT NOT NULL DEFAULT '[]',
            importance  REAL NOT NULL,
            confidence  REAL NOT NULL,
            decay_level INTEGER NOT NULL DEFAULT 0,
            status      TEXT NOT NULL DEFAULT 'active',
            valid_from  TEXT NOT NULL,
            valid_to    TEXT NOT NULL,
            cause       TEXT NOT NULL
        );
        CREATE INDEX memory_versions_memory ON memory_versions(memory_id, valid_to);

        -- Content-free audit log of mutations.
        CREATE TABLE events (
            id        INTEGER PRIMARY KEY,
            at        TEXT NOT NULL,
            action    TEXT NOT NULL,
            memory_id INTEGER,
            detail    TEXT
        );
        CREATE INDEX events_memory ON events(memory_id);

        CREATE TABLE config (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID;

        -- Knowledge graph.
        CREATE TABLE entities (
            id         INTEGER PRIMARY KEY,
            name       TEXT NOT NULL,
            key        TEXT NOT NULL UNIQUE,
            type       TEXT NOT NULL DEFAULT 'entity',
            created_at TEXT NOT NULL
        );
        CREATE TABLE entity_aliases (
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            alias     TEXT NOT NULL,
            PRIMARY KEY (entity_id, alias)
        ) WITHOUT ROWID;
        CREATE TABLE memory_entities (
            memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            PRIMARY KEY (memory_id, entity_id)
        ) WITHOUT ROWID;
        CREATE INDEX memory_entities_entity ON memory_entities(entity_id);
        CREATE TABLE relations (
            id         INTEGER PRIMARY KEY,
            source_id  INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            relation   TEXT NOT NULL,
            target_id  INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            weight     REAL NOT NULL DEFAULT 1.0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (source_id, relation, target_id)
        );
        CREATE INDEX relations_target ON relations(target_id);
        """
    )


@migration
def m002_version_origin(conn: apsw.Connection) -> None:
    """History rows copied from another memory by `consolidate` name it in `origin_id`
    (NULL = the memory's own past). Time travel follows a memory's own past only."""
    conn.execute("ALTER TABLE memory_versions ADD COLUMN origin_id INTEGER")


@migration
def m003_vector_log(conn: apsw.Connection) -> None:
    """A log of vector changes (memory id per put/delete; 0 = all vectors reset), so a long-lived
    process can keep an in-memory copy of the vectors in sync incrementally (Store.vector_search);
    and a covering index for the scope filter of vector search."""
    conn.execute(
        """
        CREATE TABLE vector_log (
            seq       INTEGER PRIMARY KEY AUTOINCREMENT,
            memory_id INTEGER NOT NULL
        );
        -- covering index for "which embedded memories are in scope" (vector search filters)
        CREATE INDEX memories_scope_embedded ON memories(status, project, embedded);
        """
    )


def latest() -> int:
    """The schema version this code writes: the number of registered migrations."""
    return len(MIGRATIONS)
