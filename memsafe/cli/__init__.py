"""Responsibility: the `memsafe` command line. Each command parses its arguments, calls one
handler in `memsafe.api`, and renders the result: data on stdout (a rich table, or one JSON
document with `--json`), messages on stderr. `MemsafeError`s become one line on stderr and
exit code 1; usage errors exit 2. A traceback appears only for real bugs, or with MEMSAFE_DEBUG=1.

Commands live in one module per group; importing a module registers its commands on `app`.
"""

from __future__ import annotations

import os
import sys

import typer

# import order = the order of commands in --help
# isort: off
from memsafe.cli import memory, graph, lifecycle, transfer, doctor, config, hook, encryption, serve, ui, bench  # noqa: F401  (registers commands)
from memsafe.cli import init  # noqa: F401,E402  (registers `memsafe init`)
# isort: on

from memsafe.cli._common import app, err, error

__all__ = ["app", "main"]


def _safe_streams() -> None:
    """Never die on a legacy console encoding: unencodable characters are replaced (FIELD-CASES F02)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):
            pass


def _click_exception_types() -> tuple[type, type]:
    """(ClickException, Abort) from Typer's own Click, found without importing its private module."""
    base = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    return base, typer.Abort


def main() -> None:
    """Console-script entry point: runs the app and turns every usage error into one line on stderr."""
    _safe_streams()
    click_error, abort = _click_exception_types()
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except abort:
        error("aborted", "Aborted", sys.argv[1:])
        sys.exit(1)
    except click_error as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = exc.format_message()
        if message:  # an empty one is `memsafe` with no arguments: the help was already shown
            error(message + hint, "UsageError", sys.argv[1:])
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
