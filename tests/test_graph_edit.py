"""Editing the knowledge graph: rename an entity, merge two (memories and relations follow),
add and remove aliases, delete an entity, remove a wrong automatic link from a memory; names at
the start of a sentence; `graph entities --sort/--limit`; the bad input of each (one line, exit
2 for usage and 1 for refusals, nothing changed) and the project scope of entities. Through the
API and the CLI, on both store backends."""

from __future__ import annotations

import json

import pytest
from conftest import run_memsafe

from memsafe import api, graph
from memsafe.errors import InvalidInput, NotFound, Refused

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

A = api.make_scope(project="a")
B = api.make_scope(project="b")
EVERY = api.make_scope(project=None, all_projects=True)


def _names(store, memory_id: int) -> list[str]:
    return store.entity_names(memory_id)


def _graph_state(store) -> tuple:
    """Everything the graph holds, in every project: entities (with aliases and counts), relations,
    memory links."""
    listing = api.graph_list(store, all_projects=True)
    entities = sorted((e.name, e.type, tuple(e.aliases), e.memories) for e in listing.entities)
    relations = sorted((r.source, r.relation, r.target, r.weight) for r in listing.relations)
    ids = [m.id for m in api.list_memories(store, status="all", all_projects=True)]
    links = sorted((i, tuple(_names(store, i))) for i in ids)
    alias_keys = store.alias_keys([e.id for e in listing.entities])
    return entities, relations, links, sorted((k, tuple(v)) for k, v in alias_keys.items())


# -- extraction at the start of a sentence ------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("Postgres keeps its WAL on the fast disk.", {"Postgres", "WAL"}),
    ("The cache is warm. Redis restarts nightly.", {"Redis"}),
    ("Kubernetes schedules the jobs; Grafana shows them", {"Kubernetes", "Grafana"}),
    ("Keeps the WAL small. Deploy on Monday. Always squash.", {"WAL"}),
])
def test_a_name_at_the_start_of_a_sentence_is_found_as_in_the_middle(text, expected):
    assert {e.name for e in graph.extract_entities(text)} == expected


def test_a_known_entity_at_the_start_of_a_sentence_is_linked(store):
    """"Python" is a common word of the vocabulary, so a sentence that opens with it names it
    only once Python is an entity; then a memory opening with it links to it."""
    first = api.remember(store, "Python keeps the scripts simple", embed_now=False)
    assert _names(store, first.id) == []
    api.remember(store, "We pin Python in CI", embed_now=False)
    later = api.remember(store, "Python keeps the build scripts short", embed_now=False)
    assert _names(store, later.id) == ["Python"]
    opened = api.remember(store, "Postgres keeps its WAL on the fast disk", embed_now=False)
    assert "Postgres" in _names(store, opened.id)


# -- rename -------------------------------------------------------------------------------------


def test_rename_keeps_memories_relations_and_the_old_name_finds_it(store):
    m = api.remember(store, "We moved the sessions to Postgres last week", embed_now=False)
    api.relate(store, "Postgres", "backs", "CheckoutApi", create=True)
    edit = api.rename_entity(store, "postgres", "PostgreSQL")
    assert edit.action == "rename" and edit.merged == "Postgres"
    assert edit.entity.name == "PostgreSQL" and "Postgres" in edit.entity.aliases and edit.entity.memories == 1
    assert _names(store, m.id) == ["PostgreSQL"]
    view = api.graph_show(store, "Postgres", depth=1, all_projects=True)  # the old name still finds it
    assert view.root == "PostgreSQL" and [r.relation for r in view.relations] == ["backs"]
    later = api.remember(store, "Nightly dumps of Postgres go to the bucket", embed_now=False)
    assert "PostgreSQL" in _names(store, later.id)  # a new memory saying the old name links to it
    assert [e.name for e in api.graph_entities(store, all_projects=True)] == ["CheckoutApi", "PostgreSQL"]


def test_rename_to_another_spelling_of_its_own_name_changes_how_it_is_written(store):
    api.remember(store, "we run on Postgres", embed_now=False)
    edit = api.rename_entity(store, "Postgres", "POSTGRES")
    assert edit.entity.name == "POSTGRES"
    assert api.graph_show(store, "postgres", depth=0, all_projects=True).root == "POSTGRES"


# -- merge --------------------------------------------------------------------------------------


