"""Responsibility: the knowledge-graph handlers (entities, relations, traversal) and the graph
helpers recall uses (entities named by a query, one-hop memories, graph context text).

Entity identity is `graph.entity_key` (NFKC + casefold + collapsed whitespace): differently
spelled names of one entity share a row; the first spelling seen is the display name and the
others are kept as aliases. Relations never create entities silently: an
unknown endpoint is an error naming it unless `create=True`, and a batch is atomic.
Forgotten and archived memories never appear in graph views.

Scope: graph views and the relations text in recall follow recall's rule: the current project
plus global memories, every project only when asked (`all_projects`). Every entity belongs to
one project or to the global graph (that of memories with no project, which every project
sees): a memory is linked to its own project's entities, or to global ones, and one name two
projects use is two entities. A scope sees the entities of its project and the global ones
(`Store.owners_of`); another project's entity is not shown, not walked through, and its
relations are left out.

Writes follow the same rule: `add_entity`, `relate_many`, `unrelate` and the edits take the
caller's scope, find a name among its own project's entities first, then the global ones, and
create a missing one in its own project (the global graph when it has none); a new memory is
linked the same way, by its own project. Another project's entity is, to them, a name that
does not exist: the same replies, word for word, as for a name stored nowhere, and nothing
attached to it.

Edits (`rename_entity`, `merge_entities`, `add_alias`, `remove_alias`, `delete_entity`) change
the entity of the scope only; with every project as the scope (`--all-projects`), a name that
several projects hold is refused as ambiguous (`--project` chooses one). A global entity that
memories of other projects name too is theirs as well: editing it from one project is refused.
`unlink_entity` changes one memory of the scope only. Each edit is one transaction: it happens
whole, or not at all.

An entity has one display name and one identity key, and any number of other names (aliases)
that find it: the spellings seen, names added with `add_alias`, its former names after a rename,
the names of entities merged into it. Extraction links a new memory that says an alias to the
entity, and `graph show` and recall find it under each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from memsafe import clock, graph, textform
from memsafe.api.hygiene import (
    _check_id,
    _controls_to_space,
    _fix_surrogates,
    clean_text,
    make_scope,
    refuse_secret,
)
from memsafe.errors import InvalidInput, NotFound, Refused
from memsafe.models import (
    EntityInfo,
    GraphEdit,
    GraphListing,
    GraphNode,
    GraphView,
    MemoryRef,
    RelationInfo,
    Scope,
)
from memsafe.store import Store

__all__ = [
    "add_entity", "relate", "relate_many", "unrelate", "graph_show", "graph_entities", "graph_list",
    "link_entities", "move_links", "clean_entity_names", "rename_entity", "merge_entities", "add_alias", "remove_alias",
    "delete_entity", "unlink_entity", "ENTITY_SORTS",
]

MAX_RELATION_CHARS = 64
MAX_WEIGHT = 1000.0
MAX_DEPTH = 10
MAX_LIMIT = 10_000
MEMORIES_PER_NODE = 5
PREVIEW_CHARS = 100


# ---------------------------------------------------------------------------------------------
# Input hygiene


def _clean_name(name: str) -> str:
    text = graph.clean_name(clean_text(name, "entity name", graph.MAX_ENTITY_CHARS))
    if not graph.entity_key(text):
        raise InvalidInput("entity name is empty")
    return refuse_secret(text, "entity name")


def clean_entity_names(names: Sequence[str]) -> list[str]:
    """Explicit entity names fit to store (trimmed, NFC); raises InvalidInput for an empty or over-long one."""
    return [_clean_name(n) for n in names]


def _clean_relation(relation: str) -> str:
    # NFC: a relation type typed with a decomposed accent is the same relation
    text = " ".join(textform.canonical(_controls_to_space(_fix_surrogates(str(relation)))).split())
    if not text:
        raise InvalidInput("relation type is empty")
    if len(text) > MAX_RELATION_CHARS:
        raise InvalidInput(f"relation type is longer than {MAX_RELATION_CHARS} characters")
    if text == "*":
        raise InvalidInput("'*' is not a relation type (`graph unrelate` uses it to mean every type)")
    return refuse_secret(text, "relation type")


def _clean_weight(weight: float) -> float:
    try:
        value = float(weight)
    except (TypeError, ValueError):
        raise InvalidInput(f"weight must be a number, got {weight!r}") from None
    if math.isnan(value) or not 0.0 <= value <= MAX_WEIGHT:
        raise InvalidInput(f"weight must be between 0 and {MAX_WEIGHT:g}, got {weight}")
    return value


# ---------------------------------------------------------------------------------------------
# Entities


GLOBAL = ""  # the owner of the global graph's entities (`Store.owners_of`)


def _owners(store: Store, scope: Scope | None) -> list[str] | None:
    """The projects whose entities `scope` reads and writes, its own first (None: every one)."""
    return None if scope is None else store.owners_of(scope)


def _home(scope: Scope | None) -> str:
    """The project a write in `scope` creates entities in: its own, else the global graph."""
    return scope.projects[0] if scope is not None and scope.projects else GLOBAL


def _get_or_create(store: Store, name: str, type_: str, at: str, owners: Sequence[str] | None = (GLOBAL,),
                   home: str = GLOBAL) -> tuple[int, bool]:
    """Entity id for `name` among the entities of `owners` (creating it in `home`), adding the
    spelling as an alias. Call inside `write()`."""
    key = graph.entity_key(name)
    found = store.entities_by_keys([key], owners).get(key)
    if found is None:
        return store.insert_entity(name, key, type_, at, home), True
    entity_id, _display, existing_type = found
    store.add_alias(entity_id, name)
    if existing_type == "entity" and type_ != "entity":
        store.set_entity_type(entity_id, type_)
    return entity_id, False


def link_entities(store: Store, memory_id: int, content: str, explicit: Sequence[str], at: str,
                  project: str | None = None) -> list[int]:
    """Extract entities from `content` (plus the explicit names) and link them to the memory,
    creating entities as needed: the memory's `project` (None: global) links its own entities,
    else global ones, and a missing one is made in that project. Call inside the memory's write
    transaction. Returns entity ids."""
    ids = []
    owner = project or GLOBAL
    owners = list(dict.fromkeys([owner, GLOBAL]))
    known = lambda keys: store.entities_by_keys(keys, owners).keys()  # noqa: E731
    for entity in graph.extract_entities(content, explicit, is_known=known):
        entity_id, _ = _get_or_create(store, entity.name, entity.type, at, owners, owner)
        ids.append(entity_id)
    store.link_memory_entities(memory_id, ids)
    return ids


def move_links(store: Store, memory_id: int, project: str | None, at: str) -> None:
    """Link a memory that moved to `project` (None: global) to the entities of the same names
    it links to there (`link_entities`) instead of its old project's; an old entity left with no
    memory and no relation goes. Call inside the memory's write transaction."""
    old = store.memory_entity_ids([memory_id]).get(memory_id, [])
    if not old:
        return
    owner = project or GLOBAL
    owners = list(dict.fromkeys([owner, GLOBAL]))
    rows = store.entity_rows(old)
    for entity_id in old:
        row = rows[entity_id]
        if row["project"] in owners:
            continue
        new_id, _ = _get_or_create(store, row["name"], row["type"], at, owners, owner)
        store.unlink_memory_entity(memory_id, entity_id)
        store.link_memory_entity(memory_id, new_id)
    store.delete_orphan_entities(old)


