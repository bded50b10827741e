"""Responsibility: measuring the MCP server as a client sees it: the token cost of `tools/list`,
cold start (process spawn to the `initialize` reply, and to the first `recall` answered), and a
warm server's searches and writes on a store of WARM_MEMORIES memories (`measure_warm`), beside
their floors: a bare SQLite insert and a bare query embedding in this process.

Everything here talks raw newline-delimited JSON-RPC to a real `python -m memsafe serve`
process (`RawClient`), so the figures include interpreter start, imports and the model load,
and nothing of an SDK client's own overhead. Token counts use `memsafe.tokens.count`
(cl100k_base) on compact JSON (`separators=(",", ":")`, UTF-8 unescaped).
"""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import cast

from memsafe import tokens
from memsafe.bench import python_m
from memsafe.bench.timing import percentile

__all__ = ["PROTOCOL_VERSION", "RawClient", "measure", "measure_warm", "tools_list_tokens"]

PROTOCOL_VERSION = "2025-11-25"


class RawClient:
    """A `memsafe serve` child process spoken to in raw JSON-RPC lines.

    Every stdout line is kept in `lines` (bytes, as read) so callers can check that nothing but
    JSON-RPC ever appears there; stderr is drained into `stderr` by a thread unless
    `drain_stderr=False` (then nobody reads it, as with a careless client).

    Args:
        db: database file for `--db`.
        args: extra arguments after `serve`.
        env: environment overrides (merged over os.environ).
        cwd: working directory of the server (its project is detected from it).
    """

    def __init__(self, db: str | os.PathLike, *, args: tuple[str, ...] = (), env: dict | None = None,
                 cwd: str | os.PathLike | None = None, drain_stderr: bool = True):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*python_m("memsafe"), "--db", str(db), "serve", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )
        self.lines: list[bytes] = []
        self.stderr = bytearray()
        self._next_id = 0
        self._inbox: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if drain_stderr:
            threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None  # opened with PIPE
        for line in stdout:
            self.lines.append(line)
            self._inbox.put(line)
        self._inbox.put(None)

    def _read_stderr(self) -> None:
        stderr = cast(io.BufferedReader, self.proc.stderr)  # a PIPE with the default buffering
        while chunk := stderr.read1(65536):
            self.stderr += chunk

    def send(self, method: str, params: dict | None = None, *, notify: bool = False) -> int | None:
        """Write one request (or notification); returns the request id."""
        message: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        request_id = None
        if not notify:
            self._next_id += 1
            request_id = message["id"] = self._next_id
        self.write_raw(json.dumps(message, ensure_ascii=False))
        return request_id

    def write_raw(self, line: str) -> None:
        """Write one line exactly as given (UTF-8), for hand-made requests."""
        stdin = self.proc.stdin
        assert stdin is not None  # opened with PIPE
        stdin.write(line.encode("utf-8") + b"\n")
        stdin.flush()

    def receive(self, request_id: int | None, timeout: float = 60.0) -> dict:
        """The response to `request_id` (notifications in between are skipped).

        Raises:
            TimeoutError: no response within `timeout` seconds; EOFError: the server exited.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no response to request {request_id} within {timeout} s") from None
            if line is None:
                raise EOFError(f"server exited (code {self.proc.poll()}); stderr: {bytes(self.stderr[-2000:])!r}")
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def request(self, method: str, params: dict | None = None, timeout: float = 60.0) -> dict:
        return self.receive(self.send(method, params), timeout)

    def initialize(self, timeout: float = 60.0) -> dict:
        """The initialize handshake (request + `notifications/initialized`); returns the result."""
        reply = self.request(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
             "clientInfo": {"name": "memsafe-bench", "version": "1"}},
            timeout,
        )
        self.send("notifications/initialized", notify=True)
        return reply["result"]

    def call(self, tool: str, arguments: dict, timeout: float = 120.0) -> dict:
        """tools/call; returns the CallToolResult dict (`content`, `isError`)."""
        return self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)["result"]

    def close(self, timeout: float = 15.0) -> int:
        """Close stdin and wait for the process to exit; returns its exit code."""
        try:
            if self.proc.stdin is not None:  # opened with PIPE: always
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _compact(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def tools_list_tokens(result: dict) -> dict:
    """Token cost of a `tools/list` result (cl100k_base, compact JSON).

    Returns:
        {"tools": n, "whole": tokens of the whole result, "core": tokens of
        [{name, description, inputSchema}] only, "per_tool": {name: tokens}}.
    """
    tools = result.get("tools", [])
    core = [{k: t[k] for k in ("name", "description", "inputSchema") if k in t} for t in tools]
    return {
        "tools": len(tools),
        "whole": tokens.count(_compact(result)),
        "core": tokens.count(_compact(core)),
        "per_tool": {t["name"]: tokens.count(_compact(t)) for t in tools},
    }


def measure(db: str | os.PathLike, runs: int = 5, *, query: str = "how do we deploy", cwd=None) -> dict:
    """Measure `memsafe serve` on `db` as a client sees it.

    Each run spawns a fresh server, times spawn → `initialize` response and spawn → first
    `recall` answered (model load included; the recall is sent right after the handshake),
    then closes it. The first run also fetches `tools/list` for the token counts.

    Returns:
        {"tools_list": tools_list_tokens(...), "spawn_to_initialize_s": median,
         "spawn_to_first_recall_s": median, "baseline_sdk_import_s": median, "runs": runs,
         "samples": {...: [seconds]}}
        Times are wall-clock seconds (time.perf_counter), medians over `runs`. The baseline is a
        bare `python -c "import mcp.server.mcpserver"` taken in the same runs: the floor any
        server built on the SDK pays, which makes figures from a loaded machine comparable.

    Raises:
        RuntimeError: a server failed to answer, or recall returned a tool error.
    """
    init_times: list[float] = []
    recall_times: list[float] = []
    sdk_times: list[float] = []
    listing: dict | None = None
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp.server.mcpserver"], check=True)
        sdk_times.append(time.perf_counter() - started)
        with RawClient(db, cwd=cwd) as client:
            try:
                client.initialize()
                init_times.append(time.perf_counter() - client.started)
                result = client.call("recall", {"query": query})
                recall_times.append(time.perf_counter() - client.started)
                if result.get("isError"):
                    raise RuntimeError(f"recall failed: {result['content'][0]['text']}")
                if listing is None:
                    listing = client.request("tools/list")["result"]
            except (TimeoutError, EOFError) as exc:
                raise RuntimeError(f"memsafe serve did not answer: {exc}") from None
    return {
        "tools_list": tools_list_tokens(listing or {}),
        "spawn_to_initialize_s": round(percentile(init_times, 0.5), 3),
        "spawn_to_first_recall_s": round(percentile(recall_times, 0.5), 3),
        "baseline_sdk_import_s": round(percentile(sdk_times, 0.5), 3),
        "runs": len(init_times),
        "samples": {"initialize": [round(t, 3) for t in init_times],
                    "first_recall": [round(t, 3) for t in recall_times]},
        "db": str(Path(db)),
    }


WARM_MEMORIES = 1_000  # the store the warm figures are taken on
WARM_SEARCHES = 100  # distinct queries timed (then the same ones again)
WARM_WRITES = 300  # remembers timed, one after another
SEARCH_TARGET_MS = 6.0  # p50 of a warm hybrid search
WRITES_TARGET_PER_S = 250.0


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process `pid` has used so far, from /proc (None where there is
    no /proc: the figures per call are then left out)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_call_ms(before: float | None, after: float | None, calls: int) -> float | None:
    return None if before is None or after is None or not calls else round((after - before) / calls * 1000, 2)


def _ms(values: list[float]) -> dict:
    return {"p50": round(percentile(values, 0.5) * 1000, 2), "p95": round(percentile(values, 0.95) * 1000, 2)}


def _pending(db: Path) -> int:
    from memsafe import api

    opened = api.open_store(str(db))
    try:
        return opened.store.pending_count()
    finally:
        opened.store.close()


def _seed_warm(db: Path, n: int) -> None:
    """`n` synthetic developer memories (`memsafe.bench.scale.synthetic_memories`), all embedded."""
    from memsafe import api
    from memsafe.bench.scale import synthetic_memories

    opened = api.open_store(str(db))
    store = opened.store
    try:
        with store.write():
            for item in synthetic_memories(n):
                api.remember(store, item["content"], kind=item["kind"], project=item["project"], tags=item["tags"],
                             source="import", embed_now=False)
        api.backfill(store, limit=None)
        store.checkpoint()
    finally:
        store.close()


def insert_floor(folder: Path, writes: int = WARM_WRITES) -> dict:
    """A bare SQLite insert as memsafe writes one (WAL, `BEGIN IMMEDIATE`, one row, `COMMIT`), in
    this process: per write, wall-clock ms and CPU ms, with `synchronous` FULL (an fsync per
    commit: what the server does) and NORMAL (no fsync: the floor without durability)."""
    import apsw

    out = {}
    for mode in ("FULL", "NORMAL"):
        path = folder / f"floor-{mode.lower()}.db"
        conn = apsw.Connection(str(path))
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {mode}")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, content TEXT NOT NULL)")
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(writes):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t (content) VALUES (?)", (f"write note {i}: a short fact " * 3,))
                conn.execute("COMMIT")
            out[mode.lower()] = {"ms": round((time.perf_counter() - started) / writes * 1000, 3),
                                 "cpu_ms": round((time.process_time() - cpu) / writes * 1000, 3)}
        finally:
            conn.close()
    return out


def embedding_floor(queries: list[str]) -> dict | None:
    """A bare query embedding (`Embedder.embed_one`, the server's own model and threads) of each
    of `queries`, in this process, after a warm-up: p50 wall-clock ms and CPU ms per query. None
    when the model is unavailable."""
    from memsafe import embed

    embedder = embed.get_embedder()
    if embedder is None:
        return None
    for q in queries[:5]:
        embedder.embed_one(q + " warm")
    times = []
    cpu = time.process_time()
    for q in queries:
        started = time.perf_counter()
        embedder.embed_one(q)
        times.append(time.perf_counter() - started)
    return {**_ms(times), "cpu_ms": round((time.process_time() - cpu) / len(queries) * 1000, 2)}


def measure_warm(db: Path, *, searches: int = WARM_SEARCHES, writes: int = WARM_WRITES, cwd=None) -> dict:
    """A warm `memsafe serve` on `db` as one client sees it, one call after another: the model
    loaded and the first searches made, then `searches` hybrid `recall`s of distinct queries,
    the same queries again (their vectors kept: `recall.vectors.query_vector`), and `writes`
    `remember`s.

    Returns:
        {"search": {p50, p95 (ms), cpu_ms}, "search_again": {...}, "writes": {per_s, p50, p95 (ms),
         cpu_ms, cpu_ms_with_embedding}, "load_average": [1, 5, 15 min]}. Times are wall-clock
        per reply as the client sees it; cpu_ms is the server process's CPU (user + system, all
        its threads) per call; for writes, `cpu_ms` over the writes themselves and
        `cpu_ms_with_embedding` once the deferred embedding of every one was done too.

    Raises:
        RuntimeError: the server failed to answer, a call returned a tool error, or the writes
            were still not embedded a minute later.
    """
    from memsafe.bench.scale import synthetic_queries

    queries = synthetic_queries(searches + 10, seed=RECALL_SEED)
    with RawClient(db, cwd=cwd) as client:
        try:
            client.initialize()

            def call(tool: str, arguments: dict) -> None:
                result = client.call(tool, arguments)
                if result.get("isError"):
                    raise RuntimeError(f"{tool} failed: {result['content'][0]['text'][:300]}")

            for q in queries[:10]:  # warm: the model, the page cache, prepared statements
                call("recall", {"query": q})
            pid = client.proc.pid
            figures: dict = {}
            for name in ("search", "search_again"):
                times = []
                cpu = process_cpu_s(pid)
                for q in queries[10:]:
                    started = time.perf_counter()
                    call("recall", {"query": q})
                    times.append(time.perf_counter() - started)
                figures[name] = {**_ms(times), "cpu_ms": _per_call_ms(cpu, process_cpu_s(pid), len(times))}
            times = []
            cpu = process_cpu_s(pid)
            began = time.perf_counter()
            for i in range(writes):
                started = time.perf_counter()
                call("remember", {"content": f"bench write {i}: the billing queue drains within {i % 9 + 1} minutes "
                                             f"after deploy {1000 + i}"})
                times.append(time.perf_counter() - started)
            seconds = time.perf_counter() - began
            replied = process_cpu_s(pid)
            deadline = time.monotonic() + 60
            while _pending(db):
                if time.monotonic() > deadline:
                    raise RuntimeError("the server had not embedded its writes a minute after them")
                time.sleep(0.1)
            figures["writes"] = {"per_s": round(writes / seconds, 1), **_ms(times),
                                 "cpu_ms": _per_call_ms(cpu, replied, writes),
                                 "cpu_ms_with_embedding": _per_call_ms(cpu, process_cpu_s(pid), writes)}
        except (TimeoutError, EOFError) as exc:
            raise RuntimeError(f"memsafe serve did not answer: {exc}") from None
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return figures


RECALL_SEED = 5
SEED_MEMORIES = 50


def run_mcp(runs: int = 5, *, warm: bool = True) -> dict:
    """`memsafe bench --mcp`: seed a temporary store with SEED_MEMORIES memories and `measure` its
    cold start; then (with `warm`) seed another with WARM_MEMORIES, `measure_warm` it, and take the
    floors (`insert_floor`, `embedding_floor`).

    Returns the `measure` dict (without the temporary path), plus "warm": the `measure_warm` dict
    with "memories", "floors" {"insert", "query_embedding"} and "targets" {"search_p50_ms",
    "writes_per_s", "met": {"search", "writes"}}. Raises MemsafeError, RuntimeError.
    """
    import tempfile

    from memsafe import api

    with tempfile.TemporaryDirectory(prefix="memsafe-bench-mcp-") as tmp:
        db = Path(tmp) / "bench.db"
        opened = api.open_store(str(db))
        try:
            for i in range(SEED_MEMORIES):
                api.remember(
                    opened.store,
                    f"Deploy note {i}: service {i % 7} ships through pipeline stage {i % 5} after review {i}",
                    embed_now=False,
                )
            api.backfill(opened.store, limit=None)
        finally:
            opened.store.close()
        report = measure(db, runs, cwd=tmp)
    report.pop("db", None)
    if warm:
        with tempfile.TemporaryDirectory(prefix="memsafe-bench-mcp-") as tmp:
            from memsafe.bench.scale import synthetic_queries

            db = Path(tmp) / "warm.db"
            _seed_warm(db, WARM_MEMORIES)
            figures = measure_warm(db, cwd=tmp)
            figures["memories"] = WARM_MEMORIES
            figures["floors"] = {"insert": insert_floor(Path(tmp)),
                                 "query_embedding": embedding_floor(synthetic_queries(WARM_SEARCHES, seed=RECALL_SEED))}
            figures["targets"] = {"search_p50_ms": SEARCH_TARGET_MS, "writes_per_s": WRITES_TARGET_PER_S,
                                  "met": {"search": figures["search"]["p50"] <= SEARCH_TARGET_MS,
                                          "writes": figures["writes"]["per_s"] >= WRITES_TARGET_PER_S}}
        report["warm"] = figures
    return report


def mcp_lines(report: dict) -> list[str]:
    """Human-readable lines for a `run_mcp` report."""
    listing = report["tools_list"]
    return [
        f"tools/list        {listing['whole']} tokens (cl100k) for {listing['tools']} tools "
        f"(name+description+inputSchema only: {listing['core']})",
        f"spawn→initialize  {report['spawn_to_initialize_s']:.3f} s (median of {report['runs']})",
        f"spawn→1st recall  {report['spawn_to_first_recall_s']:.3f} s "
        f"(median of {report['runs']}, model load included)",
        f"SDK import alone  {report['baseline_sdk_import_s']:.3f} s (python -c 'import mcp.server.mcpserver')",
        *(_warm_lines(report["warm"]) if "warm" in report else []),
    ]


def _cpu(ms: float | None) -> str:
    return f", {ms:.2f} ms CPU each" if ms is not None else ""


def _warm_lines(warm: dict) -> list[str]:
    search, again, writes, floors = warm["search"], warm["search_again"], warm["writes"], warm["floors"]
    met = warm["targets"]["met"]
    embedding = floors["query_embedding"]
    insert = floors["insert"]
    load = warm["load_average"]
    return [
        f"warm server, {warm['memories']:,} memories, one call after another"
        + (f" (load average {load[0]:.2f})" if load else ""),
        f"  search          p50 {search['p50']:.2f} ms, p95 {search['p95']:.2f} ms{_cpu(search['cpu_ms'])} "
        f"(new queries; target p50 ≤ {warm['targets']['search_p50_ms']:g} ms: {'yes' if met['search'] else 'NO'})",
        f"  search again    p50 {again['p50']:.2f} ms, p95 {again['p95']:.2f} ms{_cpu(again['cpu_ms'])} "
        "(the same queries: their vectors kept)",
        f"  write           {writes['per_s']:.1f}/s, p50 {writes['p50']:.2f} ms{_cpu(writes['cpu_ms'])}"
        + (f", {writes['cpu_ms_with_embedding']:.2f} with its embedding" if writes["cpu_ms_with_embedding"] else "")
        + f" (target ≥ {warm['targets']['writes_per_s']:g}/s: {'yes' if met['writes'] else 'NO'})",
        "  floor: query embedding  "
        + (f"p50 {embedding['p50']:.2f} ms, {embedding['cpu_ms']:.2f} ms CPU" if embedding else "model unavailable"),
        f"  floor: SQLite insert    {insert['normal']['ms']:.3f} ms ({insert['normal']['cpu_ms']:.3f} ms CPU) "
        f"without fsync, {insert['full']['ms']:.3f} ms with one",
    ]
