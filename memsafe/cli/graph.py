"""Responsibility: the knowledge-graph commands: `memsafe graph add-entity | relate | unrelate |
show | entities | list` and the edits `rename | merge | alias | unalias | delete | unlink`."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from memsafe import api, render
from memsafe.cli import fast
from memsafe.cli._common import (
    AllProjectsOpt,
    Group,
    JsonOpt,
    ProjectOpt,
    ProjectPathOpt,
    _emit_json,
    _fail,
    _scope,
    _session,
    app,
    emit,
    err,
    is_terminal,
    out,
    print_table,
)

graph_app = typer.Typer(
    name="graph",
    cls=Group,
    help="The knowledge graph: entities named in memories and typed relations between them.",
    no_args_is_help=True,
)
app.add_typer(graph_app, name="graph")


_options = fast.graph_options


@graph_app.command("add-entity")
def add_entity(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Entity name (case, width and spacing do not make a new one).")],
    type_: Annotated[str | None, typer.Option("--type", help="Entity type, e.g. service, person.")] = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Create an entity, or show the existing one with the same normalised name (--type then sets its type).

    Examples:

      memsafe graph add-entity MyService --type service
    """
    with _session(ctx) as opened:
        info = api.add_entity(opened.store, name, type=type_,
                              scope=_scope(opened, project, project_path, all_projects))
    if json_:
        _emit_json(info)
    else:
        verb = "Created" if info.created else "Exists:"
        out().print(f"{verb} entity {info.id} {info.name} ({info.type})", markup=False)