def _info(store: Store, entity_id: int, created: bool = False, scope: Scope | None = None) -> EntityInfo:
    row = store.entity_rows([entity_id])[entity_id]
    counts = store.entity_memories([entity_id], scope or Scope(projects=None))
    return EntityInfo(
        id=row["id"], name=row["name"], type=row["type"], aliases=row["aliases"],
        memories=len(counts.get(entity_id, [])), created=created,
    )


def add_entity(store: Store, name: str, *, type: str | None = None,  # noqa: A002
               scope: Scope | None = None) -> EntityInfo:
    """Create an entity, or return the existing one with the same identity key (the new
    spelling is kept as an alias; a given type replaces the one it had, default or not).

    Args:
        scope: the caller's projects (`make_scope`); None is every project. `memories` of the
            result counts the memories in it.

    Raises:
        InvalidInput: empty or over-long name or type.
    """
    display = _clean_name(name)
    type_v = _clean_relation(type) if type is not None else "entity"
    with store.write():
        entity_id, created = _get_or_create(store, display, type_v, clock.now_iso(), _owners(store, scope),
                                            _home(scope))
        if type is not None and not created:
            store.set_entity_type(entity_id, type_v)
        store.add_event(clock.now_iso(), "graph.add_entity", None, "created" if created else "exists")
    return _info(store, entity_id, created, scope)


