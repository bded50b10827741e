"""Responsibility: `memsafe serve`, the MCP server over stdio (the server itself is memsafe.server)."""

from __future__ import annotations

import typer

from memsafe.cli._common import ProjectOpt, _fail, app
from memsafe.errors import MemsafeError


@app.command()
def serve(ctx: typer.Context, project: ProjectOpt = None) -> None:
    """Run the MCP server over stdio, for Claude Code, Claude Desktop and other MCP clients.

    The project is detected from the working directory the client starts the server in
    (git root by default, see `config get project_mode`), unless --project names one.
    Stdout carries only JSON-RPC; logs go to stderr (MEMSAFE_LOG_LEVEL, default WARNING).

    Examples:

      claude mcp add memsafe -- memsafe serve

      memsafe --db ~/notes/memory.db serve --project notes
    """
    from memsafe.server import serve as run_server

    try:
        run_server(ctx.obj.db if ctx.obj else None, project)
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code, type(exc).__name__) from None
