"""Scope on the graph's write and read paths: a caller scoped to one project neither learns that
an entity exists only in another project nor attaches relations to it, through the API, the CLI
and a real MCP client over stdio. Project "a" is the caller; "b" holds a name only it uses
(LedgerVault); Handmade is a hand-made (global) entity; SharedLib is named by both projects.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memsafe import api
from memsafe.errors import NotFound

# conftest: tests on `store` or `cli` run once per backend; the stdio test keeps a SQLite file
pytestmark = pytest.mark.backends("sqlite", "postgres")

A = api.make_scope(project="a")
B = api.make_scope(project="b")
GLOBAL = api.make_scope(project=None)
EVERY = api.make_scope(project=None, all_projects=True)


def _seed(store) -> None:
    api.remember(store, "CheckoutApi talks to SharedLib for carts", project="a", embed_now=False)
    api.remember(store, "LedgerVault keeps the payroll keys", project="b", embed_now=False)
    api.remember(store, "SharedLib is pinned to version 3", project="b", embed_now=False)
    api.add_entity(store, "Handmade", type="tool")
    api.relate(store, "LedgerVault", "backs_up_to", "Handmade", scope=B)


def _message(exc_info, name: str) -> str:
    return str(exc_info.value).replace(name, "NAME")


def _all_relations(store) -> set[tuple[str, str, str]]:
    return {(r.source, r.relation, r.target) for r in api.graph_list(store, all_projects=True).relations}


@pytest.fixture
def seeded(store):
    _seed(store)
    return store


# -- writes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", [A, GLOBAL], ids=["project", "global"])
def test_relate_to_another_projects_entity_is_unknown_word_for_word(seeded, scope):
    before = _all_relations(seeded)
    with pytest.raises(NotFound) as foreign:
        api.relate(seeded, "Handmade", "leaks to", "LedgerVault", scope=scope)
    with pytest.raises(NotFound) as absent:
        api.relate(seeded, "Handmade", "leaks to", "NoSuchThing", scope=scope)
    assert _message(foreign, "LedgerVault") == _message(absent, "NoSuchThing")
    assert _all_relations(seeded) == before
    # a batch with one such endpoint stores nothing
    with pytest.raises(NotFound, match="LedgerVault"):
        api.relate_many(seeded, [("CheckoutApi", "uses", "Handmade"), ("CheckoutApi", "reads", "LedgerVault")],
                        scope=scope)
    assert _all_relations(seeded) == before


def _b_graph(store) -> tuple[set, dict]:
    listing = api.graph_list(store, project="b")
    return ({(r.source, r.relation, r.target) for r in listing.relations},
            {e.name: (e.type, e.aliases, e.memories) for e in listing.entities})


def test_create_over_another_projects_name_makes_this_projects_own_entity(seeded):
    """Each project has its own entities: creating a name only b holds answers exactly as for a
    name stored nowhere, makes a's own entity, and b's graph does not change."""
    before = _b_graph(seeded)
    foreign = api.relate(seeded, "CheckoutApi", "free text relation, any words", "ledgervault", create=True, scope=A)
    absent = api.relate(seeded, "CheckoutApi", "free text relation, any words", "nosuchthing", create=True, scope=A)
    assert (foreign.source, foreign.relation, foreign.target) == ("CheckoutApi", "free text relation, any words",
                                                                  "ledgervault")
    assert (absent.source, absent.target) == ("CheckoutApi", "nosuchthing")
    made = api.add_entity(seeded, "LEDGERVAULT", type="secret", scope=A)
    fresh = api.add_entity(seeded, "NOSUCHTHING", type="secret", scope=A)
    assert (made.created, made.memories, made.type) == (fresh.created, fresh.memories, fresh.type) == (
        False, 0, "secret")
    assert _b_graph(seeded) == before  # b's LedgerVault: same relations, type, aliases and memories
    in_a = api.graph_show(seeded, "LedgerVault", depth=1, project="a")
    assert in_a.nodes[0].entity.id != api.graph_show(seeded, "LedgerVault", depth=0, project="b").nodes[0].entity.id
    assert {(r.source, r.target) for r in in_a.relations} == {("CheckoutApi", "ledgervault")}
    assert "backs_up_to" not in {r.relation for r in in_a.relations}


def test_unrelate_another_projects_relation_is_unknown_and_keeps_it(seeded):
    with pytest.raises(NotFound) as foreign:
        api.unrelate(seeded, "LedgerVault", None, "Handmade", scope=A)
    with pytest.raises(NotFound) as absent:
        api.unrelate(seeded, "NoSuchThing", None, "Handmade", scope=A)
    assert _message(foreign, "LedgerVault") == _message(absent, "NoSuchThing")
    assert ("LedgerVault", "backs_up_to", "Handmade") in _all_relations(seeded)
    assert api.unrelate(seeded, "LedgerVault", "backs_up_to", "Handmade", scope=B) == 1


def test_project_scope_writes_its_own_and_global_entities(seeded):
    api.relate(seeded, "CheckoutApi", "uses", "Handmade", scope=A)
    api.relate(seeded, "SharedLib", "feeds", "CheckoutApi", scope=A)  # SharedLib: named by a's text too
    view = api.graph_show(seeded, "CheckoutApi", depth=1, project="a")
    assert {(r.source, r.relation, r.target) for r in view.relations} == {
        ("CheckoutApi", "uses", "Handmade"), ("SharedLib", "feeds", "CheckoutApi")}
    assert api.unrelate(seeded, "CheckoutApi", "uses", "Handmade", scope=A) == 1


def test_every_project_scope_reaches_every_entity(seeded):
    api.relate(seeded, "CheckoutApi", "audited_by", "LedgerVault", scope=EVERY)
    assert ("CheckoutApi", "audited_by", "LedgerVault") in _all_relations(seeded)
    assert api.unrelate(seeded, "CheckoutApi", None, "LedgerVault", scope=EVERY) == 1


def test_a_memory_naming_the_entity_links_it_in_its_own_project_only(seeded):
    """Linking a memory is the write that makes a name a project's: a's text names LedgerVault,
    so a sees it from then on, with a's memory only; b still sees b's memory only."""
    mine = api.remember(seeded, "CheckoutApi signs receipts with LedgerVault", project="a", embed_now=False)
    in_a = api.graph_show(seeded, "LedgerVault", depth=0, project="a")
    assert [m.id for m in in_a.nodes[0].memories] == [mine.id]
    in_b = api.graph_show(seeded, "LedgerVault", depth=0, project="b")
    assert mine.id not in [m.id for m in in_b.nodes[0].memories]
    assert api.add_entity(seeded, "LedgerVault", scope=A).memories == 1  # counts a's memories, not b's
    api.relate(seeded, "CheckoutApi", "signs_with", "LedgerVault", scope=A)


# -- reads ----------------------------------------------------------------------------------------


def _export_names(store, **scope) -> str:
    out = io.StringIO()
    api.export(store, out, **scope)
    return out.getvalue()


@pytest.mark.parametrize(("where", "options", "sees"), [
    ("a", {"project": "a"}, False),
    ("global", {}, False),
    ("b", {"project": "b"}, True),
    ("every", {"all_projects": True}, True),
])
def test_reads_show_another_projects_entity_and_relations_only_where_it_lives(seeded, where, options, sees):
    names = {e.name for e in api.graph_entities(seeded, **options)}
    assert ("LedgerVault" in names) is sees
    relations = {(r.source, r.target) for r in api.graph_list(seeded, **options).relations}
    assert (("LedgerVault", "Handmade") in relations) is sees
    if sees:
        view = api.graph_show(seeded, "LedgerVault", depth=1, **options)
        assert [(r.source, r.relation, r.target) for r in view.relations] == [("LedgerVault", "backs_up_to",
                                                                                "Handmade")]
    else:
        with pytest.raises(NotFound) as foreign:
            api.graph_show(seeded, "LedgerVault", **options)
        with pytest.raises(NotFound) as absent:
            api.graph_show(seeded, "NoSuchThing", **options)
        assert _message(foreign, "LedgerVault") == _message(absent, "NoSuchThing")
        # walking from the global entity does not reach it either
        view = api.graph_show(seeded, "Handmade", depth=3, **options)
        assert "LedgerVault" not in {n.entity.name for n in view.nodes} and view.relations == []
    # recall's graph context (a query naming the entity and the global one)
    recall_options = {"project": options.get("project"), "all_projects": options.get("all_projects", False)}
    result = api.recall(seeded, "Handmade LedgerVault payroll CheckoutApi", mode="lexical", **recall_options)
    assert ("LedgerVault" in result.graph_context) is sees
    # export carries the entity and its relation only where it lives
    assert ('"LedgerVault"' in _export_names(seeded, **recall_options)) is sees


def test_relations_written_in_b_show_in_b_but_not_in_a(seeded):
    api.relate(seeded, "SharedLib", "wraps", "LedgerVault", scope=B)
    b_view = api.graph_show(seeded, "SharedLib", depth=1, project="b")
    assert ("SharedLib", "wraps", "LedgerVault") in {(r.source, r.relation, r.target) for r in b_view.relations}
    a_view = api.graph_show(seeded, "SharedLib", depth=2, project="a")
    assert "LedgerVault" not in {n.entity.name for n in a_view.nodes}
    assert all("LedgerVault" not in (r.source, r.target) for r in a_view.relations)
    result = api.recall(seeded, "SharedLib LedgerVault", project="a", mode="lexical")
    assert "LedgerVault" not in result.graph_context


# -- CLI --------------------------------------------------------------------------------------------


def test_cli_graph_writes_follow_the_project(cli):
    assert cli("remember", "LedgerVault keeps the payroll keys", "--project", "b").exit_code == 0
    assert cli("remember", "CheckoutApi renders carts", "--project", "a").exit_code == 0
    assert cli("graph", "add-entity", "Handmade").exit_code == 0
    foreign = cli("graph", "relate", "CheckoutApi", "leaks to", "LedgerVault", "--project", "a")
    absent = cli("graph", "relate", "CheckoutApi", "leaks to", "NoSuchThing", "--project", "a")
    assert foreign.exit_code == absent.exit_code == 1
    assert foreign.stderr.replace("LedgerVault", "NAME") == absent.stderr.replace("NoSuchThing", "NAME")
    assert len(foreign.stderr.strip().splitlines()) == 1 and "Traceback" not in foreign.stderr
    # creating b's name in a answers as for a free name, and makes a's own entity
    created = cli("graph", "relate", "CheckoutApi", "leaks to", "LedgerVault", "--create", "--project", "a")
    fresh = cli("graph", "relate", "CheckoutApi", "leaks to", "NoSuchThing", "--create", "--project", "a")
    assert created.exit_code == fresh.exit_code == 0, created.stderr
    assert created.stdout.replace("LedgerVault", "NAME") == fresh.stdout.replace("NoSuchThing", "NAME")
    made = cli("graph", "add-entity", "LedgerVault", "--project", "a")
    again = cli("graph", "add-entity", "NoSuchThing", "--project", "a")
    assert made.exit_code == again.exit_code == 0
    def masked(out: str, name: str) -> str:  # entity ids are the store's own sequence
        return re.sub(r"entity \d+", "entity N", out.replace(name, "NAME"))

    assert masked(made.stdout, "LedgerVault") == masked(again.stdout, "NoSuchThing")
    cli("graph", "unrelate", "CheckoutApi", "*", "LedgerVault", "--project", "a")
    assert cli("graph", "relate", "LedgerVault", "backs_up_to", "Handmade", "--project", "b").exit_code == 0
    gone = cli("graph", "unrelate", "LedgerVault", "*", "Handmade", "--project", "a")
    assert gone.exit_code == 1 and "no relation LedgerVault * Handmade" in gone.stderr
    shown = json.loads(cli("graph", "show", "LedgerVault", "--project", "b", "--json").stdout)
    assert [(r["source"], r["relation"], r["target"]) for r in shown["relations"]] == [
        ("LedgerVault", "backs_up_to", "Handmade")]
    listing = json.loads(cli("graph", "list", "--all-projects", "--json").stdout)
    assert [(r["source"], r["target"]) for r in listing["relations"]] == [
        ("CheckoutApi", "NoSuchThing"), ("LedgerVault", "Handmade")]
    wide = cli("graph", "relate", "CheckoutApi", "audited_by", "LedgerVault", "--all-projects")
    assert wide.exit_code == 0, wide.stderr


# -- a real MCP client over stdio -----------------------------------------------------------------


def test_mcp_server_scoped_to_a_cannot_see_or_attach_to_bs_entity(tmp_path, embedder):
    db, home, cwd = tmp_path / "db" / "memory.db", tmp_path / "home", tmp_path / "srv"
    cwd.mkdir()
    opened = api.open_store(str(db))
    try:
        _seed(opened.store)
    finally:
        opened.store.close()

    async def body(s: ClientSession):
        out = {}
        for name in ("LedgerVault", "NoSuchThing"):
            out[name] = {
                "relate": await s.call_tool("relate_entities",
                                            {"relations": [["Handmade", "free text: leaks to", name]]}),
                "query": await s.call_tool("query_graph", {"entity": name}),
            }
            out[name]["create"] = await s.call_tool("relate_entities",
                                                    {"relations": [["Handmade", "leaks to", name]], "create": True})
        out["handmade"] = await s.call_tool("query_graph", {"entity": "Handmade", "depth": 3})
        out["ledger"] = await s.call_tool("query_graph", {"entity": "LedgerVault", "depth": 3})
        out["recall"] = await s.call_tool("recall", {"query": "Handmade LedgerVault payroll"})
        return out

    async def run():
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "memsafe", "--db", str(db), "serve", "--project", "a"],
                                       env={"MEMSAFE_HOME": str(home)}, cwd=str(cwd))
        with open(tmp_path / "server.err", "w", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    out = anyio.run(run)
    text = {k: {op: "\n".join(c.text for c in r.content) for op, r in v.items()}
            for k, v in out.items() if isinstance(v, dict)}
    for op in ("relate", "query", "create"):
        assert out["LedgerVault"][op].is_error == out["NoSuchThing"][op].is_error == (op != "create"), op
        assert text["LedgerVault"][op].replace("LedgerVault", "NAME") == \
            text["NoSuchThing"][op].replace("NoSuchThing", "NAME"), op
    # a's LedgerVault is a's own: b's relation and memory stay out of a's graph and recall
    seen = "\n".join(c.text for r in (out["handmade"], out["ledger"], out["recall"]) for c in r.content)
    assert "backs_up_to" not in seen and "payroll" not in seen
    assert "leaks to" in "\n".join(c.text for c in out["ledger"].content)
    assert "Traceback" not in Path(tmp_path / "server.err").read_text(encoding="utf-8")
    opened = api.open_store(str(db))
    try:
        b_view = api.graph_show(opened.store, "LedgerVault", depth=1, project="b")
        assert [(r.source, r.relation, r.target) for r in b_view.relations] == [("LedgerVault", "backs_up_to",
                                                                                 "Handmade")]
        recall_b = api.recall(opened.store, "Handmade LedgerVault payroll", project="b", mode="lexical")
        assert "leaks to" not in recall_b.graph_context
        b_list = api.graph_list(opened.store, project="b")
        assert [(r.source, r.target) for r in b_list.relations] == [("LedgerVault", "Handmade")]
        b_node = b_view.nodes[0].entity
        assert (b_node.type, b_node.memories) == ("identifier", 1)
    finally:
        opened.store.close()


def test_a_query_naming_another_projects_entity_leads_nowhere_in_scope(seeded):
    """Recall's graph hop starts from entities the scope sees: in a, a query naming b's
    LedgerVault does not reach a's memory about Handmade through b's relation LedgerVault -> Handmade."""
    from memsafe.recall import related

    mine = api.remember(seeded, "the nightly reports run there", project="a", entities=["Handmade"],
                        embed_now=False)
    named = related.query_entities(seeded, "what about LedgerVault")
    assert related.one_hop(seeded, named, api.make_scope(project="a")) == ({}, set())
    assert mine.id in related.one_hop(seeded, named, EVERY)[0]
