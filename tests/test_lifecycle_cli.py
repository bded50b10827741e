"""The lifecycle commands end to end: update/history, list, decay (dry run, quiet, policy,
idempotence), confidence/confirm, consolidate, recall --as-of/--since;
decay never wiping pinned or important memories; and decay running
in a real process while another real process writes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest
from conftest import run_memsafe

from memsafe import api, clock

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _sha(db) -> str:
    """The SQLite file's bytes; for PostgreSQL, every row of every table memsafe keeps."""
    if not isinstance(db, str):
        return hashlib.sha256(db.read_bytes()).hexdigest()
    import psycopg

    digest = hashlib.sha256()
    with psycopg.connect(db) as conn:
        for table in ("memories", "memory_fts", "memory_tags", "memory_versions", "events", "config", "entities",
                      "entity_aliases", "entity_alias_keys", "memory_entities", "relations"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):  # noqa: S608 (fixed names)
                digest.update(repr(row).encode())
    return digest.hexdigest()


def _now(monkeypatch, when) -> None:
    monkeypatch.setenv("MEMSAFE_NOW", when if isinstance(when, str) else clock.to_iso(when))


def test_update_history_and_list_commands(cli, monkeypatch):
    _now(monkeypatch, T0)
    assert cli("remember", "This repo uses Node 18", "--global").exit_code == 0
    _now(monkeypatch, T0 + timedelta(days=3))
    r = cli("update", "1", "--content", "This repo uses Bun 1.3", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["content"] == "This repo uses Bun 1.3"
    r = cli("history", "1", "--json")
    versions = json.loads(r.stdout)["versions"]
    assert [(v["cause"], v["content"]) for v in versions] == [
        ("update", "This repo uses Node 18"), ("current", "This repo uses Bun 1.3")]
    assert "update" in cli("history", "1").stdout
    r = cli("update", "1", "--content", "This repo uses Bun 1.3")  # the same text: no version, and it says so
    assert r.exit_code == 0 and "unchanged" in r.stderr + r.stdout and "Updated" not in r.stderr + r.stdout
    assert len(json.loads(cli("history", "1", "--json").stdout)["versions"]) == 2
    assert "Updated memory 1" in (lambda r: r.stderr + r.stdout)(cli("update", "1", "--importance", "0.9"))
    r = cli("update", "1")
    assert r.exit_code == 2 and "nothing to update" in r.stderr and r.stdout == ""
    assert cli("update", "99", "--content", "x").exit_code == 1
    cli("forget", "1")
    assert json.loads(cli("list", "--json").stdout) == []
    assert [m["id"] for m in json.loads(cli("list", "--forgotten", "--json").stdout)] == [1]
    assert [m["id"] for m in json.loads(cli("list", "--all", "--json").stdout)] == [1]
    assert cli("list", "--archived", "--forgotten").exit_code == 2


def test_recall_as_of_and_since_flags(cli, monkeypatch):
    _now(monkeypatch, T0)
    cli("remember", "The JavaScript runtime is Node 18", "--global")
    _now(monkeypatch, "2026-02-01T00:00:00Z")
    cli("update", "1", "--content", "The JavaScript runtime is Bun 1.3")
    cli("remember", "The JavaScript linter is Biome", "--global")
    _now(monkeypatch, "2026-03-01T00:00:00Z")
    old = json.loads(cli("recall", "JavaScript runtime", "--as-of", "2026-01-15T12:00:00+02:00", "--json").stdout)
    assert [(h["id"], h["content"]) for h in old["results"]] == [(1, "The JavaScript runtime is Node 18")]
    new = json.loads(cli("recall", "JavaScript", "--since", "2026-01-20", "--json").stdout)
    assert [h["id"] for h in new["results"]] == [2]
    # dateparser read the invalid ISO date 2026-13-01 as January 13
    for bad, why in (("tomorrow", "future"), ("when pigs fly", "cannot read"), ("2026-13-01", "not a date"),
                     ("2026-02-30T10:00", "not a date")):
        r = cli("recall", "runtime", "--as-of", bad)
        assert r.exit_code == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("recall", "runtime", "--since", "next week")
    assert r.exit_code == 2 and "future" in r.stderr


def test_confidence_confirm_and_near_duplicate_warning(cli, monkeypatch):
    cli("remember", "The staging server runs Ubuntu 22.04", "--global")
    r = cli("remember", "The staging server is running Ubuntu 22.04", "--global")
    assert r.exit_code == 0 and "nearly the same as memory 1" in r.stderr and "Remembered memory 2" in r.stdout
    r = cli("confidence", "1", "0.9", "--reason", "checked", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["after"] == 0.9
    assert cli("confidence", "1", "--boost").exit_code == 0
    for args in (["1", "1.5"], ["1", "0"]):
        r = cli("confidence", *args)
        assert r.exit_code == 2 and "between 0.01 and 0.99" in r.stderr
    assert cli("confidence", "1").exit_code == 2
    assert cli("confidence", "1", "0.5", "--weaken").exit_code == 2
    r = cli("confirm", "1", "--reason", "still true", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["stability_after"] > 0
    r = cli("consolidate", "--dry-run", "--json")
    assert [(p["survivor_id"], p["merged_id"]) for p in json.loads(r.stdout)["pairs"]] == [(1, 2)]
    assert cli("consolidate").exit_code == 0
    assert json.loads(cli("get", "2", "--json").stdout)["status_reason"] == "merged into 1"


def test_decay_policy_quiet_and_flags(cli):
    r = cli("decay", "--policy")
    assert r.exit_code == 0
    for kind, days in (("ephemeral", "10"), ("task", "30"), ("conversation", "45"), ("general", "60"),
                       ("preference", "90"), ("decision", "105"), ("fact", "120")):
        assert any(kind in line and days in line for line in r.stdout.splitlines())
    assert "pinned" in r.stdout and "identity" in r.stdout
    policy = json.loads(cli("decay", "--policy", "--json").stdout)
    assert {row["kind"] for row in policy["rows"]} >= {"fact", "ephemeral"}
    cli("remember", "A note", "--global")
    r = cli("decay", "--quiet")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    assert cli("decay", "--apply", "--json").exit_code == 0
    assert cli("decay", "--dry-run", "--apply").exit_code == 2
    assert "Exit codes" in cli("decay", "--help").stdout


def test_f19_pinned_untouched_dry_run_dry_apply_idempotent(cli, db_path, monkeypatch):
    _now(monkeypatch, T0)
    assert cli("remember", "Never force-push to main", "--pin", "--global").exit_code == 0  # id 1
    opened = api.open_store(str(db_path))
    store = opened.store
    for i in range(50):
        api.remember(store, f"Ordinary note {i}: the build step {i} takes {i + 3} minutes. It is cached.",
                     kind="task" if i % 2 else "general")
    daily = api.remember(store, "The release checklist lives in docs/release.md").id
    for day in range(1, 397, 7):  # a year of daily use, sampled weekly to keep the test fast
        _now(monkeypatch, T0 + timedelta(days=day))
        hits = api.recall(store, "release checklist", limit=1)
        assert hits.hits[0].memory.id == daily
        # Being recalled is not a use (recall would feed itself); the agent's explicit
        # read of what it recalled is (`memsafe get`, MCP get_memory).
        api.get(store, daily, use=True)
    store.close()

    _now(monkeypatch, "2027-02-01T00:00:00Z")
    before = _sha(db_path)
    r = cli("decay", "--dry-run", "--json")
    assert r.exit_code == 0
    assert _sha(db_path) == before  # the dry run changed no byte
    plan = json.loads(r.stdout)
    planned = {c["id"] for c in plan["changes"]}
    assert len(planned) == 50 and 1 not in planned and daily not in planned and plan["dry_run"]
    assert plan["protected"] == 1

    applied = json.loads(cli("decay", "--apply", "--json").stdout)
    assert {c["id"] for c in applied["changes"]} == planned
    again = json.loads(cli("decay", "--apply", "--json").stdout)
    assert again["changes"] == [] and again["banked"] == 0

    pinned = json.loads(cli("get", "1", "--json").stdout)
    assert (pinned["content"], pinned["decay_level"], pinned["status"]) == ("Never force-push to main", 0, "active")
    daily_now = json.loads(cli("get", str(daily), "--json").stdout)
    assert daily_now["decay_level"] == 0 and daily_now["status"] == "active"
    r = cli("recall", "force push", "--json")
    assert json.loads(r.stdout)["results"][0]["id"] == 1
    r = cli("recall", "force push", "--as-of", "2026-06-01T00:00:00Z", "--json")
    assert json.loads(r.stdout)["results"][0]["id"] == 1
    # a compressed/archived memory's original text is still reachable by time travel
    r = cli("recall", "build step 7 minutes cached", "--as-of", "2026-06-01T00:00:00Z", "--all-projects", "--json")
    texts = {h["id"]: h["content"] for h in json.loads(r.stdout)["results"]}
    assert any(t.startswith("Ordinary note 7:") and t.endswith("It is cached.") for t in texts.values())
    archived = json.loads(cli("list", "--archived", "--json").stdout)
    assert len(archived) == 50  # nothing hard-deleted
    total = json.loads(cli("list", "--all", "--json", "--limit", "1000").stdout)
    assert len(total) == 52


_WRITER = textwrap.dedent(
    """
    import sys
    from memsafe import api
    opened = api.open_store(sys.argv[1])
    print("ready", flush=True)
    for i in range(200):
        api.remember(opened.store, f"writer memory {i}: service {i} listens on port {8000 + i}", kind="task")
    opened.store.close()
    """
)


def test_decay_in_a_real_process_while_another_process_writes_loses_nothing(db_path, embedder, tmp_path,
                                                                             monkeypatch):
    opened = api.open_store(str(db_path))
    _now(monkeypatch, T0)
    for i in range(30):
        api.remember(opened.store, f"Old note {i}. Nobody has read it for a year.", kind="ephemeral")
    monkeypatch.delenv("MEMSAFE_NOW")
    opened.store.close()

    env = {"MEMSAFE_NOW": "2027-01-01T00:00:00Z"}
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    full_env = {**os.environ, **env}
    writer = subprocess.Popen([sys.executable, str(script), str(db_path)], env=full_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    overlapped = 0
    runs = []
    while True:
        running = writer.poll() is None
        r = run_memsafe("--db", str(db_path), "decay", "--json", env={"MEMSAFE_NOW": "2027-01-01T00:00:01Z"})
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
        overlapped += running
        if not running:
            break
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert overlapped >= 1

    opened = api.open_store(str(db_path))
    store = opened.store
    rows = list(store.conn.execute("SELECT content, status FROM memories WHERE content LIKE 'writer memory %'"))
    assert len(rows) == 200
    assert {c for c, _ in rows} == {f"writer memory {i}: service {i} listens on port {8000 + i}" for i in range(200)}
    assert {s for _, s in rows} == {"active"}
    assert store.counts()["archived"] == 30  # the old notes: archived once, not lost
    assert sum(len(r["changes"]) for r in runs) == 30
    assert store.integrity_check() == "ok"
    opened.store.close()


def test_update_with_the_same_tags_in_another_order_or_case_changes_nothing(cli):
    assert cli("remember", "Deploys go through staging first", "--tag", "ops", "--tag", "deploy").exit_code == 0
    for tags in (["deploy", "ops"], ["OPS", "Deploy"], ["ops", "deploy", "ops"]):
        args = [a for t in tags for a in ("--tag", t)]
        result = cli("update", "1", *args)
        assert result.exit_code == 0, result.output
        assert "unchanged" in result.stdout
    history = json.loads(cli("history", "1", "--json").stdout)
    assert len(history["versions"]) == 1  # the current state only: no version was written


def test_a_purged_id_is_said_to_be_purged_not_missing(cli, db_path):
    """`get`/`restore` of a purged id said "no memory with id 3 among global memories;
    --all-projects ... looks in every project", which cannot find it either. Every command taking an
    id now says it was purged, when, and the one way back (an import of a file that holds it)."""
    for text in ("the staging bucket is s3://acme-staging", "deploys go out on Tuesdays"):
        assert cli("remember", text, "--global", "--no-embed").exit_code == 0
    assert cli("purge", "1", "--yes").exit_code == 0
    for args in (("get", "1"), ("restore", "1"), ("forget", "1"), ("history", "1"), ("confirm", "1"),
                 ("update", "1", "--content", "x"), ("get", "1", "--all-projects")):
        r = cli(*args)
        assert r.exit_code == 1, (args, r.stdout)
        message = r.stderr.strip()
        assert message.startswith("Error: memory 1 was purged (") and "UTC)" in message, (args, message)
        assert "import --allow-purged" in message and "--all-projects" not in message, (args, message)
    r = cli("purge", "1", "2", "99", "--yes")  # one purged, one live, one never there: nothing happens
    assert r.exit_code == 1
    assert "no memory with id 99" in r.stderr and "memory 1 was purged" in r.stderr and "nothing was purged" in r.stderr
    assert cli("get", "2").exit_code == 0
    r = run_memsafe("--db", str(db_path), "get", "1")  # a real process: one line, no traceback
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith("Error: memory 1 was purged")
