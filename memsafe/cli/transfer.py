"""Responsibility: the export, import and embed commands."""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Annotated

import typer

from memsafe import api, render, settings
from memsafe.cli import _plain, fast
from memsafe.cli._common import (
    AllProjectsOpt,
    JsonOpt,
    ProjectOpt,
    ProjectPathOpt,
    _emit_json,
    _fail,
    _scope,
    _session,
    app,
    err,
    say,
)

PARTIAL_EXIT = fast.PARTIAL_EXIT  # import finished but skipped something


class ImportFormat(str, Enum):
    auto = "auto"
    memsafe = "memsafe"
    server_memory = "server-memory"


@app.command()
def export(
    ctx: typer.Context,
    output: Annotated[str, typer.Option("--output", "-o", help="File to write, or - for stdout.")] = "-",
    project: ProjectOpt = None,
    project_path: ProjectPathOpt = None,
    all_projects: AllProjectsOpt = False,
    include_forgotten: Annotated[
        bool, typer.Option("--include-forgotten", help="Also export forgotten memories.")
    ] = False,
    vectors: Annotated[
        bool, typer.Option("--vectors", help="Also write each memory's vector (~2 KB each), so an import "
                           "with the same model needs no re-embedding.")
    ] = False,
) -> None:
    """Export memories, history, graph and config as memsafe JSON Lines (docs/export-format.md).

    Like recall, it takes the current project and global memories; --all-projects takes every
    project (a whole backup).

    Examples:

      memsafe export -o backup.jsonl --all-projects --include-forgotten

      memsafe export -o move.jsonl --all-projects --vectors

      memsafe export --project ~/src/web | gzip > web.jsonl.gz
    """
    with _session(ctx) as opened:
        scope = _scope(opened, project, project_path, all_projects)
        key = scope.projects[0] if scope.projects else None
        options = {"project": key, "all_projects": all_projects, "include_forgotten": include_forgotten,
                   "vectors": vectors}
        if opened.store.encrypted:
            say("Warning", "the store is encrypted, but the export is plain JSON Lines: keep it somewhere safe")
        if output == "-":
            try:
                report = api.export(opened.store, sys.stdout, **options)
                sys.stdout.flush()
            except BrokenPipeError:  # the reader stopped early (`| head`): stop quietly, like other tools
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(1) from None
            except OSError as exc:
                raise _fail(f"cannot write the export to stdout: {exc.strerror or exc}") from None
        else:
            with _plain.progress("exporting") as progress:
                target = settings.expand_path(output, what="export file (--output)")
                report = api.export_to_path(opened.store, target, progress=progress, **options)
    c = report.counts
    err.print(f"Exported {render.count_of(c['memory'], 'memory')}, {render.count_of(c['entity'], 'entity')}, "
              f"{render.count_of(c['relation'], 'relation')}, {render.count_of(c['config'], 'config')}"
              + (f" with {render.count_of(report.vectors, 'vector')}" if vectors else "")
              + (f" to {report.path}" if report.path else "")
              + (" from every project" if all_projects else
                 f" from project {key} and global memories (--all-projects: every project)" if key else
                 " from global memories only (no project here; --all-projects: every project)"),
              markup=False)


