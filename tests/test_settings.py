"""memsafe's environment variables: one table (`settings.VARIABLES`), parsed once per process into
one typed object (`settings.env()`), every value checked by its kind, and a value of the wrong
kind refused before any command starts, in one line."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import run_memsafe

from memsafe import settings

# The type of an `Environment` field, by the kind of its variable.
TYPE_OF_KIND = {"path": "Path | None", "flag": "bool", "switch": "bool", "count": "int | None",
                "time": "datetime | None", "text": "str | None", "secret": "str | None", "level": "str"}


def test_the_environment_has_one_typed_field_per_variable_of_the_table():
    fields = {f.name: f for f in dataclasses.fields(settings.Environment)}
    parsed = [v for v in settings.VARIABLES if v.owned and v.kind != "program"]
    assert sorted(fields) == sorted(settings.field_name(v.name) for v in parsed)
    assert all(v.name.startswith(settings.ENV_PREFIX) for v in settings.VARIABLES if v.owned)
    for variable in parsed:
        field = fields[settings.field_name(variable.name)]
        assert field.type == TYPE_OF_KIND[variable.kind], variable.name
        default = {"switch": True, "flag": False, "level": "WARNING"}.get(variable.kind)
        assert field.default == default, variable.name
    assert settings.parse_environment({}) == settings.Environment()


def test_values_are_parsed_by_their_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    parsed = settings.parse_environment({
        "MEMSAFE_HOME": "~/state", "MEMSAFE_CACHE_DIR": "$HOME/cache", "MEMSAFE_KEY_FILE": "  ",
        "MEMSAFE_NO_VEC": "yes", "MEMSAFE_NO_MODEL": "0", "MEMSAFE_DEBUG": "On", "MEMSAFE_SERVE_WARM": "off",
        "MEMSAFE_CLI_CACHE": "1", "MEMSAFE_EMBED_THREADS": " 3 ", "MEMSAFE_NOW": "2026-05-01T12:00:00",
        "MEMSAFE_LOG_LEVEL": "debug", "MEMSAFE_WORKSPACE": " /work/app ", "MEMSAFE_DB": "m.db",
    })
    assert parsed.home == tmp_path / "state" and parsed.cache_dir == tmp_path / "cache"
    assert parsed.key_file is None  # blank is unset
    assert (parsed.no_vec, parsed.no_model, parsed.debug, parsed.serve_warm, parsed.cli_cache) == (
        True, False, True, False, True)
    assert parsed.embed_threads == 3 and parsed.log_level == "DEBUG" and parsed.workspace == "/work/app"
    assert parsed.now == datetime(2026, 5, 1, 12, tzinfo=timezone.utc)  # naive is UTC
    assert parsed.db == "m.db"  # as written: `resolve_db_path` expands it when no --db comes first
    assert "hunter2" not in repr(settings.parse_environment({"MEMSAFE_KEY": "hunter2", "MEMSAFE_NEW_KEY": "hunter2"}))


@pytest.mark.parametrize(("name", "value", "says"), [
    ("MEMSAFE_NO_VEC", "maybe", "must be 1 or 0"),
    ("MEMSAFE_SERVE_WARM", "2", "must be 1 or 0"),
    ("MEMSAFE_EMBED_THREADS", "0", "whole number of at least 1"),
    ("MEMSAFE_EMBED_THREADS", "four", "whole number of at least 1"),
    ("MEMSAFE_NOW", "soon", "is not an ISO-8601 time"),
    ("MEMSAFE_CACHE_DIR", "${workspaceFolder}/cache", "placeholder"),
])
def test_a_value_of_the_wrong_kind_is_one_line_naming_the_variable(name, value, says):
    with pytest.raises(settings.InvalidInput, match=says) as raised:
        settings.parse_environment({name: value})
    assert name in str(raised.value) and "\n" not in str(raised.value)


def test_the_environment_is_parsed_once_until_reloaded(monkeypatch):
    monkeypatch.setenv("MEMSAFE_EMBED_THREADS", "2")
    first = settings.env()
    assert settings.env() is first and first.embed_threads == 2
    monkeypatch.setitem(os.environ, "MEMSAFE_EMBED_THREADS", "5")  # a plain change: nothing re-parses
    assert settings.env() is first
    settings.reload()
    assert settings.env().embed_threads == 5


@pytest.mark.parametrize("command", [["status"], ["recall", "anything"], ["serve"], ["config", "list"]])
@pytest.mark.parametrize(("name", "value"), [("MEMSAFE_NO_MODEL", "sometimes"), ("MEMSAFE_NOW", "yesterday-ish")])
def test_a_wrong_value_is_refused_before_any_command_starts(tmp_path, command, name, value):
    r = run_memsafe("--db", str(tmp_path / "m.db"), *command, env={name: value}, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and name in r.stderr
    assert r.stdout == ""  # serve: stdout is the protocol's
    assert not (tmp_path / "m.db").exists()


def test_the_command_line_app_refuses_it_in_one_line_too(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from memsafe.cli import app

    monkeypatch.setenv("MEMSAFE_TOKEN_CACHE", "nope")
    r = CliRunner().invoke(app, ["--db", str(tmp_path / "m.db"), "status"])
    assert r.exit_code == 2, r.stderr
    assert "MEMSAFE_TOKEN_CACHE" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.db").exists()


def test_switches_and_flags_take_the_words_config_keys_take(tmp_path):
    """`MEMSAFE_NO_MODEL=0` leaves the model on (1 or 0, like the true/false config keys)."""
    env = {"MEMSAFE_NO_MODEL": "0", "MEMSAFE_NO_VEC": "false"}
    r = run_memsafe("--db", str(tmp_path / "m.db"), "status", "--json", env=env, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    status = json.loads(r.stdout)
    assert "MEMSAFE_NO_MODEL" not in json.dumps(status) and "MEMSAFE_NO_VEC" not in json.dumps(status)
    assert Path(status["db_path"]) == tmp_path / "m.db"


def test_an_agent_hook_never_fails_the_agent_on_a_wrong_value(tmp_path):
    """The hook of an agent says nothing and exits 0 whatever is wrong (agents.protocol), a
    variable memsafe cannot parse too; `memsafe agent` commands that are not hooks refuse it."""
    event = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1", "cwd": str(tmp_path)})
    env = {"MEMSAFE_NO_VEC": "maybe"}
    hook = run_memsafe("--db", str(tmp_path / "m.db"), "agent", "hook", "--agent", "claude", input=event, env=env)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")
    other = run_memsafe("--db", str(tmp_path / "m.db"), "agent", "captures", env=env)
    assert other.returncode == 2 and "MEMSAFE_NO_VEC" in other.stderr and other.stderr.count("\n") == 1