def _resolve(store: Store, names: Sequence[str], scope: Scope | None = None) -> dict[str, tuple[int, str, str]]:
    """{identity key: (id, display name, type)} of the named entities that `scope` owns (None:
    every project's, the oldest first): its own project's first, then the global ones. Another
    project's entity is not looked at, exactly as if it did not exist."""
    return store.entities_by_keys([graph.entity_key(n) for n in names], _owners(store, scope))


# ---------------------------------------------------------------------------------------------
# Relations


def relate_many(store: Store, relations: Sequence[Mapping | Sequence], *, create: bool = False,
                scope: Scope | None = None) -> list[RelationInfo]:
    """Add typed, weighted relations, all or nothing.

    Args:
        relations: items `{"source", "relation", "target", "weight"?}` (also accepted: `from`,
            `to`, `type`) or tuples `(source, relation, target[, weight])`.
        create: create missing endpoint entities; otherwise any unknown endpoint is an error.
        scope: the caller's projects (`make_scope`); None is every project. An entity of other
            projects only is unknown to it (module docstring).

    Returns:
        The stored relations (display names), in input order. Re-adding a relation updates its weight.

    Raises:
        InvalidInput: malformed item, empty name or relation, bad weight, empty batch.
        NotFound: an endpoint does not exist in scope (message names every missing one); nothing
            is stored.
    """
    if not relations:
        raise InvalidInput("no relations given")
    parsed: list[tuple[str, str, str, float]] = []
    for n, item in enumerate(relations, start=1):
        if isinstance(item, Mapping):
            source = item.get("source", item.get("from"))
            relation = item.get("relation", item.get("type", item.get("relationType")))
            target = item.get("target", item.get("to"))
            weight = item.get("weight", 1.0)
        elif isinstance(item, (list, tuple)) and len(item) in (3, 4):
            source, relation, target = item[0], item[1], item[2]
            weight = item[3] if len(item) == 4 else 1.0
        else:
            raise InvalidInput(f"relation {n}: expected source, relation, target[, weight]")
        if source is None or relation is None or target is None:
            raise InvalidInput(f"relation {n}: source, relation and target are all required")
        parsed.append((_clean_name(str(source)), _clean_relation(relation), _clean_name(str(target)),
                       _clean_weight(weight)))
    now = clock.now_iso()
    with store.write():
        names = [p[0] for p in parsed] + [p[2] for p in parsed]
        known = _resolve(store, names, scope)
        missing = [n for n in dict.fromkeys(names) if graph.entity_key(n) not in known]
        missing = list({graph.entity_key(n): n for n in reversed(missing)}.values())[::-1]
        if missing and not create:
            listed = ", ".join(repr(n) for n in missing)
            raise NotFound(
                f"unknown entit{'y' if len(missing) == 1 else 'ies'} {listed}; create "
                f"{'it' if len(missing) == 1 else 'them'} first (graph add-entity) or pass --create "
                "(MCP/API: create=true). Nothing was stored"
            )
        for name in missing:
            _get_or_create(store, name, "entity", now, _owners(store, scope), _home(scope))
        known = _resolve(store, names, scope)
        out = []
        for source, relation, target, weight in parsed:
            s_id, s_name, _ = known[graph.entity_key(source)]
            t_id, t_name, _ = known[graph.entity_key(target)]
            store.upsert_relation(s_id, relation, t_id, weight, now)
            out.append(RelationInfo(s_name, relation, t_name, weight))
        store.add_event(now, "graph.relate", None, f"{len(out)} relations")
    return out


