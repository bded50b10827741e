"""Exit codes on every front door: 2 for a usage error (a bad flag, a missing, empty or
over-limit argument, an unknown choice, a malformed value) on every command and subcommand, walked
from the Typer app so that a new command is covered without listing it here; 1 for a refusal or a
not-found; one line on stderr and no traceback either way. And the suggestion for a mistyped
command or option is a close one or none.

The Typer commands run in process through `memsafe.cli.full.main`, the console script's own error
handling (Typer's test runner would show Click's boxed usage instead); the front doors that bypass
the Typer app (`memsafe.__main__`: the fast `recall`/`remember`/`import`, `serve`, `ui`) run as
real processes.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import typer
from conftest import run_memsafe

from memsafe import api
from memsafe.cli import app, full


def walk(command, path=()):
    """(path, command) of every leaf command under `command` (a Click group or command)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))
    else:
        yield path, command


def groups(command, path=()):
    """(path, group) of `command` and of every group under it."""
    if hasattr(command, "commands"):
        yield path, command
        for name, sub in command.commands.items():
            yield from groups(sub, (*path, name))


ROOT = typer.main.get_command(app)
COMMANDS = dict(walk(ROOT))
GROUPS = dict(groups(ROOT))


def main(capsys, monkeypatch, *argv: str) -> tuple[int, str, str]:
    """Run the console script's `main` on `argv`: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["memsafe", *argv])
    with pytest.raises(SystemExit) as stop:
        full.main()
    out, err = capsys.readouterr()
    code = stop.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


def error_line(err: str) -> str:
    """The one line of a failure on stderr (asserting there is exactly one and no traceback)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    return lines[0]


def arguments(command) -> list:
    return [p for p in command.params if p.param_type_name == "argument"]


def _number(annotation) -> bool:
    return annotation in (int, float) or "int" in str(annotation) or "float" in str(annotation)


def filled(command) -> list[str]:
    """Plausible values of the command's required arguments, so an option's error is the one seen."""
    return ["1" if _number(p.type_descriptor.annotation) else "x" for p in arguments(command) if p.required]


def takes_value(param) -> bool:
    return param.param_type_name == "option" and not (param.is_flag or param.count)


def usage_cases(command) -> list[tuple[list[str], str]]:
    """(arguments after the command's path, what the error line must mention) for every usage
    error this command's declaration implies."""
    fill = filled(command)
    # `config set KEY -1` reads unknown options as values: there a bad flag is a missing VALUE
    loose = command.context_settings.get("ignore_unknown_options")
    unknown = "Missing argument" if loose else "No such option: --no-such-flag"
    cases = [(["--no-such-flag"], unknown)]
    if any(p.required for p in arguments(command)):
        cases.append(([], "Missing argument"))
    for position, param in enumerate(arguments(command)):
        desc = param.type_descriptor
        if not _number(desc.annotation) and not desc.is_choice:
            values = [*fill, *["x"] * (position + 1 - len(fill))]
            for blank in ("", "   "):
                cases.append(([*values[:position], blank, *values[position + 1:]], "empty text"))
        elif _number(desc.annotation):
            values = [*fill, *["1"] * (position + 1 - len(fill))]
            cases.append(([*values[:position], "abc", *values[position + 1:]], "Invalid value"))
    for param in command.params:
        if not takes_value(param):
            continue
        name, desc = param.opts[0], param.type_descriptor
        cases.append(([*fill, name], "requires an argument"))
        if desc.is_choice:
            cases.append(([*fill, name, "nope"], "'nope' is not one of"))
        elif _number(desc.annotation):
            cases.append(([*fill, name, "abc"], "Invalid value"))
            info = desc.parameter_info
            if info.min is not None:
                cases.append(([*fill, f"{name}={info.min - 1}"], "greater than or equal to"))
            if info.max is not None:
                cases.append(([*fill, f"{name}={info.max + 1}"], "less than or equal to"))
        else:
            for blank in ("", "   "):
                cases.append(([*fill, name, blank], "empty text"))
    return cases


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_usage_error_of_every_command_exits_2_in_one_line(path, tmp_path, capsys, monkeypatch):
    """Each command and subcommand, with each usage error its declaration allows: a bad flag, a
    missing argument, an option without its value, an empty text, an unknown choice, a number
    that is no number or outside its range. Exit 2, one `Error:` line naming the fault, no
    traceback, and nothing done (no store created)."""
    db = tmp_path / "memory.db"
    cases = usage_cases(COMMANDS[path])
    assert cases
    for extra, mentioned in cases:
        code, out, err = main(capsys, monkeypatch, "--db", str(db), *path, *extra)
        assert code == 2, (path, extra, code, out, err)
        line = error_line(err)
        assert mentioned in line, (path, extra, line)
    assert not db.exists()


