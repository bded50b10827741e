"""Responsibility: `memsafe serve`, the MCP server over stdio (memsafe.mcp.tools) or, with
`--transport http`, over streamable HTTP with tokens (memsafe.mcp.http)."""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Annotated

import typer

from memsafe.cli._common import ProjectOpt, _fail, app
from memsafe.errors import MemsafeError

HTTP_DEFAULT_PORT = 8765  # memsafe.mcp.http.DEFAULT_PORT (not imported: stdio never loads it)


class Transport(str, Enum):
    stdio = "stdio"
    http = "http"


@app.command()
def serve(
    ctx: typer.Context,
    project: ProjectOpt = None,
    transport: Annotated[
        Transport, typer.Option("--transport", help="stdio (one client, started by it) or http (a shared server).")
    ] = Transport.stdio,
    host: Annotated[
        str | None,
        typer.Option("--host", help="With --transport http: address to listen on (default 127.0.0.1; any other "
                     "needs MEMSAFE_HTTP_TOKENS_FILE)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535,
                     help=f"With --transport http: port (default {HTTP_DEFAULT_PORT}; 0 = any free port)."),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", metavar="NAME",
                     help="With --transport http: another Host name clients use, e.g. a reverse proxy's "
                     "public name (repeatable)."),
    ] = None,
) -> None:
    """Run the MCP server over stdio, for Claude Code, Claude Desktop and other MCP clients.

    The project is detected from the working directory the client starts the server in
    (git root by default, see `config get project_mode`), unless --project names one.
    Stdout carries only JSON-RPC; logs go to stderr (MEMSAFE_LOG_LEVEL, default WARNING).

    With --transport http it serves one memory to a team over MCP's streamable HTTP at
    http://HOST:PORT/mcp. Bearer tokens come from the file MEMSAFE_HTTP_TOKENS_FILE names
    (lines `name token`); each memory written records its token's user as author. Tokens are
    required on any address but loopback. `GET /healthz` answers without a token. See
    docs/team.md for deployment behind TLS.

    Examples:

      claude mcp add memsafe -- memsafe serve

      memsafe --db ~/notes/memory.db serve --project notes

      memsafe --db /srv/memsafe/team.db serve --transport http --host 0.0.0.0
    """
    db = ctx.obj.db if ctx.obj else None
    try:
        if transport is Transport.stdio:
            if host is not None or port is not None or allow_host:
                raise _fail("--host, --port and --allow-host need --transport http", 2, "UsageError")
            from memsafe.mcp.stdio import STOP
            from memsafe.mcp.stdio import serve as run_server

            try:
                run_server(db, project)
            except KeyboardInterrupt:  # a stop signal during start-up (see memsafe.__main__)
                sys.stderr.flush()
                os._exit(STOP.code)
            return
        from memsafe.mcp.http import serve_http

        serve_http(db, project, host=host or "127.0.0.1", port=HTTP_DEFAULT_PORT if port is None else port,
                   allow_hosts=tuple(allow_host or ()))
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code, type(exc).__name__) from None
