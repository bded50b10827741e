"""Generated docs stay in step with the CLI: completions/ and man/ equal what the app generates
now, and every command and option has help text."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from memsafe.cli import app

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "run `make docs` (python scripts/gen_docs.py) and commit completions/ and man/"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(command=None, path="memsafe", parent=None):
    command = command or get_command(app)
    ctx = typer.Context(command, info_name=path.split()[-1], parent=parent)
    yield path, command, ctx
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from _commands(sub, f"{path} {name}", ctx)


def test_completions_and_man_pages_are_up_to_date():
    stale = _gen_docs().stale("all")
    assert not stale, f"generated docs are out of date: {', '.join(stale)}; {REGENERATE}"


@pytest.mark.parametrize("path", [p for p, _, _ in _commands()])
def test_every_command_and_option_has_help(path):
    command, ctx = next((c, x) for p, c, x in _commands() if p == path)
    assert (command.help or command.short_help or "").strip(), f"`{path}` has no help text (add a docstring)"
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            assert (getattr(param, "help", None) or "").strip(), f"`{path}` option {param.opts} has no help text"


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_page_renders():
    done = subprocess.run(["man", str(ROOT / "man" / "memsafe.1")], capture_output=True, text=True,
                          env={"MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "100", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "memsafe-import(1)" in done.stdout and "SYNOPSIS" in done.stdout


def test_completion_scripts_call_the_app():
    bash = (ROOT / "completions" / "memsafe.bash").read_text()
    assert "_MEMSAFE_COMPLETE=complete_bash" in bash
    assert "_MEMSAFE_COMPLETE=complete_zsh" in (ROOT / "completions" / "_memsafe").read_text()
    assert "complete_fish" in (ROOT / "completions" / "memsafe.fish").read_text()


def test_bash_completion_completes_commands():
    import os
    import sys

    exe = Path(sys.executable).parent / "memsafe"
    if not exe.exists():
        pytest.skip("the memsafe console script is not installed next to this interpreter")
    env = {**os.environ, "COMP_WORDS": "memsafe hook ", "COMP_CWORD": "2", "_MEMSAFE_COMPLETE": "complete_bash"}
    done = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["install", "uninstall", "status", "backfill"]


@pytest.mark.parametrize(("words", "expected"), [
    ("memsafe recall deploy --mode ", ["hybrid", "lexical", "vector"]),  # was a plain <str>: nothing
    ("memsafe import x --format ", ["auto", "memsafe", "server-memory"]),
])
def test_bash_completion_completes_option_choices(words, expected):
    """`recall --mode <TAB>` offered nothing and its help said `<str>`, while
    `import --format <TAB>` listed its formats; both are choices now, in help and in TAB."""
    import os
    import sys

    exe = Path(sys.executable).parent / "memsafe"
    if not exe.exists():
        pytest.skip("the memsafe console script is not installed next to this interpreter")
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split())),
           "_MEMSAFE_COMPLETE": "complete_bash", "MEMSAFE_CLI_CACHE": "0"}
    done = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == expected
    if "--mode" in words:  # the man page is made from the help (test_completions_and_man_pages_are_up_to_date)
        assert "\\-\\-mode\\fP <hybrid|lexical|vector>" in (ROOT / "man" / "memsafe-recall.1").read_text()


def _named_commands(text: str) -> set[tuple[str, ...]]:
    """Every `memsafe WORD [WORD] [--option]` a document names, in code or in backticks."""
    named = set()
    blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S))
    runs = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    runs += re.findall(r"^\s*((?:\.venv/bin/)?memsafe [^\n#]+)", blocks, flags=re.M)
    for run in runs:
        for line in run.split("|"):
            words = line.replace(".venv/bin/memsafe", "memsafe").split()
            if words[:1] == ["memsafe"] or words[:2] == ["$(command", "-v"]:
                named.add(tuple(words[1:]))
    return named


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_every_command_and_option_a_document_names_exists(doc):
    """A reader copying a command from the README or the usage page gets a command that exists,
    with options it has (global options such as --db may come first)."""
    root = get_command(app)
    problems = []
    for words in _named_commands((ROOT / doc).read_text()):
        command, ctx_path = root, ["memsafe"]
        options = {o for p in root.params for o in p.opts}
        for word in words:
            if word.startswith("-"):
                name = word.split("=")[0]
                if name not in options and name not in ("--help",):
                    problems.append((" ".join(ctx_path), name))
                continue
            subs = getattr(command, "commands", None)
            if not subs:
                continue  # an argument (a query, an id, a path)
            if word not in subs:  # a group takes a subcommand first
                problems.append((" ".join(ctx_path), word))
                break
            command = subs[word]
            ctx_path.append(word)
            options = {o for p in command.params for o in p.opts} | {o for p in root.params for o in p.opts}
    assert problems == [], problems


def test_every_environment_variable_the_code_reads_is_in_the_one_table():
    """`settings.VARIABLES` documents every `MEMSAFE_*` name the package mentions (docs/usage.md
    and the man pages are made from it: test_completions_and_man_pages_are_up_to_date), and holds
    no variable the code no longer reads: each is named in the code outside the table, or its
    `settings.Environment` field is read (`env().FIELD`)."""
    from memsafe import settings

    def code(path):  # the table itself names every variable: it does not count as reading one
        text = path.read_text()
        if path.name == "settings.py":
            text = re.sub(r"\nVARIABLES: .*?\nINTERNAL_VARIABLES", "", text, flags=re.S)
        return text

    texts = [code(path) for path in (ROOT / "memsafe").rglob("*.py")]
    texts += [path.read_text() for path in (ROOT / "memsafe" / "data" / "claude-plugin" / "bin").iterdir()]
    named = {m for text in texts for m in re.findall(r"_?MEMSAFE_[A-Z][A-Z_]*[A-Z]", text)}
    fields = {m for text in texts for m in re.findall(r"\benv\(\)\.([a-z_]+)", text)}
    documented = {v.name for v in settings.VARIABLES if v.owned}
    assert named - documented - set(settings.INTERNAL_VARIABLES) == set()
    assert {name for name in documented if name not in named and settings.field_name(name) not in fields} == set()


def _table_names(text: str, title: str) -> list[str]:
    """The first column of the table under `## {title}` of a Markdown text."""
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def _man_terms(page: str, title: str) -> list[str]:
    """The terms (`.TP` then `\\fBTERM\\fP`) of one section of a man page."""
    section = page.split(f'.SH "{title}"\n' if " " in title else f".SH {title}\n", 1)[1].split("\n.SH ", 1)[0]
    return [t.replace("\\-", "-") for t in re.findall(r"^\.TP\n\\fB(.+?)\\fP$", section, flags=re.M)]


def test_docs_man_pages_and_config_list_name_the_variables_and_keys_of_the_one_table(tmp_path):
    """docs/usage.md, the man pages and `memsafe config list` name the variables of
    `settings.VARIABLES` and the keys of `api.config.CONFIG_KEYS` + `settings.DB_KEY`, in their
    order; README.md and docs/ name no other `MEMSAFE_*` variable and `config` no other key."""
    from conftest import run_memsafe

    from memsafe import settings
    from memsafe.api.config import CONFIG_KEYS

    variables = [v.name for v in settings.VARIABLES]
    keys = [*CONFIG_KEYS, settings.DB_KEY.name]
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert _table_names(usage, "Environment") == variables
    assert _table_names(usage, "Config keys") == keys
    for page in ("memsafe.1", "memsafe-recall.1", "memsafe-config.1"):
        assert _man_terms((ROOT / "man" / page).read_text(encoding="utf-8"), "ENVIRONMENT") == variables, page
    for page in sorted((ROOT / "man").glob("memsafe-config*.1")):
        assert _man_terms(page.read_text(encoding="utf-8"), "CONFIG KEYS") == keys, page.name
    listed = run_memsafe("--db", str(tmp_path / "m.db"), "config", "list", "--json", env={"MEMSAFE_NO_MODEL": "1"})
    assert listed.returncode == 0, listed.stderr
    assert list(json.loads(listed.stdout)) == keys
    known = {*variables, *settings.INTERNAL_VARIABLES}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        assert set(re.findall(r"\bMEMSAFE_[A-Z][A-Z_]*[A-Z]", text)) - known == set(), doc.name
        named_keys = set(re.findall(r"memsafe config (?:get|set|reset) ([a-z_]+)", text))
        assert named_keys - set(keys) == set(), doc.name
