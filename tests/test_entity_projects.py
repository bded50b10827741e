"""Entities belong to a project: a store made at the previous schema (one entity row shared by
every project that named it) upgrades with every entity, alias and relation still visible in
each project that saw it; edits, a memory's move, export and import keep each project's graph to
itself. Both backends.
"""

from __future__ import annotations

import json

import apsw
import pytest

from memsafe import api
from memsafe.errors import NotFound, Refused

# conftest: tests on `db_path`, `store` or `cli` run once per backend
pytestmark = pytest.mark.backends("sqlite", "postgres")

A = api.make_scope(project="a")
B = api.make_scope(project="b")
EVERY = api.make_scope(project=None, all_projects=True)

SQLITE_OLD_GRAPH = """
DROP TABLE entity_alias_keys;
DROP TABLE entities;
CREATE TABLE entities (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    key        TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL DEFAULT 'entity',
    created_at TEXT NOT NULL
);
CREATE TABLE entity_alias_keys (
    key       TEXT PRIMARY KEY,
    entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX entity_alias_keys_entity ON entity_alias_keys(entity_id);
"""

PG_OLD_GRAPH = """
DROP INDEX entities_key;
DROP INDEX entity_alias_keys_key;
ALTER TABLE entities DROP CONSTRAINT entities_project_key;
ALTER TABLE entities DROP COLUMN project;
ALTER TABLE entities ADD CONSTRAINT entities_key_key UNIQUE (key);
ALTER TABLE entity_alias_keys DROP CONSTRAINT entity_alias_keys_pkey;
ALTER TABLE entity_alias_keys DROP COLUMN project;
ALTER TABLE entity_alias_keys ADD PRIMARY KEY (key);
"""

# The old graph: (id, name, type) entities, their aliases, alias keys, links and relations.
OLD_ENTITIES = [(1, "SharedLib", "identifier"), (2, "CheckoutApi", "identifier"), (3, "LedgerVault", "identifier"),
                (4, "Handmade", "tool"), (5, "GlobalThing", "identifier")]
OLD_ALIASES = [(1, "SharedLib"), (1, "sharedlib"), (2, "CheckoutApi"), (3, "LedgerVault"), (4, "Handmade"),
               (5, "GlobalThing")]
OLD_ALIAS_KEYS = [("shlib", 1)]
OLD_RELATIONS = [(1, "depends_on", 4), (2, "uses", 1), (3, "stores_in", 1), (2, "audits", 3), (5, "part_of", 1)]


def _old_store(db_path, backend) -> dict[str, int]:
    """A store at the schema before entity projects, holding the old graph; {memory label: id}."""
    opened = api.open_store(str(db_path))
    store = opened.store
    ids = {
        "a1": api.remember(store, "the cart page calls a library", project="a", embed_now=False).id,
        "a2": api.remember(store, "the checkout service", project="a", embed_now=False).id,
        "a3": api.remember(store, "the global thing, seen from a", project="a", embed_now=False).id,
        "b1": api.remember(store, "the library is pinned", project="b", embed_now=False).id,
        "b2": api.remember(store, "the payroll keys", project="b", embed_now=False).id,
        "g1": api.remember(store, "the global thing", embed_now=False).id,
    }
    links = [(ids["a1"], 1), (ids["b1"], 1), (ids["a2"], 2), (ids["b2"], 3), (ids["g1"], 5), (ids["a3"], 5)]
    store.close()
    if backend == "sqlite":
        conn = apsw.Connection(str(db_path))
        conn.execute("PRAGMA foreign_keys = OFF")
        with conn:
            conn.execute("DELETE FROM relations; DELETE FROM memory_entities; DELETE FROM entity_aliases;")
            conn.execute(SQLITE_OLD_GRAPH)
            _fill(conn.execute, links)
            conn.execute("PRAGMA user_version = 14")
        conn.close()
    else:
        import psycopg

        from memsafe.store.postgres import close_pool

        close_pool(str(db_path))  # the next open migrates again
        with psycopg.connect(str(db_path)) as conn:
            conn.execute("DELETE FROM relations; DELETE FROM memory_entities; DELETE FROM entity_aliases; "
                         "DELETE FROM entity_alias_keys; DELETE FROM entities;")
            conn.execute(PG_OLD_GRAPH)
            _fill(lambda sql, params=(): conn.execute(sql.replace("?", "%s"), params), links)
            for table in ("entities", "relations"):  # as the store leaves them after explicit ids
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
            conn.execute("UPDATE memsafe_schema SET version = 7")
    return ids


