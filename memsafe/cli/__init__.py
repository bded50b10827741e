"""Responsibility: the `memsafe` command line. Each command parses its arguments, calls one
handler in `memsafe.api`, and renders the result: data on stdout (a rich table, or one JSON
document with `--json`), messages on stderr. An error is one line on stderr, exit code 2 for a usage
error (Click's, `InvalidInput`) and 1 for a refusal or not-found (`memsafe.errors`). A traceback
appears only for real bugs, or with MEMSAFE_DEBUG=1.

`memsafe.cli.full` builds the Typer app (one module per group of commands); `memsafe.cli.fast`
runs the hot commands (`recall`, `remember`) without it when their arguments are plain, and
hands everything else to it. `app` and `main` are imported on first use (PEP 562), so importing
a submodule costs only that submodule.
"""

__all__ = ["app", "main"]


def __getattr__(name: str):
    if name in __all__:
        from memsafe.cli import full

        return getattr(full, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
