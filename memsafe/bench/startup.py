"""Responsibility: `memsafe bench --startup`: what a shell, a git hook and an agent loop pay per call.

Whole-process measures (`timing.interleaved`, each round also timing `python -c pass`, so every
figure has its ratio to the interpreter's bare start-up under the same load):
`--version`, `--help`, one completion TAB (bash protocol), `recall --mode lexical`, default
`recall`, `remember`, the reading commands (`get`, `list`, `history`, `status`) and `forget`,
MCP spawn → `initialize` reply, and the agent hooks at SessionStart and UserPromptSubmit
(`memsafe agent hook`, the event JSON on stdin, as Claude Code runs it) on a store of HOOK_SEED
memories.

Measures inside one process (a warm `memsafe serve`, or this process):
- MCP `remember` reply time (p50) and sequential remembers per second; how long until the last one
  is vector-searchable (no memory pending);
- MCP `recall` reply time (p50) at SEED memories;
- `api.recall` in process (p50), model loaded and warm;
- after a CLI `remember`, how long until its vector is stored (the deferred embedding);
- `import --no-embed` of the seed export into a fresh store (memories/s, keyword-searchable at
  once) and the embedding throughput of filling the seed's vectors (texts/s).

Everything runs on a temporary store seeded with SEED synthetic memories (`bench.scale`); your
own store is never touched. Targets are those of docs/performance.md; `met` says whether a median meets them.
memsafe's own modules are byte-compiled first (as `pip install` does; an editable install under
PYTHONDONTWRITEBYTECODE=1 would otherwise compile them in every process), and each whole-process
measure runs once untimed, so caches a first run fills (answers, token counts, secret gates) are
there as on a machine in use.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from memsafe.bench import timing

__all__ = ["SEED", "run_startup", "startup_table"]

SEED = 1000
HOOK_SEED = 10_000  # the agent hooks are measured on a store this large (keyword-searchable, no vectors)
HOOK_P95_S = 0.400
HOOK_PROMPT = "the runbook for restarting notifications"
MCP_REMEMBERS = 200
QUERY = "how is the cache warmed at boot"
LEXICAL_S = 0.200  # `recall --mode lexical`, and each reading command
# The reading commands timed (each with `--project web`); `status` says whether the model loads
# without loading it once it loaded before (`embed.known_model`: the seeding here loads it).
READING = (("get", "1"), ("list", "-n", "20"), ("history", "1"), ("status",))


def memsafe_argv() -> list[str]:
    """How a user runs memsafe: the console script beside this interpreter, else `python -m memsafe`."""
    script = Path(sys.executable).with_name("memsafe")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "memsafe"]


def _seed(db: Path, n: int, export: Path) -> dict:
    """Fill `db` with n synthetic memories and their vectors; leave an export without vectors in
    `export`. Returns the embedding throughput of the fill (texts/s, length-sorted batches)."""
    from memsafe import api, embed
    from memsafe.bench.scale import synthetic_memories

    opened = api.open_store(str(db))
    store = opened.store
    try:
        with store.write():
            for item in synthetic_memories(n):
                api.remember(store, item["content"], kind=item["kind"], project="web", tags=item["tags"],
                             source="import", embed_now=False)
        api.export_to_path(store, export, project="web")
        model = embed.get_embedder()
        if model is None:
            raise RuntimeError(f"the embedding model is unavailable: {embed.load_error()}")
        model.embed(["warm up"])
        started = time.perf_counter()
        api.backfill(store, limit=None)
        seconds = time.perf_counter() - started
        store.compact_word_index()  # as cron's daily decay (the store's maintenance) leaves it
        store.checkpoint()
    finally:
        store.close()
    return {"texts": n, "seconds": round(seconds, 3), "texts_per_s": round(n / seconds, 1),
            "threads": model.session.get_session_options().intra_op_num_threads}


def _import_rate(ms: list[str], export: Path, folder: str, n: int, env: dict, runs: int) -> dict:
    """`memsafe import FILE --no-embed` of n memories into a fresh store, whole process: memories/s
    (median of `runs`), each then searchable by keyword."""
    times = []
    for i in range(runs):
        target = Path(folder) / f"import-{i}.db"
        times.append(timing.time_process([*ms, "--db", str(target), "import", str(export), "--no-embed"], env=env))
        found = _keyword_hits(target, n)
        if found != n:  # a figure for an import that imported nothing would be meaningless
            raise RuntimeError(f"the import bench found {found} of {n} memories by keyword")
    p50 = timing.percentile(times, 0.5)
    return {"memories": n, "seconds": timing.summary(times), "per_s": round(n / p50, 1), "target": 1000}


def _keyword_hits(db: Path, n: int) -> int:
    """How many memories of `db` (at most n) a keyword search for "ref", a word in every seeded
    memory, finds."""
    from memsafe import api

    opened = api.open_store(str(db))
    try:
        return len(api.recall(opened.store, "ref", all_projects=True, mode="lexical", limit=n,
                              budget=10**6).hits)
    finally:
        opened.store.close()


def _pending(db: Path) -> int:
    from memsafe import api

    opened = api.open_store(str(db))
    try:
        return opened.store.pending_count()
    finally:
        opened.store.close()


def _wait_embedded(db: Path, timeout: float = 30.0) -> float | None:
    """Seconds until no memory is pending in `db` (polled every 20 ms), or None after `timeout`."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if _pending(db) == 0:
            return time.perf_counter() - started
        time.sleep(0.02)
    return None


