"""Responsibility: bringing rows stored in an older Unicode form to the current one, the same on
both backends (SQLite's migration m012, PostgreSQL's m005): tags, entity keys and duplicate
hashes, which are matched by equality in SQL and so cannot be folded when read. The memories'
texts are kept as written; everything that matches them reads them through `textform.fold`."""

from __future__ import annotations

import unicodedata

from memsafe import textform

# A GLOB pattern matching any text that holds a character outside ASCII (GLOB reads code points).
NON_ASCII_GLOB = "*[^\x01-\x7f]*"
BATCH = 500  # rows read at a time


def _batches(conn, sql: str):
    """Rows of `sql` (`SELECT id, ... FROM t WHERE id > ? ORDER BY id LIMIT ?`), BATCH at a time."""
    last = None
    while rows := conn.execute(sql, (last if last is not None else -(2**63), BATCH)).fetchall():
        yield rows
        last = rows[-1][0]


def refold_rows(conn) -> None:
    """Tags, entity keys, project names and duplicate hashes recomputed in the current forms (`textform.name_key`,
    as `api.hygiene.clean_tags` and `graph.entity_key` make them; `textform.duplicate_key`) on
    either backend (`conn.execute` with `?` parameters: an apsw connection or the PostgreSQL
    store's `PgConnection`), in the caller's transaction. A tag whose new form the memory already
    holds is dropped (it is the same tag); an entity whose new key another entity holds keeps its
    old key (it stays reachable under its name as stored; merging two entities' links is the
    graph's business, not a migration's)."""
    tags = [(m, t) for m, t in conn.execute("SELECT memory_id, tag FROM memory_tags").fetchall()
            if textform.name_key(t) != t]
    for memory_id, tag in tags:
        if textform.name_key(tag):
            conn.execute("INSERT INTO memory_tags(memory_id, tag) VALUES (?, ?) ON CONFLICT DO NOTHING",
                         (memory_id, textform.name_key(tag)))
        conn.execute("DELETE FROM memory_tags WHERE memory_id = ? AND tag = ?", (memory_id, tag))
    entities = conn.execute("SELECT id, key FROM entities").fetchall()
    keys = {key for _, key in entities}
    for entity_id, key in entities:
        new = key if key.isascii() else textform.name_key(key)
        if new and new != key and new not in keys:
            conn.execute("UPDATE entities SET key = ? WHERE id = ?", (new, entity_id))
            keys.discard(key)
            keys.add(new)
    projects = [p for (p,) in conn.execute("SELECT DISTINCT project FROM memories WHERE project IS NOT NULL")
                if "/" not in p and "\\" not in p and textform.canonical(p) != p]
    for project in projects:  # a name, stored NFC by `api.hygiene.clean_project` (a path is left as it is)
        conn.execute("UPDATE memories SET project = ? WHERE project = ?", (textform.canonical(project), project))
    for rows in _batches(conn, "SELECT id, content FROM memories WHERE id > ? ORDER BY id LIMIT ?"):
        for memory_id, content in rows:
            if not content.isascii() and textform.duplicate_form(content) != _nfc_form(content):
                conn.execute("UPDATE memories SET content_hash = ? WHERE id = ?",
                             (textform.duplicate_key(content), memory_id))


def _nfc_form(content: str) -> str:
    """The form duplicates were told by before `textform.duplicate_form` (NFC, whitespace runs
    collapsed): a text whose form is unchanged keeps its hash."""
    return " ".join(unicodedata.normalize("NFC", content).split())
