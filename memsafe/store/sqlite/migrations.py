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

import re
from collections.abc import Callable

import apsw

from memsafe.store.common import owners
from memsafe.store.common.sql import scalar

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


# The trigram index (m004): every 3-character substring of each memory, case-insensitive. It finds
# an identifier, version or code exactly as typed inside longer text (`2.4.7` in
# `deploy-v2.4.7-hotfix`; `get_user_by_id` but not `get_users_by_ids`, which the porter index folds
# together), and Chinese or Japanese words inside runs that unicode61 keeps as one token (since
# m007 the word index holds those as bigrams; single CJK characters are still looked up here).
# External content, read through a view that adds a space to the text, so a word ending the text
# still starts a trigram: a 1-2 character CJK word is found through the trigrams it starts
# (`memories_tri_vocab`, see Store.exact_search). Deletes go through the 'delete' command, so
# FTS5 secure-delete removes a purged text's trigrams from the pages (a contentless_delete table
# would only mark them deleted, and the text would stay in the file). detail='none' keeps no
# positions (222 instead of 857 bytes per memory on the scale bench's texts): a term is looked up
# as the AND of its trigrams, and every candidate is checked against its text.
TRIGRAM_SQL = """
CREATE VIEW memories_tri_text(id, content) AS SELECT id, content || ' ' FROM memories;
CREATE VIRTUAL TABLE memories_tri USING fts5(
    content, content='memories_tri_text', content_rowid='id', tokenize='trigram', detail='none'
);
INSERT INTO memories_tri(memories_tri, rank) VALUES ('secure-delete', 1);
CREATE VIRTUAL TABLE memories_tri_vocab USING fts5vocab(memories_tri, 'row');
INSERT INTO memories_tri(memories_tri) VALUES ('rebuild');
CREATE TRIGGER memories_tri_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_tri(rowid, content) VALUES (new.id, new.content || ' ');
END;
CREATE TRIGGER memories_tri_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_tri(memories_tri, rowid, content) VALUES ('delete', old.id, old.content || ' ');
END;
CREATE TRIGGER memories_tri_au AFTER UPDATE OF content ON memories BEGIN
    INSERT INTO memories_tri(memories_tri, rowid, content) VALUES ('delete', old.id, old.content || ' ');
    INSERT INTO memories_tri(rowid, content) VALUES (new.id, new.content || ' ');
END;
"""


@migration
def m004_ids_never_reused_trigram_index(conn: apsw.Connection) -> None:
    """Memory ids are never handed out twice (a purged id never comes to name another memory), and a
    trigram index stands beside the word index (for the terms a query must hold exactly,
    `recall.terms.exact_terms`).

    `memories` is rebuilt with `id INTEGER PRIMARY KEY AUTOINCREMENT` (SQLite's 12-step table
    change, https://sqlite.org/lang_altertable.html#otheralter; the caller turns foreign keys off
    around the migration, so dropping the old table cascades nothing): every column, row and id is
    copied; indexes and triggers (the FTS5 sync triggers) are re-created from their stored SQL; the
    FTS5 tables, the vec0 vectors, history, tags, graph links and the audit log are keyed by the
    same ids and stay as they are. `sqlite_sequence` is seeded with the largest id ever handed
    out: the largest row id or the largest id in the audit log, which keeps a content-free
    `purge` event for every purged memory, so ids purged before this migration are not reused
    either. PostgreSQL equivalent: `id BIGINT GENERATED BY DEFAULT AS IDENTITY` (never reused,
    explicit ids from an import still allowed) with `setval` to the same maximum.
    """
    table_sql = scalar(conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'memories'"))
    if "AUTOINCREMENT" not in table_sql.upper():
        new_sql, n = re.subn(r"\bid(\s+)INTEGER(\s+)PRIMARY(\s+)KEY\b", "id INTEGER PRIMARY KEY AUTOINCREMENT",
                             table_sql, count=1, flags=re.IGNORECASE)
        if n != 1:
            raise apsw.SchemaChangeError("memories has no `id INTEGER PRIMARY KEY` column")
        new_sql = re.sub(r"^CREATE TABLE\s+\"?memories\"?", "CREATE TABLE memories_new", new_sql, flags=re.IGNORECASE)
        dependents = [r[0] for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'memories' AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL ORDER BY type, name"
        )]
        columns = ", ".join(f'"{r[1]}"' for r in conn.execute("PRAGMA table_info(memories)"))
        conn.execute(new_sql)
        conn.execute(f"INSERT INTO memories_new({columns}) SELECT {columns} FROM memories ORDER BY id")
        conn.execute("DROP TABLE memories")
        conn.execute("ALTER TABLE memories_new RENAME TO memories")
        for sql in dependents:
            conn.execute(sql)
        if conn.execute("PRAGMA foreign_key_check").fetchall():
            raise apsw.ConstraintError("rebuilding memories broke a foreign key")
    highest = scalar(conn.execute(
        "SELECT max(coalesce((SELECT max(id) FROM memories), 0), coalesce((SELECT max(memory_id) FROM events), 0))"
    ))
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'memories'")
    conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('memories', ?)", (highest,))

    conn.execute(TRIGRAM_SQL)


