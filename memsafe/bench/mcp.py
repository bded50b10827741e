"""Responsibility: measuring the MCP server as a client sees it: the token cost of `tools/list`
and cold start (process spawn to the `initialize` reply, and to the first `recall` answered).

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

__all__ = ["PROTOCOL_VERSION", "RawClient", "measure", "tools_list_tokens"]

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


SEED_MEMORIES = 50


def run_mcp(runs: int = 5) -> dict:
    """`memsafe bench --mcp`: seed a temporary store with SEED_MEMORIES memories, then `measure` it.

    Returns the `measure` dict (without the temporary path). Raises MemsafeError, RuntimeError.
    """
    import tempfile
    from pathlib import Path

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
    ]
