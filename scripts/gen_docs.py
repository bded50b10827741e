"""Generate the shell completions (completions/) and man pages (man/) from the Typer app.

    python scripts/gen_docs.py [all|completions|man] [--check]

Completions come from Typer itself (`typer._completion_shared.get_completion_script`). Man
pages are rendered by click-man's `ManPage` (roff writer), fed from the Typer command tree the
way click-man's own `generate_man_page` does; click-man's walker cannot be used directly
because Typer >= 0.26 vendors its own copy of click, whose classes click-man does not
recognise. One page per command, like click-man: memsafe.1, memsafe-recall.1, memsafe-hook-install.1...

`--check` writes nothing and exits 1 listing the files that differ (used by tests/test_docs.py).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROG = "memsafe"
COMPLETE_VAR = "_MEMSAFE_COMPLETE"
SHELLS = {"bash": "memsafe.bash", "zsh": "_memsafe", "fish": "memsafe.fish"}


def completion_files() -> dict[str, str]:
    """{relative path: content} for every completion script."""
    from typer._completion_shared import get_completion_script

    return {
        f"completions/{name}": get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell) + "\n"
        for shell, name in SHELLS.items()
    }


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
    return str(page)


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


def generated(what: str = "all") -> dict[str, str]:
    files: dict[str, str] = {}
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
    if what not in ("all", "completions", "man"):
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