@migration
def m005_author(conn: apsw.Connection) -> None:
    """Who wrote each memory and each earlier version (attribution): the user a team
    server's token stands for; NULL when unknown (local use, rows older than this migration)."""
    conn.execute("ALTER TABLE memories ADD COLUMN author TEXT; ALTER TABLE memory_versions ADD COLUMN author TEXT")


# How much of each memory the trigram index holds (characters). Every distinct 3-character piece is
# a term: 1 MB of base64 text is ~260,000 of them and took 1-2 s to index, most of a remember of
# that size (the target: under 2 s for every 1 MB shape). Identifiers, versions and CJK words
# are looked for in memories far shorter than this; past it, a long memory is still found by the
# word index (and `recall --mode lexical` by its words), just not by a substring inside a run.
TRIGRAM_MAX_CHARS = 65_536


def _trigram_triggers(conn: apsw.Connection, text: str) -> None:
    """Re-create the trigram index's view and sync triggers so each indexes `text` (an SQL
    expression with `{}` for the row: `memories`, `new` or `old`)."""
    conn.execute(f"""
        DROP TRIGGER memories_tri_ai; DROP TRIGGER memories_tri_ad; DROP TRIGGER memories_tri_au;
        DROP VIEW memories_tri_text;
        CREATE VIEW memories_tri_text(id, content) AS SELECT id, {text.format('memories')} FROM memories;
        CREATE TRIGGER memories_tri_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_tri(rowid, content) VALUES (new.id, {text.format('new')});
        END;
        CREATE TRIGGER memories_tri_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_tri(memories_tri, rowid, content) VALUES ('delete', old.id, {text.format('old')});
        END;
        CREATE TRIGGER memories_tri_au AFTER UPDATE OF content ON memories BEGIN
            INSERT INTO memories_tri(memories_tri, rowid, content) VALUES ('delete', old.id, {text.format('old')});
            INSERT INTO memories_tri(rowid, content) VALUES (new.id, {text.format('new')});
        END;
    """)


@migration
def m006_trigram_index_bounded(conn: apsw.Connection) -> None:
    """The trigram index holds the first TRIGRAM_MAX_CHARS characters of each memory (plus the
    space that lets a last word start a trigram): its view and sync triggers are re-created on
    `substr(content, 1, N)`. The index is rebuilt only when a memory is longer than that, since
    for every other row the indexed text is unchanged (and the FTS5 'delete' command must be fed
    exactly the text that was indexed)."""
    n = TRIGRAM_MAX_CHARS
    text = f"substr({{}}.content, 1, {n}) || ' '"
    _trigram_triggers(conn, text)
    if scalar(conn.execute("SELECT EXISTS (SELECT 1 FROM memories WHERE length(content) > ?)", (n,))):
        conn.execute("INSERT INTO memories_tri(memories_tri) VALUES ('rebuild')")