def _mcp_measures(db: Path, cwd: str, remembers: int, env: dict) -> dict:
    """A warm server: remember reply p50 and rate, time to vector-searchable, recall reply p50."""
    from memsafe.bench.mcp import RawClient

    out: dict = {}
    with RawClient(db, cwd=cwd, env=env, args=("--project", "web")) as client:
        client.initialize()
        first = client.call("recall", {"query": QUERY})  # waits for the model, like an agent's first call
        if first.get("isError"):
            raise RuntimeError(f"recall failed: {first['content'][0]['text']}")
        times = []
        started = time.perf_counter()
        for i in range(remembers):
            t0 = time.perf_counter()
            result = client.call("remember", {"content": f"mcp bench note {i}: queue {i % 13} drains "
                                              f"within {i % 7 + 1} minutes after deploy {i}"})
            times.append(time.perf_counter() - t0)
            if result.get("isError"):
                raise RuntimeError(f"remember failed: {result['content'][0]['text']}")
        total = time.perf_counter() - started
        searchable = _wait_embedded(db)
        out["mcp_remember_reply"] = {"seconds": timing.summary(times), "target_s": 0.010}
        out["mcp_remembers_per_s"] = {"value": round(remembers / total, 1), "target": 100}
        out["mcp_remember_to_searchable"] = {"seconds": None if searchable is None else round(searchable, 3),
                                             "target_s": 1.0}
        times = timing.timed(lambda: client.call("recall", {"query": QUERY}), 30)
        out["mcp_recall_reply"] = {"seconds": timing.summary(times)}
    return out


def _in_process_recall(db: Path, runs: int = 50) -> dict:
    """p50 of `api.recall` in a warm process: QUERY asked again and again (its vector reused after
    the first), and `runs` queries new to the process (each embedded by the model), in hybrid and
    lexical mode."""
    from memsafe import api, embed
    from memsafe.bench import scale

    opened = api.open_store(str(db))
    try:
        embed.get_embedder()
        for _ in range(3):
            api.recall(opened.store, QUERY, project="web")
        times = timing.timed(lambda: api.recall(opened.store, QUERY, project="web"), runs)
        unique = [q for q in dict.fromkeys(scale.synthetic_queries(40 * runs, seed=29)) if q != QUERY]
        fresh = iter(unique[:runs])
        new = timing.timed(lambda: api.recall(opened.store, next(fresh), project="web"), min(runs, len(unique)))
        fresh = iter(unique[-runs:])
        lexical = timing.timed(lambda: api.recall(opened.store, next(fresh), project="web", mode="lexical"),
                               min(runs, len(unique)))
    finally:
        opened.store.close()
    return {"seconds": timing.summary(times), "target_s": 0.005, "new_query_seconds": timing.summary(new),
            "lexical_seconds": timing.summary(lexical)}


