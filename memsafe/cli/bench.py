"""Responsibility: `memsafe bench`: run the retrieval benchmark shipped with the package and print
its figures (rich table, or one JSON document). Measures live in `memsafe.bench.quality` (`run_quality`
and its renderers); further measures are added as options of this command."""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe import settings
from memsafe.cli._common import JsonOpt, _emit_json, _fail, app, emit, err, out, say
from memsafe.errors import MemsafeError


@app.command()
def bench(
    ctx: typer.Context,
    quick: Annotated[
        bool, typer.Option("--quick", help="Fewer budget sweeps (hybrid only); same queries; seconds, not a minute.")
    ] = False,
    corpus: Annotated[
        str | None, typer.Option("--corpus", help=(
            "A corpus JSON file (or gzip-compressed JSON) instead of those shipped with memsafe: {\"now\"?, "
            "\"memories\": [{\"id\", \"content\", \"kind\"?, \"source\"?, \"project\"?, \"tags\"?, "
            "\"entities\"?, \"at\"?}], \"relations\"?: [{\"source\", \"relation\", \"target\"}], \"queries\": "
            "[{\"id\", \"type\": semantic|keyword|graph|fact|request|update|temporal|note|commit, \"query\", "
            "\"relevant\": [memory ids], \"stale\"?: [memory ids], \"project\"?}]}; at and now: ISO-8601 times."))
    ] = None,
    misses: Annotated[bool, typer.Option("--misses", help="Also list hybrid queries not answered at rank 1.")] = False,
    ablate: Annotated[
        bool, typer.Option("--ablate", help="Turn each ranking signal off in turn on each corpus (or --corpus) and "
                           "print one table of the change in R@1 / R@5, lexical and hybrid (a few minutes).")
    ] = False,
    mcp: Annotated[
        bool, typer.Option("--mcp", help="Measure the MCP server instead: tools/list tokens, cold start, "
                                         "warm searches and writes.")
    ] = False,
    runs: Annotated[
        int, typer.Option("--runs", min=1, max=50,
                          help="With --mcp, --startup or --rebase: runs to take the median of.")
    ] = 5,
    scale: Annotated[
        str | None,
        typer.Option("--scale", help="Measure at these store sizes instead, e.g. 1000,10000,100000 (slow)."),
    ] = None,
    full_embed_limit: Annotated[
        int, typer.Option("--full-embed-limit", min=100,
                          help="With --scale or --http: embed at most this many with the model.")
    ] = 20000,
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", metavar="FORMAT", help="Benchmark on your own labelled data in this format "
                     "instead (locomo); give the file as the argument."),
    ] = None,
    file: Annotated[str | None, typer.Argument(metavar="[FILE]", help="The labelled dataset file (with --dataset).")]
    = None,
    inputs: Annotated[
        bool,
        typer.Option("--inputs", help="Measure storing one 1 MB memory of each hostile shape instead (limit 2 s)."),
    ] = False,
    rebase: Annotated[
        bool, typer.Option("--rebase", help="Measure the git hooks instead: a rebase of 40 and 120 commits with and "
                           "without them, in temporary repositories (limit 2x at 120; about a minute a run).")
    ] = False,
    startup: Annotated[
        bool, typer.Option("--startup", help="Measure start-up instead: whole-process times beside `python -c pass`, "
                           "MCP handshake and remember/recall replies.")
    ] = False,
    http: Annotated[
        bool, typer.Option("--http", help="Measure the team path instead: MCP-over-HTTP clients writing at once, "
                           "and recall over HTTP beside stdio (on --db if given: an empty store).")
    ] = False,
    clients: Annotated[int, typer.Option("--clients", min=1, max=64, help="With --http: writing clients.")] = 8,
    remembers: Annotated[
        int, typer.Option("--remembers", min=1, max=100000, help="With --http: remembers per client.")
    ] = 250,
    latency_at: Annotated[
        int, typer.Option("--latency-at", min=0, help="With --http: store size for the recall latency (0 skips it).")
    ] = 10000,
    postgres: Annotated[
        str | None,
        typer.Option("--postgres", metavar="URL", help="Build the benchmark's store in a temporary schema of this "
                     "PostgreSQL database (dropped afterwards) instead of a temporary SQLite file."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Benchmark recall quality on built-in corpora: lexical, vector and hybrid side by side.

    Builds a temporary store per corpus (your own store is never touched): a template corpus,
    developer prose, users' prompts to a coding assistant, and notes among two real backfilled
    commit histories (docs/corpora.md). Asks each corpus's queries and reports, per query type,
    Recall@1/3/5/10, MRR, update-first@10 (the current value above the stale one), budget
    adherence, utilisation and in-process latency, with a plain FTS5 BM25 row for reference.
    Exits 1 if a quality floor is missed: on the template corpus, hybrid R@1 ≥ 0.95 (semantic,
    keyword) and R@3 ≥ 0.90 (graph); on the template and developer-prose corpora, hybrid at least
    the better of lexical and vector on R@1, R@3 and MRR of each query type (the other corpora are
    reported only).

    Examples:

      memsafe bench --quick

      memsafe bench --json

      memsafe bench --ablate

      memsafe bench --postgres postgresql://me@localhost/scratch --json

      memsafe bench --mcp

      memsafe bench --scale 1000,10000 --json

      memsafe bench --dataset locomo locomo10.json --json

      memsafe bench --inputs

      memsafe bench --startup --runs 9

      memsafe bench --rebase --runs 3

      memsafe bench --http

      memsafe --db postgresql://memsafe@db.internal/bench bench --http --json
    """
    if http:
        _bench_http(ctx.obj.db if ctx.obj else None, clients, remembers, latency_at, full_embed_limit, json_)
        return
    if startup:
        _bench_startup(runs, json_)
        return
    if rebase:
        _bench_rebase(runs, json_)
        return
    if inputs:
        _bench_inputs(json_)
        return
    if dataset is not None or file is not None:
        _bench_dataset(dataset, file, json_)
        return
    if mcp:
        _bench_mcp(runs, json_)
        return
    if scale:
        _bench_scale(scale, full_embed_limit, json_)
        return
    if ablate:
        _bench_ablate(corpus, json_)
        return
    from memsafe.bench import quality as bench_mod

    try:
        report = bench_mod.run_quality(quick=quick, corpus_path=corpus, postgres=postgres)
    except MemsafeError as exc:
        if settings.env().debug:
            raise
        raise _fail(str(exc), exc.exit_code, type(exc).__name__) from None
    except (OSError, ValueError, KeyError) as exc:
        raise _fail(f"cannot run the benchmark corpus: {exc}") from None
    if json_:
        _emit_json(report)
    else:
        console = out()
        for table in bench_mod.quality_tables(report):
            console.print(table)
        for line in bench_mod.floor_lines(report):
            console.print(line, markup=False, highlight=False)
        console.print(f"{report['seconds']:.1f} s", markup=False)
        if misses:
            for m in report["misses"]:
                if m["mode"] == "hybrid":
                    console.print(
                        f"miss {m['query_id']} ({m['type']}) rank={m['rank']} top3={m['top3']}: {m['query']}",
                        markup=False, highlight=False,
                    )
    if not report["ok"]:
        if not json_:  # with --json the report above says which floor ("ok": false)
            say("Error", "a quality floor was missed")
        raise typer.Exit(1)


def _bench_ablate(corpus: str | None, json_: bool) -> None:
    """Each ranking signal off in turn, on every shipped corpus or on `corpus` alone."""
    from memsafe.bench import ablate as bench_ablate

    try:
        report = bench_ablate.run_ablation(corpus_path=corpus, progress=lambda msg: err.print(
            msg, markup=False, highlight=False))
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    except (OSError, ValueError, KeyError) as exc:
        raise _fail(f"cannot run the benchmark corpus: {exc}") from None
    emit(report, json_, bench_ablate.ablation_table(report))


def _bench_dataset(dataset: str | None, file: str | None, json_: bool) -> None:
    """Recall quality on a labelled dataset file (LoCoMo format): one store per conversation."""
    if dataset != "locomo":
        raise _fail("--dataset takes locomo (the LoCoMo format)" if dataset else "give --dataset locomo with FILE", 2)
    if not file:
        raise _fail("--dataset locomo needs the dataset FILE as argument", 2)
    from memsafe.bench import locomo
    from memsafe.cli._plain import progress as _progress

    try:
        with _progress("recall") as progress:
            report = locomo.run_locomo(file, progress=progress)
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _fail(f"cannot run the dataset {file}: {exc}") from None
    emit(report, json_, locomo.locomo_table(report))


def _bench_mcp(runs: int, json_: bool) -> None:
    """The MCP server's token cost and cold start, on a temporary seeded store."""
    from memsafe.bench.mcp import SEED_MEMORIES, WARM_MEMORIES, mcp_lines, run_mcp

    err.print(f"seeding {SEED_MEMORIES} memories, then {runs} cold starts; then {WARM_MEMORIES:,} memories for a warm "
              "server's searches and writes …")
    try:
        report = run_mcp(runs)
    except (MemsafeError, RuntimeError) as exc:
        raise _fail(str(exc)) from None
    if json_:
        _emit_json(report)
        return
    console = out()
    for line in mcp_lines(report):
        console.print(line)



def _bench_http(db: str | None, clients: int, remembers: int, latency_at: int, full_embed_limit: int,
                json_: bool) -> None:
    """MCP over HTTP under load (8 clients x 250 remembers, recalls alongside), then recall latency
    over HTTP and stdio at `latency_at` memories; exits 1 unless every remember was stored, once,
    without an error."""
    from memsafe.bench import http as bench_http

    try:
        report = bench_http.run_http(db=db, clients=clients, remembers=remembers, latency_at=latency_at,
                                     full_embed_limit=full_embed_limit,
                                     progress=lambda msg: err.print(msg, markup=False, highlight=False))
    except (MemsafeError, RuntimeError) as exc:
        raise _fail(str(exc)) from None
    if json_:
        _emit_json(report)
    else:
        console = out()
        for line in bench_http.http_lines(report):
            console.print(line, markup=False, highlight=False)
    if not report["ok"]:
        if not json_:
            say("Error", "the load did not store exactly one memory per remember without errors")
        raise typer.Exit(1)


def _bench_scale(sizes_text: str, full_embed_limit: int, json_: bool) -> None:
    """Import throughput, DB size, recall/remember latency and peak RSS at several store sizes."""
    from memsafe.bench import scale as bench_scale

    try:
        sizes = bench_scale.parse_sizes(sizes_text)
        result = bench_scale.run_scale(
            sizes, full_embed_limit=full_embed_limit, progress=lambda msg: err.print(msg)
        )
    except (ValueError, RuntimeError) as exc:
        raise _fail(str(exc)) from None
    emit(result, json_, bench_scale.scale_table(result, sizes))


def _bench_inputs(json_: bool) -> None:
    """Time storing one 1,000,000-character memory of each shape (letters, hex, base64, prose,
    repeated tokens, long lines); exits 1 if one takes 2 s or more."""
    from memsafe.bench import inputs as bench_inputs

    result = bench_inputs.run_inputs(progress=lambda msg: err.print(msg, markup=False, highlight=False))
    emit(result, json_, bench_inputs.inputs_table(result))
    if not result["ok"]:
        say("Error", f"a memory took {result['limit_s']:g} s or more to store")
        raise typer.Exit(1)


def _bench_rebase(runs: int, json_: bool) -> None:
    """A rebase of 40 and 120 commits with and without memsafe's git hooks; exits 1 if the hooks
    make the 120-commit one 2x slower or leave a duplicate memory."""
    from memsafe.bench import rebase as bench_rebase

    try:
        result = bench_rebase.run_rebase(runs=runs, progress=lambda msg: err.print(msg, markup=False,
                                                                                   highlight=False))
    except RuntimeError as exc:
        raise _fail(str(exc)) from None
    emit(result, json_, bench_rebase.rebase_table(result))
    if not result["ok"]:
        say("Error", f"a {result['limit_commits']}-commit rebase with memsafe's hooks took "
                     f"{result['limit_ratio']:g}x as long or more, or one left a duplicate memory")
        raise typer.Exit(1)


def _bench_startup(runs: int, json_: bool) -> None:
    """Start-up and per-call cost of the CLI and the MCP server, beside `python -c pass`."""
    from memsafe.bench import startup as bench_startup

    try:
        report = bench_startup.run_startup(runs, progress=lambda msg: err.print(msg))
    except (MemsafeError, RuntimeError) as exc:
        raise _fail(str(exc)) from None
    emit(report, json_, bench_startup.startup_table(report))