def relate(
    store: Store, source: str, relation: str, target: str, *, weight: float = 1.0, create: bool = False,
    scope: Scope | None = None,
) -> RelationInfo:
    """Add one relation `source relation target`. See `relate_many` (same errors and scope)."""
    return relate_many(store, [(source, relation, target, weight)], create=create, scope=scope)[0]


def unrelate(store: Store, source: str, relation: str | None, target: str, *, scope: Scope | None = None) -> int:
    """Remove the relation (every relation type from source to target when `relation` is None).
    Returns how many were removed.

    Args:
        scope: the caller's projects (`make_scope`); None is every project. An entity of other
            projects only is unknown to it, with the same error as a name never stored.

    Raises:
        NotFound: an endpoint (in scope) or the relation does not exist.
    """
    s_name, t_name = _clean_name(source), _clean_name(target)
    rel = _clean_relation(relation) if relation is not None else None
    with store.write():
        known = _resolve(store, [s_name, t_name], scope)
        missing = [n for n in (s_name, t_name) if graph.entity_key(n) not in known]
        if missing:
            raise NotFound(f"unknown entity {', '.join(repr(n) for n in missing)}")
        removed = store.delete_relations(known[graph.entity_key(s_name)][0], rel, known[graph.entity_key(t_name)][0])
        if not removed:
            raise NotFound(f"no relation {s_name} {rel or '*'} {t_name}")
        store.add_event(clock.now_iso(), "graph.unrelate", None, f"{removed} relations")
    return removed


# ---------------------------------------------------------------------------------------------
# Views


def _relation_infos(store: Store, rows: Sequence[tuple]) -> list[RelationInfo]:
    names = store.entity_rows([r[1] for r in rows] + [r[3] for r in rows])
    return [RelationInfo(names[r[1]]["name"], r[2], names[r[3]]["name"], r[4]) for r in rows]


def _scope(project: str | None, all_projects: bool) -> Scope:
    return make_scope(project=project, all_projects=all_projects)


def _unknown(display: str, scope: Scope) -> NotFound:
    if scope.projects is None:
        return NotFound(f"unknown entity {display!r}")
    where = f"project {scope.projects[0]} or global memories" if scope.projects else "global memories"
    return NotFound(f"unknown entity {display!r} in the graph of {where}; --all-projects (MCP: all_projects=true) "
                    "looks in every project")


