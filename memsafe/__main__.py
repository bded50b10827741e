"""Entry point of `python -m memsafe` and of the `memsafe` console script.

`memsafe [--db PATH] serve [--project NAME]` goes straight to the MCP server without loading the
Typer app (about 0.1 s of imports, which counts against the client's handshake: FIELD-CASES F04);
`memsafe --version` is answered here too; `memsafe [--db PATH] ui [--port N] [--no-open]` starts the
page without the CLI (`memsafe.ui.start`); `memsafe agent hook [--agent NAME]` (an agent's
lifecycle hook) runs `memsafe.agents.protocol` without it; `--help` and completion (TAB)
requests answered before come from `memsafe.cli.cache`, before anything else is imported; a
plain `recall`, `remember`, `import`, `get`, `list`, `status`, `history`, `graph show` or
`forget` runs without the Typer app (`memsafe.cli.fast`, which exits without the interpreter's
teardown); every other command line goes through the CLI as usual.
"""

import os
import sys


def _serve_args(argv: list[str]) -> tuple[str | None, str | None] | None:
    """(db, project) when argv is exactly `[--db PATH]... serve [--project|-p NAME]...`, else None."""
    db = project = None
    seen_serve = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        wanted = ("--project", "-p") if seen_serve else ("--db",)
        if not seen_serve and arg == "serve":
            seen_serve = True
        elif name in wanted and (eq or i + 1 < len(argv)):
            value = inline if eq else argv[i + 1]
            i += 0 if eq else 1
            if seen_serve:
                project = value
            else:
                db = value
        else:
            return None
        i += 1
    return (db, project) if seen_serve else None


