"""Paths as MCP clients pass them: `~` and environment variables (`$HOME`, `${HOME}`, `%HOME%`) are
expanded in `--db`, `MEMSAFE_DB` and every path setting and argument; an unexpanded placeholder
(`${workspaceFolder}`, `${env:HOME}`, an unset `$VAR`) is refused with one line and exit 2, over
MCP as a tool error or a start-up error on stderr, and no file or folder is named after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memsafe import api
from memsafe.cli import app

EXPANDED = ["$HOME/{}", "${HOME}/{}", "~/{}", "%HOME%/{}", "$MEMSAFE_TEST_DIR/{}"]
PLACEHOLDERS = ["${workspaceFolder}/{}", "${env:HOME}/{}", "${input:db}/{}", "$MEMSAFE_UNSET_VAR/{}",
                "%USERPROFILE%\\{}", "${MEMSAFE_EMPTY_VAR}/{}", "${ }/{}"]


@pytest.fixture
def place(tmp_path, monkeypatch):
    """(home, cwd): HOME and MEMSAFE_TEST_DIR point at `home`; commands run in `cwd`."""
    home, cwd = tmp_path / "userhome", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEMSAFE_TEST_DIR", str(home))
    monkeypatch.setenv("MEMSAFE_EMPTY_VAR", "")
    monkeypatch.delenv("MEMSAFE_UNSET_VAR", raising=False)
    monkeypatch.delenv("USERPROFILE", raising=False)
    monkeypatch.chdir(cwd)
    return home, cwd


def _named_after_placeholder(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if any(c in p.name for c in "${}%")]


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _run(*args: str, env: dict | None = None, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memsafe", *args], capture_output=True, text=True, encoding="utf-8",
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


# -- the database path ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", EXPANDED)
@pytest.mark.parametrize("how", ["--db", "MEMSAFE_DB"])
def test_db_path_expands_home_and_variables(place, embedder, form, how):
    home, cwd = place
    value = form.replace("{}", "m.db")
    args, env = (["--db", value], {}) if how == "--db" else ([], {"MEMSAFE_DB": value})
    made = _run(*args, "remember", "paths from a client config are expanded", "--global", env=env, cwd=cwd)
    assert made.returncode == 0, made.stderr
    assert (home / "m.db").is_file()
    status = _run(*args, "status", "--json", env=env, cwd=cwd)
    assert json.loads(status.stdout)["db_path"] == str(home / "m.db")
    assert _named_after_placeholder(cwd.parent) == []


@pytest.mark.parametrize("form", PLACEHOLDERS)
@pytest.mark.parametrize("how", ["--db", "MEMSAFE_DB", "config"])
def test_db_path_with_a_placeholder_is_refused_in_one_line(place, form, how):
    home, cwd = place
    value = form.replace("{}", "m.db")
    args, env = (["--db", value], {}) if how == "--db" else ([], {"MEMSAFE_DB": value}) if how == "MEMSAFE_DB" \
        else ([], {})
    if how == "config":
        settings_file = Path(os.environ["MEMSAFE_HOME"]) / "settings.json"
        settings_file.parent.mkdir(parents=True)
        settings_file.write_text(json.dumps({"db": value}), encoding="utf-8")
    for command in (["remember", "never stored under a placeholder", "--global"], ["recall", "placeholder"],
                    ["status"], ["list"]):
        r = _run(*args, *command, env=env, cwd=cwd)
        assert r.returncode == 2, (command, r.stderr)
        line = _one_line(r.stderr)
        placeholder = form.split("/")[0].split("\\")[0]
        assert line.startswith("Error: ") and placeholder in line, line
        assert r.stdout == ""
    assert _named_after_placeholder(cwd.parent) == []
    assert not (home / "m.db").exists()


def test_config_set_db_expands_and_refuses(place, cli):
    home, cwd = place
    refused = cli("config", "set", "db", "${workspaceFolder}/m.db")
    assert refused.exit_code == 2 and "${workspaceFolder}" in _one_line(refused.stderr)
    assert not (Path(os.environ["MEMSAFE_HOME"]) / "settings.json").exists()
    stored = cli("config", "set", "db", "$HOME/notes.db")
    assert stored.exit_code == 0, stored.stderr
    saved = json.loads((Path(os.environ["MEMSAFE_HOME"]) / "settings.json").read_text(encoding="utf-8"))
    assert saved["db"] == str(home / "notes.db")


# -- the other path settings ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MEMSAFE_HOME", "MEMSAFE_CACHE_DIR", "MEMSAFE_MODEL_DIR", "MEMSAFE_KEY_FILE",
                                  "MEMSAFE_HTTP_TOKENS_FILE"])
@pytest.mark.parametrize("command", [["status"], ["recall", "anything"], ["--help"], ["serve"]])
def test_path_settings_with_a_placeholder_are_refused_at_start(place, name, command):
    home, cwd = place
    r = _run(*command, env={name: "${workspaceFolder}/memsafe"}, cwd=cwd)
    assert r.returncode == 2, r.stderr
    assert name in _one_line(r.stderr) and "${workspaceFolder}" in r.stderr
    assert r.stdout == ""  # serve: stdout is the protocol's
    assert _named_after_placeholder(cwd.parent) == []


def test_memsafe_home_and_cache_dir_expand_variables(place, embedder):
    home, cwd = place
    env = {"MEMSAFE_HOME": "$HOME/state", "MEMSAFE_CACHE_DIR": "${HOME}/cache"}
    r = _run("remember", "a home named by a variable", "--global", env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert json.loads(_run("status", "--json", env=env, cwd=cwd).stdout)["db_path"] == str(home / "state" / "memory.db")
    assert (home / "state" / "memory.db").is_file() and (home / "cache").is_dir()
    assert _named_after_placeholder(cwd.parent) == []


def test_key_file_named_by_a_variable_is_read(place, cli, monkeypatch):
    home, cwd = place
    from memsafe.store.sqlite import encryption

    (home / "key.txt").write_text("k" * 32 + "\n", encoding="utf-8")
    monkeypatch.setenv("MEMSAFE_KEY_FILE", "$HOME/key.txt")
    assert encryption.key_file() == home / "key.txt"
    monkeypatch.setenv("MEMSAFE_KEY_FILE", "${workspaceFolder}/key.txt")
    r = cli("status")
    assert r.exit_code == 2 and "MEMSAFE_KEY_FILE" in _one_line(r.stderr)


def test_model_dir_with_a_placeholder_says_why_the_model_is_off(place, monkeypatch):
    from memsafe import embed

    monkeypatch.setenv("MEMSAFE_MODEL_DIR", "${workspaceFolder}/model")
    with pytest.raises(embed.ModelUnavailable, match=r"MEMSAFE_MODEL_DIR .*\$\{workspaceFolder\}"):
        embed.model_files()


# -- path arguments: export, import, --project, --project-path, --repo ------------------------------


def test_export_and_import_paths_expand_and_refuse(place, cli):
    home, cwd = place
    assert cli("remember", "exported through a variable", "--global").exit_code == 0
    out = cli("export", "-o", "${HOME}/backup.jsonl", "--all-projects")
    assert out.exit_code == 0, out.stderr
    assert (home / "backup.jsonl").is_file()
    for args in (["export", "-o", "${workspaceFolder}/backup.jsonl"], ["import", "${workspaceFolder}/backup.jsonl"],
                 ["import", "$MEMSAFE_UNSET_VAR/backup.jsonl", "--dry-run"]):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.stderr)
        assert "is not set" in _one_line(r.stderr)
    back = cli("import", "$HOME/backup.jsonl", "--json")
    assert back.exit_code == 0, back.stderr
    assert _named_after_placeholder(cwd.parent) == []


def test_project_paths_expand_and_refuse(place, cli):
    home, cwd = place
    (home / "web").mkdir()
    assert cli("remember", "the web project keeps its own notes", "--project", "~/web").exit_code == 0
    for form in ("$HOME/web", "${HOME}/web", "%HOME%/web"):
        listed = cli("list", "--project", form, "--json")
        assert listed.exit_code == 0, listed.stderr
        assert [m["project"] for m in json.loads(listed.stdout)] == [str(home / "web")], form
        by_path = cli("list", "--project-path", form, "--json")
        assert [m["project"] for m in json.loads(by_path.stdout)] == [str(home / "web")], form
    for args in (["remember", "never in a placeholder project", "--project", "${workspaceFolder}"],
                 ["recall", "notes", "--project", "${workspaceFolder}"],
                 ["list", "--project-path", "${env:HOME}/web"],
                 ["hook", "install", "--repo", "${workspaceFolder}"]):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.stderr)
        assert "${" in _one_line(r.stderr)
    projects = {m.project for m in api.list_memories(api.open_store(str(cli.db)).store, all_projects=True)}
    assert projects == {str(home / "web")}
    assert _named_after_placeholder(cwd.parent) == []


# -- `serve` as a client starts it ------------------------------------------------------------------


@pytest.mark.parametrize("args, env", [
    (["--db", "${workspaceFolder}/.memsafe/m.db", "serve"], {}),
    (["serve"], {"MEMSAFE_DB": "${workspaceFolder}/m.db"}),
    (["serve", "--project", "${workspaceFolder}"], {}),
    (["--db", "%USERPROFILE%\\m.db", "serve"], {}),
])
def test_serve_with_a_placeholder_fails_at_start_on_stderr(place, args, env):
    home, cwd = place
    r = _run(*args, env=env, cwd=cwd, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert _one_line(r.stderr).startswith("Error: ")
    assert _named_after_placeholder(cwd.parent) == []


def test_serve_expands_the_db_path_and_transfer_paths_over_mcp(place, embedder):
    home, cwd = place

    async def body(s: ClientSession):
        out = {"remember": await s.call_tool("remember", {"content": "served from an expanded path",
                                                          "is_global": True})}
        for name, path in (("placeholder", "${workspaceFolder}/out.jsonl"), ("unset", "$MEMSAFE_UNSET_VAR/o.jsonl"),
                           ("vscode", "${env:HOME}/out.jsonl"), ("expanded", "${HOME}/out.jsonl")):
            out[name] = await s.call_tool("transfer", {"path": path, "direction": "export", "all_projects": True})
        out["import"] = await s.call_tool("transfer", {"path": "${workspaceFolder}/out.jsonl", "direction": "import"})
        return out

    async def run():
        params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", "${HOME}/m.db", "serve"],
                                       env={**os.environ}, cwd=str(cwd))
        with open(cwd.parent / "server.err", "w", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    out = anyio.run(run)
    text = {k: "\n".join(c.text for c in r.content) for k, r in out.items()}
    assert not out["remember"].is_error, text["remember"]
    assert (home / "m.db").is_file()
    for name in ("placeholder", "unset", "vscode", "import"):
        assert out[name].is_error, text[name]
        assert "${" in text[name] or "$MEMSAFE_UNSET_VAR" in text[name]
    assert not out["expanded"].is_error, text["expanded"]
    assert (home / "out.jsonl").is_file()
    assert "Traceback" not in (cwd.parent / "server.err").read_text(encoding="utf-8")
    assert _named_after_placeholder(cwd.parent) == []


def test_in_process_cli_refuses_the_same_way(place, tmp_path):
    """The Typer app itself (no `python -m memsafe` start-up check) refuses a placeholder `--db`."""
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["--db", "${workspaceFolder}/m.db", "status"])
    assert r.exit_code == 2 and "${workspaceFolder}" in _one_line(r.stderr)
    assert _named_after_placeholder(tmp_path) == []