@pytest.mark.parametrize("extra, mentioned", [
    (["--no-such-flag", "status"], "No such option"),
    (["--db"], "requires an argument"),
    (["--db", "", "status"], "empty text"),
    (["--db", "   ", "status"], "empty text"),
    (["no-such-command"], "No such command"),
])
def test_usage_errors_before_the_command_exit_2(extra, mentioned, capsys, monkeypatch):
    code, _, err = main(capsys, monkeypatch, *extra)
    assert code == 2 and mentioned in error_line(err)


@pytest.mark.parametrize("args, mentioned", [
    # over a limit or out of range, checked by memsafe rather than by the option's declaration
    (["remember", "x" * (api.MAX_CONTENT_CHARS + 1)], "the limit is"),
    (["remember", "x", *["--tag", "t"] * 60], "tags"),
    (["recall", "x", "--project", "p" * (api.MAX_PROJECT_CHARS + 1)], "at most"),
    (["get", "0"], "positive integer"),
    (["confidence", "1", "2"], "between"),
    (["confidence", "1"], "exactly one of"),
    (["graph", "relate", "a", "b", "c", "--weight", "inf"], "weight must be between"),
    (["config", "set", "recall_limit", "0"], "between"),
    (["config", "set", "token_budget", "abc"], "must be an integer"),
    (["config", "get", "no_such_key"], "unknown config key"),
    # malformed values
    (["recall", "x", "--since", "nonsense"], "cannot read"),
    (["recall", "x", "--as-of", "2026-02-30"], "not a date"),
    (["recall", "x", "--as-of", "9999-01-01"], "future"),
    # options that cannot go together
    (["recall", "x", "--all-projects", "--project", "p"], "not both"),
    (["recall", "x", "--as-of", "2026-01-01", "--include-forgotten"], "cannot be combined"),
    (["update", "1"], "nothing to update"),
    (["list", "--archived", "--forgotten"], "only one of"),
    (["decay", "--dry-run", "--apply"], "either"),
    (["serve", "--host", "0.0.0.0"], "need --transport http"),
    (["purge", "1"], "--yes"),  # without a terminal the confirmation must be on the command line
    (["bench", "--dataset", "nope", "file"], "--dataset takes locomo"),
])
def test_usage_errors_memsafe_checks_exit_2(args, mentioned, tmp_path, capsys, monkeypatch):
    """Usage errors only memsafe can see (a content above the size limit, an id of 0, a date
    that does not exist, options that exclude each other): exit 2 too, not 1."""
    db = tmp_path / "memory.db"
    assert main(capsys, monkeypatch, "--db", str(db), "remember", "seed")[0] == 0
    capsys.readouterr()
    code, out, err = main(capsys, monkeypatch, "--db", str(db), *args)
    assert code == 2, (args, out, err)
    assert mentioned in error_line(err), err


@pytest.fixture
def seeded(tmp_path, capsys, monkeypatch):
    """A store with memory 1 (active) and memory 2 (forgotten); returns a runner on it."""
    db = tmp_path / "memory.db"

    def run(*args: str) -> tuple[int, str, str]:
        return main(capsys, monkeypatch, "--db", str(db), *args)

    assert run("remember", "The deploy script lives in ops/deploy.sh")[0] == 0
    assert run("remember", "An old note about the staging server")[0] == 0
    assert run("forget", "2")[0] == 0
    capsys.readouterr()
    return run