@graph_app.command()
def relate(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Source entity.")],
    relation: Annotated[str, typer.Argument(help="Relation type, e.g. depends_on.")],
    target: Annotated[str, typer.Argument(help="Target entity.")],
    weight: Annotated[float, typer.Option("--weight", min=0.0, help="Relation weight (default 1).")] = 1.0,
    create: Annotated[
        bool, typer.Option("--create", help="Create missing entities (otherwise an unknown entity is an error).")
    ] = False,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Add the relation SOURCE RELATION TARGET between two existing entities.

    Like recall, it sees the entities of the current project and global ones (--all-projects:
    every project); a name only another project's memories use is unknown here.

    Examples:

      memsafe graph relate checkout-api depends_on ledger-db

      memsafe graph relate checkout-api owned_by "Alice Chen" --create
    """
    with _session(ctx) as opened:
        info = api.relate(opened.store, source, relation, target, weight=weight, create=create,
                          scope=_scope(opened, project, project_path, all_projects))
    emit(info, json_, "Related " + render.relations_lines([info])[0])


@graph_app.command()
def unrelate(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Source entity.")],
    relation: Annotated[str, typer.Argument(help="Relation type, or * for every relation type.")],
    target: Annotated[str, typer.Argument(help="Target entity.")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Remove the relation SOURCE RELATION TARGET (the entities stay), among the entities of the
    current project and global ones (--all-projects: every project)."""
    with _session(ctx) as opened:
        removed = api.unrelate(opened.store, source, None if relation == "*" else relation, target,
                               scope=_scope(opened, project, project_path, all_projects))
    emit({"removed": removed}, json_, f"Removed {render.count_of(removed, 'relation')}")


@graph_app.command()
def show(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity to start from.")],
    depth: Annotated[int, typer.Option("--depth", min=0, max=10, help="Hops to follow (both directions).")] = 2,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many entities.")] = 30,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Show an entity's neighbourhood (breadth-first, both directions) with its memories.

    Each entity reached is listed with the active memories that mention it. Like recall, it
    reads the current project and global memories (--all-projects: every project).

    Examples:

      memsafe graph show checkout-api --depth 1
    """
    fast.graph_show(ctx.obj.db if ctx.obj else None, entity, depth=depth, limit=limit, project=project,
                    project_path=project_path, all_projects=all_projects, json_=json_)


LISTED = 50  # entities (and relations) a table shows unless --limit says otherwise

ListLimitOpt = Annotated[
    int | None,
    typer.Option("--limit", "-n", min=1, help=f"Show at most this many (default: {LISTED} in the table, every one "
                 "with --json)."),
]


class EntitySort(str, Enum):
    """`graph entities --sort` (api.graph_entities's `sort`)."""

    by_name = "name"
    by_count = "count"
    by_recent = "recent"


ORDER_WORDS = {"name": "by name", "count": "most mentioned", "recent": "most recently mentioned"}


def _title(shown: int, total: int, sort: str = "name") -> str:
    return render.count_of(total, "entity") + (f", the first {shown:,} {ORDER_WORDS[sort]}" if shown < total else "")


def _more(shown: int, total: int, noun: str, limit: int | None) -> None:
    """The line after a listing cut at its limit: how many more, and how to see them (stderr)."""
    if total > shown:
        n = total - shown
        how = "--json lists every one" if limit is None else "--json without --limit lists every one"
        err.print(f"… {n:,} more {render.count_of(n, noun).split(' ', 1)[1]}: --limit {total} shows them all; {how}",
                  markup=False, highlight=False)


@graph_app.command()
def entities(
    ctx: typer.Context,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    limit: ListLimitOpt = None,
    sort: Annotated[EntitySort, typer.Option(
        "--sort", help="Order: name, count (most mentioned first) or recent (newest mention first).")
    ] = EntitySort.by_name,
    json_: JsonOpt = False,
) -> None:
    """List entities with how many active memories mention each (current project plus global,
    or --all-projects), by name, or by --sort count|recent.

    The table shows the first 50; a line on stderr says how many more there are.

    Examples:

      memsafe graph entities --sort count --limit 10
    """
    with _session(ctx) as opened:
        scope = _scope(opened, project, project_path, all_projects)
        rows = api.graph_entities(opened.store, sort=sort.value, **_options(scope))
    if json_:
        _emit_json(rows if limit is None else rows[:limit])
    elif not rows:
        err.print("No entities.")
    else:
        shown = rows[: limit or LISTED]
        title = _title(len(shown), len(rows), sort.value)
        print_table(lambda: render.entities_table(shown, title=title), lambda: render.entities_lines(shown, title))
        _more(len(shown), len(rows), "entity", limit)


@graph_app.command("list")
def list_(
    ctx: typer.Context,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    limit: ListLimitOpt = None,
    json_: JsonOpt = False,
) -> None:
    """List the entities and relations of the current project plus global ones (--all-projects: all).

    The first 50 of each are shown; a line on stderr says how many more there are.
    """
    with _session(ctx) as opened:
        scope = _scope(opened, project, project_path, all_projects)
        listing = api.graph_list(opened.store, **_options(scope))
    if json_:
        if limit is not None:
            listing.entities, listing.relations = listing.entities[:limit], listing.relations[:limit]
        _emit_json(listing)
        return
    console = out()
    cap = limit or LISTED
    if listing.entities:
        shown, title = listing.entities[:cap], _title(min(cap, len(listing.entities)), len(listing.entities))
        print_table(lambda: render.entities_table(shown, title=title), lambda: render.entities_lines(shown, title))
        _more(min(cap, len(listing.entities)), len(listing.entities), "entity", limit)
    console.print(render.count_of(len(listing.relations), "relation"), markup=False)
    for line in render.relations_lines(listing.relations[:cap]):
        console.print("  " + line, markup=False, highlight=False)
    _more(min(cap, len(listing.relations)), len(listing.relations), "relation", limit)


# -- edits ----------------------------------------------------------------------------------------


def _edit_line(edit) -> str:
    e = edit.entity
    names = f" (also: {', '.join(e.aliases)})" if e.aliases else ""
    if edit.action == "rename":
        return f"Renamed entity {e.id} {edit.merged} → {e.name}{names}; the old name still finds it"
    if edit.action == "merge":
        return (f"Merged {edit.merged} into entity {e.id} {e.name}{names}: "
                f"{render.count_of(edit.links, 'memory link')} and {render.count_of(edit.relations, 'relation')} moved")
    if edit.action == "alias-add":
        return f"Entity {e.id} {e.name}: {edit.detail} is now another name of it{names}"
    if edit.action == "alias-remove":
        return f"Entity {e.id} {e.name}: {edit.detail} is no longer a name of it"
    if edit.action == "delete":
        return (f"Deleted entity {e.id} {e.name} with {render.count_of(edit.links, 'memory link')} and "
                f"{render.count_of(edit.relations, 'relation')}; the memories are unchanged")
    text = f"Memory {edit.memory_id} no longer names entity {e.id} {e.name}"
    return text + (f" ({edit.detail})" if edit.detail else "")


@graph_app.command()
def rename(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity to rename (its name or an alias).")],
    new_name: Annotated[str, typer.Argument(help="Its new name (must not be another entity's).")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Rename an entity; its memories and relations stay, and the old name stays an alias.

    Onto another entity's name it is refused (graph merge joins two entities). An entity that
    memories of other projects also name is edited only with --all-projects.

    Examples:

      memsafe graph rename postgres PostgreSQL
    """
    with _session(ctx) as opened:
        edit = api.rename_entity(opened.store, entity, new_name,
                                 scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))


@graph_app.command()
def merge(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity to merge away.")],
    into: Annotated[str, typer.Argument(help="Entity that stays.")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Merge ENTITY into INTO: its memories, relations and names move to INTO, and ENTITY goes.

    Examples:

      memsafe graph merge pg PostgreSQL
    """
    with _session(ctx) as opened:
        edit = api.merge_entities(opened.store, entity, into,
                                  scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))


@graph_app.command()
def alias(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity.")],
    alias_: Annotated[str, typer.Argument(metavar="ALIAS", help="Another name that finds it.")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Add ALIAS as another name of ENTITY: show, recall and new memories find it under both.

    Examples:

      memsafe graph alias PostgreSQL pg
    """
    with _session(ctx) as opened:
        edit = api.add_alias(opened.store, entity, alias_, scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))


@graph_app.command()
def unalias(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity.")],
    alias_: Annotated[str, typer.Argument(metavar="ALIAS", help="The alias to remove.")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Remove an alias of ENTITY (memories already linked stay linked)."""
    with _session(ctx) as opened:
        edit = api.remove_alias(opened.store, entity, alias_,
                                scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))


@graph_app.command()
def delete(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(help="Entity to delete.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Delete an entity with its aliases, memory links and relations (the memories stay).

    Without a terminal, --yes is required.
    """
    if not yes:
        if not is_terminal():
            raise _fail("graph delete removes the entity's relations; pass --yes to confirm when not running in a "
                        "terminal", 2)
        if not typer.confirm(f"Delete entity {entity!r} with its relations and memory links?"):
            raise _fail("nothing deleted")
    with _session(ctx) as opened:
        edit = api.delete_entity(opened.store, entity, scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))


@graph_app.command()
def unlink(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")],
    entity: Annotated[str, typer.Argument(help="Entity the memory should not name.")],
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Remove a wrong automatic link between a memory and an entity (the text is unchanged).

    Examples:

      memsafe graph unlink 12 Keeps
    """
    with _session(ctx) as opened:
        edit = api.unlink_entity(opened.store, memory_id, entity,
                                 scope=_scope(opened, project, project_path, all_projects))
    emit(edit, json_, _edit_line(edit))
