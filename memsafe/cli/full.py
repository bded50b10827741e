"""Responsibility: the whole Typer app of the `memsafe` command line and its entry point `main`
(see `memsafe.cli`). Commands live in one module per group; importing a module registers its
commands on `app`.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import typer

# import order = the order of commands in --help
# isort: off
from memsafe.cli import memory, graph, lifecycle, transfer, doctor, config, hook, encryption, serve, ui, bench  # noqa: F401  (registers commands)
from memsafe.cli import init, agent  # noqa: F401,E402  (registers `memsafe init` and `memsafe agent`)
# isort: on

from memsafe.cli import _plain
from memsafe.cli._common import app, close_matches, err, error

if TYPE_CHECKING:  # for the type checker only: at run time the classes are found from Typer's public ones
    from typer._click.exceptions import ClickException

__all__ = ["app", "main"]

# `memsafe --help` groups the commands in these panels, in this order (Typer's help panels); a
# command missing here fails tests/test_cli.py, so a new command is placed on purpose.
PANELS = {
    "Daily use": ("remember", "recall", "get", "list", "update", "forget", "restore", "status"),
    "Curation": ("history", "confirm", "confidence", "consolidate", "purge", "graph", "ui"),
    "Maintenance": ("decay", "embed", "doctor", "export", "import", "config", "encrypt", "decrypt", "rekey"),
    "Integration": ("init", "serve", "hook", "agent"),
    "Development": ("bench",),
}


def _place_in_panels() -> None:
    """Give every top-level command and group its help panel and sort them by `PANELS`."""
    order = [name for names in PANELS.values() for name in names]
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}

    def name_of(info) -> str:
        return info.name or (info.typer_instance.info.name if hasattr(info, "typer_instance") else "") \
            or info.callback.__name__.replace("_", "-").strip("-")

    for infos in (app.registered_commands, app.registered_groups):
        for info in infos:
            info.rich_help_panel = panel_of.get(name_of(info))
        infos.sort(key=lambda info: order.index(name_of(info)) if name_of(info) in order else len(order))


_place_in_panels()


def _click_exception_types() -> tuple[type[ClickException], type[typer.Abort]]:
    """(ClickException, Abort) from Typer's own Click, found without importing its private module."""
    base = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    return base, typer.Abort


def main() -> None:
    """Console-script entry point: runs the app and turns every usage error into one line on stderr."""
    _plain.safe_streams()
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
        if hasattr(exc, "possibilities") and ctx is not None:  # an unknown option: suggest close ones only
            names = [name for param in ctx.command.get_params(ctx) for name in (*param.opts, *param.secondary_opts)]
            matches = close_matches(exc.option_name, [  # type: ignore[attr-defined]  # NoSuchOption's
                name for name in names if name.startswith("--")])
            exc.possibilities = None
            exc.message += f". Did you mean {', '.join(matches)}?" if matches else ""
        message = exc.format_message()
        if message:  # an empty one is `memsafe` with no arguments: the help was already shown
            error(message + hint, "UsageError", sys.argv[1:])
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    if code == 130 and not _plain.interruption_said:  # Typer turns a KeyboardInterrupt into a silent 130
        err.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)