@migration
def m007_cjk_bigrams(conn: apsw.Connection) -> None:
    """The word index cuts Chinese, Japanese and Korean runs into overlapping bigrams:
    `memories_fts` is re-created with the `cjk_bigram` tokenizer over FTS5's own
    (`memsafe.store.common.tokenizer`; the connection has it registered) and rebuilt from the
    texts, its sync triggers re-created as m001 made them. A text without CJK gets the same
    tokens as before. One transaction with the version bump, after the backup copy: a crash or
    kill leaves the old index, and the next open does it again. The old index's pages are freed
    with `secure_delete` on (zeroed: no purged text survives in them)."""
    from memsafe.store.common.tokenizer import TOKENIZE

    conn.execute(f"""
        DROP TRIGGER memories_fts_ai; DROP TRIGGER memories_fts_ad; DROP TRIGGER memories_fts_au;
        DROP TABLE memories_fts;
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            content, content='memories', content_rowid='id', tokenize='{TOKENIZE}'
        );
        INSERT INTO memories_fts(memories_fts, rank) VALUES ('secure-delete', 1);
        INSERT INTO memories_fts(memories_fts) VALUES ('rebuild');
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
    """)


@migration
def m008_vector_log_token(conn: apsw.Connection) -> None:
    """Each vector_log row carries a random token (`random()`, 64 bits): a process's in-memory copy
    of the vectors recognises the row at its position by memory id AND token. By memory id alone, a
    copy of the file put back at its path (a backup restored, an export re-imported: same oldest
    memory) that had then seen as many vector writes, the last naming the same memory, would pass for
    the file the copy was read from, and its vectors would be searched. Rows written
    before keep a NULL token. Adding a column rewrites nothing; a file that has it already is left
    as it is."""
    if "token" not in {r[1] for r in conn.execute("PRAGMA table_info(vector_log)")}:
        conn.execute("ALTER TABLE vector_log ADD COLUMN token INTEGER")


@migration
def m009_vector_log_scope(conn: apsw.Connection) -> None:
    """A process's in-memory copy of the vectors holds each vector's memory's status and project
    too, so a recall's scope is checked in memory, without SQL. A memory's status,
    project or `embedded` flag changes without its vector changing (forget, archive, restore,
    `update --project`, `rename_project`, an edited text waiting for its new vector, an import's
    merge): triggers log its id in `vector_log`, flagged `scope_only` (its vector is unchanged),
    once per memory row changed (one `rename_project` UPDATE logs every memory it moves); so does
    a row deleted or inserted while flagged embedded. The log also prunes itself now, whoever
    writes to it (a trigger: each 1,000th row drops the rows 50,000 and more before it; a copy
    further behind loads again). Triggers and a column that exist already are left as they are."""
    if "scope_only" not in {r[1] for r in conn.execute("PRAGMA table_info(vector_log)")}:
        conn.execute("ALTER TABLE vector_log ADD COLUMN scope_only INTEGER NOT NULL DEFAULT 0")
    log = "INSERT INTO vector_log(memory_id, token, scope_only) VALUES ({}.id, random(), 1)"
    conn.execute(f"""
        CREATE TRIGGER IF NOT EXISTS memories_scope_au AFTER UPDATE OF status, project, embedded ON memories
        WHEN old.status IS NOT new.status OR old.project IS NOT new.project OR old.embedded IS NOT new.embedded
        BEGIN {log.format("new")}; END;
        CREATE TRIGGER IF NOT EXISTS memories_scope_ai AFTER INSERT ON memories WHEN new.embedded = 1
        BEGIN {log.format("new")}; END;
        CREATE TRIGGER IF NOT EXISTS memories_scope_ad AFTER DELETE ON memories WHEN old.embedded = 1
        BEGIN {log.format("old")}; END;
        CREATE TRIGGER IF NOT EXISTS vector_log_prune AFTER INSERT ON vector_log WHEN new.seq % 1000 = 0
        BEGIN DELETE FROM vector_log WHERE seq <= new.seq - 50000; END;
    """)