def _hook_store(folder: Path, n: int) -> tuple[Path, Path]:
    """A store of n synthetic memories (no vectors: the hooks search by keyword) whose project is
    the git repository `folder/web`, and that repository; some are pinned, decisions or tasks, so
    the brief has all its sections. Returns (database, repository)."""
    import subprocess

    from memsafe import api, settings
    from memsafe.bench.scale import synthetic_memories

    repo = folder / "web"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    key = settings.detect_project_keys(repo)[0]
    db = folder / "hooks.db"
    opened = api.open_store(str(db))
    store = opened.store
    try:
        with store.write():
            for i, item in enumerate(synthetic_memories(n, seed=11)):
                api.remember(store, item["content"], kind=item["kind"], project=key,
                             tags=[*item["tags"], *(["pinned"] if i % 997 == 0 else [])], source="import",
                             embed_now=False)
        store.compact_word_index()
        store.checkpoint()
    finally:
        store.close()
    return db, repo


def _hook_timer(ms: list[str], db: Path, repo: Path, event_name: str, env: dict):
    """A timer (round → (wall seconds, CPU seconds)) of one `memsafe agent hook` process answering
    `event_name`, in a new session each round (so the prompt's memories were not shown before);
    checks the reply injects something. The CPU time (user + system) is the process's own, from
    `os.wait4` where it exists: on a loaded machine the wall time waits for the CPU, the CPU time
    much less so."""
    import json
    import subprocess
    import uuid

    def run(round_no: int) -> tuple[float, float | None]:
        event = {"session_id": str(uuid.uuid4()), "cwd": str(repo),  # a new session, named as Claude Code names it
                 "transcript_path": str(repo / "none.jsonl"), "hook_event_name": event_name,
                 **({"source": "startup"} if event_name == "SessionStart" else {"prompt": HOOK_PROMPT})}
        started = time.perf_counter()
        proc = subprocess.Popen([*ms, "--db", str(db), "agent", "hook"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **env},
                                cwd=str(repo))
        cpu = None
        if hasattr(os, "wait4"):  # POSIX: reaped here, for the process's own resource usage
            out = _feed(proc, event)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        else:
            out, _ = proc.communicate(json.dumps(event).encode())
        seconds = time.perf_counter() - started
        if proc.returncode != 0 or b"additionalContext" not in out:
            raise RuntimeError(f"the {event_name} hook injected nothing (see the hook log)")
        return seconds, cpu

    return run


def _feed(proc, event: dict) -> bytes:
    """Write `event` to the stdin of `proc`, close it, and read its stdout to the end (the caller
    reaps the process itself, for its resource usage)."""
    import json

    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(event).encode())
    proc.stdin.close()
    out = proc.stdout.read()
    proc.stdout.close()
    return out


def hook_verdicts(report: dict) -> dict:
    """{measure name: {"p50_s", "p95_s", "cpu_p50_s", "cpu_p95_s" (None without CPU times),
    "target_p50_s", "target_p95_s", "met"}} for the agent hook measures of a `run_startup` report:
    `met` when the median is within the hook target and the p95 within HOOK_P95_S, wall-clock."""
    out = {}
    for name, m in report["processes"]["measures"].items():
        if not name.startswith("agent hook"):
            continue
        cpu = m.get("cpu_seconds") or {}
        out[name] = {"p50_s": m["seconds"]["p50"], "p95_s": m["seconds"]["p95"],
                     "cpu_p50_s": cpu.get("p50"), "cpu_p95_s": cpu.get("p95"),
                     "target_p50_s": m["target_s"], "target_p95_s": HOOK_P95_S,
                     "met": m["seconds"]["p50"] <= m["target_s"] and m["seconds"]["p95"] <= HOOK_P95_S}
    return out


