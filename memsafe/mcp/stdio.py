"""Responsibility: answering the MCP `initialize` request of `memsafe serve` (stdio) before the MCP
SDK is imported.

Importing the SDK (its pydantic protocol types) and memsafe's handlers takes most of the 1 s a
server took from spawn to its `initialize` reply, and clients time out on that reply (the
target is at most 0.5 s). The reply itself is a pure function of the installed memsafe and SDK and of the
protocol version the client asks for. So:

- The first time, the SDK answers as usual and `Early.record` keeps its `result`, in one JSON
  file in `settings.cache_dir()` named by a stamp of the installed server (memsafe's version,
  Python's, and the size and mtime of `memsafe/mcp/tools.py`, `prompts.py` and of the SDK's packages): an upgrade
  or an edit starts a new file.
- Later, `answer_initialize` reads the first line from stdin while `memsafe.mcp.tools` is imported
  in a thread; when it is a well-formed `initialize` request whose answer is kept, it writes that
  answer at once. The line is still handed to the SDK (its session must see the handshake), and
  the SDK's own reply to it is dropped (`Early.swallow`); a reply that differs from the kept one
  replaces it for next time.
- Anything else (no cache or a damaged one, another first message, a terminal on stdin,
  `MEMSAFE_CLI_CACHE=0`, arguments the server may refuse) leaves the answer to the SDK, unchanged.

Standard library only (and `memsafe.settings` for the folder), so nothing here costs an import.
"""

from __future__ import annotations

import codecs
import importlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Early", "answer_initialize", "serve", "Stop", "STOP", "catch_stop_signals"]

MAX_FIRST_LINE = 65_536  # bytes: a longer first line is no handshake worth answering early


def _stamp() -> str:
    """Identity of the installed server (`caches.stamp_of`): `memsafe/mcp/tools.py` and `prompts.py`
    (the tools, prompts and resources shape the capabilities), and the files
    of the MCP SDK's packages that shape the reply."""
    import importlib.util

    from memsafe import caches

    files = [Path(__file__).resolve().parent / name for name in ("tools.py", "prompts.py")]
    for package, names in (("mcp", ("__init__.py", "server/runner.py", "server/lowlevel/server.py")),
                           ("mcp_types", ("__init__.py", "version.py"))):
        try:
            spec = importlib.util.find_spec(package)  # finds, does not import
        except (ImportError, ValueError):
            spec = None
        for where in (spec.submodule_search_locations or []) if spec else []:
            files += [Path(where) / name for name in names]
    return caches.stamp_of(files)


def _path() -> Path:
    from memsafe import settings

    return settings.cache_dir() / f"mcp-initialize-{_stamp()}.json"


def _enabled() -> bool:
    from memsafe import settings

    return settings.env().cli_cache


