"""Faults a new user meets following README.md and --help: real processes, the real model, a real
SQLite file, the real MCP SDK client."""

from __future__ import annotations

import json
import sys

import anyio
import pytest
from conftest import run_memsafe
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memsafe import __version__


def test_version_flag_prints_the_version(tmp_path):
    # `memsafe --version` said "Error: Missing command." and exited 2
    r = run_memsafe("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"memsafe {__version__}"
    assert r.stderr == ""


@pytest.mark.parametrize(
    "text",
    [
        "the db password is Xk9#mP2qL7vR",
        "aws secret access key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws key AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "staging api key was 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    ],
)
def test_credentials_written_as_prose_are_refused_and_redacted(cli, text):
    # these were stored in clear; with --redact the AWS secret key stayed in clear next to a redacted key id
    r = cli("remember", text)
    assert r.exit_code == 1 and "looks like a credential" in r.stderr
    r = cli("remember", text, "--redact", "--json")
    assert r.exit_code == 0, r.stderr
    stored = json.loads(r.stdout)["content"]
    for secret in ("Xk9#mP2qL7vR", "wJalrXUtnFEMI", "9f8e7d6c5b4a"):
        assert secret not in stored


@pytest.mark.parametrize(
    "text",
    [
        "rotate the API key every 90 days",
        "the password reset flow lives in auth/reset.py",
        "token bucket limiter allows 100 requests per second",
        "the secret is kept in Vault under kv/prod",
        "refresh the access token before it expires",
    ],
)
def test_prose_about_credentials_is_not_a_credential(cli, text):
    r = cli("remember", text)
    assert r.exit_code == 0, r.stderr


def test_config_commands_take_json(cli):
    # README: "commands that print data take --json"; config get/set/reset did not
    r = cli("config", "get", "token_budget", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 2000}
    r = cli("config", "set", "token_budget", "3000", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 3000}
    r = cli("config", "reset", "token_budget", "--json")
    assert json.loads(r.stdout) == {"key": "token_budget", "value": 2000}
    r = cli("config", "get", "db", "--json")
    assert json.loads(r.stdout)["key"] == "db" and json.loads(r.stdout)["value"].endswith("memory.db")


def test_config_type_error_reads_well(cli):
    r = cli("config", "set", "token_budget", "abc")
    assert r.exit_code == 1
    assert "must be an integer" in r.stderr


async def _mcp_calls(db, cwd, home, calls):
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve"],
                                   env={"MEMSAFE_HOME": str(home)}, cwd=str(cwd))
    out = []
    with open(home.parent / "server.err", "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for name, args in calls:
                    res = await session.call_tool(name, args)
                    out.append((res.is_error, "\n".join(c.text for c in res.content)))
    return out


def test_mcp_errors_name_tool_arguments_not_cli_flags(tmp_path, embedder):
    # update_memory without changes said only "give --content, --tag, ..."; relate_entities only
    # "(graph add-entity) or pass --create"; forget only "`restore 1` brings it back": CLI words an
    # agent cannot use. configure with a value and no key silently listed every setting; a bad
    # kind or id gave a multi-line pydantic dump with a URL
    cwd = tmp_path / "srv"
    cwd.mkdir()
    home = tmp_path / "home"
    calls = [
        ("remember", {"content": "We rebase feature branches onto main"}),
        ("update_memory", {"id": 1}),
        ("relate_entities", {"relations": [["Zoë", "owns", "payments"]]}),
        ("forget", {"id": 1}),
        ("forget", {"id": 1}),
        ("recall", {"query": "rebase", "since": "yesterday"}),
        ("remember", {"content": "x", "kind": "nope"}),
        ("get_memory", {"id": "abc"}),
    ]
    results = anyio.run(_mcp_calls, tmp_path / "m.db", cwd, home, calls)
    assert not results[0][0] and not results[3][0]
    for is_error, text in results[1:3] + results[4:]:
        assert is_error, text
        assert "\n" not in text and "pydantic" not in text, text
    assert "MCP/API: content, tags" in results[1][1]
    assert "create=true" in results[2][1]
    assert "undo=true" in results[4][1]
    assert results[5][1].startswith("unknown argument since; recall takes query, ")
    assert "kind: Input should be 'fact'" in results[6][1] and "'nope'" in results[6][1]
    assert "id: Input should be a valid integer" in results[7][1]


def test_import_dry_run_does_not_create_the_database(tmp_path, embedder):
    # `import FILE --dry-run` against a new --db created the store file ("Warning: created a new
    # empty store") although --dry-run promises to write nothing
    source = tmp_path / "memory.json"
    source.write_text(
        '{"type":"entity","name":"Zoë Müller","entityType":"person","observations":["Owns the 支付 service ☕"]}\n'
        '{"type":"entity","name":"支付","entityType":"service","observations":[]}\n'
        '{"type":"relation","from":"Zoë Müller","to":"支付","relationType":"owns"}\n',
        encoding="utf-8",
    )
    db = tmp_path / "new" / "memory.db"
    r = run_memsafe("--db", str(db), "import", str(source), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["dry_run"] and report["memories_added"] == 1 and report["relations_added"] == 1
    assert not db.exists() and not db.parent.exists()
    assert "Warning" not in r.stderr
    r = run_memsafe("--db", str(db), "import", str(source))
    assert r.returncode == 0, r.stderr and db.exists()


def test_status_and_doctor_with_vectors_switched_off_say_to_unset_the_switch(tmp_path, embedder):
    # MEMSAFE_NO_VEC=1 status advised `pip install --force-reinstall sqlite-vec` and printed
    # "model not loaded: not loaded: vector search unavailable"
    db = tmp_path / "m.db"
    env = {"MEMSAFE_NO_VEC": "1"}
    r = run_memsafe("--db", str(db), "status", env=env)
    assert r.returncode == 1
    assert "unset MEMSAFE_NO_VEC" in r.stdout and "pip install" not in r.stdout
    assert "not loaded: not loaded" not in r.stdout
    r = run_memsafe("--db", str(db), "doctor", "--no-model", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["sqlite-vec"]["fix"].startswith("unset MEMSAFE_NO_VEC")
