"""Responsibility: measuring the team path: `memsafe serve --transport http` under
load from several real MCP clients, and its recall latency beside the same store over stdio.

- `HttpServer` runs `python -m memsafe --db DB serve --transport http --port 0` as a child process
  and reads its address from the one line it writes to stderr once it accepts requests; tests
  use it too.
- `connect` is the MCP SDK's own client (`mcp.Client`) over streamable HTTP with a bearer token.
- `run_http` (for `memsafe bench --http`): a load phase, `clients` clients each sending
  `remembers` remembers one after another while `recallers` more clients recall in a loop, all at
  once against one server; then the store is filled to `latency_at` memories (synthetic developer
  memories from `memsafe.bench.scale`, the first `full_embed_limit` embedded by the model, the
  rest given synthesised vectors) and recall is timed over HTTP and over stdio on that store.
  Latencies are wall-clock per reply as the client sees it, p50/p95 over `queries` queries.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from memsafe.bench import python_m
from memsafe.bench.timing import percentile

__all__ = ["HttpServer", "connect", "run_http", "http_lines"]

READY = re.compile(r"MCP over HTTP on (http://\S+/mcp)")
RECALL_QUERY_SEED = 29


class HttpServer:
    """A `memsafe serve --transport http` child process on a free port.

    Args:
        db: `--db` value (a file path, or a `postgresql://` URL where supported).
        tokens: {user: token}; written to a tokens file the server is pointed at (None: no tokens).
        host: `--host` (default 127.0.0.1).
        args: more arguments after `serve` (e.g. `--project web`, `--allow-host NAME`).
        env: environment overrides (merged over os.environ).
        cwd: the server's working directory.
        wait: seconds to wait for it to accept requests.

    Attributes:
        url: the MCP endpoint (`http://127.0.0.1:PORT/mcp`); `base` without the path.
        stderr: everything the server wrote to stderr so far (text).

    Raises:
        RuntimeError: it exited or did not become ready within `wait` seconds (its stderr says why).
    """

    def __init__(self, db: str | os.PathLike, *, tokens: dict[str, str] | None = None, host: str = "127.0.0.1",
                 args: tuple[str, ...] = (), env: dict | None = None, cwd: str | os.PathLike | None = None,
                 wait: float = 60.0):
        self._folder = tempfile.TemporaryDirectory(prefix="memsafe-http-")
        full_env = {**os.environ, **(env or {})}
        full_env.pop("MEMSAFE_HTTP_TOKENS_FILE", None)
        if tokens is not None:
            path = Path(self._folder.name) / "tokens"
            path.write_text("".join(f"{user} {token}\n" for user, token in tokens.items()), encoding="utf-8")
            path.chmod(0o600)
            full_env["MEMSAFE_HTTP_TOKENS_FILE"] = str(path)
        self.proc = subprocess.Popen(
            [*python_m("memsafe"), "--db", str(db), "serve", "--transport", "http", "--host", host, "--port", "0",
             *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd,
        )
        self._err = bytearray()
        self._ready = threading.Event()
        self.url = self.base = ""
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + wait
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"memsafe serve --transport http did not start: {self.stderr[-2000:]}")

    def _drain(self) -> None:
        while chunk := self.proc.stderr.read1(65536):
            self._err += chunk
            if not self._ready.is_set():
                found = READY.search(self.stderr)
                if found:
                    self.url = found.group(1).replace("0.0.0.0", "127.0.0.1")  # noqa: S104 (a client's view)
                    self.base = self.url.removesuffix("/mcp")
                    self._ready.set()

    @property
    def stderr(self) -> str:
        return bytes(self._err).decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = 10.0) -> str:
        """The server's stderr once it contains `text` (the log reaches us through a pipe and a reader
        thread, so a line the server wrote before answering may arrive after the answer).

        Raises:
            TimeoutError: `text` did not appear within `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        while text not in (log := self.stderr):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not in the server's stderr after {timeout} s: {log[-2000:]}")
            time.sleep(0.02)
        return log

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait for the exit (killed after `timeout`); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._folder.cleanup()
        return code

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None = None, *, headers: dict[str, str] | None = None):
    """An initialised `mcp.Client` over streamable HTTP (the SDK's transport), sending
    `Authorization: Bearer TOKEN` when a token is given, plus `headers`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(60, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def _load(url: str, tokens: dict[str, str], clients: int, remembers: int, recallers: int) -> dict:
    """Every writer and recaller at once; returns counts, errors and reply times."""
    import anyio

    from memsafe.bench.scale import SERVICES, synthetic_queries

    users = list(tokens)
    errors: list[str] = []
    remember_s: list[float] = []
    recall_s: list[float] = []
    writing = [clients]
    queries = synthetic_queries(64, seed=RECALL_QUERY_SEED)

    async def writer(n: int) -> None:
        token = tokens[users[n % len(users)]]
        try:
            async with connect(url, token) as client:
                for i in range(remembers):
                    text = (f"load note {n}-{i}: the {SERVICES[(n + i) % len(SERVICES)]} queue of writer {n} "
                            f"drains within {i % 9 + 1} minutes after deploy {n * 1000 + i}")
                    t0 = time.perf_counter()
                    result = await client.call_tool("remember", {"content": text})
                    remember_s.append(time.perf_counter() - t0)
                    if result.is_error:
                        errors.append(f"remember {n}-{i}: {_text(result)[:200]}")
        except Exception as exc:  # a transport failure ends this writer; counted, reported
            errors.append(f"writer {n}: {type(exc).__name__}: {exc}"[:300])
        finally:
            writing[0] -= 1

    async def recaller(n: int) -> None:
        token = tokens[users[n % len(users)]]
        i = 0
        try:
            async with connect(url, token) as client:
                while writing[0] > 0:
                    t0 = time.perf_counter()
                    result = await client.call_tool("recall", {"query": queries[i % len(queries)]})
                    recall_s.append(time.perf_counter() - t0)
                    if result.is_error:
                        errors.append(f"recall {n}: {_text(result)[:200]}")
                    i += 1
        except Exception as exc:
            errors.append(f"recaller {n}: {type(exc).__name__}: {exc}"[:300])

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n in range(clients):
            group.start_soon(writer, n)
        for n in range(recallers):
            group.start_soon(recaller, n)
    seconds = time.perf_counter() - started
    return {
        "clients": clients, "remembers_per_client": remembers, "recall_clients": recallers,
        "seconds": round(seconds, 1),
        "remembers_per_s": round(len(remember_s) / seconds, 1) if seconds else None,
        "remember_ms_p50": _ms(remember_s, 0.5), "remember_ms_p95": _ms(remember_s, 0.95),
        "recalls": len(recall_s), "recall_under_load_ms_p50": _ms(recall_s, 0.5),
        "recall_under_load_ms_p95": _ms(recall_s, 0.95),
        "errors": len(errors), "error_samples": errors[:5],
    }


def _ms(seconds: list[float], q: float) -> float | None:
    return round(percentile(seconds, q) * 1000, 1) if seconds else None


async def _http_recalls(url: str, token: str, queries: list[str]) -> list[float]:
    async with connect(url, token) as client:
        for q in queries[:5]:  # warm: the model, page cache, statements
            await client.call_tool("recall", {"query": q})
        times = []
        for q in queries[5:]:
            t0 = time.perf_counter()
            result = await client.call_tool("recall", {"query": q})
            times.append(time.perf_counter() - t0)
            if result.is_error:
                raise RuntimeError(f"recall over HTTP failed: {_text(result)[:300]}")
    return times


def _stdio_recalls(db: str, queries: list[str], args: tuple[str, ...]) -> list[float]:
    from memsafe.bench.mcp import RawClient

    with RawClient(db, args=args) as client:
        client.initialize()
        for q in queries[:5]:
            client.call("recall", {"query": q})
        times = []
        for q in queries[5:]:
            t0 = time.perf_counter()
            result = client.call("recall", {"query": q})
            times.append(time.perf_counter() - t0)
            if result.get("isError"):
                raise RuntimeError(f"recall over stdio failed: {result['content'][0]['text'][:300]}")
    return times


def _count(db: str) -> int:
    from memsafe import api

    opened = api.open_store(db)
    try:
        return opened.store.counts()["total"]
    finally:
        opened.store.close()


def run_http(*, db: str | None = None, clients: int = 8, remembers: int = 250, recallers: int = 2,
             latency_at: int = 10_000, queries: int = 40, full_embed_limit: int = 1000, progress=None) -> dict:
    """The team-path benchmark (module docstring) on `db`, or on a new temporary SQLite file.

    Args:
        db: an empty store to load (a file path or a `postgresql://` URL); None: a temporary file.
        clients / remembers: writer clients and remembers each (one after another).
        recallers: clients recalling in a loop while the writers run.
        latency_at: store size for the latency phase (0 skips it).
        queries: timed recalls per transport (after 5 untimed ones).
        full_embed_limit: in the fill, memories embedded by the model; the rest get synthesised vectors.
        progress: called with a line of text as phases start.

    Returns:
        {"load": {..., "memories_before", "memories_after", "exact": bool, "ok": bool},
         "latency": {"memories", "http_recall_ms_p50/p95", "stdio_recall_ms_p50/p95", ...} or None,
         "db": where, "ok": bool}; times in ms, rates per second.

    Raises:
        RuntimeError: the store is not empty, the server did not start, or a phase failed.
    """
    import anyio

    from memsafe.bench import scale

    say = progress or (lambda msg: None)
    folder = tempfile.mkdtemp(prefix="memsafe-bench-http-")
    where = db or str(Path(folder) / "team.db")
    before = _count(where)
    if before:
        raise RuntimeError(f"{where} already holds {before:,} memories; give an empty store")
    tokens = {f"user{n}": secrets.token_hex(16) for n in range(4)}
    report: dict = {"db": where, "machine": {"cpus": os.cpu_count(),
                                            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}}
    say(f"load: {clients} clients x {remembers} remembers, {recallers} recalling alongside")
    with HttpServer(where, tokens=tokens, args=("--project", "web")) as server:
        load = anyio.run(_load, server.url, tokens, clients, remembers, recallers)
    load["memories_before"] = before
    load["memories_after"] = _count(where)
    load["exact"] = load["memories_after"] - before == clients * remembers
    load["ok"] = load["exact"] and load["errors"] == 0
    report["load"] = load
    report["latency"] = None
    if latency_at:
        fill = latency_at - load["memories_after"]
        say(f"fill to {latency_at:,} memories ({min(fill, full_embed_limit):,} embedded by the model)")
        if fill > 0:
            filled = scale._child("import", where, str(fill), str(full_embed_limit), "32")
        qs = scale.synthetic_queries(queries + 5, seed=RECALL_QUERY_SEED)
        say(f"recall over HTTP at {latency_at:,} memories")
        with HttpServer(where, tokens=tokens, args=("--project", "web")) as server:
            http = anyio.run(_http_recalls, server.url, next(iter(tokens.values())), qs)
        say(f"recall over stdio at {latency_at:,} memories")
        stdio = _stdio_recalls(where, qs, ("--project", "web"))
        report["latency"] = {
            "memories": _count(where), "queries": len(http),
            "vectors_synthesized": filled.get("vectors_synthesized", 0) if fill > 0 else 0,
            "http_recall_ms_p50": _ms(http, 0.5), "http_recall_ms_p95": _ms(http, 0.95),
            "stdio_recall_ms_p50": _ms(stdio, 0.5), "stdio_recall_ms_p95": _ms(stdio, 0.95),
        }
    report["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["ok"] = load["ok"]
    return report


def http_lines(report: dict) -> list[str]:
    """The report as lines of text for a terminal."""
    load = report["load"]
    lines = [
        f"store: {report['db']}",
        f"load: {load['clients']} clients x {load['remembers_per_client']} remembers with "
        f"{load['recall_clients']} recalling alongside: {load['memories_after'] - load['memories_before']:,} "
        f"memories stored ({'exact' if load['exact'] else 'NOT exact'}), {load['errors']} errors, "
        f"{load['seconds']} s ({load['remembers_per_s']} remembers/s)",
        f"  remember reply p50 / p95: {load['remember_ms_p50']} / {load['remember_ms_p95']} ms; "
        f"recall under load p50 / p95: {load['recall_under_load_ms_p50']} / {load['recall_under_load_ms_p95']} ms "
        f"({load['recalls']} recalls)",
    ]
    lines += [f"  error: {e}" for e in load["error_samples"]]
    latency = report.get("latency")
    if latency:
        lines.append(f"recall at {latency['memories']:,} memories, p50 / p95 over {latency['queries']} queries: "
                     f"HTTP {latency['http_recall_ms_p50']} / {latency['http_recall_ms_p95']} ms, "
                     f"stdio {latency['stdio_recall_ms_p50']} / {latency['stdio_recall_ms_p95']} ms")
    return lines