def _key(request: dict) -> str | None:
    """The cache key of a well-formed `initialize` request (the protocol version it asks for),
    or None for anything else."""
    params = request.get("params")
    if request.get("jsonrpc") != "2.0" or request.get("method") != "initialize" or not isinstance(params, dict):
        return None
    if not isinstance(request.get("id"), (int, str)) or isinstance(request.get("id"), bool):
        return None
    info = params.get("clientInfo")
    if not (isinstance(params.get("protocolVersion"), str) and isinstance(params.get("capabilities"), dict)
            and isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
        return None
    return params["protocolVersion"]


@dataclass
class Early:
    """What happened before the SDK took over stdin.

    Attributes:
        data: bytes already read from stdin (the first line, with its newline when it had one),
            to be handed to the SDK before the rest of the stream.
        request_id: the id of the well-formed `initialize` request read here, or None.
        key: the protocol version it asks for (the cache key).
        answered: whether it was answered here (then `kept` is the `result` written).
    """

    data: bytes = b""
    request_id: int | str | None = None
    key: str | None = None
    answered: bool = False
    kept: dict | None = field(default=None, repr=False)

    def text(self) -> str:
        """`data` as text (UTF-8; a bad byte becomes U+FFFD, as the SDK's reader does)."""
        return self.data.decode("utf-8", errors="replace")

    def swallow(self, reply: object) -> bool:
        """Whether `reply` (a JSON-RPC message the SDK is about to write) must be dropped: it
        answers the `initialize` already answered here. The SDK's successful answer is kept for
        next time when it differs from what was kept (or nothing was)."""
        if self.request_id is None or not isinstance(reply, dict) or reply.get("id") != self.request_id:
            return False
        self.request_id = None  # one reply per request
        result = reply.get("result")
        if isinstance(result, dict) and result != self.kept:
            self.record(result)
        return self.answered

    def record(self, result: dict) -> None:
        """Keep `result` as the answer to `initialize` for this protocol version (atomically;
        a cache: never fails the server)."""
        if not _enabled() or self.key is None:
            return
        from memsafe import caches

        caches.merge_json(_path(), {self.key: result})


def _read_first_line(fd: int) -> bytes:
    """Bytes from `fd` up to and including the first newline, read one byte at a time so that
    nothing past the line is taken from the stream; stops early at end of input or after
    MAX_FIRST_LINE bytes, at the end of a UTF-8 character (the rest of the line is decoded apart)."""
    out = bytearray()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        try:
            byte = os.read(fd, 1)
        except InterruptedError:
            continue
        if not byte:
            return bytes(out)
        out += byte
        if byte == b"\n":
            return bytes(out)
        decoder.decode(byte)
        if len(out) >= MAX_FIRST_LINE and not decoder.getstate()[0]:  # no character left half-read
            return bytes(out)


def _plausible(result: object) -> bool:
    """Whether a kept `result` has the shape of an `initialize` result (a cache file edited or
    damaged into other JSON is not sent)."""
    return (isinstance(result, dict) and isinstance(result.get("protocolVersion"), str)
            and isinstance(result.get("capabilities"), dict) and isinstance(result.get("serverInfo"), dict)
            and isinstance(result["serverInfo"].get("name"), str))


def _arguments_hold(db: str | None, project: str | None) -> bool:
    """Whether `memsafe.mcp.tools.serve` will surely accept `db` and `project`, by checks that import
    nothing: an early answer must not precede a refusal (`serve --project ""`). False leaves the
    handshake to the server, which refuses bad arguments before reading stdin."""
    from memsafe import settings
    from memsafe.errors import MemsafeError

    try:
        settings.resolve_db_path(db)
    except (MemsafeError, OSError, ValueError):
        return False
    return project is None or (project.isprintable() and bool(project.strip()) and len(project) <= 4096)


def answer_initialize(wire_in: int = 0, wire_out: int = 1, kept_in: Path | None = None) -> Early:
    """Read the client's first line from `wire_in`; answer it on `wire_out` when it is an
    `initialize` whose answer was kept in `kept_in` (default: this installation's file; see the
    module docstring). Never raises for what the client sent: anything unusual is left to the
    SDK. A terminal on stdin is not read."""
    if not _enabled() or os.isatty(wire_in):
        return Early()
    from memsafe import caches

    kept_in = kept_in or _path()
    data = _read_first_line(wire_in)
    early = Early(data=data)
    try:
        request = json.loads(data.decode("utf-8").lstrip("\ufeff"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return early
    key = _key(request) if isinstance(request, dict) else None
    if key is None:
        return early
    early.key, early.request_id = key, request["id"]
    kept = caches.load_json(kept_in).get(key)
    if not _plausible(kept):
        return early  # the SDK answers; its answer is kept (Early.swallow)
    reply = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": kept}, separators=(",", ":"),
                       ensure_ascii=False) + "\n"
    try:
        view = memoryview(reply.encode("utf-8"))
        while view:
            view = view[os.write(wire_out, view):]
    except OSError:
        return early  # the client is gone; the SDK will find out
    early.answered, early.kept = True, kept
    return early


STOP_DEADLINE_S = 10.0  # after SIGINT or SIGTERM, `serve` ends by then whatever it is doing


class Stop:
    """SIGINT and SIGTERM for `memsafe serve`, from its first line on.

    Until the server's event loop listens for them (`loop` set), a signal raises
    KeyboardInterrupt in the main thread, which ends the start-up; once the loop runs it is only
    recorded (`signum`), and the loop's own listener, which replaces this handler, looks at it
    first. (Before: the asyncio runner's SIGINT handler cancelled the loop's task, which then
    waited for the thread reading stdin, forever on a terminal; and a library that swallowed
    the KeyboardInterrupt of an import left the server running.) Either way the first signal
    arms a deadline: `STOP_DEADLINE_S` later the process ends (`os._exit`, 128 + the signal)
    whatever it is doing, with every thread's stack on stderr, so Ctrl-C never leaves it running.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.loop = False
        self._deadline: threading.Timer | None = None

    def handle(self, signum: int, frame=None) -> None:
        """The signal handler (and the loop's listener calls it too)."""
        if self.signum is None:
            self.signum = signum
        self.arm_deadline()
        if not self.loop:
            raise KeyboardInterrupt

    @property
    def code(self) -> int:
        """The exit code: 128 + the first stop signal (130 for SIGINT when none was seen)."""
        return 128 + (self.signum or 2)

    def arm_deadline(self, seconds: float = STOP_DEADLINE_S) -> None:
        """End the process `seconds` from now unless it has ended (once; a daemon timer)."""
        if self._deadline is None:
            self._deadline = threading.Timer(seconds, self._overdue)
            self._deadline.daemon = True
            self._deadline.start()

    def _overdue(self) -> None:
        import faulthandler
        import sys

        try:
            sys.stderr.write(f"memsafe serve: still running {STOP_DEADLINE_S:g} s after the stop signal; "
                             "ending it now. Where each thread was:\n")
            sys.stderr.flush()
            faulthandler.dump_traceback(all_threads=True)
        finally:
            os._exit(self.code)


STOP = Stop()


def catch_stop_signals() -> None:
    """Route SIGINT and SIGTERM to `STOP` (main thread only; elsewhere nothing)."""
    import signal

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, STOP.handle)
        signal.signal(signal.SIGTERM, STOP.handle)


def serve(db: str | None = None, project: str | None = None) -> None:
    """`memsafe.mcp.tools.serve` over stdio, its module (the MCP SDK and the handlers: most of a
    start) imported in a thread while the client's first line is read and, when it is an
    `initialize` whose answer is kept, answered. Raises what `memsafe.mcp.tools.serve` raises."""
    catch_stop_signals()
    from memsafe import caches  # noqa: F401  (imported before the thread starts: see below)

    kept_in = _path()
    # While the thread imports, this one imports nothing: two threads importing overlapping
    # modules in different orders can meet a partially initialised module (importlib breaks
    # the deadlock that way).
    loading = threading.Thread(target=importlib.import_module, args=("memsafe.mcp.tools",), daemon=True)
    loading.start()
    early = answer_initialize(kept_in=kept_in) if _arguments_hold(db, project) else Early()
    loading.join()
    from memsafe.mcp.tools import serve as run_server

    run_server(db, project, early=early)