def graph_show(
    store: Store, name: str, *, depth: int = 2, limit: int = 30, project: str | None = None,
    all_projects: bool = False,
) -> GraphView:
    """Breadth-first neighbourhood of an entity over relations in both directions.

    Scope (as recall's): the entities, relations and memories of `project` plus global ones, or
    of every project with `all_projects`; with neither, global ones only. Another project's
    entity is neither shown nor walked through (module docstring). The walk starts from every
    entity of that name in scope (a project's own and a global one; each project's for every
    project), nearest first.

    Args:
        depth: hops from the entity (0 = the entity alone), at most 10.
        limit: at most this many entities (the start included); `truncated` says if it cut.
        project / all_projects: the scope; memories listed per entity are active ones in it.

    Raises:
        NotFound: no such entity in scope. InvalidInput: depth or limit out of range.
    """
    display = _clean_name(name)
    if not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        raise InvalidInput(f"depth must be between 0 and {MAX_DEPTH}, got {depth}")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    scope = _scope(project, all_projects)
    found = _resolve(store, [display], scope).get(graph.entity_key(display))
    if found is None or not store.visible_entities([found[0]], scope):
        raise _unknown(display, scope)
    start = found[0]
    # every entity of this name the scope sees starts the walk: a project's own and a global one,
    # or, for every project, each project's
    twins = [e for e in store.entity_ids_by_keys([graph.entity_key(display)], _owners(store, scope)) if e != start]
    starts = [start, *sorted(store.visible_entities(twins, scope))][:limit] if twins else [start]
    distance = dict.fromkeys(starts, 0)
    frontier = list(starts)
    truncated = False
    for hop in range(1, depth + 1):
        if not frontier:
            break
        touching = store.relations_touching(frontier)
        visible = store.visible_entities([e for r in touching for e in (r[1], r[3]) if e not in distance], scope)
        nxt: list[int] = []
        for _rid, s, _rel, t, _w in touching:
            for other in (s, t):
                if other in distance or other not in visible:
                    continue
                if len(distance) >= limit:
                    truncated = True
                    continue
                distance[other] = hop
                nxt.append(other)
        frontier = nxt
    ids = list(distance)
    rows = store.entity_rows(ids)
    mentions = store.entity_memories(ids, scope)
    shown = {i for ids_ in mentions.values() for i in ids_[:MEMORIES_PER_NODE]}
    memories = store.get_memories(list(shown))
    nodes = []
    for entity_id in sorted(ids, key=lambda e: (distance[e], rows[e]["key"])):
        row = rows[entity_id]
        mem_ids = mentions.get(entity_id, [])
        refs = [
            MemoryRef(i, _preview(memories[i].content), memories[i].kind, memories[i].project)
            for i in mem_ids[:MEMORIES_PER_NODE]
        ]
        info = EntityInfo(row["id"], row["name"], row["type"], row["aliases"], len(mem_ids))
        nodes.append(GraphNode(info, distance[entity_id], refs))
    inside = set(ids)
    rels = [r for r in store.relations_touching(ids) if r[1] in inside and r[3] in inside]
    return GraphView(rows[start]["name"], depth, limit, nodes, _relation_infos(store, rels), truncated)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


ENTITY_SORTS = ("name", "count", "recent")


