"""Responsibility: `memsafe ui`, the local web page for seeing and curating the store: its options
and help. A plain `memsafe [--db P] ui [--port N] [--no-open]` does not come through here:
`memsafe.__main__` hands it to `memsafe.ui.start` before the CLI loads; both paths run
`start.main`. Starlette, uvicorn and Jinja2 stay out of every other command."""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe.cli._common import app

DEFAULT_PORT = 8377  # memsafe.ui.start.DEFAULT_PORT (not imported: --help stays light)


@app.command()
def ui(
    ctx: typer.Context,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535,
                     help=f"Port on 127.0.0.1 (default {DEFAULT_PORT}, or any free port if it is taken; "
                     "0 = any free port)."),
    ] = None,
    no_open: Annotated[bool, typer.Option("--no-open", help="Print the URL but do not open a browser.")] = False,
) -> None:
    """See and curate what memsafe remembers, in a local web page.

    Serves a page on 127.0.0.1 only (never on the network), guarded by a random token made for
    this run: the printed URL carries it. Search with the same recall as the CLI, browse and
    filter, read a memory's history and diffs, edit, forget, restore, pin, confirm or purge,
    and look at the knowledge graph and charts of the store. Ctrl-C stops it.

    Examples:

      memsafe ui

      memsafe ui --port 8400 --no-open
    """
    from memsafe.ui import start

    code = start.main(ctx.obj.db if ctx.obj else None, port, no_open)
    if code:
        raise typer.Exit(code)
