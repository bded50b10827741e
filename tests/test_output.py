"""Everyday output a new user reads: --help that uses the terminal's width and shows no type for
flags, counts in the right number, a note when a store is created, complete man pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_memsafe

from memsafe import api
from memsafe.plural import count_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [["--help"], ["recall", "--help"], ["remember", "--help"], ["init", "--help"]])
def test_help_shows_no_bool_type_and_keeps_short_help_on_one_line(command):
    r = run_memsafe(*command, env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert r.returncode == 0, r.stderr
    assert "<bool>" not in r.stdout  # a flag takes no value
    # the help column gets the width the other columns leave: short help texts fit on one line
    # (they wrapped word by word, with "exit." alone on a line)
    assert any("--help" in line and "Show this message and exit." in line for line in r.stdout.splitlines())


def test_counts_use_the_right_number(cli):
    assert count_of(1, "memory") == "1 memory" and count_of(2, "memory") == "2 memories"
    assert count_of(1, "entity") == "1 entity" and count_of(1_500, "token") == "1,500 tokens"
    r = cli("remember", "We deploy with Kamal from the main branch", "--global")
    assert r.exit_code == 0, r.stderr
    assert "1 memory (" in cli("list").stdout
    assert "1 version" in cli("history", "1").stdout
    assert "1 memory · " in cli("recall", "how do we deploy?").stdout


def test_a_new_store_is_announced_on_stderr_with_its_path(tmp_path):
    db = tmp_path / "typo" / "memroy.db"
    r = run_memsafe("--db", str(db), "status")
    assert f"created a new store at {db}" in r.stderr
    assert "created a new store" not in r.stdout
    again = run_memsafe("--db", str(db), "status")
    assert "created a new store" not in again.stderr


def test_man_pages_have_environment_files_and_exit_status():
    for page in (ROOT / "man").glob("*.1"):
        text = page.read_text()
        for section in (".SH ENVIRONMENT", ".SH FILES", '.SH "EXIT STATUS"'):
            assert section in text, (page.name, section)
    assert "MEMSAFE_DB" in (ROOT / "man" / "memsafe.1").read_text()


LONG = ("We chose PostgreSQL for the billing ledger because it needs serialisable transactions;\n"
        "DynamoDB was the alternative, and its\ttransactions cost more. ") * 4


def test_list_get_history_and_entities_print_whole_content_when_piped(cli, store):
    """Piped (a script, grep, an agent's shell), the commands that show stored text print every
    value whole on its own line, where a terminal table folds and cuts it with "…"."""
    memory = api.remember(store, LONG, embed_now=False, entities=["BillingLedger" * 8])
    api.update(store, memory.id, content=LONG + " Revisited.")
    store.close()
    flat = " ".join(LONG.split())
    listed = cli("list").stdout.splitlines()
    assert listed[1].split("\t") == ["id", "kind", "status", "level", "age", "content"]
    assert listed[2].split("\t")[5] == flat + " Revisited."
    history = cli("history", str(memory.id)).stdout.splitlines()
    assert [row.split("\t")[-1] for row in history[2:]] == [flat, flat + " Revisited."]
    got = cli("get", str(memory.id)).stdout.split("content:\n", 1)
    assert got[1] == "".join(f"  {line}\n" if line.strip() else "\n" for line in (LONG + " Revisited.").splitlines())
    assert f"id\t{memory.id}\n" in got[0]
    entities = cli("graph", "entities").stdout
    assert "BillingLedger" * 8 in entities and "…" not in entities
    for command in (("list",), ("history", str(memory.id)), ("get", str(memory.id))):
        assert "…" not in cli(*command).stdout, command
