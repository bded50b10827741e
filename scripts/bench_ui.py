"""Benchmark `memsafe ui`: how soon the page is usable after the command starts, and how fast
pages are on a large store.

Builds a temporary store of N synthetic memories (as `memsafe bench --scale` does), then, RUNS
times: starts `memsafe ui --no-open --port 0` as a fresh process and measures the wall time from
the spawn until the first page (the newest 50 memories, the page the printed URL opens) has been
fully received, and the CPU time the process used until then. Then, in the
last process: a page deep in the list (keyset pagination), the charts page and a search.

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


def start(db: str) -> tuple[subprocess.Popen, str, float]:
    """Spawn the page; returns (process, url, spawn time)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memsafe", "--db", db, "ui", "--no-open", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
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


def fetch(opener, url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with opener.open(url, timeout=300) as response:
        body = response.read()
    took = time.perf_counter() - t0
    print(f"{took * 1000:8.1f} ms  {url.split('?')[0].split('/', 3)[-1] or '/'} {url.partition('?')[2][:40]}",
          file=sys.stderr)
    return took, len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="memories in the store")
    parser.add_argument("--runs", type=int, default=5, help="cold starts to take the median of")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MEMSAFE_HOME"] = str(Path(tmp) / "home")
        db = str(Path(tmp) / "ui.db")
        build_s = build(db, args.n)
        startups, cpus = [], []
        for i in range(args.runs):
            proc, url, t0 = start(db)
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
            try:
                _, size = fetch(opener, url)  # token -> cookie -> the first page, fully received
                startups.append(time.perf_counter() - t0)
                cpus.append(cpu_seconds(proc.pid))
                if i == args.runs - 1:
                    base = url.split("/?")[0]
                    deep_after = args.n - 50 * 100  # page 101 of the list
                    deep = fetch(opener, f"{base}/?after={max(deep_after, 2)}")[0]
                    first_search = fetch(opener, f"{base}/?q=database+connection+timeout")[0]
                    search = fetch(opener, f"{base}/?q=deploy+the+service")[0]
                    charts = fetch(opener, f"{base}/charts")[0]
                    page = fetch(opener, base + "/")[0]
            finally:
                proc.terminate()
                proc.wait(15)
    result = {
        "memories": args.n,
        "build_seconds": round(build_s, 1),
        "startup_to_usable_page_s": {"median": round(statistics.median(startups), 3),
                                     "max": round(max(startups), 3), "runs": len(startups),
                                     "cpu_median": round(statistics.median(cpus), 3) if None not in cpus else None},
        "first_page_bytes": size,
        "warm_ms": {"first_page": round(page * 1000, 1), "page_101": round(deep * 1000, 1),
                    "first_search": round(first_search * 1000, 1), "search": round(search * 1000, 1),
                    "charts_with_decay_dry_run": round(charts * 1000, 1)},
    }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
