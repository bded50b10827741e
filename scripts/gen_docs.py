"""Generate the shell completions (completions/) and man pages (man/) from the Typer app.

    python scripts/gen_docs.py [all|completions|man|fast] [--check]

Completions come from `memsafe.api.init.completion_script` (Typer's scripts; `memsafe init`
installs the same text). Every man page ends with ENVIRONMENT, FILES and EXIT STATUS. Man
pages are rendered by click-man's `ManPage` (roff writer), fed from the Typer command tree the
way click-man's own `generate_man_page` does; click-man's walker cannot be used directly
because Typer >= 0.26 vendors its own copy of click, whose classes click-man does not
recognise. One page per command, like click-man: memsafe.1, memsafe-recall.1, memsafe-hook-install.1...

The fast path's option table (`memsafe/cli/fast_spec.py`, see `memsafe.cli.fast`) is generated
from the same declarations, so the hot commands' options are written once, in their Typer commands.

`--check` writes nothing and exits 1 listing the files that differ (used by tests/test_docs.py).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROG = "memsafe"
SHELLS = {"bash": "memsafe.bash", "zsh": "_memsafe", "fish": "memsafe.fish"}


def completion_files() -> dict[str, str]:
    """{relative path: content} for every completion script (the same text `memsafe init` installs)."""
    from memsafe.api.init import completion_script

    return {f"completions/{name}": completion_script(shell, PROG) for shell, name in SHELLS.items()}


def _roff(text: str) -> str:
    """Plain text for a man page: hyphens escaped, `code` in bold."""
    import re

    text = text.replace("\\", "\\\\").replace("-", "\\-")
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fP", text)


# What a variable's value is, by `settings.Variable.kind`, as the tables say it.
VALUE_OF_KIND = {"path": "path", "flag": "1 or 0 (default 0)", "switch": "1 or 0 (default 1)",
                 "count": "whole number >= 1", "time": "ISO-8601 time", "text": "text", "secret": "text (a secret)",
                 "level": "log level", "program": "path of a program"}


def environment_rows() -> list[tuple[str, str]]:
    """The man pages' ENVIRONMENT, from `memsafe.settings.VARIABLES` (the one table)."""
    from memsafe.settings import VARIABLES

    return [(v.name, _roff(f"{v.meaning[0].upper()}{v.meaning[1:]}. "
                           + (f"Value: {VALUE_OF_KIND[v.kind]}." if v.owned else "Read, not owned by memsafe.")))
            for v in VARIABLES]


def _value(variable) -> str:
    return VALUE_OF_KIND[variable.kind] if variable.owned else "read, not owned by memsafe"


def usage_environment() -> str:
    """docs/usage.md's "Environment" table, from `memsafe.settings.VARIABLES`."""
    from memsafe.settings import VARIABLES

    return "\n".join(["| variable | value | meaning |", "| --- | --- | --- |",
                      *(f"| `{v.name}` | {_value(v)} | {v.meaning} |" for v in VARIABLES)]) + "\n"


def config_keys() -> dict:
    """Every key `memsafe config` knows, in `config list`'s order: the store's
    (`memsafe.api.config.CONFIG_KEYS`), then `db` (`memsafe.settings.DB_KEY`)."""
    from memsafe.api.config import CONFIG_KEYS
    from memsafe.settings import DB_KEY

    return {**CONFIG_KEYS, DB_KEY.name: DB_KEY}


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _key_value(spec) -> tuple[str, str]:
    """What a config key takes (its type, bounds or choices) and its default, as the tables say them."""
    if spec.choices:
        kind = " or ".join(spec.choices)
    elif spec.type in (int, float):
        kind = "whole number" if spec.type is int else "number"
        if spec.low is not None and spec.high is not None:
            kind += f" from {_number(spec.low)} to {_number(spec.high)}"
    else:
        kind = {bool: "true or false"}.get(spec.type, "text")
    if spec.name == "db":
        return kind, "memory.db in the user data folder"
    default = str(spec.default).lower() if spec.type is bool else str(spec.default)
    return kind, default or "none"


def usage_config() -> str:
    """docs/usage.md's "Config keys" table, from `config_keys()`."""
    return "\n".join(["| key | value | default | meaning |", "| --- | --- | --- | --- |",
                      *(f"| `{name}` | {' | '.join(_key_value(spec))} | {spec.help} |"
                        for name, spec in config_keys().items())]) + "\n"