def _fill(execute, links) -> None:
    at = "2026-01-01T00:00:00+00:00"
    for entity_id, name, etype in OLD_ENTITIES:
        execute("INSERT INTO entities(id, name, key, type, created_at) VALUES (?, ?, ?, ?, ?)",
                (entity_id, name, name.lower(), etype, at))
    for entity_id, alias in OLD_ALIASES:
        execute("INSERT INTO entity_aliases(entity_id, alias) VALUES (?, ?)", (entity_id, alias))
    for key, entity_id in OLD_ALIAS_KEYS:
        execute("INSERT INTO entity_alias_keys(key, entity_id) VALUES (?, ?)", (key, entity_id))
    for memory_id, entity_id in links:
        execute("INSERT INTO memory_entities(memory_id, entity_id) VALUES (?, ?)", (memory_id, entity_id))
    for source, relation, target in OLD_RELATIONS:
        execute("INSERT INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
                "VALUES (?, ?, ?, 1.0, ?, ?)", (source, relation, target, at, at))


def _view(store, **scope) -> tuple[list, list]:
    listing = api.graph_list(store, **scope)
    return (sorted((e.name, e.type, tuple(e.aliases), e.memories) for e in listing.entities),
            sorted((r.source, r.relation, r.target) for r in listing.relations))


# What each scope saw before the upgrade (an entity named by one of its memories, or by none),
# with the memories of the scope (its project's and global ones) that name it.
SEEN = {
    "a": ([("CheckoutApi", "identifier", (), 1), ("GlobalThing", "identifier", (), 2),
           ("Handmade", "tool", (), 0), ("SharedLib", "identifier", ("sharedlib",), 1)],
          [("CheckoutApi", "uses", "SharedLib"), ("GlobalThing", "part_of", "SharedLib"),
           ("SharedLib", "depends_on", "Handmade")]),
    "b": ([("GlobalThing", "identifier", (), 1), ("Handmade", "tool", (), 0),
           ("LedgerVault", "identifier", (), 1), ("SharedLib", "identifier", ("sharedlib",), 1)],
          [("GlobalThing", "part_of", "SharedLib"), ("LedgerVault", "stores_in", "SharedLib"),
           ("SharedLib", "depends_on", "Handmade")]),
    None: ([("GlobalThing", "identifier", (), 1), ("Handmade", "tool", (), 0)], []),
}


def test_upgrade_keeps_every_entity_alias_and_relation_in_its_project(db_path, backend, embedder):
    ids = _old_store(db_path, backend)
    opened = api.open_store(str(db_path))
    store = opened.store
    try:
        for project, seen in SEEN.items():
            assert _view(store, project=project) == seen, project
        # the alias key finds each project's own SharedLib, with that project's memory only
        for project, memory in (("a", "a1"), ("b", "b1")):
            view = api.graph_show(store, "shlib", depth=0, project=project)
            assert view.nodes[0].entity.name == "SharedLib"
            assert [m.id for m in view.nodes[0].memories] == [ids[memory]]
        # the relation between two projects' entities, seen by no project, is kept for every project
        every = _view(store, all_projects=True)[1]
        assert ("CheckoutApi", "audits", "LedgerVault") in every
        assert every.count(("SharedLib", "depends_on", "Handmade")) == 2  # a's and b's SharedLib
        # the global entity a's memory named stays one entity, linked by both memories
        thing = api.graph_show(store, "GlobalThing", depth=0, project="a")
        assert sorted(m.id for m in thing.nodes[0].memories) == sorted([ids["a3"], ids["g1"]])
        # and from now on a's writes stay a's
        api.relate(store, "SharedLib", "feeds", "CheckoutApi", scope=A)
        assert _view(store, project="b") == SEEN["b"]
    finally:
        store.close()


