"""Responsibility: what a command needs besides its argument parser, without Typer or rich at
import: one-line errors (or a JSON error document under --json), `Warning:`/`Note:` lines, the
session (open store → handler → errors mapped to one line and an exit code) and the project a
command reads. The Typer app (`memsafe.cli._common`) and the fast path of the hot commands
(`memsafe.cli.fast`) both use these, so both paths print and exit alike. rich is imported only
when something is printed through it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from memsafe import render, settings


class Failed(SystemExit):
    """A command failed and has said why: exit with `code` (the Typer app turns it into typer.Exit)."""

    code: int


@functools.cache
def err_console():
    """The rich console of stderr (made on first use: rich costs tens of ms to import)."""
    return render.console(stderr=True)


def say(kind: str, message: str) -> None:
    """One line on stderr: `Error: …`, `Warning: …` or `Note: …` (message shown literally)."""
    line = render.printable(" ".join(str(message).splitlines()))
    if not is_tty(sys.stderr):  # what rich prints there (soft wrap, no colour), without importing it
        sys.stderr.write(f"{kind}: {line}".expandtabs(8) + "\n")
        return
    from rich.text import Text

    style = {"Error": "bold red"}.get(kind, "yellow")
    err_console().print(Text.assemble((f"{kind}:", style), " ", line))


def is_tty(stream) -> bool:
    """True when `stream` is a terminal, or rich is told to treat it as one (FORCE_COLOR,
    TTY_COMPATIBLE): then output goes through rich for its colours and widths."""
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        return True
    return bool(getattr(stream, "isatty", None) and stream.isatty())


def emit_json(obj) -> None:
    """One JSON document of `obj` on stdout."""
    sys.stdout.write(render.dumps(obj) + "\n")


def error(message: str, kind: str = "Error", json_: bool = False) -> None:
    """Report an error: one line `Error: …` on stderr, or with --json one document on stdout,
    `{"error": {"type": KIND, "message": …}}` (a script need not parse plain text). `kind` is
    the exception's class name (NotFound, InvalidInput, UsageError, DatabaseError, …)."""
    global interruption_said
    interruption_said = interruption_said or kind == "Interrupted"
    if json_:
        emit_json({"error": {"type": kind, "message": " ".join(str(message).splitlines())}})
    else:
        say("Error", message)


interruption_said = False  # a command said what its interruption kept (`error` of kind Interrupted)


# Every command that reads a scope refuses both (`_common._scope`, `fast.recall`).
BOTH_SCOPES = "use --all-projects or --project/--project-path, not both"


def fail(message: str, code: int = 1, kind: str = "Error", json_: bool = False) -> Failed:
    """Report the error (`error`) and return the exit to raise, with the same code either way."""
    error(message, kind, json_)
    return Failed(code)


@contextmanager
def errors(path=None, json_: bool = False) -> Iterator[None]:
    """Map MemsafeError and SQLite errors to one line on stderr and the error's exit code (2 for a
    usage error, 1 for a refusal, not-found or a damaged file; tracebacks only with MEMSAFE_DEBUG).
    Raises `Failed`."""
    import apsw

    from memsafe.errors import MemsafeError

    try:
        yield
    except MemsafeError as exc:
        if settings.env().debug:
            raise
        raise fail(str(exc), exc.exit_code, type(exc).__name__, json_) from None
    except apsw.Error as exc:  # a damaged or unreadable file: say so in one line, never a traceback
        if settings.env().debug:
            raise
        raise fail(f"database error in {path or 'the database'}: {exc}; run `memsafe doctor`",
                   kind="DatabaseError", json_=json_) from None


@contextmanager
def session(db: str | None, json_: bool = False):
    """Open the store (`api.open_store(db)`), show its warnings on stderr, map errors to one
    line (see `errors`); its notes are shown after the command. Yields `api.Opened`."""
    from memsafe import api

    opened = None
    with errors(db, json_):
        try:
            opened = api.open_store(db)
            for warning in opened.warnings:
                say("Warning", warning)
            yield opened
            for note in opened.notes:  # after the command, so an error stays the one line on stderr
                say("Note", note)
        finally:
            if opened is not None:
                opened.store.close()


def project_key(opened, project: str | None, project_path: str | None) -> tuple[str | None, str]:
    """(project key, the rule that chose it) of a command given --project / --project-path, else
    the current directory's project."""
    from memsafe import api, settings

    mode = api.config_get(opened.store, "project_mode")
    if project_path is not None:  # an empty one is refused, not read as "the current directory"
        return api.clean_project(project_path, mode=mode, path=True, store=opened.store), "--project-path"
    if project is not None:  # storing handlers scan it
        return api.clean_project(project, mode=mode, check_secrets=False, store=opened.store), "--project"
    key = api.current_project(opened.store, mode=mode)
    return key, f"{mode} of {settings.current_dir()}"