def config_rows() -> list[tuple[str, str]]:
    """The CONFIG KEYS section of the `memsafe config` pages, from `config_keys()`."""
    rows = []
    for name, spec in config_keys().items():
        kind, default = _key_value(spec)
        rows.append((name, _roff(f"{spec.help[0].upper()}{spec.help[1:]}. Value: {kind}; default: {default}.")))
    return rows


# Sections every page ends with (roff). ENVIRONMENT comes from memsafe.settings.VARIABLES, CONFIG KEYS
# (the `memsafe config` pages) from `config_keys()`.
FILES = [
    ("~/.local/share/memsafe/memory.db", "The default database on Linux (the platform's user data folder "
     "elsewhere; \\fBmemsafe status\\fP prints the one in use), with its \\-wal and \\-shm files."),
    ("~/.config/memsafe/settings.json", "User settings written by \\fBmemsafe config set db\\fP."),
    ("~/.local/share/memsafe/hook.log", "Errors of the git hook's background runs."),
    (".git/hooks/post\\-commit", "The hook \\fBmemsafe hook install\\fP writes (an existing hook is kept as "
     "post\\-commit.pre\\-memsafe)."),
]
EXIT_STATUS = [
    ("0", "Success."),
    ("1", "An error, said in one line on stderr (bad input, unknown id, unreadable database); "
     "\\fBdoctor\\fP, \\fBstatus\\fP and \\fBembed\\fP also when a check fails."),
    ("2", "A usage error: unknown command or option, missing argument."),
    ("3", "\\fBimport \\-\\-skip\\-invalid\\fP imported the valid records and skipped others."),
    ("130", "Interrupted (Ctrl\\-C)."),
]


def _sections(config: bool = False) -> str:
    """ENVIRONMENT, FILES and EXIT STATUS, the same on every page; CONFIG KEYS first on the
    pages of `memsafe config`."""
    lines = []
    sections = (("CONFIG KEYS", config_rows()),) if config else ()
    for title, rows in (*sections, ("ENVIRONMENT", environment_rows()), ("FILES", FILES), ("EXIT STATUS", EXIT_STATUS)):
        lines.append(f'.SH "{title}"' if " " in title else f".SH {title}")
        for term, text in rows:
            lines += [".TP", f"\\fB{term}\\fP", text]
    return "\n".join(lines) + "\n"


def _short_help(command) -> str:
    text = command.short_help or (command.help or "").strip().split("\n\n")[0]
    return " ".join(text.split())


def _page(ctx, version: str) -> str:
    from click_man.man import ManPage

    command = ctx.command
    page = ManPage(ctx.command_path)
    page.version = version
    page.date = os.environ.get("MEMSAFE_MAN_DATE", "")  # no build date: the file stays reproducible
    page.short_help = _short_help(command)
    page.description = inspect.cleandoc(command.help or "")
    page.synopsis = " ".join(command.collect_usage_pieces(ctx))
    page.options = [
        p.get_help_record(ctx)
        for p in command.params
        if p.param_type_name == "option" and not getattr(p, "hidden", False) and p.get_help_record(ctx)
    ]
    commands = getattr(command, "commands", None)
    if commands:
        page.commands = [(name, _short_help(sub)) for name, sub in commands.items() if not sub.hidden]
    return str(page) + _sections(config=ctx.command_path.startswith(f"{PROG} config"))


def man_files() -> dict[str, str]:
    """{relative path: roff} for the program and every visible command, recursively."""
    import typer
    from typer.main import get_command

    from memsafe import __version__
    from memsafe.cli import app

    out: dict[str, str] = {}

    def walk(command, name: str, parent) -> None:
        ctx = typer.Context(command, info_name=name, parent=parent)
        out[f"man/{ctx.command_path.replace(' ', '-')}.1"] = _page(ctx, __version__)
        for sub_name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                walk(sub, sub_name, ctx)

    walk(get_command(app), PROG, None)
    return out


# the commands `memsafe.cli.fast` runs without Typer (a sub-command as "group command")
FAST_COMMANDS = ("recall", "remember", "import", "get", "forget", "history", "list", "status", "graph show")


def _fast_spec(param) -> object:
    """How the fast path reads one option's value, from its Typer declaration: "flag" (and "off"
    for the `--no-` side of an on/off flag), "text", ("int", min, max), ("float", min, max) or
    ("choice", values)."""
    import enum
    import typing

    if getattr(param, "is_flag", False):
        return "flag"
    annotation = param.type_descriptor.annotation
    if typing.get_origin(annotation) is list:  # a repeatable option: each value read alike
        (annotation,) = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ("choice", tuple(member.value for member in annotation))
    if annotation in (int, float):
        return (annotation.__name__, getattr(param, "min", None), getattr(param, "max", None))
    if annotation is not str:
        raise SystemExit(f"{param.name}: the fast path cannot read a {annotation!r} option; extend _fast_spec")
    return "text"


