"""Responsibility: `memsafe bench-mcp`, a temporary command measuring the MCP server (token cost
of tools/list, cold start). To be folded into `memsafe bench --mcp`."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from memsafe.cli._common import JsonOpt, _emit_json, _fail, app, err
from memsafe.errors import MemsafeError

SEED_MEMORIES = 50


def _seed(db: Path, count: int) -> None:
    from memsafe import api

    opened = api.open_store(str(db))
    try:
        for i in range(count):
            api.remember(
                opened.store,
                f"Deploy note {i}: service {i % 7} ships through pipeline stage {i % 5} after review {i}",
                embed_now=False,
            )
        api.backfill(opened.store, limit=None)
    finally:
        opened.store.close()


@app.command("bench-mcp")
def bench_mcp(
    runs: Annotated[int, typer.Option("--runs", min=1, max=50, help="Cold starts to take the median of.")] = 5,
    json_: JsonOpt = False,
) -> None:
    """Measure the MCP server: tools/list token cost and cold start (median of --runs).

    Runs on a temporary database seeded with 50 memories; your own store is not touched.
    """
    from memsafe.bench_mcp import measure

    with tempfile.TemporaryDirectory(prefix="memsafe-bench-mcp-") as tmp:
        db = Path(tmp) / "bench.db"
        try:
            err.print(f"seeding {SEED_MEMORIES} memories, then {runs} cold starts …")
            _seed(db, SEED_MEMORIES)
            report = measure(db, runs, cwd=tmp)
        except (MemsafeError, RuntimeError) as exc:
            raise _fail(str(exc)) from None
    report.pop("db", None)
    if json_:
        _emit_json(report)
        return
    listing = report["tools_list"]
    typer.echo(f"tools/list        {listing['whole']} tokens for {listing['tools']} tools "
               f"(name+description+inputSchema only: {listing['core']})")
    typer.echo(f"spawn→initialize  {report['spawn_to_initialize_s']:.3f} s (median of {report['runs']})")
    typer.echo(f"spawn→1st recall  {report['spawn_to_first_recall_s']:.3f} s (median of {report['runs']})")
    typer.echo(f"SDK import alone  {report['baseline_sdk_import_s']:.3f} s (python -c 'import mcp.server.mcpserver')")
