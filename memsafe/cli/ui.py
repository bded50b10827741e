"""Responsibility: `memsafe ui`, the local web page for seeing and curating the store. The page
itself is `memsafe.ui.server`, imported only when this command runs (Starlette, uvicorn and
Jinja2 stay out of every other command)."""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe.cli._common import _errors, app, err, say

DEFAULT_PORT = 8377


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
    import webbrowser

    from memsafe import api
    from memsafe.ui import server

    db = ctx.obj.db if ctx.obj else None
    with _errors(db):
        sock = server.bind(port, DEFAULT_PORT)
        opened = api.open_store(db)
    for warning in opened.warnings:
        say("Warning", warning)
    state = server.UiState(opened, sock.getsockname()[1])
    url = state.url()

    def ready() -> None:
        print(url, flush=True)  # the one line on stdout: scripts read the URL from here
        err.print(f"memsafe ui: serving {opened.path} on 127.0.0.1 only; press Ctrl-C to stop", highlight=False)
        if not no_open:
            webbrowser.open(url)

    try:
        server.run(state, sock, on_ready=ready)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled once it has shut down
        pass
    finally:
        opened.store.close()
        sock.close()
    err.print("memsafe ui: stopped", highlight=False)