@pytest.mark.parametrize("args, mentioned", [
    # not found
    (["get", "424242"], "no memory with id 424242"),
    (["forget", "424242"], "no memory with id 424242"),
    (["restore", "424242"], "no memory with id 424242"),
    (["history", "424242"], "no memory with id 424242"),
    (["update", "424242", "--content", "x"], "no memory with id 424242"),
    (["confirm", "424242"], "no memory with id 424242"),
    (["confidence", "424242", "0.5"], "no memory with id 424242"),
    (["purge", "424242", "--yes"], "424242"),
    (["graph", "show", "NoSuchEntity"], "unknown entity"),
    (["import", "no-such-file.jsonl"], "no file at"),
    # refused: a secret, a duplicate, a state that says no
    (["remember", "the key is ghp_" + "a" * 36], "credential"),
    (["remember", "The deploy script lives in ops/deploy.sh"], "already remembered as memory 1"),
    (["forget", "2"], "already forgotten"),
    (["restore", "1"], "already active"),
    (["confirm", "2"], "forgotten"),
    (["update", "2", "--content", "new text"], "restore"),
    (["config", "set", "weight_vector", "0"], None),  # with weight_lexical 0 below: both 0
    (["decrypt"], "not encrypted"),
    (["rekey"], "not encrypted"),
    (["hook", "status"], "not inside a git repository"),
    (["hook", "install"], "not inside a git repository"),
])
def test_refusals_and_not_found_exit_1(args, mentioned, seeded):
    if mentioned is None:  # a pair of settings that cannot both be 0
        assert seeded("config", "set", "weight_lexical", "0")[0] == 0
        mentioned = "cannot both be 0"
    code, out, err = seeded(*args)
    assert code == 1, (args, out, err)
    assert mentioned in error_line(err), err


def test_a_file_that_is_a_folder_or_malformed_is_refused_with_1(tmp_path, seeded):
    code, _, err = seeded("export", "-o", str(tmp_path))
    assert code == 1 and "not a regular file" in error_line(err)
    code, _, err = seeded("import", str(tmp_path))
    assert code == 1 and "not a regular file" in error_line(err)
    malformed = tmp_path / "notes.jsonl"
    malformed.write_text("not an export\n", encoding="utf-8")
    code, _, err = seeded("import", str(malformed))
    assert code == 1 and "notes.jsonl" in error_line(err)


def test_a_store_memsafe_cannot_open_is_refused_with_1(tmp_path, capsys, monkeypatch):
    """A schema newer than this memsafe, and a SQLite file that is not a memsafe store."""
    import apsw

    newer = tmp_path / "newer.db"
    assert main(capsys, monkeypatch, "--db", str(newer), "remember", "from the future")[0] == 0
    conn = apsw.Connection(str(newer))
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    foreign = tmp_path / "foreign.db"
    conn = apsw.Connection(str(foreign))
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    capsys.readouterr()
    for db, mentioned in ((newer, "upgrade memsafe"), (foreign, "not a memsafe database")):
        code, _, err = main(capsys, monkeypatch, "--db", str(db), "list")
        assert code == 1 and mentioned in error_line(err), err


# -- suggestions for a mistyped command or option ------------------------------------------------


@pytest.mark.parametrize("typo, suggested", [
    ("recal", ["recall"]),  # Click's own offered "decay" too
    ("serv", ["serve"]),
    ("rem", ["remember"]),
    ("remeber", ["remember"]),
    ("lsit", ["list"]),
    ("xyz", []),
    ("qwertyuiop", []),
])
def test_a_mistyped_command_gets_only_close_suggestions(typo, suggested, capsys, monkeypatch):
    code, _, err = main(capsys, monkeypatch, typo)
    line = error_line(err)
    assert code == 2 and f"No such command '{typo}'" in line
    if suggested:
        assert "Did you mean " + ", ".join(repr(s) for s in suggested) + "?" in line, line
    else:
        assert "Did you mean" not in line, line


@pytest.mark.parametrize("path", list(GROUPS), ids=lambda p: " ".join(p) or "memsafe")
def test_every_group_suggests_its_own_commands_and_nothing_distant(path, capsys, monkeypatch):
    """In every group (the app, graph, config, hook, and any added later): a command with its last
    letter dropped is suggested; a word like none of them gets no suggestion."""
    for name in [n for n in GROUPS[path].commands if len(n) >= 4]:
        code, _, err = main(capsys, monkeypatch, *path, name[:-1])
        line = error_line(err)
        assert code == 2 and "Did you mean" in line and repr(name) in line, line
    code, _, err = main(capsys, monkeypatch, *path, "qqqqzzzz")
    assert code == 2 and "Did you mean" not in error_line(err)