@app.command("import")
def import_(
    ctx: typer.Context,
    file: Annotated[  # text, not Path: Typer reads an empty Path as "." (`_common._refuse_blank`)
        str, typer.Argument(help="A memsafe export, or an MCP memory-server file (JSONL or JSON array).")
    ],
    format_: Annotated[ImportFormat, typer.Option("--format", "-f", help="File format.")] = ImportFormat.auto,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and count; write nothing.")] = False,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Import the valid records, list the rest (exit 3).")
    ] = False,
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="server-memory: project of the observations.")
    ] = None,
    no_embed: Annotated[bool, typer.Option("--no-embed", help="Leave vectors pending (see `memsafe embed`).")] = False,
    redact: Annotated[
        bool, typer.Option(
            "--redact/--no-redact",
            help="Store text that looks like a credential with the secret replaced (default), or refuse the record.",
        )
    ] = True,
    allow_purged: Annotated[
        bool, typer.Option("--allow-purged", help="Bring back memories that were purged here (skipped otherwise).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Import FILE in one transaction: all of it, or nothing (unless --skip-invalid).

    Memories merge by uid, so importing the same file twice changes nothing the second time.
    A memory purged here is skipped and reported, unless --allow-purged. Text that looks like a
    credential is stored with each secret replaced by [REDACTED:<type>] (a note names the record);
    --no-redact refuses such a record instead.
    Exit codes: 0 imported, 1 refused (nothing written), 2 a usage error, 3 imported with records skipped,
    130 interrupted by Ctrl-C, 143 by SIGTERM (it says what was kept).

    Examples:

      memsafe import backup.jsonl --dry-run

      memsafe import ~/.mcp/memory.json --format server-memory --skip-invalid
    """
    try:
        fast.import_(ctx.obj.db if ctx.obj else None, file, format_=format_.value, dry_run=dry_run,
                     skip_invalid=skip_invalid, project=project, no_embed=no_embed, redact=redact,
                     allow_purged=allow_purged, json_=json_)
    except _plain.Failed as exc:
        raise typer.Exit(exc.code) from None


@app.command()
def embed(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="NAME",
        help="Re-embed every memory with this model and make it the store's (minilm, minilm-l3, e5-small; "
             "docs/embedders.md). The old vectors stay until the new ones are all computed.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Compute every pending vector (memories stored with --no-embed, imports, git hooks).

    Until then those memories are found by keywords only. Exits 1 if vectors cannot be computed
    here; 130 (Ctrl-C) or 143 (SIGTERM) when interrupted: what was embedded is kept, and the next
    `memsafe embed` goes on from there. With --model, every memory is embedded again with that
    model, then all its vectors replace the old ones in one write: interrupted, nothing changed.

    Examples:

      memsafe embed

      memsafe embed --model e5-small
    """
    import time

    if model is not None:
        _reembed(ctx, model, json_)
        return
    with _session(ctx) as opened:
        before = opened.store.pending_count()
        started = time.monotonic()
        try:
            with _plain.progress("embedding", unit="vectors") as progress:
                report = api.embed_pending(opened.store, progress=progress)
        except KeyboardInterrupt:  # each batch is its own transaction: the batches written stay
            pending = opened.store.pending_count()
            message = (f"interrupted: {render.count_of(before - pending, 'memory')} embedded, {pending} pending; "
                       "`memsafe embed` goes on from there")
            _plain.error(message, "Interrupted", json_)
            raise _plain.Failed(130) from None  # 143 for SIGTERM (`memsafe.__main__`)
    if json_:
        _emit_json(report)
    elif report.error is None:
        seconds = time.monotonic() - started
        rate = f", {report.embedded / seconds:,.0f}/s" if report.embedded and seconds > 0 else ""
        err.print(f"Embedded {render.count_of(report.embedded, 'memory')} ({seconds:.1f} s{rate}); "
                  f"{report.pending} pending")
    if report.error:
        if not json_:  # with --json the report above holds the error
            say("Error", f"{report.error}; {render.count_of(report.pending, 'memory')} pending")
        raise typer.Exit(1)


def _reembed(ctx: typer.Context, model: str, json_: bool) -> None:
    """`memsafe embed --model NAME`: `api.reembed` with a progress bar."""
    import time

    with _session(ctx) as opened:
        started = time.monotonic()
        try:
            with _plain.progress(f"re-embedding ({model})", unit="memories") as progress:
                report = api.reembed(opened.store, model, progress=progress)
        except KeyboardInterrupt:  # nothing was written: the new vectors were not all computed
            _plain.error("interrupted: nothing changed; the store keeps its vectors and model", "Interrupted", json_)
            raise _plain.Failed(130) from None  # 143 for SIGTERM (`memsafe.__main__`)
    if json_:
        _emit_json(report)
        return
    seconds = time.monotonic() - started
    err.print(f"Re-embedded {render.count_of(report.embedded, 'memory')} with {report.model} ({report.dim} dims, "
              f"{seconds:.1f} s; before: {report.previous}); {report.pending} pending")
