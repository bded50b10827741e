"""Concurrency stress: many writer processes, recalls (and `memsafe decay`, when that command
exists) on one database file at once; then verify that nothing was lost or broken.

Every writer is a separate OS process. Writers of kind `api` open the store once and call
`api.remember` in a loop (half of them computing embeddings); writers of kind `cli` run one
`python -m memsafe remember --no-embed` process per memory; writers of kind `serve` (used only
when `memsafe serve` exists) call the MCP `remember` tool over stdio. Each writer prints the id
of each memory after its commit was acknowledged. Recall processes query in a loop meanwhile.

Checks afterwards: the exact number of memories, every acknowledged id present, no caller saw
"database is locked" (or any other error), `Store.consistency_problems()` empty (integrity_check,
FTS rows, vector rows).

    python scripts/stress.py run --writers 4 --cli-writers 2 --serve-writers 2 --json   # 8 x 250
    python scripts/stress.py run --writers 4 --count 50 --cli-writers 2 --cli-count 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["deploy", "retry", "cache", "schema", "auth", "billing", "search", "logging", "build", "release"]


def content_for(writer: str, i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"stress note {writer}-{i}: the {topic} path was checked by {writer} at step {i}"


def _memsafe_cmd() -> list[str]:
    return [sys.executable, "-m", "memsafe"]


def has_command(name: str) -> bool:
    r = subprocess.run([*_memsafe_cmd(), name, "--help"], capture_output=True, text=True)
    return r.returncode == 0


# -- roles (each runs in its own process) ----------------------------------------------------------


def role_writer(db: str, name: str, count: int, embed: bool) -> int:
    from memsafe import api

    opened = api.open_store(db)
    for i in range(count):
        m = api.remember(opened.store, content_for(name, i), embed_now=embed)
        print(m.id, flush=True)
    opened.store.close()
    return 0


def role_cli_writer(db: str, name: str, count: int) -> int:
    failures = 0
    for i in range(count):
        r = subprocess.run(
            [*_memsafe_cmd(), "--db", db, "remember", content_for(name, i), "--no-embed", "--global", "--json"],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            failures += 1
            print(r.stderr.strip(), file=sys.stderr, flush=True)
            continue
        print(json.loads(r.stdout)["id"], flush=True)
    return 1 if failures else 0


def role_serve_writer(db: str, name: str, count: int) -> int:
    """remember over MCP stdio against `memsafe serve` (only when that command exists)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main() -> int:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "memsafe", "--db", db, "serve"], env=dict(os.environ)
        )
        failures = 0
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for i in range(count):
                result = await session.call_tool("remember", {"content": content_for(name, i)})
                text = " ".join(getattr(c, "text", "") for c in result.content)
                found = re.search(r"Remembered #(\d+)", text)
                if result.is_error or not found:
                    failures += 1
                    print(text[:300], file=sys.stderr, flush=True)
                else:
                    print(found.group(1), flush=True)  # acknowledged: the tool call returned its id
        return 1 if failures else 0

    return anyio.run(main)


def role_recaller(db: str, stop_file: str) -> int:
    from memsafe import api

    opened = api.open_store(db)
    n = 0
    while not os.path.exists(stop_file):
        api.recall(opened.store, TOPICS[n % len(TOPICS)] + " path checked", all_projects=True)
        n += 1
    print(n, flush=True)
    opened.store.close()
    return 0


# -- orchestration ----------------------------------------------------------------------------------