def test_merge_across_graphs_is_refused(store):
    api.remember(store, "CheckoutApi calls SharedLib", project="a", embed_now=False)
    api.add_entity(store, "Handmade")  # global
    with pytest.raises(Refused, match="merges only into one of its own graph"):
        api.merge_entities(store, "SharedLib", "Handmade", scope=A)
    assert {e.name for e in api.graph_entities(store, project="a")} == {"CheckoutApi", "Handmade", "SharedLib"}


def test_a_memory_moved_to_another_project_takes_that_projects_entities(store):
    moved = api.remember(store, "LedgerVault rotates its keys", project="a", embed_now=False)
    api.remember(store, "LedgerVault keeps the payroll keys", project="b", embed_now=False)
    api.relate(store, "LedgerVault", "backs_up_to", "Offsite", create=True, scope=B)
    api.update(store, moved.id, project="b", scope=A)
    assert api.graph_entities(store, project="a") == []  # a's LedgerVault named nothing else: gone
    node = api.graph_show(store, "LedgerVault", depth=1, project="b")
    assert sorted(m.id for m in node.nodes[0].memories)[0] == moved.id
    assert [(r.source, r.target) for r in node.relations] == [("LedgerVault", "Offsite")]


def test_a_renamed_project_takes_its_graph_and_merges_into_the_names_the_new_key_holds(store, tmp_path):
    """A project renamed (a repository whose key changes) takes its entities and alias keys with
    its memories; an entity the new key holds already absorbs the old one, links and relations
    kept. The store's export then names only entities of each memory's own project, and imports."""
    moved = api.remember(store, "LedgerVault rotates its keys through Vaultwarden", project="a", embed_now=False)
    kept = api.remember(store, "LedgerVault keeps the payroll keys", project="b", embed_now=False)
    api.relate(store, "LedgerVault", "backs_up_to", "Offsite", create=True, scope=A)
    api.relate(store, "LedgerVault", "audited_by", "Finance", create=True, scope=B)
    api.add_alias(store, "Vaultwarden", "vw", scope=A)
    with store.write():
        assert store.rename_project("a", "b") == 1
    assert api.graph_entities(store, project="a") == []
    node = api.graph_show(store, "LedgerVault", depth=1, project="b")
    assert sorted(m.id for m in node.nodes[0].memories) == sorted([moved.id, kept.id])
    assert sorted((r.relation, r.target) for r in node.relations) == [("audited_by", "Finance"),
                                                                      ("backs_up_to", "Offsite")]
    assert api.graph_show(store, "vw", depth=0, project="b").nodes[0].entity.name == "Vaultwarden"
    path = tmp_path / "all.jsonl"
    api.export_to_path(store, path, all_projects=True)
    entity_projects = {r["project"] for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())
                       if r.get("type") == "entity"}
    assert entity_projects == {"b"}
    fresh = api.open_store(str(tmp_path / "fresh.db")).store
    try:
        api.import_file(fresh, path)
        assert _view(fresh, project="b") == _view(store, project="b")
    finally:
        fresh.close()


def test_export_and_import_keep_each_projects_graph(store, db_path, tmp_path, backend):
    api.remember(store, "CheckoutApi calls SharedLib", project="a", embed_now=False)
    api.remember(store, "SharedLib is pinned", project="b", embed_now=False)
    api.relate(store, "SharedLib", "owned_by", "TeamA", create=True, scope=A)
    api.relate(store, "SharedLib", "owned_by", "TeamB", create=True, scope=B)
    before = {p: _view(store, project=p) for p in ("a", "b", None)}
    path = tmp_path / "all.jsonl"
    api.export_to_path(store, path, all_projects=True)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["project"] for r in records if r.get("type") == "entity" and r["key"] == "sharedlib") == ["a", "b"]
    # into an empty store
    fresh = api.open_store(str(tmp_path / "fresh.db")).store
    try:
        api.import_file(fresh, path)
        assert {p: _view(fresh, project=p) for p in before} == before
    finally:
        fresh.close()
    # a file from before entities had projects: entities go where their memories are
    old = tmp_path / "old.jsonl"
    lines = []
    for r in records:
        if r.get("type") == "entity":
            if r["project"] == "b" or r["key"] == "teamb":
                continue  # one record per key, as an old export wrote it
            del r["project"]
        if r.get("type") == "relation":
            if "teamb" in (r["source"], r["target"]):
                continue
            r.pop("source_project")
            r.pop("target_project")
        if r.get("type") == "end":
            r["counts"]["entity"] -= 2
            r["counts"]["relation"] -= 1
        lines.append(json.dumps(r))
    old.write_text("\n".join(lines) + "\n", encoding="utf-8")
    again = api.open_store(str(tmp_path / "again.db")).store
    try:
        api.import_file(again, old)
        assert _view(again, project="a") == before["a"]
        # b's own SharedLib, with b's memory; TeamA, named by no memory, is global (as an upgrade
        # makes it), so both projects' SharedLib keep the relation they both saw in the old store
        assert _view(again, project="b") == ([("SharedLib", "identifier", (), 1), ("TeamA", "entity", (), 0)],
                                             [("SharedLib", "owned_by", "TeamA")])
    finally:
        again.close()