@migration
def m010_scope_by_id(conn: apsw.Connection) -> None:
    """A covering index of each memory's scope by id: BM25's join of each match to its memory and
    the scope check of a list of ids (`SQLiteFullText._bm25_search`, `_in_scope`) read it instead
    of the table, whose rows hold the whole text (a page or more per lookup). Measured on a
    10,000-memory `bench --scale` store (~2,000 matches a query, thread CPU): the BM25
    join of a project-scoped query 3.7-4.0 ms against 1.7-2.7 with this index. Every column a
    scope filters on (`SQLMemories._scope_sql`; tags are their own table, looked up by id)."""
    conn.execute(f"CREATE INDEX IF NOT EXISTS {SCOPE_BY_ID} "
                 "ON memories(id, status, project, embedded, kind, created_at)")


@migration
def m011_created_by_status(conn: apsw.Connection) -> None:
    """An index of memories by status and creation time: the memories created in the window a query
    names (`created_between`: "what happened last week?") are read as one range of it, latest
    first, instead of checking the creation time of every memory in scope. Measured on a
    10,000-memory `bench --scale` store: 7.0 ms against 0.08 ms for an empty window,
    0.4 ms for a window holding every memory (the first 75)."""
    conn.execute(f"CREATE INDEX IF NOT EXISTS {CREATED_BY_STATUS} ON memories(status, created_at)")


@migration
def m012_unicode_forms(conn: apsw.Connection) -> None:
    """Matching reads every text in one Unicode form (`memsafe.textform.fold`: NFKC case fold,
    invisible characters dropped), so full-width, decomposed and ligature spellings agree:

    - the trigram index reads each text through the SQL function `memsafe_fold` (registered with
      the tokenizer, `tokenizer.register`): its view and sync triggers are re-created on it;
    - both full-text indexes are rebuilt from the texts when a text holds a non-ASCII character
      (the word index's tokenizer folds such texts now; an ASCII text's tokens are unchanged);
    - tags, entity keys and duplicate hashes stored in an older form are recomputed
      (`memsafe.store.common.forms.refold_rows`, shared with PostgreSQL's m005). The memories' texts are kept as
      written: they are read through the fold, and new texts are stored NFC.

    One transaction with the version bump, after the backup copy: a crash leaves the old file."""
    from memsafe.store.common import forms
    from memsafe.store.common.tokenizer import FOLD_FUNCTION

    n = TRIGRAM_MAX_CHARS
    text = f"{FOLD_FUNCTION}(substr({{}}.content, 1, {n})) || ' '"
    _trigram_triggers(conn, text)
    if scalar(conn.execute("SELECT EXISTS (SELECT 1 FROM memories WHERE content GLOB ?)", (forms.NON_ASCII_GLOB,))):
        conn.execute("INSERT INTO memories_tri(memories_tri) VALUES ('rebuild')")
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
    forms.refold_rows(conn)


@migration
def m013_entity_alias_keys(conn: apsw.Connection) -> None:
    """Names other than its own that resolve to an entity: an alias added by hand, the old name
    of a renamed entity, the names of an entity merged into it. Extraction, `graph show` and
    recall find the entity under each (an identity key, `graph.entity_key`, is in at most one
    entity: its own key or one of these). Empty at first: until now an alias was only a spelling
    of the entity's own key."""
    conn.execute(
        """
        CREATE TABLE entity_alias_keys (
            key       TEXT PRIMARY KEY,
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE
        ) WITHOUT ROWID;
        CREATE INDEX entity_alias_keys_entity ON entity_alias_keys(entity_id);
        """
    )


