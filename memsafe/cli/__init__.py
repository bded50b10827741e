"""Responsibility: the `memsafe` command line. Each command parses its arguments, calls one
handler in `memsafe.api`, and renders the result: data on stdout (a rich table, or one JSON
document with `--json`), messages on stderr. `MemsafeError`s become one line on stderr and
exit code 1; usage errors exit 2. A traceback appears only for real bugs, or with MEMSAFE_DEBUG=1.

Commands live in one module per group; importing a module registers its commands on `app`.
"""

from __future__ import annotations

import sys

from memsafe.cli import bench_scale, config, memory  # noqa: F401  (registers commands)
from memsafe.cli._common import app, err

__all__ = ["app", "main"]


def _safe_streams() -> None:
    """Never die on a legacy console encoding: unencodable characters are replaced (FIELD-CASES F02)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):
            pass


def main() -> None:
    """Console-script entry point."""
    _safe_streams()
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
