"""Responsibility: what every command shares: the Typer app, the global options, the shared
option types, the session (open store → handler → one-line errors) and output helpers."""

from __future__ import annotations

import sys
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from memsafe import __version__, api, settings
from memsafe.cli import _plain
from memsafe.errors import MemsafeError
from memsafe.models import Kind

if TYPE_CHECKING:  # for the type checker only: at run time the class is found from Typer's public ones
    from typer._click.exceptions import UsageError


def _stack(choices: str, width: int = 16) -> str:
    """`<fact|preference|decision|…>` on lines of at most `width` characters, broken after a `|`:
    a narrow type column leaves the help text room (rich shrinks the widest column first, and
    an unbroken list of choices made every help text wrap word by word)."""
    lines = [""]
    for part in choices.replace("|", "|\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _reflow(paragraph: str) -> str:
    """A prose paragraph of a docstring as one line, for the terminal to wrap; lists, indented
    lines (examples) and `\\b` paragraphs keep their line breaks."""
    lines = paragraph.split("\n")
    if paragraph.startswith(("\b", " ")) or any(line[:1] in (" ", "-", "*", "|") for line in lines[1:]):
        return paragraph
    return " ".join(line.strip() for line in lines)


def _no_orphans(divide):
    """Rich's `divide_line` (greedy: where to break a line of text to fit `width`), changed so the
    last line never holds a single word when the line before it has two or more: its last word
    moves down. Breaks only move earlier, so every line still fits."""

    def divide_line(text: str, width: int, fold: bool = True) -> list[int]:
        breaks = divide(text, width, fold)
        if breaks:
            start = breaks[-2] if len(breaks) > 1 else 0
            tail = text[breaks[-1]:].strip()
            line = text[start:breaks[-1]].rstrip()
            cut = text.rfind(" ", start, start + len(line)) + 1  # where the line's last word starts
            if tail and " " not in tail and cut > start and text[start:cut].strip() \
                    and len(text[cut:].strip()) <= width:
                breaks[-1] = cut
        return breaks

    return divide_line


def _tidy_help() -> None:
    """Four fixes to Typer's rich help (typer >= 0.29), each guarded so another version is left as it is:

    - a flag shows no type (`--json <bool>` looked as if it took a value), as in Typer's plain help;
    - the help column takes the width the others leave, and choices stack in a narrow type column
      (rich shrank the help column to the width of the widest other one: text wrapped word by word);
    - the docstring's line breaks inside a paragraph are not kept (at 80 columns a line broken at
      100 left one or two words on a line of their own);
    - no paragraph or cell ends with a word alone on its last line (`_no_orphans`).
    """
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_memsafe", False):
        return

    def display_type_rich(self, ctx):
        if self.is_flag or self.count:
            return None
        return shown(self, ctx)

    # Patching a library's method is what a type checker is there to flag; here it is the point.
    display_type_rich._memsafe = True  # type: ignore[attr-defined]  # patched once, even if this module is reloaded
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]

    from rich.table import Table
    from typer import rich_utils

    class HelpTable(Table):
        """The last column (the help text) takes all the width the others leave (ratio=1): by
        default rich shrank it to the width of the widest other column, wrapping word by word."""

        def add_row(self, *renderables, **kwargs):
            if self.expand and len(renderables) >= 5 and "|" in str(renderables[-2]):  # options panel: choices
                types = rich_utils.Text(_stack(str(renderables[-2])), style=rich_utils.STYLE_TYPES)
                renderables = (*renderables[:-2], rich_utils.types_highlighter(types), renderables[-1])
            super().add_row(*renderables, **kwargs)
            if self.expand and self.columns:
                self.columns[-1].ratio = 1
                if len(self.columns) >= 5:  # the options panel: its type column stays narrow too
                    self.columns[-2].max_width = 16

    if getattr(rich_utils, "Table", None) is Table:
        rich_utils.Table = HelpTable  # type: ignore[misc]  # (a patch of Typer's help rendering, as above)
    import rich.text

    format_help = rich_utils.rich_format_help

    def rich_format_help(*args, **kwargs):  # only help text: data output wraps as rich does
        greedy = rich.text.divide_line
        rich.text.divide_line = _no_orphans(greedy)
        try:
            return format_help(*args, **kwargs)
        finally:
            rich.text.divide_line = greedy

    if hasattr(rich.text, "divide_line"):
        rich_utils.rich_format_help = rich_format_help
    if hasattr(rich_utils, "_fix_linebreaks"):
        rich_utils._fix_linebreaks = lambda paragraphs, markup_mode: "\n\n".join(_reflow(p) for p in paragraphs)