def fast_spec_file() -> dict[str, str]:
    """{"memsafe/cli/fast_spec.py": its text}: for each of FAST_COMMANDS, every option name (long
    and short) → (parameter, spec, repeatable), the positional parameter (name, spec) or None,
    and the defaults."""
    import pprint

    from typer.main import get_command

    from memsafe.cli import app

    root = get_command(app)
    options: dict = {}
    positional: dict = {}
    defaults: dict = {}
    for name in FAST_COMMANDS:
        command = root
        for word in name.split():
            command = command.commands[word]  # type: ignore[attr-defined]  # a group's
        options[name], defaults[name], positional[name] = {}, {}, None
        for param in command.params:
            if param.param_type_name == "argument":
                if param.multiple or positional[name] is not None:
                    raise SystemExit(f"{name}: the fast path reads one argument, not {param.name!r} too")
                positional[name] = (param.name, _fast_spec(param))
                continue
            spec = _fast_spec(param)
            for opt in param.opts:
                options[name][opt] = (param.name, spec, bool(param.multiple))
            for opt in param.secondary_opts:  # the off switch of an on/off flag (--no-redact)
                options[name][opt] = (param.name, "off", False)
            default = param.default
            defaults[name][param.name] = [] if param.multiple else getattr(default, "value", default)
    body = "\n".join([
        '"""The options of the commands `memsafe.cli.fast` runs without the Typer app, as their Typer',
        "commands declare them (generated by `make docs`, scripts/gen_docs.py; tests/test_docs.py fails",
        'when it is out of date). Each option: (parameter, how its value is read, repeatable)."""',
        "",
        "from typing import Any",
        "",
        "OPTIONS: dict[str, dict[str, tuple[str, Any, bool]]] = "
        + pprint.pformat(options, width=100, sort_dicts=False),
        f"POSITIONAL: dict[str, tuple[str, Any] | None] = {pprint.pformat(positional, width=100, sort_dicts=False)}",
        f"DEFAULTS: dict[str, dict[str, Any]] = {pprint.pformat(defaults, width=100, sort_dicts=False)}",
        "",
    ])
    return {"memsafe/cli/fast_spec.py": body}


def usage_file() -> dict[str, str]:
    """{"docs/usage.md": its text with the tables under "## Environment" and "## Config keys"
    made by `usage_environment` and `usage_config`}."""
    import re

    text = (ROOT / "docs" / "usage.md").read_text()
    for title, made in (("Environment", usage_environment()), ("Config keys", usage_config())):
        table = re.compile(rf"(## {title}\n\n(?:[^|#\n][^\n]*\n|\n)*)((?:\|[^\n]*\n)+)")
        if not table.search(text):
            raise SystemExit(f"docs/usage.md has no table under '## {title}'")
        text = table.sub(lambda m: m.group(1) + made, text, count=1)  # noqa: B023  # used at once
    return {"docs/usage.md": text}


def generated(what: str = "all") -> dict[str, str]:
    files: dict[str, str] = {}
    if what == "all":
        files.update(usage_file())
    if what in ("all", "fast"):
        files.update(fast_spec_file())
    if what in ("all", "completions"):
        files.update(completion_files())
    if what in ("all", "man"):
        files.update(man_files())
    return files


def stale(what: str = "all") -> list[str]:
    """Files that are missing or differ from what the app generates (and stray man pages)."""
    files = generated(what)
    bad = [rel for rel, text in files.items() if not (ROOT / rel).is_file() or (ROOT / rel).read_text() != text]
    if what in ("all", "man"):
        bad += [f"man/{p.name} (no such command)" for p in sorted((ROOT / "man").glob("*.1"))
                if f"man/{p.name}" not in files]
    return bad


def main(argv: list[str]) -> int:
    what = next((a for a in argv if not a.startswith("-")), "all")
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    unknown = [a for a in argv if a.startswith("-") and a != "--check"]
    if what not in ("all", "completions", "man", "fast") or unknown:
        print(__doc__, file=sys.stderr)
        return 2
    if "--check" in argv:
        bad = stale(what)
        for rel in bad:
            print(f"out of date: {rel}", file=sys.stderr)
        return 1 if bad else 0
    files = generated(what)
    if what in ("all", "man"):
        for old in (ROOT / "man").glob("*.1"):
            if f"man/{old.name}" not in files:
                old.unlink()
    for rel, text in files.items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