def test_merge_moves_memories_relations_and_names(store):
    m1 = api.remember(store, "The orders live in Postgres", embed_now=False)
    m2 = api.remember(store, "Backups of PgCluster run at night", embed_now=False)
    m3 = api.remember(store, "Postgres and PgCluster are the same database", embed_now=False)
    api.relate_many(store, [("PgCluster", "feeds", "Reporting", 2.0), ("Reporting", "reads", "PgCluster"),
                            ("Postgres", "feeds", "Reporting", 5.0), ("PgCluster", "same as", "Postgres")], create=True)
    edit = api.merge_entities(store, "PgCluster", "Postgres")
    assert edit.action == "merge" and edit.merged == "PgCluster" and edit.entity.name == "Postgres"
    assert edit.links == 1 and edit.relations == 2  # m3 named both; `same as` between the two goes
    assert "PgCluster" in edit.entity.aliases
    assert "Postgres" in _names(store, m2.id) and "PgCluster" not in _names(store, m2.id)
    assert "Postgres" in _names(store, m1.id) and _names(store, m3.id).count("Postgres") == 1
    rels = {(r.source, r.relation, r.target): r.weight for r in api.graph_list(store, all_projects=True).relations}
    assert rels == {("Postgres", "feeds", "Reporting"): 5.0, ("Reporting", "reads", "Postgres"): 1.0}
    assert api.graph_show(store, "pgcluster", depth=0, all_projects=True).root == "Postgres"
    later = api.remember(store, "PgCluster failover takes a minute", embed_now=False)
    assert "Postgres" in _names(store, later.id)
    assert api.graph_show(store, "Postgres", depth=0, all_projects=True).nodes[0].entity.memories == 4


# -- aliases ------------------------------------------------------------------------------------


def test_an_alias_finds_the_entity_and_links_new_memories_until_removed(store):
    api.remember(store, "Our database is PostgreSQL 16", embed_now=False)
    edit = api.add_alias(store, "PostgreSQL", "Pgsql")
    assert edit.action == "alias-add" and "Pgsql" in edit.entity.aliases
    assert api.graph_show(store, "pgsql", depth=0, all_projects=True).root == "PostgreSQL"
    m = api.remember(store, "The reports read from Pgsql replicas", embed_now=False)
    assert "PostgreSQL" in _names(store, m.id)
    removed = api.remove_alias(store, "PostgreSQL", "pgsql")
    assert removed.action == "alias-remove" and "Pgsql" not in removed.entity.aliases
    with pytest.raises(NotFound):
        api.graph_show(store, "Pgsql", depth=0, all_projects=True)
    assert "PostgreSQL" in _names(store, m.id)  # memories linked before stay linked


def test_alias_bad_input_changes_nothing(store):
    api.remember(store, "PostgreSQL and Redis run in the compose file", embed_now=False)
    before = _graph_state(store)
    with pytest.raises(Refused, match="already the entity 'Redis'"):
        api.add_alias(store, "PostgreSQL", "redis")
    with pytest.raises(Refused, match="already a name of"):
        api.add_alias(store, "PostgreSQL", "PostgreSQL")
    with pytest.raises(Refused, match="not an alias"):
        api.remove_alias(store, "PostgreSQL", "postgresql")
    with pytest.raises(NotFound, match="no alias 'Pg'"):
        api.remove_alias(store, "PostgreSQL", "Pg")
    with pytest.raises(NotFound, match="unknown entity 'Nobody'"):
        api.add_alias(store, "Nobody", "Nemo")
    assert _graph_state(store) == before


# -- delete and unlink --------------------------------------------------------------------------


def test_delete_removes_the_entity_its_links_and_relations_not_the_memories(store):
    m = api.remember(store, "Redis caches the sessions", embed_now=False)
    api.relate(store, "Redis", "caches for", "CheckoutApi", create=True)
    edit = api.delete_entity(store, "redis")
    assert edit.action == "delete" and edit.entity.name == "Redis" and (edit.links, edit.relations) == (1, 1)
    assert _names(store, m.id) == [] and api.get(store, m.id).content == "Redis caches the sessions"
    assert api.graph_list(store, all_projects=True).relations == []
    with pytest.raises(NotFound):
        api.graph_show(store, "Redis", depth=0, all_projects=True)


def test_unlink_removes_a_wrong_automatic_link(store):
    m = api.remember(store, "Our team met Chrome engineers at Berlin", embed_now=False)
    other = api.remember(store, "Chrome 120 breaks the upload form", embed_now=False)
    assert "Berlin" in _names(store, m.id)
    edit = api.unlink_entity(store, m.id, "Chrome")
    assert edit.action == "unlink" and edit.memory_id == m.id and edit.detail == ""
    assert "Chrome" not in _names(store, m.id) and "Chrome" in _names(store, other.id)
    gone = api.unlink_entity(store, m.id, "Berlin")
    assert "deleted" in gone.detail  # it named no other memory and had no relation
    with pytest.raises(NotFound):
        api.graph_show(store, "Berlin", depth=0, all_projects=True)
    before = _graph_state(store)
    with pytest.raises(NotFound, match="not linked to 'Chrome'"):
        api.unlink_entity(store, m.id, "Chrome")
    with pytest.raises(NotFound):
        api.unlink_entity(store, 999, "Chrome")
    assert _graph_state(store) == before
    assert api.get(store, m.id).content == "Our team met Chrome engineers at Berlin"