def run(
    db: str,
    writers: int,
    count: int,
    cli_writers: int = 0,
    cli_count: int = 0,
    serve_writers: int = 0,
    recallers: int = 1,
    decay: bool = True,
) -> dict:
    """Run the stress and verify. Returns a summary dict; `ok` is True when every check passed."""
    me = str(Path(__file__).resolve())
    stop_file = db + ".stop"
    procs: list[tuple[str, subprocess.Popen]] = []
    env = dict(os.environ)
    started = time.monotonic()

    def spawn(label: str, *args: str) -> None:
        procs.append((label, subprocess.Popen(
            [sys.executable, me, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )))

    expected = writers * count + cli_writers * cli_count
    for w in range(writers):
        spawn(f"api{w}", "writer", db, f"A{w}", str(count), "1" if w % 2 == 0 else "0")
    for w in range(cli_writers):
        spawn(f"cli{w}", "cli-writer", db, f"C{w}", str(cli_count))
    serve_ok = serve_writers > 0 and has_command("serve")
    if serve_ok:
        for w in range(serve_writers):
            spawn(f"serve{w}", "serve-writer", db, f"S{w}", str(count))
        expected += serve_writers * count
    recall_procs = []
    for r in range(recallers):
        recall_procs.append(subprocess.Popen(
            [sys.executable, me, "recaller", db, stop_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        ))
    decay_result = None
    if decay and has_command("decay"):
        time.sleep(1.0)
        d = subprocess.run([*_memsafe_cmd(), "--db", db, "decay", "--apply"], capture_output=True, text=True)
        decay_result = {"exit": d.returncode, "stderr": d.stderr.strip()[-300:]}

    acknowledged: set[int] = set()
    errors: list[str] = []
    for label, p in procs:
        out, err = p.communicate(timeout=3600)
        for line in out.split():
            if line.isdigit():
                acknowledged.add(int(line))
        if p.returncode != 0 or err.strip():
            errors.append(f"{label} exit {p.returncode}: {err.strip()[-500:]}")
    write_seconds = time.monotonic() - started
    Path(stop_file).touch()
    recalls = 0
    for p in recall_procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0 or err.strip():
            errors.append(f"recaller exit {p.returncode}: {err.strip()[-500:]}")
        recalls += int(out.split()[-1]) if out.split() else 0
    os.unlink(stop_file)

    from memsafe import api

    opened = api.open_store(db)
    store = opened.store
    ids = {r[0] for r in store.conn.execute("SELECT id FROM memories")}
    problems = store.consistency_problems()
    summary = {
        "expected": expected,
        "memories": len(ids),
        "acknowledged": len(acknowledged),
        "acknowledged_missing": sorted(acknowledged - ids)[:20],
        "vectors": store.vector_count(),
        "embedded_rows": store.conn.execute("SELECT count(*) FROM memories WHERE embedded = 1").fetchone()[0],
        "problems": problems,
        "errors": errors,
        "locked_errors": sum("locked" in e.lower() for e in errors),
        "recalls": recalls,
        "serve_writers": serve_writers if serve_ok else 0,
        "decay": decay_result,
        "write_seconds": round(write_seconds, 2),
    }
    store.close()
    summary["ok"] = (
        summary["memories"] == expected
        and not summary["acknowledged_missing"]
        and not problems
        and not errors
        and (decay_result is None or decay_result["exit"] == 0)
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "writer":
        return role_writer(argv[1], argv[2], int(argv[3]), argv[4] == "1")
    if argv and argv[0] == "cli-writer":
        return role_cli_writer(argv[1], argv[2], int(argv[3]))
    if argv and argv[0] == "serve-writer":
        return role_serve_writer(argv[1], argv[2], int(argv[3]))
    if argv and argv[0] == "recaller":
        return role_recaller(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--db", help="database file (default: a new temporary one)")
    parser.add_argument("--writers", type=int, default=6, help="api writer processes")
    parser.add_argument("--count", type=int, default=250, help="remembers per api/serve writer")
    parser.add_argument("--cli-writers", type=int, default=2, help="writers that run one CLI process per memory")
    parser.add_argument("--cli-count", type=int, default=250)
    parser.add_argument("--serve-writers", type=int, default=0, help="MCP writers (needs `memsafe serve`)")
    parser.add_argument("--recallers", type=int, default=2)
    parser.add_argument("--no-decay", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    db = args.db or str(Path(tempfile.mkdtemp(prefix="memsafe-stress-")) / "stress.db")
    summary = run(
        db, args.writers, args.count, args.cli_writers, args.cli_count, args.serve_writers, args.recallers,
        decay=not args.no_decay,
    )
    summary["db"] = db
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for k, v in summary.items():
            print(f"{k:22} {v}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
