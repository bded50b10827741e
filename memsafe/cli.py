"""Responsibility: the `memsafe` command line. Each command parses its arguments, calls one
handler in `memsafe.api`, and renders the result: data on stdout (a rich table, or one JSON
document with `--json`), messages on stderr. `MemsafeError`s become one line on stderr and
exit code 1; usage errors exit 2. A traceback appears only for real bugs, or with MEMSAFE_DEBUG=1.
"""

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
from memsafe.models import Kind, Source

app = typer.Typer(
    name="memsafe",
    help="Persistent, local, offline memory for AI coding agents and the people who use them.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app = typer.Typer(help="Show and change settings (validated).", no_args_is_help=True)
app.add_typer(config_app, name="config")

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
        bool, typer.Option("--no-embed", help="Store now, compute the vector later (faster).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Remember CONTENT. Prints the new memory's id.

    Examples:

      memsafe remember "API errors are logged to /var/log/api.err" --kind fact --tag ops

      git log -1 --format=%B | memsafe remember - --source git
    """
    text = sys.stdin.read() if content == "-" else content
    with _session(ctx) as opened:
        key = None if global_ else _project(opened, project, project_path)[0]
        memory = api.remember(
            opened.store, text, kind=kind.value, project=key, tags=tag or [], source=source.value,
            importance=importance, embed_now=not no_embed,
        )
    if json_:
        _emit_json(memory)
    else:
        out().print(f"Remembered memory {memory.id}" + (f" in {memory.project}" if memory.project else " (global)"))


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
    mode: Annotated[str, typer.Option("--mode", help="hybrid, lexical or vector.")] = "hybrid",
    json_: JsonOpt = False,
) -> None:
    """Recall what memsafe knows about QUERY, packed to fit a token budget.

    Searches the current project plus global memories by meaning (vectors) and by keywords
    (BM25), fused.

    Examples:

      memsafe recall "how do we deploy?"

      memsafe recall "ERR_SSL_PROTOCOL" --all-projects --json
    """
    with _session(ctx) as opened:
        key = None if all_projects else _project(opened, project, project_path)[0]
        result = api.recall(
            opened.store, query, project=key, all_projects=all_projects,
            kinds=[k.value for k in kind or []], tags=tag or [], budget=budget, limit=limit, mode=mode,
        )
    if json_:
        _emit_json(render.recall_dict(result))
        return
    for note in result.notes:
        err.print(f"[yellow]Note:[/] {note}", markup=True)
    if not result.hits:
        err.print("No memories found.")
        return
    out().print(render.recall_table(result))


@app.command()
def get(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")],
    json_: JsonOpt = False,
) -> None:
    """Show one memory, whatever its status."""
    with _session(ctx) as opened:
        memory = api.get(opened.store, memory_id)
    if json_:
        _emit_json(memory)
    else:
        out().print(render.memory_table(memory))


@app.command()
def forget(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept in the audit log).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Forget a memory: hidden from every recall, kept for audit; `restore ID` undoes it."""
    with _session(ctx) as opened:
        memory = api.forget(opened.store, memory_id, reason=reason)
    if json_:
        _emit_json(memory)
    else:
        out().print(f"Forgot memory {memory.id} (restore with: memsafe restore {memory.id})")


@app.command()
def restore(
    ctx: typer.Context,
    memory_id: Annotated[int, typer.Argument(metavar="ID", help="Memory id.")],
    json_: JsonOpt = False,
) -> None:
    """Bring a forgotten or archived memory back."""
    with _session(ctx) as opened:
        memory = api.restore(opened.store, memory_id)
    if json_:
        _emit_json(memory)
    else:
        out().print(f"Restored memory {memory.id}")


@app.command()
def purge(
    ctx: typer.Context,
    memory_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="Memory ids.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Destroy memories for good: text, vectors, full-text index and history. Cannot be undone.

    Without a terminal, --yes is required.
    """
    if not yes:
        if not sys.stdin.isatty():
            raise _fail("purge destroys data; pass --yes to confirm when not running in a terminal")
        if not typer.confirm(f"Permanently destroy memory {', '.join(map(str, memory_ids))}?"):
            raise _fail("nothing purged")
    with _session(ctx) as opened:
        report = api.purge(opened.store, memory_ids)
    if json_:
        _emit_json(report)
    else:
        out().print(
            f"Purged {len(report.purged_ids)} memories ({report.versions_removed} history versions removed)"
        )


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
    with _session(ctx) as opened:
        key, rule = _project(opened, project, project_path)
        report = api.status(opened, project=key, project_rule=rule)
    if json_:
        _emit_json(report)
    else:
        console = out()
        for line in render.status_lines(report):
            console.print(line, markup=False)
    if not (report.vector_search["available"] and report.model.get("loaded")):
        raise typer.Exit(1)


# -- config ----------------------------------------------------------------------------------------


@config_app.command("list")
def config_list(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """List every setting with its value, default and meaning."""
    with _session(ctx) as opened:
        items = api.config_list(opened.store)
        db_path = str(opened.path)
    items["db"] = {"value": db_path, "default": str(settings.default_db_path()), "help": "database file"}
    if json_:
        _emit_json(items)
        return
    from rich.table import Table

    table = Table("key", "value", "default", "meaning")
    for key, item in items.items():
        table.add_row(key, str(item["value"]), str(item["default"]), item["help"])
    out().print(table)


@config_app.command("get")
def config_get(ctx: typer.Context, key: Annotated[str, typer.Argument(help="Setting name.")]) -> None:
    """Print one setting's value."""
    if key == "db":
        path, _ = settings.resolve_db_path(ctx.obj.db)
        typer.echo(str(path))
        return
    with _session(ctx) as opened:
        value = api.config_get(opened.store, key)
    typer.echo(str(value))


@config_app.command("set")
def config_set(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Setting name (see `config list`).")],
    value: Annotated[str, typer.Argument(help="New value.")],
) -> None:
    """Change a setting. `config set db PATH` chooses the database file for later runs."""
    if key == "db":
        try:
            path = api.set_db_path(value)
        except MemsafeError as exc:
            raise _fail(str(exc)) from None
        typer.echo(f"db = {path}")
        return
    with _session(ctx) as opened:
        parsed = api.config_set(opened.store, key, value)
    typer.echo(f"{key} = {parsed}")


@config_app.command("reset")
def config_reset(ctx: typer.Context, key: Annotated[str, typer.Argument(help="Setting name.")]) -> None:
    """Return a setting to its default."""
    with _session(ctx) as opened:
        value = api.config_reset(opened.store, key)
    typer.echo(f"{key} = {value}")


# -- entry point -----------------------------------------------------------------------------------


def _safe_streams() -> None:
    """Never die on a legacy console encoding: unencodable characters are replaced (FIELD-CASES F02)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):
            pass


def main() -> None:
    """Console-script entry point."""
    _safe_streams()
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