# -- bad input: one line, exit code, nothing changed --------------------------------------------


def _seed_projects(store) -> None:
    api.remember(store, "CheckoutApi talks to Postgres for carts", project="a", embed_now=False)
    api.remember(store, "Redis holds the sessions of CheckoutApi", project="a", embed_now=False)
    api.remember(store, "LedgerVault keeps the payroll keys", project="b", embed_now=False)
    api.remember(store, "SharedLib is pinned in CheckoutApi", project="a", embed_now=False)
    api.remember(store, "SharedLib is pinned to version 3", project="b", embed_now=False)


def test_edits_follow_the_project_scope(store):
    _seed_projects(store)
    before = _graph_state(store)
    with pytest.raises(NotFound, match="unknown target entity 'LedgerVault'"):
        api.merge_entities(store, "Redis", "LedgerVault", scope=A)  # another project's: unknown here
    with pytest.raises(NotFound, match="unknown entity 'LedgerVault'"):
        api.rename_entity(store, "LedgerVault", "Vault", scope=A)
    with pytest.raises(NotFound):
        api.delete_entity(store, "LedgerVault", scope=A)
    assert _graph_state(store) == before
    # each project has its own SharedLib: editing a's leaves b's as it was
    b_before = _project_graph(store, "b")
    assert api.add_alias(store, "SharedLib", "Shlib", scope=A).entity.name == "SharedLib"
    assert api.rename_entity(store, "SharedLib", "Shared", scope=A).entity.name == "Shared"
    assert api.merge_entities(store, "Redis", "Shared", scope=A).entity.name == "Shared"
    assert api.delete_entity(store, "Shared", scope=A).entity.name == "Shared"
    assert _project_graph(store, "b") == b_before
    # b's name is free in a: renaming to it answers as renaming to a name stored nowhere
    assert api.rename_entity(store, "Postgres", "LedgerVault", scope=A).entity.name == "LedgerVault"
    assert _project_graph(store, "b") == b_before
    # every project: a name two projects hold is ambiguous; --project chooses
    with pytest.raises(Refused, match="several projects have an entity 'LedgerVault'"):
        api.rename_entity(store, "LedgerVault", "Vault", scope=EVERY)
    assert api.rename_entity(store, "CheckoutApi", "Checkout", scope=EVERY).entity.name == "Checkout"


def _project_graph(store, project: str) -> tuple:
    listing = api.graph_list(store, project=project)
    return (sorted((e.id, e.name, e.type, tuple(e.aliases), e.memories) for e in listing.entities),
            sorted((r.source, r.relation, r.target, r.weight) for r in listing.relations))


def test_merge_into_itself_and_onto_names_of_one_entity(store):
    api.remember(store, "Postgres keeps the orders", embed_now=False)
    api.add_alias(store, "Postgres", "Pgsql")
    before = _graph_state(store)
    with pytest.raises(InvalidInput, match="into itself") as same:
        api.merge_entities(store, "Postgres", "postgres ")
    assert not isinstance(same.value, Refused)  # usage: exit 2
    with pytest.raises(Refused, match="names of one entity"):
        api.merge_entities(store, "Pgsql", "Postgres")
    with pytest.raises(NotFound, match="unknown entity 'Nowhere'"):
        api.merge_entities(store, "Nowhere", "Postgres")
    with pytest.raises(Refused, match="already has that name"):
        api.rename_entity(store, "Postgres", "Postgres")
    with pytest.raises(InvalidInput, match="empty"):
        api.rename_entity(store, "Postgres", "   ")
    assert _graph_state(store) == before


