"""Responsibility: `memsafe doctor`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from memsafe import api
from memsafe.cli._common import JsonOpt, _emit_json, _session, app, out
from memsafe.plural import count_of

_MARK = {"ok": "ok  ", "warning": "WARN", "error": "FAIL"}


@app.command()
def doctor(
    ctx: typer.Context,
    repo: Annotated[str | None, typer.Option("--repo", help="Repository whose git hook to check (default: cwd).")]
    = None,
    no_model: Annotated[bool, typer.Option("--no-model", help="Do not load the embedding model (faster).")] = False,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Rebuild damaged word, trigram and vector indexes from the memories (never changes "
        "a memory), then check.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Check the installation and the store: versions, paths, schema, integrity, indexes, model, hook.

    Exits 1 if any check fails; each problem comes with what to do.

    Examples:
        memsafe doctor
        memsafe doctor --repair
    """
    with _session(ctx) as opened:
        repaired = api.repair(opened, embed_vectors=not no_model) if repair else None
        report = api.doctor(opened, repo=repo, load_model=not no_model)
    if json_:
        _emit_json({**asdict(report), "ok": report.ok, **({"repair": asdict(repaired)} if repaired else {})})
    else:
        console = out()
        line = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
        if repaired is not None:
            for done in repaired.done or ["nothing to repair: every index matches the memories"]:
                line(f"repaired         {done}")
        line("versions   " + ", ".join(f"{k} {v}" for k, v in report.versions.items() if v))
        for key, value in report.paths.items():
            line(f"{key:<17}{value}")
        c = report.counts
        line(f"memories         {c['active']} active, {c['archived']} archived, {c['forgotten']} forgotten; "
             f"{count_of(c['versions'], 'version')}, {count_of(c['entities'], 'entity')}, "
             f"{count_of(c['relations'], 'relation')}")
        line(f"size             {report.db_bytes:,} bytes" + (f" + {report.wal_bytes:,} WAL"
                                                                 if report.backend == "sqlite" else ""))
        for check in report.checks:
            line(f"[{_MARK[check.level]}] {check.name:<12} {check.detail}")
            if check.fix and check.level != "ok":
                line(f"       fix: {check.fix}")
        warnings = sum(check.level == "warning" for check in report.checks)
        if not report.ok:
            line("Problems found (see FAIL lines).")
        elif warnings:
            line(f"No failures; {warnings} warning{'s' if warnings > 1 else ''} (see WARN lines).")
        else:
            line("All good.")
    if not report.ok:
        raise typer.Exit(1)