_tidy_help()


def close_matches(word: str, choices, n: int = 3) -> list[str]:
    """The choices a mistyped `word` most likely meant, best first, at most `n`: the most similar
    ones (difflib's ratio at least 0.75, and within 0.1 of the best: `recal` → recall, `lsit` →
    list, `instal` → install but not uninstall), then those it begins, from 3 characters on
    (`rem` → remember). Leading dashes are compared without: through them `--bogus` looked close
    to `--host`. Click's own suggestions took difflib's default cutoff, 0.6, which offered
    `decay` for `recal`."""
    import difflib

    bare = word.lstrip("-")
    names = {choice.lstrip("-"): choice for choice in choices}
    scored = sorted(((difflib.SequenceMatcher(None, bare, name).ratio(), name) for name in names),
                    key=lambda pair: (-pair[0], pair[1]))
    floor = max(0.75, scored[0][0] - 0.1) if scored else 1.0
    close = [name for ratio, name in scored if ratio >= floor]
    begun = sorted(name for name in names if len(bare) >= 3 and name.startswith(bare) and name != bare)
    return [names[name] for name in dict.fromkeys(close + begun)][:n]


def _is_text(annotation) -> bool:
    """True for a parameter that takes text (str, alone or in a list). A Path parameter could not
    tell an empty value from `.` (Typer turns "" into Path(".")): text parameters take str."""
    if typing.get_origin(annotation) in (list, tuple):
        return any(_is_text(arg) for arg in typing.get_args(annotation))
    return annotation is str


def _refuse_blank(param) -> None:
    """Make `param` (a text option or argument) refuse a value given empty or blank, as a usage
    error (exit 2): `--project ""` from an unset variable would otherwise mean the current
    directory, `--output ""` the folder `.`, `--reason ""` no reason at all."""
    callback = param.callback

    def check(ctx, param, value):
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            where = "" if param.param_type_name == "argument" else "; leave the option out for its default"
            raise typer.BadParameter(f"empty text{where}", ctx=ctx, param=param)
        return callback(ctx, param, value) if callback is not None else value

    param.callback = check


