"""Responsibility: small JSON caches memsafe can rebuild at any time, each named by a stamp of the
installed files its answers depend on (`stamp_of`): the CLI's help and completion answers
(`memsafe.cli.cache`) and the MCP server's `initialize` reply (`memsafe.mcp.stdio`). A cache never
fails a command: a missing or unreadable file counts as empty, an error writing one is ignored.

Standard library only: both callers run before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def stamp_of(files: list[Path]) -> str:
    """A short digest of memsafe's version, Python's, and each file's path, size and mtime: any
    upgrade or edit of those files changes it (a missing file counts as such)."""
    from memsafe import __version__

    parts = [__version__, sys.version]
    for f in files:
        try:
            st = f.stat()
            parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{f}:-")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


def load_json(path: Path) -> dict:
    """The JSON object stored at `path`; {} when missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def merge_json(path: Path, entries: dict) -> None:
    """Merge `entries` into the JSON object at `path` (atomically: temporary file, then rename).
    A cache: an error writing it is ignored."""
    merged = {**load_json(path), **entries}
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: never fail the command for it