def _exit_now(code: int) -> None:
    """End a command the fast path ran: flush stdout and stderr, then leave without the
    interpreter's teardown (clearing numpy's and onnxruntime's modules and the model's
    session cost a default recall ~100 ms of CPU, a lexical one ~30 ms). The command has closed
    its store and started whatever it hands on (the detached embedder of `remember`) before it
    returns; a model still loading on its thread (a recall that failed first) ends with the
    process, which never aborts there as an interpreter shutting down under it can. A reader gone
    (broken pipe) makes it exit 1, as inside the command.

    Also how every command a stop signal ended leaves (130 or 143), once it has unwound (rolled
    back, removed its temporary folders): an interpreter run as `python -m memsafe` whose
    KeyboardInterrupt passed through an `exec` or `eval` of source text (dataclasses and
    namedtuples are made that way, at import) kills itself with SIGINT at the end of its teardown
    even when the command caught the exception (CPython's "unhandled KeyboardInterrupt" flag is set
    there and never cleared), so the caller saw death by signal instead of the exit code."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = code or 1
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def _check_settings() -> None:
    """One line and exit 2 for a `MEMSAFE_*` variable whose value is not of its kind (a path
    holding a variable that cannot be expanded, a true/false that is neither...): parsed here,
    once (`settings.env()`), before any command starts, so none fails on it half-way."""
    from memsafe import settings
    from memsafe.errors import InvalidInput

    try:
        settings.env()
    except InvalidInput as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(exc.exit_code)


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # answered without importing the CLI (a shell prompt may call it)
        from memsafe import __version__

        sys.stdout.write(f"memsafe {__version__}\n")
        return
    if "ui" not in sys.argv[1:4]:  # the page owns its stop signals (`memsafe.ui.start`)
        _stop_on_sigterm()  # first, so a stop signal at any later instant ends the command with 130/143
    if not ("agent" in sys.argv[1:4] and "hook" in sys.argv[1:5]):  # a hook never fails the agent (`agents.protocol`)
        _check_settings()
    serve_args = _serve_args(sys.argv[1:])
    if serve_args is not None:
        try:
            from memsafe.errors import MemsafeError
            from memsafe.mcp.stdio import STOP, serve
        except KeyboardInterrupt:
            _exit_now(_terminated_code(130))
        try:
            serve(*serve_args)  # its own handlers replace the CLI's from its first line on
        except MemsafeError as exc:
            sys.stderr.write(f"Error: {exc}\n")
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:  # SIGINT or SIGTERM during start-up, while a thread may be importing:
            sys.stderr.flush()  # ending the interpreter normally under it could abort (SIGABRT)
            os._exit(STOP.code if STOP.signum else _terminated_code(130))
        return
    if "agent" in sys.argv[1:4]:  # `[--db PATH] agent hook ...`: an agent's lifecycle hook, without the CLI
        import gc

        gc.disable()  # a hook that injects is one short process: collecting while it imports costs ~10% of its CPU
        from memsafe.agents import protocol

        hook_args = protocol.parse_argv(sys.argv[1:])
        if hook_args is not None:
            _exit_now(protocol.main(*hook_args))
        gc.enable()
        _check_settings()  # an `agent` command that is not a hook
    if "ui" in sys.argv[1:4]:  # `[--db PATH] ui ...`: the page starts without the CLI
        from memsafe.ui import start

        ui = start.parse_argv(sys.argv[1:])
        if ui is not None:
            try:
                code = start.main(*ui)
            except KeyboardInterrupt:
                _exit_now(130)
            sys.exit(code)
        _stop_on_sigterm()
    try:
        _cli()
    except KeyboardInterrupt:  # a stop signal before the command's own handling (while importing it)
        sys.stderr.write("interrupted\n")
        _exit_now(_terminated_code(130))
    except SystemExit as exc:
        code = _terminated_code(exc.code)
        if _signals or code in (130, 143):
            _exit_now(code)  # see _exit_now: a stopped command ends without the interpreter's teardown
        raise SystemExit(code) from None


def _cli() -> None:
    """Every command line but `--version`, `serve` and `ui`: a cached answer, the fast path, or
    the Typer app. Raises SystemExit with the command's code (or returns: 0)."""
    argv = sys.argv[1:]
    if argv[-1:] in (["--help"], ["-h"]) or "_MEMSAFE_COMPLETE" in os.environ:  # only these have a key
        from memsafe.cli import cache as cli_cache

        key = cli_cache.request_key(argv, os.environ, sys.stdout)
        if key is not None:  # first, as it is the lightest: no CLI, nor the fast path's modules
            if not cli_cache.replay(key):
                from memsafe.cli import main as cli_main

                with cli_cache.recording(key):
                    cli_main()
            return
    from memsafe.cli import fast

    code = fast.run(argv)  # a plain command of the fast path: no Typer app (None: not one)
    if code is not None:
        _exit_now(_terminated_code(code))
    from memsafe.cli import main as cli_main

    cli_main()


_signals: list[int] = []  # SIGINT or SIGTERM, once a CLI command received one


def _stop_on_sigterm() -> None:
    """A CLI command stops on SIGTERM (`kill`, `timeout`, a service manager) as on Ctrl-C: a
    KeyboardInterrupt, so its transaction rolls back, its temporary files and folders go and its
    progress bar ends (Python's default ends the process at once, leaving them). Both signals are
    recorded (`_terminated_code`). Installed first thing in `main` (a signal before that, during
    the interpreter's own start, gets Python's defaults); `serve` replaces it with its own from
    its first line, and `ui` never installs it (uvicorn takes the signals and hands them back)."""
    import signal

    def stop(signum, frame):
        _signals.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _terminated_code(code):
    """The exit code of a command: 128 + the signal's number (130 Ctrl-C, 143 SIGTERM) once one
    stopped it, also when native code swallowed the KeyboardInterrupt and the command ended in an
    error of its own (a `bench` whose recall was interrupted said a quality floor was missed)."""
    if not _signals:
        return code
    if code not in (130, 143):
        sys.stderr.write("interrupted\n")
    return 128 + _signals[-1]


if __name__ == "__main__":
    main()