def run_startup(runs: int = 5, *, seed: int = SEED, remembers: int = MCP_REMEMBERS, progress=None,
                hook_seed: int = HOOK_SEED) -> dict:
    """Run every start-up measure (see the module docstring) on a temporary store.

    Returns:
        {"processes": `timing.interleaved` result (seconds, ratio to `python -c pass`, target, met),
         "mcp_initialize": {...}, "in_server": {...}, "in_process_recall": {...},
         "cli_remember_to_searchable": {...}, "seed": n, "machine": {...},
         "hooks": `hook_verdicts`}. Seconds throughout.

    Raises:
        RuntimeError: a command failed or a server did not answer.
    """
    import compileall

    from memsafe.bench.mcp import RawClient

    say = progress or (lambda msg: None)
    compileall.compile_dir(str(Path(__file__).resolve().parents[1]), quiet=2)
    load_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="memsafe-bench-startup-") as tmp:
        db = Path(tmp) / "bench.db"
        say(f"seeding {seed} memories …")
        export = Path(tmp) / "seed.jsonl"
        embedding = _seed(db, seed, export)
        env = {"MEMSAFE_DB": str(db), "MEMSAFE_HOME": tmp, "COLUMNS": "100"}
        ms = memsafe_argv()
        say("import --no-embed …")
        imports = _import_rate(ms, export, tmp, seed, env, min(runs, 3))
        counter = iter(range(10**9))
        say(f"seeding {hook_seed:,} memories for the agent hooks …")
        hook_db, hook_repo = _hook_store(Path(tmp), hook_seed)

        def spawn_to_initialize(_round: int) -> float:
            with RawClient(db, cwd=tmp, env=env) as client:
                client.initialize()
                return time.perf_counter() - client.started

        def remember_argv(_round: int) -> list[str]:
            return [*ms, "remember", f"startup bench note {next(counter)}: the web cache warms at boot",
                    "--project", "web"]

        measures = [
            timing.Measure("--version", [*ms, "--version"], env=env, target_ratio=3),
            timing.Measure("--help", [*ms, "--help"], env=env, target_ratio=3),
            timing.Measure("completion TAB", ms, env={**env, "_MEMSAFE_COMPLETE": "complete_bash",
                                                      "COMP_WORDS": "memsafe rec", "COMP_CWORD": "1"},
                           target_ratio=3),
            timing.Measure("recall --mode lexical", [*ms, "recall", QUERY, "--project", "web", "--mode", "lexical"],
                           env=env, target_s=LEXICAL_S),
            timing.Measure("recall", [*ms, "recall", QUERY, "--project", "web"], env=env, target_s=0.450),
            timing.Measure("remember", remember_argv, env=env, target_s=0.300),
            # the reading commands (and forget) run on the fast path too: within the lexical recall's target
            *[timing.Measure(words[0], [*ms, *words, "--project", "web"], env=env, target_s=LEXICAL_S)
              for words in READING],
            timing.Measure("forget", lambda round_no: [*ms, "forget", str(seed - 2 - round_no), "--project", "web"],
                           env=env, target_s=LEXICAL_S),
            timing.Measure("MCP spawn → initialize", timer=spawn_to_initialize, target_s=0.500),
            timing.Measure(f"agent hook SessionStart ({hook_seed:,} memories)",
                           timer=_hook_timer(ms, hook_db, hook_repo, "SessionStart", env), target_s=0.150),
            timing.Measure(f"agent hook UserPromptSubmit ({hook_seed:,} memories)",
                           timer=_hook_timer(ms, hook_db, hook_repo, "UserPromptSubmit", env), target_s=0.150),
        ]
        say("warm-up run …")
        for m in measures:
            m.run(-1)
        say(f"{runs} rounds of whole-process runs …")
        processes = timing.interleaved(measures, runs, progress=say)
        say("CLI remember → vector-searchable …")
        timing.time_process(remember_argv(0), env=env)
        cli_searchable = _wait_embedded(db)
        say(f"MCP: {remembers} sequential remembers, recall …")
        in_server = _mcp_measures(db, tmp, remembers, env)
        say("recall in process …")
        in_process = _in_process_recall(db)
    report = {
        "processes": processes,
        "cli_remember_to_searchable": {"seconds": None if cli_searchable is None else round(cli_searchable, 3),
                                       "target_s": 5.0},
        "in_server": in_server,
        "in_process_recall": in_process,
        "import": imports,
        "embedding": embedding,
        "seed": seed,
        "hook_seed": hook_seed,
        "machine": {"cpus": os.cpu_count(), "load_avg_at_start": load_start,
                    "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
    }
    report["hooks"] = hook_verdicts(report)
    return report


def _mark(met: bool | None) -> str:
    return "" if met is None else ("yes" if met else "NO")


def startup_rows(report: dict) -> list[tuple[str, str, str, str, str, str]]:
    """(measure, median, median CPU, × python -c pass, target, met) rows of a `run_startup` report."""
    proc = report["processes"]

    def cpu(summary_s: dict | None) -> str:
        return "" if not summary_s else f"{summary_s['p50'] * 1000:.0f} ms"

    rows = [(timing.BASELINE, f"{proc['baseline']['p50'] * 1000:.0f} ms", cpu(proc.get("baseline_cpu")), "1.0", "", "")]
    for name, m in proc["measures"].items():
        target = " ".join(filter(None, [f"≤ {m['target_s'] * 1000:.0f} ms" if m["target_s"] else "",
                                        f"≤ {m['target_ratio']:g}×" if m["target_ratio"] else ""]))
        rows.append((name, f"{m['seconds']['p50'] * 1000:.0f} ms", cpu(m.get("cpu_seconds")), f"{m['ratio']:.1f}",
                     target, _mark(m["met"])))
        if name.startswith("agent hook"):  # a hook blocks the user: its slow runs count too
            p95 = m["seconds"]["p95"]
            cpu95 = (m.get("cpu_seconds") or {}).get("p95")
            rows.append(("  … p95", f"{p95 * 1000:.0f} ms", "" if cpu95 is None else f"{cpu95 * 1000:.0f} ms", "",
                         f"≤ {HOOK_P95_S * 1000:.0f} ms", _mark(p95 <= HOOK_P95_S)))

    def single(name: str, seconds, target_s) -> None:
        met = None if target_s is None else (seconds is not None and seconds <= target_s)
        shown = "never" if seconds is None else f"{seconds * 1000:.1f} ms"
        rows.append((name, shown, "", "", f"≤ {target_s * 1000:g} ms" if target_s else "", _mark(met)))

    s = report["in_server"]
    single("MCP remember reply (p50)", s["mcp_remember_reply"]["seconds"]["p50"], 0.010)
    rate = s["mcp_remembers_per_s"]["value"]
    rows.append(("MCP sequential remembers", f"{rate:.0f} /s", "", "", "≥ 100 /s", _mark(rate >= 100)))
    single("MCP remember → vector-searchable", s["mcp_remember_to_searchable"]["seconds"], 1.0)
    single(f"MCP recall reply (p50, {report['seed']:,} memories)", s["mcp_recall_reply"]["seconds"]["p50"], None)
    inproc = report["in_process_recall"]
    single(f"recall in process (p50, {report['seed']:,} memories), a repeated query", inproc["seconds"]["p50"], 0.005)
    single("  … each query new (embedded by the model)", inproc["new_query_seconds"]["p50"], None)
    single("  … --mode lexical, each query new", inproc["lexical_seconds"]["p50"], None)
    single("CLI remember → vector-searchable", report["cli_remember_to_searchable"]["seconds"], 5.0)
    imp = report["import"]
    rows.append((f"import --no-embed ({imp['memories']:,}), keyword-searchable", f"{imp['per_s']:.0f} /s", "", "",
                 "≥ 1000 /s", _mark(imp["per_s"] >= 1000)))
    emb = report["embedding"]
    rows.append((f"embedding ({emb['threads']} threads, batches)", f"{emb['texts_per_s']:.0f} texts/s", "", "", "",
                 ""))
    return rows


def startup_table(report: dict):
    """A rich table of `startup_rows`."""
    from rich.table import Table

    table = Table(title=f"memsafe start-up ({report['processes']['runs']} rounds, medians; "
                        f"load {report['machine']['load_avg_at_start'][0]:.1f})")
    for col in ("measure", "median", "CPU", "× python -c pass", "target", "met"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    for row in startup_rows(report):
        table.add_row(*row)
    table.caption = hook_verdict_line(report)
    return table


def hook_verdict_line(report: dict) -> str:
    """One line: each agent hook's p50 / p95 (wall, then CPU) and whether it meets its target."""
    parts = []
    for name, v in (report.get("hooks") or hook_verdicts(report)).items():
        event = name.removeprefix("agent hook ").split(" ")[0]
        cpu = "" if v["cpu_p50_s"] is None else f" (CPU {v['cpu_p50_s'] * 1000:.0f} / {v['cpu_p95_s'] * 1000:.0f} ms)"
        parts.append(f"{event} {v['p50_s'] * 1000:.0f} / {v['p95_s'] * 1000:.0f} ms{cpu}: "
                     f"{'meets' if v['met'] else 'MISSES'} ≤ {v['target_p50_s'] * 1000:.0f} / "
                     f"{v['target_p95_s'] * 1000:.0f} ms")
    load = report["machine"]["load_avg_at_start"]
    return f"agent hooks, p50 / p95: {'; '.join(parts)} (load average {load[0]:.1f} at the start)"