def read_stdin(json_: bool = False) -> str:
    """All of standard input as text (invalid UTF-8 becomes U+FFFD). Fails in one line without stdin."""
    stream = sys.stdin
    if stream is None or stream.closed:
        raise fail("no standard input to read; pass the text as an argument instead of -", json_=json_)
    data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read()
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def err_line(text: str) -> None:
    """One line of text on stderr, as `err_console().print(text, markup=False)` shows it; without
    importing rich when that cannot change it (not a terminal, printable text, no `:name:` that
    rich could read as an emoji code)."""
    if is_tty(sys.stderr) or not text.isprintable() or _EMOJI_CODE.search(text):
        err_console().print(text, markup=False)
    else:
        sys.stderr.write(text + "\n")


_EMOJI_CODE = re.compile(r":\S*?:")  # what rich's emoji replacement could match (a superset of it)


@contextmanager
def progress(label: str, enabled: bool = True, unit: str | None = None) -> Iterator:
    """A rich progress bar on stderr (only on a terminal); yields a (done, total) callback, or None.
    `unit` (plural, e.g. "vectors"): the bar also shows the rate, "31 vectors/s"."""
    if not (enabled and is_tty(sys.stderr) and err_console().is_terminal):
        yield None
        return
    from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text("" if task.speed is None else f"{task.speed:,.0f} {unit}/s")

    columns = [TextColumn(label), BarColumn(), TaskProgressColumn(), *([Rate()] if unit else []), TimeRemainingColumn()]
    bar = Progress(*columns, console=err_console(), transient=True)
    with bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def interrupts() -> Iterator[list]:
    """SIGINT raises KeyboardInterrupt as usual and is also recorded in the yielded list (truthy
    once interrupted): native code (onnxruntime importing numpy) can swallow the exception.
    SIGTERM raises it too, for every CLI command (`memsafe.__main__`), which exits 143 then."""
    import signal
    import threading

    seen: list = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def out():
    """Console for data on stdout: no markup interpretation, control characters escaped."""
    return render.console()


def _cells(char: str) -> int:
    """At least the cells rich gives `char` (1 or 2)."""
    import unicodedata

    return 2 if ord(char) > 0xFFFF or unicodedata.east_asian_width(char) in "WFA" else 1


def _unchanged(text: str, width: int) -> bool:
    """True when rich's console (no markup, no highlighting, soft wrap off) would print `text` as
    it is on a line of `width` cells: printable, no `:emoji:` code, no trailing blanks, and too
    short to wrap (wide, ambiguous and astral characters counted as two cells, as no terminal gives
    them more)."""
    cells = len(text) if text.isascii() else sum(_cells(char) for char in text)
    if not (text.isprintable() and text == text.rstrip() and cells < width):
        return False
    if not _EMOJI_CODE.search(text):
        return True
    from rich._emoji_replace import _emoji_replace  # its table only (a model's `name:size:hash` looks like a code)

    return _emoji_replace(text) == text


def _piped_width(default: int) -> int | None:
    """The width the data console lays out at when stdout is not a terminal (`render.console`),
    or None when it is one: then rich must lay it out."""
    if is_tty(sys.stdout):
        return None
    width = os.environ.get("COLUMNS") or ""
    return int(width) if width.isdigit() else default


def print_line(text: str) -> None:
    """One line of text on stdout, as `out().print(text)` shows it; without importing rich when
    the line cannot be changed by it (printable, fits the width, no `:emoji:` code, not a terminal)."""
    print_lines([text], default_width=80)


def print_lines(lines, default_width: int = 120) -> None:
    """Lines of text on stdout, as `out().print(line)` shows each; without importing rich when
    none can be changed by it (see `print_line`)."""
    lines = list(lines)
    width = _piped_width(default_width)
    if width is not None and all(_unchanged(line, width) for line in lines):
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    console = out()
    for line in lines:
        console.print(line, markup=False, highlight=False)


def print_table(table, lines=None) -> None:
    """Print `table()` (a rich renderable) on a terminal, or `lines()` (plain text lines, every
    value whole) when stdout is a pipe or a file and `lines` is given: a table folds and cuts
    long content to the terminal's width, which a script or `grep` must not see."""
    if lines is not None and not is_tty(sys.stdout):
        sys.stdout.write("".join(line + "\n" for line in lines()))
        sys.stdout.flush()
    else:
        out().print(table())


def safe_streams() -> None:
    """Never die on a legacy console encoding: unencodable characters are replaced."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]  # absent: AttributeError, caught
        except (AttributeError, ValueError):
            pass
