"""Responsibility: the memory commands: remember, recall, get, forget, restore, purge, status."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from memsafe import api, render
from memsafe.cli import fast
from memsafe.cli._common import (
    AllProjectsOpt,
    IdArg,
    JsonOpt,
    KindOpt,
    ProjectOpt,
    ProjectPathOpt,
    TagsOpt,
    _emit_json,
    _fail,
    _scope,
    _session,
    app,
    emit,
    is_terminal,
    out,
    say,
)
from memsafe.models import Kind, Source


class RecallMode(str, Enum):
    """`recall --mode` (api.recall's `mode`)."""

    hybrid = "hybrid"
    lexical = "lexical"
    vector = "vector"


# -- commands --------------------------------------------------------------------------------------


@app.command()
def remember(
    ctx: typer.Context,
    content: Annotated[str, typer.Argument(help="The text to remember, or - to read it from stdin.")],
    kind: KindOpt = Kind.GENERAL,
    tag: TagsOpt = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    global_: Annotated[bool, typer.Option("--global", help="Store without a project (seen everywhere).")] = False,
    source: Annotated[Source, typer.Option("--source", help="Where it came from.")] = Source.USER,
    importance: Annotated[
        float | None, typer.Option("--importance", min=0.0, max=1.0, help="0–1, default 0.5.")
    ] = None,
    no_embed: Annotated[
        bool, typer.Option("--no-embed", help="Leave the vector pending for `memsafe embed` (no background embedding).")
    ] = False,
    pin: Annotated[bool, typer.Option("--pin", help="Tag it `pinned`: it never decays.")] = False,
    entity: Annotated[
        list[str] | None, typer.Option("--entity", "-e", help="Link this graph entity too (repeatable).")
    ] = None,
    redact: Annotated[
        bool, typer.Option("--redact", help="Store content that looks like a credential with the secret redacted.")
    ] = False,
    at: Annotated[
        str | None, typer.Option("--at", help="When it happened, if not now: ISO-8601, a date, 'yesterday', "
                                 "'3 days ago' (no offset = local time; not in the future).")
    ] = None,
    supersedes: Annotated[
        int | None, typer.Option("--supersedes", min=1, help="This corrects memory ID: mark that one replaced.")
    ] = None,
    keep_both: Annotated[
        bool, typer.Option("--keep-both", help="Do not mark the memory this one looks like it replaces.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Remember CONTENT. Prints the new memory's id at once; its vector is computed in the background.

    The memory is found by keywords at once and by meaning a few seconds later (a detached
    `memsafe` process embeds it; if that never runs, the next `embed`, `serve` or `recall` does).

    Examples:

      memsafe remember "API errors are logged to /var/log/api.err" --kind fact --tag ops

      git log -1 --format=%B | memsafe remember - --source git

      memsafe remember "we moved to Postgres 16" --at 2026-03-01

    When it looks like it corrects an earlier memory of the project (same subject, a changed
    command, version, number, time, name or negation) it says so, and marks that one replaced
    when both have the same source; --keep-both leaves it, --supersedes ID names it yourself.
    """
    fast.remember(ctx.obj.db if ctx.obj else None, content, kind=kind.value, tag=tag or [], project=project,
                  project_path=project_path, global_=global_, source=source.value, importance=importance,
                  no_embed=no_embed, pin=pin, entity=entity or [], redact=redact, at=at, supersedes=supersedes,
                  keep_both=keep_both, json_=json_)


@app.command()
def recall(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in any words.")],
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="At most this many memories.")] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget (cl100k_base), default 2000.")
    ] = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: Annotated[bool, typer.Option("--all-projects", help="Search every project.")] = False,
    kind: Annotated[list[Kind] | None, typer.Option("--kind", "-k", help="Only these kinds.")] = None,
    tag: TagsOpt = None,
    source: Annotated[list[Source] | None, typer.Option("--source", help="Only memories from these sources.")] = None,
    exclude_source: Annotated[
        list[Source] | None, typer.Option("--exclude-source", help="No memories from these sources (e.g. git).")
    ] = None,
    mode: Annotated[
        RecallMode, typer.Option("--mode", help="Both searches fused, keywords (BM25) only, or meaning (vectors) only.")
    ] = RecallMode.hybrid,
    include_forgotten: Annotated[
        bool, typer.Option("--include-forgotten", help="Also search forgotten memories (marked as such).")
    ] = False,
    include_archived: Annotated[
        bool, typer.Option("--include-archived", help="Also return archived memories, with their original text.")
    ] = False,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="Answer from what was known then: ISO-8601, a date, 'yesterday', 'last week', "
                     "'3 days ago' or 'the past two weeks' (a calendar name from its local start; no offset = "
                     "local time)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only what happened since then (same formats, e.g. today, "
                                 "24h).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Only what happened before then (same formats).")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Recall what memsafe knows about QUERY, packed to fit a token budget.

    Searches the current project plus global memories by meaning (vectors) and by keywords
    (BM25), fused.

    Examples:

      memsafe recall "how do we deploy?"

      memsafe recall "ERR_SSL_PROTOCOL" --all-projects --json

      memsafe recall "which runtime?" --as-of 2026-03-01

      memsafe recall "what did we decide about caching?" --exclude-source git
    """
    fast.recall(ctx.obj.db if ctx.obj else None, query, limit=limit, budget=budget, project=project,
                project_path=project_path, all_projects=all_projects, kind=[k.value for k in kind or []],
                tag=tag or [], mode=mode.value, include_forgotten=include_forgotten,
                include_archived=include_archived, as_of=as_of, since=since, until=until,
                source=[s.value for s in source or []], exclude_source=[s.value for s in exclude_source or []],
                json_=json_)


@app.command()
def get(
    ctx: typer.Context,
    memory_id: IdArg,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Show one memory, whatever its status.

    Like recall, it reads the current project and global memories: a memory of another project
    is "not found" unless --all-projects (or that --project) is given.
    """
    fast.get(ctx.obj.db if ctx.obj else None, memory_id, project=project, project_path=project_path,
             all_projects=all_projects, json_=json_)


@app.command()
def forget(
    ctx: typer.Context,
    memory_id: IdArg,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept in the audit log).")] = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Forget a memory: hidden from every recall, kept for audit; `restore ID` undoes it.

    Like get, it reaches the current project and global memories (--all-projects: every project).
    """
    fast.forget(ctx.obj.db if ctx.obj else None, memory_id, reason=reason, project=project,
                project_path=project_path, all_projects=all_projects, json_=json_)


@app.command()
def restore(
    ctx: typer.Context,
    memory_id: IdArg,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Bring a forgotten or archived memory back, with its full original text if decay compressed it.

    Like get, it reaches the current project and global memories (--all-projects: every project).
    """
    with _session(ctx) as opened:
        memory = api.restore(opened.store, memory_id, scope=_scope(opened, project, project_path, all_projects))
    emit(memory, json_, f"Restored memory {memory.id}")


@app.command()
def purge(
    ctx: typer.Context,
    memory_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="Memory ids.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Destroy memories for good: text, vectors, full-text index and history. Cannot be undone.

    Without a terminal, --yes is required. Like get, it reaches the current project and global
    memories (--all-projects: every project); an id outside them purges nothing.
    """
    if not yes:
        if not is_terminal():
            raise _fail("purge destroys data; pass --yes to confirm when not running in a terminal", 2)
        if not typer.confirm(f"Permanently destroy memory {', '.join(map(str, memory_ids))}?"):
            raise _fail("nothing purged")
    with _session(ctx) as opened:
        report = api.purge(opened.store, memory_ids, scope=_scope(opened, project, project_path, all_projects))
    if json_:
        from dataclasses import asdict

        _emit_json({**asdict(report), "remove_command": report.remove_command})
    else:
        out().print(
            f"Purged {render.count_of(len(report.purged_ids), 'memory')} "
            f"({render.count_of(report.versions_removed, 'version')} of history removed)"
        )
    copies = render.purge_copies(report)
    if copies:
        say("Warning", copies)


@app.command()
def status(
    ctx: typer.Context,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show where the store is, what it holds, and whether vector search works.

    Exits 1 if vector search is unavailable (recall then uses BM25 only).
    """
    fast.status(ctx.obj.db if ctx.obj else None, project=project, project_path=project_path, json_=json_)


