"""Responsibility: what every command shares: the Typer app, the global options, the shared
option types, the session (open store → handler → one-line errors) and output helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console

from memsafe import __version__, api, render, settings
from memsafe.errors import MemsafeError
from memsafe.models import Kind

app = typer.Typer(
    name="memsafe",
    help="Persistent, local, offline memory for AI coding agents and the people who use them.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

err = Console(stderr=True, highlight=False, soft_wrap=True)


def out() -> Console:
    return Console(highlight=False)


# -- shared options ------------------------------------------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="Project name or path (default: the git repository of the current directory).",
    ),
]
ProjectPathOpt = Annotated[
    str | None, typer.Option("--project-path", help="Use the project of this path (posix or Windows).")
]
KindOpt = Annotated[Kind, typer.Option("--kind", "-k", help="What the memory is.")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tag", "-t", help="Tag (repeatable).")]


@dataclass
class Ctx:
    db: str | None = None


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Database file (default: $MEMSAFE_DB, `config set db`, or the user data dir)."),
    ] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True)] = False,
) -> None:
    """memsafe remembers what matters across sessions, in one SQLite file on this machine.

    Examples:

      memsafe remember "we squash before merging" --kind decision

      memsafe recall "how do we merge?"
    """
    if version:
        typer.echo(f"memsafe {__version__}")
        raise typer.Exit()
    ctx.obj = Ctx(db=db)


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]Error:[/] {message}", markup=True, highlight=False)
    return typer.Exit(code)


@contextmanager
def _session(ctx: typer.Context) -> Iterator[api.Opened]:
    """Open the store, show its warnings on stderr, map MemsafeError to a one-line error."""
    opened = None
    try:
        opened = api.open_store(ctx.obj.db if ctx.obj else None)
        for warning in opened.warnings:
            err.print(f"[yellow]Warning:[/] {warning}", markup=True)
        yield opened
    except MemsafeError as exc:
        if os.environ.get("MEMSAFE_DEBUG"):
            raise
        raise _fail(str(exc), exc.exit_code) from None
    finally:
        if opened is not None:
            opened.store.close()


def _project(opened: api.Opened, project: str | None, project_path: str | None) -> tuple[str | None, str]:
    """(project key, the rule that chose it)."""
    if project_path:
        return settings.project_key(project_path), "--project-path"
    if project:
        return api.clean_project(project), "--project"
    mode = api.config_get(opened.store, "project_mode")
    return settings.detect_project(mode=mode), f"{mode} of {os.getcwd()}"


def _emit_json(obj) -> None:
    sys.stdout.write(render.dumps(obj) + "\n")