def graph_entities(store: Store, *, project: str | None = None, all_projects: bool = False, sort: str = "name",
                   limit: int | None = None) -> list[EntityInfo]:
    """The entities in scope (as `graph_show`), with how many active memories in scope mention
    each and when the newest of them was made.

    Args:
        sort: `name` (by identity key), `count` (most mentioned first, then by name) or `recent`
            (newest mention first, then by name).
        limit: at most this many (None: all).

    Raises:
        InvalidInput: unknown sort, limit < 1.
    """
    if sort not in ENTITY_SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(ENTITY_SORTS)}, got {sort!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise InvalidInput(f"limit must be at least 1, got {limit}")
    rows = store.list_entities(_scope(project, all_projects))
    if sort == "count":
        rows.sort(key=lambda r: -r["memories"])  # stable: ties stay by key
    elif sort == "recent":
        rows.sort(key=lambda r: r["last_mentioned"] or "", reverse=True)  # stable: ties stay by key
    rows = rows[:limit] if limit is not None else rows
    aliases = store.entity_rows([r["id"] for r in rows])
    return [
        EntityInfo(r["id"], r["name"], r["type"], aliases[r["id"]]["aliases"], r["memories"],
                   last_mentioned=r["last_mentioned"]) for r in rows
    ]


def graph_list(store: Store, *, project: str | None = None, all_projects: bool = False) -> GraphListing:
    """The entities in scope (as `graph_entities`) and the relations between two of them."""
    entities = graph_entities(store, project=project, all_projects=all_projects)
    inside = {e.id for e in entities}
    rels = [r for r in store.all_relations() if r[1] in inside and r[3] in inside]
    return GraphListing(entities, _relation_infos(store, rels))


# ---------------------------------------------------------------------------------------------
# Edits


def _editable(store: Store, name: str, scope: Scope | None, *, role: str = "") -> tuple[int, str]:
    """(id, display name) of the entity `name` finds in `scope`, which the scope may edit. Call
    inside `write()`.

    Raises:
        NotFound: no such entity in scope (another project's entity is unknown here).
        Refused: memories of other projects name it too (editing it would change their graph).
    """
    display = _clean_name(name)
    found = _resolve(store, [display], scope).get(graph.entity_key(display))
    if found is None:
        raise NotFound(f"unknown {role}entity {display!r}; `memsafe graph entities` lists them. Nothing was changed")
    entity_id, current, _type = found
    if scope is None or scope.projects is None:
        if len(store.entity_ids_by_key(graph.entity_key(display))) > 1:
            raise Refused(f"several projects have an entity {display!r}; --project chooses whose to edit. "
                          "Nothing was changed")
    elif store.shared_entities([entity_id], scope):
        raise Refused(f"entity {current!r} is also named by memories of other projects; editing it would change "
                      "their graph too: --all-projects (MCP: all_projects=true) edits it everywhere. "
                      "Nothing was changed")
    return entity_id, current


def _owner(store: Store, key: str, entity_id: int) -> tuple[int, str] | None:
    """(id, display name) of the entity `key` finds (its own key or an alias key) in a graph that
    sees entity `entity_id`: its project's and the global one, or, for a global entity, any
    project's. Keys are unique within a project; a second entity of one name in a graph its
    memories see would split them between two."""
    project = store.entity_rows([entity_id])[entity_id]["project"]
    found = store.entities_by_keys([key], [project, GLOBAL] if project != GLOBAL else None).get(key)
    return (found[0], found[1]) if found else None


def _joined_by(store: Store, entity_id: int, other_id: int, source: str, into: str) -> str:
    """How a user joins two entities of one name: `graph merge` when both are of one graph, else
    (a project's entity and a global one) a different name, since a merge stays inside a graph."""
    rows = store.entity_rows([entity_id, other_id])
    project = rows[other_id]["project"]
    if rows[entity_id]["project"] == project:
        return f"`memsafe graph merge {source!r} {into!r}` joins the two"
    where = f"project {project}" if project else "the global graph"
    return f"it is of {where}, which this graph sees, and a merge stays inside one graph: choose another name"


def _same_key_aliases(store: Store, entity_id: int, key: str) -> list[str]:
    row = store.entity_rows([entity_id])[entity_id]
    return [a for a in row["aliases"] if graph.entity_key(a) == key]


def rename_entity(store: Store, name: str, new_name: str, *, scope: Scope | None = None) -> GraphEdit:
    """Give entity `name` the display name `new_name`; its memories and relations stay. The old
    name stays an alias (it still finds the entity; `remove_alias` drops it). A new name of the
    same identity key only changes how it is written.

    Raises:
        InvalidInput: an empty or over-long name.
        NotFound: no entity `name` in scope. Refused: `new_name` is another entity's name or
        alias (`merge_entities` joins the two), or other projects name it too. Nothing changes.
    """
    display = _clean_name(new_name)
    key = graph.entity_key(display)
    now = clock.now_iso()
    with store.write():
        entity_id, current = _editable(store, name, scope)
        old_key = store.entity_rows([entity_id])[entity_id]["key"]
        owner = _owner(store, key, entity_id)
        if owner is not None and owner[0] != entity_id:
            raise Refused(f"cannot rename {current!r} to {display!r}: that is already the entity {owner[1]!r}; "
                          f"{_joined_by(store, entity_id, owner[0], current, owner[1])}. Nothing was changed")
        if current == display:
            raise Refused(f"entity {current!r} already has that name. Nothing was changed")
        if key != old_key:
            store.delete_alias_key(entity_id, key)  # it was an alias: now the name itself
            store.rename_entity(entity_id, display, key)
            store.add_alias_key(entity_id, old_key)
        else:
            store.rename_entity(entity_id, display, key)
        store.add_alias(entity_id, current)
        store.add_event(now, "graph.rename", None, f"entity {entity_id}")
    return GraphEdit("rename", _info(store, entity_id, scope=scope), merged=current)


def merge_entities(store: Store, source: str, into: str, *, scope: Scope | None = None) -> GraphEdit:
    """Fold entity `source` into entity `into`: every memory that names `source` names `into`,
    its relations become `into`'s (a relation between the two goes; a duplicate keeps the higher
    weight), its names become aliases of `into` (so they still find it), and `source` is deleted.

    Raises:
        InvalidInput: the same name twice (an entity cannot merge into itself).
        NotFound: either is not an entity in scope (another project's entity is unknown here).
        Refused: both names find one entity, or other projects name either. Nothing changes.
    """
    s_display, t_display = _clean_name(source), _clean_name(into)
    if graph.entity_key(s_display) == graph.entity_key(t_display):
        raise InvalidInput(f"cannot merge entity {s_display!r} into itself. Nothing was changed")
    now = clock.now_iso()
    with store.write():
        s_id, s_name = _editable(store, s_display, scope)
        t_id, t_name = _editable(store, t_display, scope, role="target ")
        if s_id == t_id:
            raise Refused(f"{s_display!r} and {t_display!r} are names of one entity, {t_name!r}: nothing to merge. "
                          "Nothing was changed")
        rows = store.entity_rows([s_id, t_id])
        if rows[s_id]["project"] != rows[t_id]["project"]:  # a memory stays linked to its own project's entities
            where = {s_id: "", t_id: ""}
            for i in where:
                where[i] = f"project {rows[i]['project']}" if rows[i]["project"] else "the global graph"
            raise Refused(f"cannot merge {s_name!r} ({where[s_id]}) into {t_name!r} ({where[t_id]}): an entity "
                          "merges only into one of its own graph. Nothing was changed")
        s_type, t_type = rows[s_id]["type"], rows[t_id]["type"]
        links, relations = store.merge_entity(s_id, t_id, now)
        if t_type == "entity" and s_type != "entity":
            store.set_entity_type(t_id, s_type)
        store.add_event(now, "graph.merge", None, f"entity {s_id} into {t_id}")
    return GraphEdit("merge", _info(store, t_id, scope=scope), merged=s_name, links=links, relations=relations)


def add_alias(store: Store, name: str, alias: str, *, scope: Scope | None = None) -> GraphEdit:
    """Make `alias` another name of entity `name`: it finds the entity in `graph show` and recall,
    and a memory that says it is linked to the entity.

    Raises:
        InvalidInput: an empty or over-long name. NotFound: no entity `name` in scope.
        Refused: `alias` already finds another entity, or is already this one's name, or other
        projects name the entity too. Nothing changes.
    """
    spelled = _clean_name(alias)
    key = graph.entity_key(spelled)
    with store.write():
        entity_id, current = _editable(store, name, scope)
        owner = _owner(store, key, entity_id)
        if owner is not None and owner[0] != entity_id:
            raise Refused(f"{spelled!r} is already the entity {owner[1]!r}; "
                          f"{_joined_by(store, entity_id, owner[0], owner[1], current)}. Nothing was changed")
        row = store.entity_rows([entity_id])[entity_id]
        if spelled == current or spelled in row["aliases"]:
            raise Refused(f"{spelled!r} is already a name of {current!r}. Nothing was changed")
        store.add_alias(entity_id, spelled)
        if key != row["key"]:
            store.add_alias_key(entity_id, key)
        store.add_event(clock.now_iso(), "graph.alias", None, f"entity {entity_id}: added")
    return GraphEdit("alias-add", _info(store, entity_id, scope=scope), detail=spelled)


def remove_alias(store: Store, name: str, alias: str, *, scope: Scope | None = None) -> GraphEdit:
    """`alias` is no longer a name of entity `name` (it no longer finds it; memories already
    linked stay linked). The entity's own name cannot be removed: rename it first.

    Raises:
        InvalidInput: an empty or over-long name. NotFound: no entity `name` in scope, or it has
        no alias `alias`. Refused: `alias` is the entity's own name, or other projects name the
        entity too. Nothing changes.
    """
    spelled = _clean_name(alias)
    key = graph.entity_key(spelled)
    with store.write():
        entity_id, current = _editable(store, name, scope)
        row = store.entity_rows([entity_id])[entity_id]
        if spelled == current or (key == row["key"] and not [a for a in row["aliases"] if a == spelled]):
            raise Refused(f"{spelled!r} is the name of {current!r}, not an alias; `memsafe graph rename` changes it. "
                          "Nothing was changed")
        if key == row["key"]:  # one spelling of the entity's own name
            removed = store.delete_aliases(entity_id, [spelled])
        else:
            removed = store.delete_aliases(entity_id, _same_key_aliases(store, entity_id, key))
            removed += store.delete_alias_key(entity_id, key)
        if not removed:
            raise NotFound(f"entity {current!r} has no alias {spelled!r}. Nothing was changed")
        store.add_event(clock.now_iso(), "graph.alias", None, f"entity {entity_id}: removed")
    return GraphEdit("alias-remove", _info(store, entity_id, scope=scope), detail=spelled)


def delete_entity(store: Store, name: str, *, scope: Scope | None = None) -> GraphEdit:
    """Delete entity `name` with its aliases, its links to memories and its relations. The
    memories themselves stay (their text is unchanged); a later memory that names it makes it anew.

    Raises:
        InvalidInput: an empty or over-long name. NotFound: no entity `name` in scope.
        Refused: other projects name it too. Nothing changes.
    """
    with store.write():
        entity_id, _current = _editable(store, name, scope)
        info = _info(store, entity_id, scope=scope)
        links, relations = store.entity_usage(entity_id)
        store.delete_entity(entity_id)
        store.add_event(clock.now_iso(), "graph.delete", None, f"entity {entity_id}")
    return GraphEdit("delete", info, links=links, relations=relations)


def unlink_entity(store: Store, memory_id: int, name: str, *, scope: Scope | None = None) -> GraphEdit:
    """Remove a wrong link between memory `memory_id` and entity `name` (automatic extraction
    found a name that is not one). The memory's text is unchanged. An entity left with no memory
    and no relation is deleted too (`GraphEdit.detail` says so).

    Raises:
        NotFound: the memory is not in scope (as `api.get`), no entity `name` is known in scope,
        or the memory is not linked to it. Nothing changes.
    """
    from memsafe.api.core import get  # core imports this module


    display = _clean_name(name)
    with store.write():
        memory = get(store, _check_id(memory_id), scope=scope)
        key = graph.entity_key(display)
        found = store.entities_by_keys([key], list(dict.fromkeys([memory.project or GLOBAL, GLOBAL]))).get(key)
        if found is None:
            raise NotFound(f"unknown entity {display!r}. Nothing was changed")
        entity_id, current, _type = found
        if not store.unlink_memory_entity(memory_id, entity_id):
            raise NotFound(f"memory {memory_id} is not linked to {current!r}. Nothing was changed")
        info = _info(store, entity_id, scope=scope)
        gone = store.delete_orphan_entities([entity_id]) > 0
        store.add_event(clock.now_iso(), "graph.unlink", memory_id, f"entity {entity_id}")
    return GraphEdit("unlink", info, links=1, memory_id=memory_id,
                     detail="the entity named no other memory and had no relation: deleted" if gone else "")
