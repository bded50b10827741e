"""Responsibility: the lifecycle commands: update, history, list, decay, confirm, confidence,
consolidate. Each parses, calls one handler in `memsafe.api`, and renders."""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe import api, decay, render
from memsafe.cli import fast
from memsafe.cli._common import (
    AllProjectsOpt,
    IdArg,
    JsonOpt,
    ProjectOpt,
    ProjectPathOpt,
    _emit_json,
    _fail,
    _scope,
    _session,
    app,
    emit,
    out,
    read_stdin,
)
from memsafe.models import Kind, Source

ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (kept in the audit log).")]


_preview = fast.preview


@app.command()
def update(
    ctx: typer.Context,
    memory_id: IdArg,
    content: Annotated[
        str | None, typer.Option("--content", "-c", help="New text (re-embedded), or - to read it from stdin.")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", "-t", help="Replace the tags with these (repeatable).")
    ] = None,
    no_tags: Annotated[bool, typer.Option("--no-tags", help="Remove every tag.")] = False,
    kind: Annotated[Kind | None, typer.Option("--kind", "-k", help="New kind.")] = None,
    importance: Annotated[float | None, typer.Option("--importance", min=0.0, max=1.0, help="0–1.")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p", help="Move it to this project.")] = None,
    global_: Annotated[bool, typer.Option("--global", help="Make it a global memory (no project).")] = False,
    redact: Annotated[
        bool, typer.Option("--redact", help="Store new content that looks like a credential redacted.")
    ] = False,
    all_projects: Annotated[
        bool, typer.Option("--all-projects", help="Reach a memory of any project (default: the current project "
                           "plus global memories).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Change a memory; the previous version is kept (see `memsafe history ID`).

    Like get, it reaches the current project and global memories (--all-projects: every
    project); --project and --global move the memory reached.

    Examples:

      memsafe update 12 --content "This repo uses Bun 1.3"

      memsafe update 12 --tag ops --tag deploy --importance 0.9

      git log -1 --format=%B | memsafe update 12 --content -
    """
    if tag and no_tags:
        raise _fail("use either --tag or --no-tags", 2)
    if content == "-":  # as `remember -` reads it (never stored as a literal "-")
        content = read_stdin(json_)
    with _session(ctx) as opened:
        scope = _scope(opened, None, None, all_projects)
        before = api.get(opened.store, memory_id, scope=scope)
        memory = api.update(
            opened.store, memory_id, content=content, tags=[] if no_tags else tag, kind=kind.value if kind else None,
            importance=importance, project=project, clear_project=global_, redact=redact, scope=scope,
        )
    fields = ("content", "kind", "importance", "project", "tags")
    same = all(getattr(before, f) == getattr(memory, f) for f in fields)
    emit(memory, json_, f"Memory {memory.id} unchanged: it already has those values" if same
         else f"Updated memory {memory.id}")


@app.command()
def history(
    ctx: typer.Context,
    memory_id: IdArg,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """List every version of a memory, oldest first; the last row is the current state.

    Each row: when it held, what ended it (update, decay, restore, merge), and what it changed
    from the row before (content, kind, tags, importance, status, level).
    Reads the current project and global memories unless --all-projects (as `get`).
    """
    fast.history(ctx.obj.db if ctx.obj else None, memory_id, project=project, project_path=project_path,
                 all_projects=all_projects, json_=json_)


@app.command("list")
def list_(
    ctx: typer.Context,
    archived: Annotated[bool, typer.Option("--archived", help="Only archived memories (decayed).")] = False,
    forgotten: Annotated[bool, typer.Option("--forgotten", help="Only forgotten memories.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Every status.")] = False,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="At most this many.")] = None,
    source: Annotated[Source | None, typer.Option("--source", help="Only memories from this source "
                                                  "(hook: what the agent hooks captured).")] = None,
    json_: JsonOpt = False,
) -> None:
    """List memories, newest first: active ones by default (current project plus global).

    Examples:

      memsafe list --archived --all-projects

      memsafe list --source hook

      memsafe list --forgotten --json
    """
    fast.list_(ctx.obj.db if ctx.obj else None, archived=archived, forgotten=forgotten, all_=all_, project=project,
               project_path=project_path, all_projects=all_projects, limit=limit,
               source=source.value if source else None, json_=json_)


@app.command("decay")
def decay_(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report; write nothing at all.")] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Apply the changes (the default).")] = False,
    policy: Annotated[bool, typer.Option("--policy", help="Show the decay policy table and exit.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No output on success (for cron).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Compress and archive what nobody uses, per the decay policy; nothing is ever deleted.

    Levels: 0 full text, 1 summary, 2 first sentence + entity names, 3 archived. Every earlier
    text stays in history; `memsafe restore ID` brings the original back. Memories tagged
    pinned, core or identity never decay. Idempotent, and safe to run while other memsafe
    processes write. A run also compacts the full-text index (keyword search looks each word
    up in one piece instead of dozens): the daily cron run is the store's maintenance.

    Exit codes: 0 done (or nothing to do); 1 error (message on stderr); 2 usage error.

    Examples:

      memsafe decay --dry-run

      memsafe decay --policy

      crontab: 17 3 * * *  memsafe decay --quiet
    """
    if dry_run and apply:
        raise _fail("use either --dry-run or --apply", 2)
    with _session(ctx) as opened:
        if policy:
            view = api.decay_policy(opened.store)
        else:
            report = api.decay(opened.store, dry_run=dry_run)
    if policy:
        if json_:
            _emit_json(view)
        elif not quiet:
            _print_policy(view)
        return
    if json_:
        _emit_json(report)
        return
    if quiet:
        return
    _print_decay(report)


def _print_policy(view: decay.PolicyView) -> None:
    from rich.table import Table

    table = Table(title="decay policy (config key decay_policy overrides it)", title_justify="left")
    for name in ("kind", "half-life (days)", "floor", "deepest level"):
        table.add_column(name, justify="left" if name == "kind" else "right")
    for row in view.rows:
        deepest = decay.level_for(row.floor) if row.floor > 0 else 3
        table.add_row(row.kind, f"{row.half_life_days:g}", f"{row.floor:.2f}",
                      f"{deepest} {decay.LEVEL_NAMES[deepest]}")
    console = out()
    console.print(table)
    console.print(f"never decayed: memories tagged {', '.join(view.protected_tags)}", markup=False, soft_wrap=True)
    console.print("levels: " + ", ".join(f"strength < {t:.2f} → {name}" for name, t in view.thresholds.items()),
                  markup=False, soft_wrap=True)
    for line in view.formula:
        console.print(line, markup=False, soft_wrap=True)


def _print_decay(report) -> None:
    console = out()
    for line in render.decay_lines(report):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def confirm(
    ctx: typer.Context,
    memory_id: IdArg,
    reason: ReasonOpt = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Review a memory: it is still right. It decays slower from now on (FSRS stability).

    Like get, it reaches the current project and global memories (--all-projects: every project).
    """
    with _session(ctx) as opened:
        result = api.confirm(opened.store, memory_id, reason=reason,
                             scope=_scope(opened, project, project_path, all_projects))
    if json_:
        _emit_json(result)
    else:
        out().print(f"Confirmed memory {memory_id}: stability {result.stability_after:.1f} d, "
                    f"decay half-life now {result.half_life_days:.0f} d")


@app.command()
def confidence(
    ctx: typer.Context,
    memory_id: IdArg,
    value: Annotated[float | None, typer.Argument(help="New confidence, 0.01–0.99.")] = None,
    boost: Annotated[bool, typer.Option("--boost", help="Raise it (odds × 2).")] = False,
    weaken: Annotated[bool, typer.Option("--weaken", help="Lower it (odds ÷ 2).")] = False,
    reason: ReasonOpt = None,
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Set how sure memsafe is that a memory is right. Feeds ranking and decay.

    Like get, it reaches the current project and global memories (--all-projects: every project).

    Examples:

      memsafe confidence 12 0.95 --reason "checked the docs"

      memsafe confidence 12 --weaken
    """
    if sum([value is not None, boost, weaken]) != 1:
        raise _fail("give exactly one of VALUE, --boost or --weaken", 2)
    with _session(ctx) as opened:
        change = api.set_confidence(opened.store, memory_id, value=value, boost=boost, weaken=weaken, reason=reason,
                                    scope=_scope(opened, project, project_path, all_projects))
    emit(change, json_, f"Memory {memory_id}: confidence {change.before:.2f} → {change.after:.2f}")


@app.command()
def consolidate(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list the pairs.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Merge near-duplicate memories (same project, cosine ≥ near_duplicate_threshold).

    One run reaches the fixpoint: each cluster of near-copies merges into one survivor (the
    most used, then the oldest), which keeps every history; the others are forgotten with
    reason `merged into N`. Memories still waiting for a vector are embedded first (a dry run
    does not store those vectors).

    Pairs that read alike but differ in fact (a negation, a number, a version, a date or time, an
    identifier, a commit and its revert, two commits) are never merged: they are listed as
    possible conflicts, with how they differ, for you to review.
    """
    with _session(ctx) as opened:
        report = api.consolidate(opened.store, dry_run=dry_run)
    if json_:
        _emit_json(report)
        return
    verb = "would merge" if dry_run else "merged"
    console = out()
    console.print(f"{len(report.pairs)} near-duplicates {verb} (threshold {report.threshold})", markup=False)
    if report.embedded:  # a dry run stores no vector: those waiting for one were embedded to compare them
        console.print(f"  ({render.count_of(report.embedded, 'memory')} still waiting for a vector embedded "
                      "to compare them; not stored)", markup=False)
    for p in report.pairs:
        console.print(f"  {p.merged_id} → {p.survivor_id}  (cosine {p.similarity:.3f})", markup=False)
    if report.conflicts:
        console.print(f"{render.count_of(len(report.conflicts), 'possible conflict')} not merged (they read "
                      "alike but differ; review them: memsafe get ID, update or forget one):", markup=False)
    for c in report.conflicts:
        console.print(f"  {c.first_id} ≠ {c.second_id}  (cosine {c.similarity:.3f}): {'; '.join(c.reasons)}",
                      markup=False, highlight=False)