_UsageError: type[UsageError] = next(  # Typer's Click's
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class Group(typer.core.TyperGroup):
    """memsafe's command groups (the app and each sub-app: `typer.Typer(cls=Group)`): a mistyped
    command gets only close suggestions (`close_matches`), and every text parameter of the group
    and of its commands refuses an empty value (`_refuse_blank`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "suggest_commands": False})  # `resolve_command` suggests
        commands = [c for c in self.commands.values() if not isinstance(c, typer.core.TyperGroup)]
        for param in [p for command in (self, *commands) for p in command.params]:
            descriptor = param.type_descriptor  # type: ignore[attr-defined]  # on Typer's own parameter classes
            if not descriptor.is_choice and _is_text(descriptor.annotation):
                _refuse_blank(param)

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except _UsageError as exc:
            mistyped = args and not args[0].startswith("-")  # else an unknown option: `full.main` suggests
            matches = close_matches(args[0], self.list_commands(ctx)) if mistyped else []
            if matches:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise


app = typer.Typer(
    name="memsafe",
    cls=Group,
    help="Persistent, local, offline memory for AI coding agents and the people who use them.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

err = _plain.err_console()
out, say = _plain.out, _plain.say


# -- errors as JSON under --json -------------------------------------------------------------------

_json_errors = False  # set while a command given --json runs (`JsonOpt`'s callback); reset by `_root`


def _note_json(value: bool) -> bool:
    """`--json` callback: errors of this command are printed as JSON too."""
    global _json_errors
    _json_errors = _json_errors or bool(value)
    return value


def json_errors(argv: list[str] | None = None) -> bool:
    """True when errors must be JSON: the command was given --json (for a usage error raised
    before --json was parsed, `argv` is checked for it too)."""
    if _json_errors or argv is None:
        return _json_errors
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def error(message: str, kind: str = "Error", argv: list[str] | None = None) -> None:
    """Report an error: one line `Error: …` on stderr, or with --json one document on stdout,
    `{"error": {"type": KIND, "message": …}}` (a script need not parse plain text). `kind` is
    the exception's class name (NotFound, InvalidInput, UsageError, DatabaseError, …)."""
    _plain.error(message, kind, json_errors(argv))


# -- shared options ------------------------------------------------------------------------------

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document instead of a table.", callback=_note_json)
]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="Project name or path (default: the git repository of the current directory).",
    ),
]
ProjectPathOpt = Annotated[
    str | None, typer.Option("--project-path", help="Use the project of this path (posix or Windows).")
]
AllProjectsOpt = Annotated[
    bool, typer.Option("--all-projects", help="Every project (default: the current project plus global memories).")
]
KindOpt = Annotated[Kind, typer.Option("--kind", "-k", help="What the memory is.")]
IdArg = Annotated[int, typer.Argument(metavar="ID", help="Memory id.")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tag", "-t", help="Tag (repeatable).")]


@dataclass
class Ctx:
    db: str | None = None


def _print_version(value: bool) -> None:
    """Eager callback: `memsafe --version` works without a command."""
    if value:
        typer.echo(f"memsafe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Database file (default: $MEMSAFE_DB, `config set db`, or the user data dir)."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True, callback=_print_version),
    ] = False,
) -> None:
    """memsafe remembers what matters across sessions, in one SQLite file on this machine.

    Examples:

      memsafe remember "we squash before merging" --kind decision

      memsafe recall "how do we merge?"
    """
    global _json_errors
    _json_errors = False
    try:
        settings.env()  # a variable of the wrong kind: one line before the command starts, as `memsafe` says it
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    ctx.obj = Ctx(db=db)


def _fail(message: str, code: int = 1, kind: str = "Error") -> typer.Exit:
    """Report the error (`error`) and return the Exit to raise, with the same code either way."""
    error(message, kind)
    return typer.Exit(code)


@contextmanager
def _errors(path=None) -> Iterator[None]:
    """Map MemsafeError and SQLite errors to one line on stderr and the error's exit code
    (`_plain.errors`), exiting through typer.Exit."""
    try:
        with _plain.errors(path, json_errors()):
            yield
    except _plain.Failed as exc:
        raise typer.Exit(exc.code) from None


@contextmanager
def _session(ctx: typer.Context) -> Iterator[api.Opened]:
    """Open the store, show its warnings on stderr, map errors to one line (`_plain.session`)."""
    try:
        with _plain.session(ctx.obj.db if ctx.obj else None, json_errors()) as opened:
            yield opened
    except _plain.Failed as exc:
        raise typer.Exit(exc.code) from None


read_stdin = _plain.read_stdin


def is_terminal() -> bool:
    """True when standard input is an interactive terminal (confirmation prompts are possible)."""
    return sys.stdin is not None and not sys.stdin.closed and sys.stdin.isatty()


_project = _plain.project_key


def _scope(opened: api.Opened, project: str | None, project_path: str | None, all_projects: bool):
    """The read scope of a command, as recall's: the current (or given) project plus global
    memories, or every project with --all-projects."""
    if all_projects and (project is not None or project_path is not None):
        raise _fail(_plain.BOTH_SCOPES, 2)
    key = None if all_projects else _project(opened, project, project_path)[0]
    return api.make_scope(project=key, all_projects=all_projects)


_emit_json = _plain.emit_json


def emit(obj, json_: bool, human, piped=None) -> None:
    """A command's result on stdout: one JSON document of `obj` with --json, else `human`
    (text or a rich renderable) through the safe console; `piped` (a function returning lines),
    when stdout is not a terminal, instead (`print_table`)."""
    if json_:
        _emit_json(obj)
    else:
        print_table(lambda: human, piped)


print_table = _plain.print_table
