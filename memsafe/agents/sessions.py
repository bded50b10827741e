"""Responsibility: the state of each agent session between its hooks: what it was shown (memory id ->
its updated_at, so a memory is injected once unless it changed), how far its transcript was read
and the running session log. One small JSON file per session in `<data dir>/agent-sessions/`,
named by a digest of the agent and the session id (a session id is never a path), written whole
and then renamed into place (a crash leaves the previous state), under an exclusive lock (hooks of
one session may overlap). Files untouched for STALE_DAYS are removed at a session's start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memsafe import settings

FOLDER = "agent-sessions"
STALE_DAYS = 30
LOCK_WAIT_S = 2.0


class Busy(Exception):
    """Another hook of the session held its state for longer than LOCK_WAIT_S."""


def folder() -> Path:
    """Where the session states live (created on first use)."""
    return settings.data_dir() / FOLDER


def path_of(agent: str, session_id: str) -> Path:
    """The state file of `agent`'s session `session_id`."""
    digest = hashlib.sha256(f"{agent}\0{session_id}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return folder() / f"{digest}.json"


def load(path: Path) -> dict:
    """The state stored at `path`; {} when missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(path: Path, state: dict) -> None:
    """Write `state` to `path` whole (temporary file, then rename). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh, ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextmanager
def locked(path: Path) -> Iterator[dict]:
    """Hold the session's lock and yield its state (a dict to change in place); saved on a normal
    exit, left as it was when the block raises.

    Raises:
        Busy: the lock stayed taken for LOCK_WAIT_S. OSError: the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Busy(f"another hook of this session held {path.name} for {LOCK_WAIT_S:g}s") from None
                time.sleep(0.02)
        state = load(path)
        before = json.dumps(state, sort_keys=True)
        yield state
        if json.dumps(state, sort_keys=True) != before:
            state["touched"] = time.time()
            save(path, state)
    finally:
        os.close(fd)


def prune(now: float | None = None) -> int:
    """Remove session states (and their locks) untouched for STALE_DAYS. Returns how many."""
    cutoff = (now or time.time()) - STALE_DAYS * 86400
    removed = 0
    try:
        entries = list(os.scandir(folder()))
    except OSError:
        return 0
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed += entry.name.endswith(".json")
    return removed