@pytest.mark.parametrize("args, suggested", [
    (["recall", "x", "--lmit", "3"], "--limit"),
    (["remember", "x", "--glob"], "--global"),
    (["--dbb", "x", "status"], "--db"),
    (["serve", "--bogus"], None),  # Click's own offered --host
    (["recall", "x", "--bogus"], None),
])
def test_a_mistyped_option_gets_only_close_suggestions(args, suggested, capsys, monkeypatch):
    code, _, err = main(capsys, monkeypatch, *args)
    line = error_line(err)
    assert code == 2 and "No such option" in line
    if suggested:
        assert f"Did you mean {suggested}?" in line, line
    else:
        assert "Did you mean" not in line and "Possible options" not in line, line


# -- the front doors that bypass the Typer app ----------------------------------------------------


def _proc_error(proc) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("args, code, mentioned", [
    # the fast path of recall, remember and import (memsafe.cli.fast)
    (["remember", ""], 2, "empty text"),
    (["remember", "x", "--project", ""], 2, "empty text"),
    (["remember", "x", "--kind", "nope"], 2, "'nope' is not one of"),
    (["remember", "x", "--importance", "2"], 2, "less than or equal to 1"),
    (["remember", "-"], 2, "the limit is"),  # standard input: x * (MAX_CONTENT_CHARS + 1)
    (["recall", "x", "--limit", "0"], 2, "greater than or equal to 1"),
    (["recall", "x", "--mode", "nope"], 2, "'nope' is not one of"),
    (["recall", "x", "--as-of", ""], 2, "empty text"),
    (["recall", "x", "--since", "nonsense"], 2, "cannot read"),
    (["recall", "x", "--all-projects", "--project", "p"], 2, "not both"),
    (["recall", "x", "--as-of", "2026-01-01", "--include-forgotten"], 2, "cannot be combined"),
    (["import", ""], 2, "empty text"),
    (["import", "x", "--format", "nope"], 2, "'nope' is not one of"),
    (["--db", "", "recall", "x"], 2, "empty"),
    (["remember", "the key is ghp_" + "a" * 36], 1, "credential"),
    (["import", "no-such-file.jsonl"], 1, "no file at"),
    # serve and ui (memsafe.__main__, memsafe.ui.start)
    (["serve", "--bogus"], 2, "No such option"),
    (["serve", "--transport", "nope"], 2, "'nope' is not one of"),
    (["serve", "--project", ""], 2, "empty"),
    (["--db", "", "serve"], 2, "empty"),
    (["ui", "--port", "70000"], 2, "less than or equal to 65535"),
    (["ui", "--bogus"], 2, "No such option"),
    (["--db", "", "ui", "--no-open"], 2, "empty"),
])
def test_the_front_doors_outside_the_typer_app_agree(args, code, mentioned, tmp_path):
    """`memsafe.__main__` answers these without the Typer app where it can (the fast path, the
    MCP server, the web page); their codes and lines are the Typer app's."""
    db = tmp_path / "memory.db"
    db_args = [] if args[0] == "--db" else ["--db", str(db)]
    text = "x" * (api.MAX_CONTENT_CHARS + 1) if args == ["remember", "-"] else ""
    proc = run_memsafe(*db_args, *args, env={"MEMSAFE_NO_VEC": "1"}, cwd=tmp_path, input=text)
    assert proc.returncode == code, (args, proc.returncode, proc.stderr)
    assert mentioned in _proc_error(proc)


def test_a_taken_port_is_a_refusal_for_the_page(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = run_memsafe("--db", str(tmp_path / "memory.db"), "ui", "--port", str(port), "--no-open",
                           cwd=tmp_path, input="")
    assert proc.returncode == 1 and "cannot listen" in _proc_error(proc)
    assert not Path(tmp_path / "memory.db").exists()
