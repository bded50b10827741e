"""Benchmark `memsafe ui`: how soon the page is usable after the command starts, and how fast
pages are on a large store.

Builds a temporary store of N synthetic memories (as `memsafe bench --scale` does), then starts
`memsafe ui --no-open --port 0` as a fresh process RUNS times (after one untimed start, reported
apart as `first_start_s`: it writes Python's bytecode and the compiled templates, as the first run
after an install does) and measures, from the spawn:
- `usable_s`: the wall time until the first page (the one the printed URL opens: the newest 50
  memories, checked to hold 50 rows) has been fully received, and `cpu_s` the CPU time the
  process used until then (it does not grow when other processes compete for the cores);
- `search_answered_s`: the wall time until a search typed at once in that page has been answered
  (the same recall as the CLI: it waits for the embedding model, which loads after the first page).
Then, in the last process: a page deep in the list (keyset pagination), the charts page and a
search again. The load average and `python -c pass` (wall and CPU, the floor of any Python
process here) are reported with the figures: wall times on a shared machine are only
comparable under the same load.

Usage:
    .venv/bin/python scripts/bench_ui.py [--n 10000] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path


def build(db: str, n: int) -> float:
    """The store `memsafe bench --scale` builds (its synthetic memories; every vector made from
    its template's embedding plus noise, so no search waits for embeddings). Returns seconds."""
    from memsafe.bench import scale

    t0 = time.perf_counter()
    scale._phase_import(db, n, full_embed_limit=0, batch_size=32)
    return time.perf_counter() - t0


def child_env() -> dict[str, str]:
    """The environment of the measured processes: this one's, with Python allowed to keep its
    bytecode (an installed package has it; PYTHONDONTWRITEBYTECODE would recompile memsafe's
    modules on every start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONUNBUFFERED": "1"}


def start(db: str) -> tuple[subprocess.Popen, str, float]:
    """Spawn the page; returns (process, url, spawn time)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memsafe", "--db", db, "ui", "--no-open", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env())
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit("memsafe ui did not print its URL")
    return proc, url, t0


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux /proc; None elsewhere). Unlike
    wall time, this does not grow when other processes compete for the cores."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def fetch(opener, url: str) -> tuple[float, bytes]:
    """GET `url` and read the whole body; returns (seconds, body)."""
    t0 = time.perf_counter()
    with opener.open(url, timeout=300) as response:
        body = response.read()
    took = time.perf_counter() - t0
    print(f"{took * 1000:8.1f} ms  {url.split('?')[0].split('/', 3)[-1] or '/'} {url.partition('?')[2][:40]}",
          file=sys.stderr)
    return took, body


def rows(body: bytes) -> int:
    """Memories listed in a page (`<li class="mem …">` rows)."""
    return body.count(b'<li class="mem ')


def python_floor(runs: int) -> dict[str, float]:
    """Median wall and CPU seconds of `python -c pass` (the floor of any Python process here)."""
    walls, cpus = [], []
    for _ in range(runs):
        before = os.times()
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=child_env())
        walls.append(time.perf_counter() - t0)
        after = os.times()
        cpus.append(after.children_user + after.children_system - before.children_user - before.children_system)
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def one_start(db: str, n: int, query: str, last: bool) -> dict:
    """Start the page once; the first page, then a search typed at once (and, when `last`, the
    warm pages). Returns the figures of this start."""
    proc, url, t0 = start(db)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    try:
        _, body = fetch(opener, url)  # token -> cookie -> the first page, fully received
        usable = time.perf_counter() - t0
        cpu = cpu_seconds(proc.pid)
        if rows(body) != min(n, 50):
            raise SystemExit(f"the first page lists {rows(body)} memories, expected {min(n, 50)}")
        base = url.split("/?")[0]
        _, found = fetch(opener, f"{base}/?q={query}")
        answered = time.perf_counter() - t0
        if not rows(found):
            raise SystemExit("the search found nothing")
        out = {"usable_s": usable, "cpu_s": cpu, "search_answered_s": answered, "bytes": len(body)}
        if last:
            deep_after = n - 50 * 100  # page 101 of the list
            out["warm_ms"] = {
                "page_101": fetch(opener, f"{base}/?after={max(deep_after, 2)}")[0] * 1000,
                "search": fetch(opener, f"{base}/?q=deploy+the+service")[0] * 1000,
                "charts": fetch(opener, f"{base}/charts")[0] * 1000,
                "first_page": fetch(opener, base + "/")[0] * 1000,
            }
        return out
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="memories in the store")
    parser.add_argument("--runs", type=int, default=5, help="timed starts to take the median of")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    query = "database+connection+timeout"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MEMSAFE_HOME"] = str(Path(tmp) / "home")
        db = str(Path(tmp) / "ui.db")
        build_s = build(db, args.n)
        load_before = os.getloadavg()
        floor = python_floor(5)
        first = one_start(db, args.n, query, last=False)  # writes bytecode and compiled templates
        runs = [one_start(db, args.n, query, last=i == args.runs - 1) for i in range(args.runs)]
        load_after = os.getloadavg()
    med = lambda key: round(statistics.median(r[key] for r in runs), 3)  # noqa: E731
    result = {
        "memories": args.n,
        "build_seconds": round(build_s, 1),
        "runs": args.runs,
        "usable_s": {"median": med("usable_s"), "max": round(max(r["usable_s"] for r in runs), 3)},
        "cpu_s": {"median": med("cpu_s") if None not in [r["cpu_s"] for r in runs] else None},
        "search_answered_s": {"median": med("search_answered_s")},
        "first_start_s": {"usable": round(first["usable_s"], 3),
                          "search_answered": round(first["search_answered_s"], 3)},
        "python_pass": floor,
        "first_page_bytes": runs[-1]["bytes"],
        "warm_ms": {k: round(v, 1) for k, v in runs[-1]["warm_ms"].items()},
        "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
        "cores": os.cpu_count(),
    }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
