"""Responsibility: `memsafe bench-scale` — the scale benchmark (memsafe.bench_scale) from the command line.
(Temporary name: to be folded into `memsafe bench --scale` at merge.)"""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe import bench_scale
from memsafe.cli._common import JsonOpt, _emit_json, _fail, app, err, out

_ROWS = [
    ("import (memories/s, with embeddings)", "import_per_s"),
    ("import (memories per CPU-second)", "import_per_cpu_s"),
    ("DB bytes per memory", "db_bytes_per_memory"),
    ("recall p50 / p95 in process, project (ms)", ("recall_ms_p50", "recall_ms_p95")),
    ("recall p50 / p95 in process, all projects (ms)", ("recall_all_projects_ms_p50", "recall_all_projects_ms_p95")),
    ("recall p50 / p95 CLI process (ms)", ("cli_recall_ms_p50", "cli_recall_ms_p95")),
    ("remember p50 / p95 CLI process (ms)", ("cli_remember_ms_p50", "cli_remember_ms_p95")),
    ("peak RSS import / serve-like / CLI recall (MB)",
     ("import_peak_rss_mb", "serve_like_peak_rss_mb", "cli_recall_peak_rss_mb")),
    ("vectors synthesised (not model-embedded)", "vectors_synthesized"),
]


@app.command("bench-scale")
def bench_scale_cmd(
    sizes: Annotated[str, typer.Option("--sizes", help="Comma-separated store sizes.")] = "1000,10000",
    queries: Annotated[int, typer.Option("--queries", min=5, help="Recall queries per size (in process).")] = 40,
    cli_samples: Annotated[int, typer.Option("--cli-samples", min=1, help="CLI runs per size.")] = 5,
    work_dir: Annotated[
        str | None, typer.Option("--work-dir", help="Where to build the stores (default: temp).")
    ] = None,
    full_embed_limit: Annotated[
        int, typer.Option("--full-embed-limit", min=100, help="Embed at most this many with the model per size.")
    ] = 20000,
    json_: JsonOpt = False,
) -> None:
    """Measure import throughput, DB size, recall/remember latency and peak RSS at several store sizes.

    Builds fresh stores of synthetic memories (never touches your store). Slow: 10,000 memories take minutes.

    Example:

      memsafe bench-scale --sizes 1000,10000 --json
    """
    try:
        size_list = [int(s.replace("_", "")) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise _fail(f"--sizes must be comma-separated whole numbers, got {sizes!r}") from None
    if not size_list or any(s < 10 for s in size_list):
        raise _fail("--sizes needs at least one size of 10 or more")
    try:
        result = bench_scale.run_scale(
            size_list, work_dir=work_dir, queries=queries, cli_samples=cli_samples, full_embed_limit=full_embed_limit,
            progress=lambda msg: err.print(msg, markup=False),
        )
    except RuntimeError as exc:
        raise _fail(str(exc)) from None
    if json_:
        _emit_json(result)
        return
    from rich.table import Table

    table = Table(title=f"memsafe scale benchmark (load avg {result['machine']['load_avg_at_start']})")
    table.add_column("metric")
    for n in size_list:
        table.add_column(f"{n:,}", justify="right")
    for label, key in _ROWS:
        cells = []
        for n in size_list:
            row = result["sizes"][n]
            cells.append(" / ".join(str(row.get(k)) for k in key) if isinstance(key, tuple) else str(row.get(key)))
        table.add_row(label, *cells)
    out().print(table)