@migration
def m014_event_time_and_corrections(conn: apsw.Connection) -> None:
    """Each memory has the time the thing it tells happened (`happened_at`, UTC ISO-8601: a
    commit's author date, a date given with `remember --at`), besides the time it was stored
    (`created_at`); and a correction names the memory it replaces (`supersedes`) while the
    replaced one names its correction (`superseded_by`), a link both ways.

    Existing rows get the best time known: `created_at`, which for a commit remembered by the
    post-commit hook is the moment of the commit; `hook backfill` re-dates commits stored
    before (their author date, read from git). An index by status and event time serves the
    windows a query names (`created_between`) and `--since`/`--until`, and the covering index of
    a scope by id (m010) holds `happened_at` instead of `created_at`. Columns that exist
    already are left as they are."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(memories)")}
    for column, sql_type in (("happened_at", "TEXT"), ("supersedes", "INTEGER"), ("superseded_by", "INTEGER")):
        if column not in have:
            conn.execute(f"ALTER TABLE memories ADD COLUMN {column} {sql_type}")
    conn.execute("UPDATE memories SET happened_at = created_at WHERE happened_at IS NULL")
    conn.execute(f"CREATE INDEX IF NOT EXISTS {HAPPENED_BY_STATUS} ON memories(status, happened_at)")
    # the covering index of a scope by id (m010) holds the time a scope filters on: now the event's
    conn.execute(f"DROP INDEX IF EXISTS {SCOPE_BY_ID}")
    conn.execute(f"CREATE INDEX {SCOPE_BY_ID} ON memories(id, status, project, embedded, kind, happened_at)")


@migration
def m015_entity_projects(conn: apsw.Connection) -> None:
    """Every entity belongs to one project (`project`; '' is the global graph, that of memories
    with no project): an identity key is unique within a project, and so is an alias key. A
    scope reads and writes the entities of its own projects only, so a name held by another
    project is, to it, a name that does not exist. Existing entities are split among the
    projects whose memories name them (`memsafe.store.common.owners`). Both tables are rebuilt
    (a column constraint cannot be dropped in place); foreign keys are off while migrating. A
    key alone stays indexed in both, for the every-project lookups."""
    conn.execute(
        """
        CREATE TABLE entities_new (
            id         INTEGER PRIMARY KEY,
            project    TEXT NOT NULL DEFAULT '',
            name       TEXT NOT NULL,
            key        TEXT NOT NULL,
            type       TEXT NOT NULL DEFAULT 'entity',
            created_at TEXT NOT NULL,
            UNIQUE (project, key)
        );
        INSERT INTO entities_new(id, name, key, type, created_at) SELECT id, name, key, type, created_at FROM entities;
        DROP TABLE entities;
        ALTER TABLE entities_new RENAME TO entities;
        CREATE TABLE entity_alias_keys_new (
            project   TEXT NOT NULL DEFAULT '',
            key       TEXT NOT NULL,
            entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            PRIMARY KEY (project, key)
        ) WITHOUT ROWID;
        INSERT INTO entity_alias_keys_new(key, entity_id) SELECT key, entity_id FROM entity_alias_keys;
        DROP TABLE entity_alias_keys;
        ALTER TABLE entity_alias_keys_new RENAME TO entity_alias_keys;
        CREATE INDEX entity_alias_keys_entity ON entity_alias_keys(entity_id);
        CREATE INDEX entities_key ON entities(key);
        CREATE INDEX entity_alias_keys_key ON entity_alias_keys(key);
        """
    )
    owners.assign_entity_projects(conn)


SCOPE_BY_ID = "memories_scope_by_id"  # m010
CREATED_BY_STATUS = "memories_created_by_status"  # m011
HAPPENED_BY_STATUS = "memories_happened_by_status"  # m014


def latest() -> int:
    """The schema version this code writes: the number of registered migrations."""
    return len(MIGRATIONS)