def _one_line(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_cli_edits_and_their_bad_input(cli, db_path):
    for text, project in (("CheckoutApi talks to Postgres for carts", "a"),
                          ("Redis holds the sessions of CheckoutApi", "a"),
                          ("LedgerVault keeps the payroll keys", "b")):
        assert cli("remember", text, "-p", project, "--no-embed").exit_code == 0

    def state():
        return cli("graph", "list", "--all-projects", "--json").stdout

    before = state()
    _one_line(cli("graph", "merge", "Redis", "redis", "-p", "a"), 2, "into itself")
    _one_line(cli("graph", "merge", "Redis", "LedgerVault", "-p", "a"), 1, "unknown target entity 'LedgerVault'")
    _one_line(cli("graph", "rename", "Redis", "Postgres", "-p", "a"), 1, "already the entity 'Postgres'",
              "graph merge")
    _one_line(cli("graph", "rename", "Nobody", "Somebody", "-p", "a"), 1, "unknown entity 'Nobody'")
    _one_line(cli("graph", "alias", "Nobody", "Nemo", "-p", "a"), 1, "unknown entity")
    _one_line(cli("graph", "unalias", "Redis", "Rds", "-p", "a"), 1, "no alias")
    _one_line(cli("graph", "unlink", "1", "Redis", "-p", "a"), 1, "not linked")
    _one_line(cli("graph", "unlink", "0", "Redis", "-p", "a"), 2)
    _one_line(cli("graph", "delete", "Redis", "-p", "a"), 2, "--yes")
    assert state() == before

    renamed = cli("graph", "rename", "Postgres", "PostgreSQL", "-p", "a", "--json")
    assert renamed.exit_code == 0, renamed.stderr
    assert json.loads(renamed.stdout)["entity"]["name"] == "PostgreSQL"
    plain = cli("graph", "alias", "PostgreSQL", "Pgsql", "-p", "a")
    assert plain.exit_code == 0 and "Pgsql is now another name" in plain.stdout
    merged = cli("graph", "merge", "Redis", "PostgreSQL", "-p", "a")
    assert merged.exit_code == 0 and "Merged Redis into entity" in merged.stdout, merged.stderr
    assert cli("graph", "unalias", "PostgreSQL", "Redis", "-p", "a").exit_code == 0
    unlinked = cli("graph", "unlink", "2", "PostgreSQL", "-p", "a")
    assert unlinked.exit_code == 0 and "Memory 2 no longer names" in unlinked.stdout
    deleted = cli("graph", "delete", "CheckoutApi", "-p", "a", "--yes")
    assert deleted.exit_code == 0 and "Deleted entity" in deleted.stdout
    names = {e["name"] for e in json.loads(cli("graph", "entities", "-p", "a", "--json").stdout)}
    assert names == {"PostgreSQL"}


def test_entities_sort_and_limit(cli, store, monkeypatch, db_path):
    for n, text in enumerate(["Zorbix and Alpix share a queue", "Alpix restarts", "Alpix and Midrex talk",
                              "Midrex is new", "Omnix came last"]):
        monkeypatch.setenv("MEMSAFE_NOW", f"2026-03-0{n + 1}T10:00:00Z")
        api.remember(store, text, embed_now=False)
    by = lambda *args: [e["name"] for e in json.loads(cli("graph", "entities", "--json", *args).stdout)]  # noqa: E731
    assert by() == ["Alpix", "Midrex", "Omnix", "Zorbix"]
    assert by("--sort", "name", "--limit", "2") == ["Alpix", "Midrex"]
    assert by("--sort", "count") == ["Alpix", "Midrex", "Omnix", "Zorbix"]  # 3, 2, 1, 1 (ties by name)
    assert by("--sort", "recent") == ["Omnix", "Midrex", "Alpix", "Zorbix"]
    assert by("--sort", "recent", "--limit", "1") == ["Omnix"]
    table = cli("graph", "entities", "--sort", "count", "--limit", "2")
    assert table.exit_code == 0 and table.stdout.startswith("4 entities, the first 2 most mentioned")
    rows = api.graph_entities(store, all_projects=True, sort="recent", limit=2)
    assert [e.name for e in rows] == ["Omnix", "Midrex"] and rows[0].last_mentioned.startswith("2026-03-05")
    with pytest.raises(InvalidInput):
        api.graph_entities(store, sort="size")
    wrong = run_memsafe("--db", str(db_path), "graph", "entities", "--sort", "size")
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1
    assert "'size' is not one of 'name', 'count', 'recent'" in wrong.stderr


def test_renamed_and_merged_names_survive_export_and_import(store, tmp_path):
    api.remember(store, "We moved the sessions to Postgres", embed_now=False)
    api.remember(store, "PgCluster failover takes a minute", embed_now=False)
    api.rename_entity(store, "Postgres", "PostgreSQL")
    api.merge_entities(store, "PgCluster", "PostgreSQL")
    api.export_to_path(store, tmp_path / "graph.jsonl", all_projects=True)
    target = api.open_store(str(tmp_path / "copy.db")).store
    try:
        api.import_file(target, tmp_path / "graph.jsonl")
        for name in ("Postgres", "PgCluster", "postgresql"):
            assert api.graph_show(target, name, depth=0, all_projects=True).root == "PostgreSQL"
        m = api.remember(target, "Postgres vacuum runs at night", embed_now=False)
        assert "PostgreSQL" in target.entity_names(m.id)
    finally:
        target.close()