def test_graph_show_of_every_project_starts_from_each_projects_entity(store):
    api.remember(store, "SharedLib is pinned", project="a", embed_now=False)
    api.remember(store, "SharedLib is vendored", project="b", embed_now=False)
    api.relate(store, "SharedLib", "owned_by", "TeamA", create=True, scope=A)
    api.relate(store, "SharedLib", "owned_by", "TeamB", create=True, scope=B)
    every = api.graph_show(store, "SharedLib", depth=1, all_projects=True)
    assert sorted((r.source, r.target) for r in every.relations) == [("SharedLib", "TeamA"), ("SharedLib", "TeamB")]
    assert [n.distance for n in every.nodes].count(0) == 2
    in_a = api.graph_show(store, "SharedLib", depth=1, project="a")
    assert [(r.source, r.target) for r in in_a.relations] == [("SharedLib", "TeamA")]


def test_a_global_entity_other_projects_name_is_edited_from_every_project_only(store):
    api.remember(store, "GlobalThing is the shared config", embed_now=False)  # global
    mine = api.remember(store, "CheckoutApi reads GlobalThing", project="a", embed_now=False)
    node = api.graph_show(store, "GlobalThing", depth=0, project="a").nodes[0]
    assert mine.id in [m.id for m in node.memories]  # a's memory links the global entity
    with pytest.raises(Refused, match="also named by memories of other projects"):
        api.rename_entity(store, "GlobalThing", "SharedConfig", scope=B)
    with pytest.raises(NotFound):  # b cannot reach a's memory, nor its links
        api.unlink_entity(store, mine.id, "GlobalThing", scope=B)
    assert api.rename_entity(store, "GlobalThing", "SharedConfig", scope=EVERY).entity.name == "SharedConfig"
    assert api.unlink_entity(store, mine.id, "SharedConfig", scope=A).memory_id == mine.id


@pytest.mark.parametrize("edit", ["rename", "alias"])
def test_a_name_is_not_given_to_a_second_entity_in_a_graph_that_sees_both(store, edit):
    """A project sees its own graph and the global one: a project's entity renamed (or aliased) to
    a global entity's name, or a global one to a project's, would split a project's memories
    between two entities of one name. Refused, nothing changed; another project's name is free."""
    api.remember(store, "Postgres listens on port 5433", project="a", embed_now=False)
    api.remember(store, "Redis caches the sessions", project="a", embed_now=False)
    api.add_entity(store, "SQLite")  # global
    api.remember(store, "Kafka carries the events", project="b", embed_now=False)
    change = api.rename_entity if edit == "rename" else api.add_alias
    before = {p: _view(store, project=p) for p in ("a", "b", None)}
    for name, onto, scope in (("Postgres", "SQLite", A),  # a's entity onto a global name
                              ("SQLite", "Redis", EVERY)):  # a global entity onto a's name
        with pytest.raises(Refused, match="already the entity.*choose another name"):  # no merge offered
            change(store, name, onto, scope=scope)
        assert {p: _view(store, project=p) for p in before} == before
    assert change(store, "Postgres", "Kafka", scope=A).entity.name == ("Kafka" if edit == "rename" else "Postgres")
