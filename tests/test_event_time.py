"""Every memory has the time the thing happened (`happened_at`: a commit's author date, a date
given with `remember --at`) besides the time it was stored. `--since`, `--until`, the time words
of a query, decay and the ages shown read the event time; `history` and `--as-of` keep answering
what the store held then. Older stores are migrated with the best time known, and `hook
backfill` stores each commit at its own author date, with its author."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import apsw
import pytest

from memsafe import api
from memsafe.store.sqlite import migrations as sqlite_migrations

pytestmark = pytest.mark.backends("sqlite", "postgres")

NOW = "2026-11-20T10:00:00+00:00"


def git(repo: Path, *args: str, env: dict | None = None, input: bytes | None = None) -> None:
    import os

    subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=60, input=input,
                   env={**os.environ, **(env or {})})


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Committer")
    git(root, "config", "user.email", "committer@example.com")
    git(root, "config", "commit.gpgsign", "false")
    return root


# (author date, author, subject): years of history, authored long before the backfill
HISTORY = [
    ("2019-03-04T09:15:00+01:00", "Ada Lovelace", "Add the payment gateway client"),
    ("2021-07-19T17:40:00-04:00", "Grace Hopper", "Move the deploy script to make release"),
    ("2024-01-31T12:00:00+00:00", "Ada Lovelace", "Pin Node 20 in the CI image"),
]


def _commit_history(repo: Path) -> None:
    for n, (date, author, subject) in enumerate(HISTORY):
        (repo / f"f{n}.txt").write_text(subject)
        git(repo, "add", f"f{n}.txt")
        git(repo, "commit", "-q", "-m", subject, env={"GIT_AUTHOR_DATE": date, "GIT_AUTHOR_NAME": author,
                                                      "GIT_COMMITTER_DATE": date})


def test_backfill_stores_each_commit_at_its_author_date_with_its_author(repo, db_path, cli, monkeypatch):
    _commit_history(repo)
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    result = cli("hook", "backfill", "--repo", str(repo), "--json")
    assert result.exit_code == 0, result.stderr
    opened = api.open_store(str(db_path))
    try:
        memories = [opened.store.get_memory(r["id"]) for r in opened.store.export_memory_rows(0, 10, ["active"], None)]
        got = [(m.happened_at, m.author, m.created_at[:10]) for m in memories]
        from memsafe import clock

        assert got == [(clock.to_iso(clock.parse_iso(d)), a, NOW[:10]) for d, a, _ in HISTORY]
        # a commit stored before event times were kept (its time = when it was stored) is re-dated
        with opened.store.write():
            opened.store.update_memory(memories[0].id, {"happened_at": memories[0].created_at, "author": None})
    finally:
        opened.store.close()
    again = cli("hook", "backfill", "--repo", str(repo), "--json")
    assert json.loads(again.stdout)["remembered"] == 0
    # --since reads the event time: only what happened since 2021
    recent = cli("recall", "commit", "--project-path", str(repo), "--since", "2021-01-01", "--mode", "lexical",
                 "--json")
    assert recent.exit_code == 0, recent.stderr
    hits = json.loads(recent.stdout)["results"]
    assert sorted(h["happened_at"][:4] for h in hits) == ["2021", "2024"]
    before = cli("recall", "commit", "--project-path", str(repo), "--until", "2020-01-01", "--mode", "lexical",
                 "--json")
    hits = json.loads(before.stdout)["results"]
    assert [h["content"].split(": ", 1)[1][:22] for h in hits] == ["Add the payment gatewa"]
    assert hits[0]["happened_at"].startswith("2019-03-04T08:15")  # re-dated (UTC)
    opened = api.open_store(str(db_path))
    try:
        assert opened.store.get_memory(hits[0]["id"]).author == "Ada Lovelace"
    finally:
        opened.store.close()


def test_remember_at_is_event_time_and_as_of_still_reads_what_the_store_held(store, monkeypatch, cli):
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    result = cli("remember", "We moved the staging database to PostgreSQL 16.", "--project", "web",
                 "--at", "2026-03-02", "--json")
    assert result.exit_code == 0, result.stderr
    moved = json.loads(result.stdout)
    assert moved["happened_at"].startswith("2026-03-0") and moved["created_at"].startswith("2026-11-20")
    api.remember(store, "The staging database got a nightly backup job.", project="web")
    # time words in the query read the event time
    march = api.recall(store, "what happened with the staging database in March 2026?", project="web")
    assert march.hits[0].memory.id == moved["id"]
    since = api.recall(store, "staging database", project="web", since="2026-11-01T00:00:00+00:00")
    assert [h.memory.id for h in since.hits] != [] and moved["id"] not in [h.memory.id for h in since.hits]
    # as of April the store did not hold it yet, though it happened in March
    past = api.recall_as_of(store, "staging database", project="web", as_of="2026-04-01")
    assert moved["id"] not in [h.memory.id for h in past.hits]


@pytest.mark.parametrize("at", ["tomorrow", "2999-01-01", "the day after never", "31 April 2026", ""])
def test_a_bad_at_is_one_line_exit_2_and_nothing_stored(cli, store, at, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    before = store.counts()["total"]
    result = cli("remember", "The retry budget for webhooks is 8 attempts.", "--at", at)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    if at:  # an empty value is Typer's own usage error
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "--at" in result.stderr
    assert store.counts()["total"] == before


def test_decay_counts_idleness_from_when_it_happened(store, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    old = api.remember(store, "A note about the 2019 launch of the payments client.", kind="ephemeral",
                       at="2019-03-04")
    fresh = api.remember(store, "A note about this week's launch of the search page.", kind="ephemeral")
    report = api.decay(store, dry_run=True)
    planned = {c.id for c in report.changes}
    assert old.id in planned and fresh.id not in planned


@pytest.mark.backends("sqlite")
def test_a_schema_12_sqlite_store_gets_event_times_from_what_it_knows(tmp_path, embedder):
    path = tmp_path / "old" / "memory.db"
    path.parent.mkdir()
    conn = apsw.Connection(str(path))
    from memsafe.store.common import tokenizer

    tokenizer.register(conn)
    conn.execute("BEGIN")
    for number, (_name, fn) in enumerate(sqlite_migrations.MIGRATIONS[:12], start=1):
        fn(conn)
        conn.execute(f"PRAGMA user_version = {number}")
    for i, (created, source) in enumerate([("2025-01-02T03:04:05.000000+00:00", "git"),
                                           ("2026-05-06T07:08:09.000000+00:00", "user")], start=1):
        conn.execute("INSERT INTO memories(uid, content, source, created_at, updated_at, content_updated_at, "
                     "content_hash) VALUES (?, ?, ?, ?, ?, ?, ?)", (f"u{i}", f"memory {i}", source, created, created,
                                                                   created, f"h{i}"))
    conn.execute("COMMIT")
    conn.close()
    opened = api.open_store(str(path))
    try:
        store = opened.store
        assert store.schema_version() == sqlite_migrations.latest()
        assert store.backup_path is not None and store.backup_path.exists()
        rows = [store.get_memory(i) for i in (1, 2)]
        assert [(m.happened_at, m.supersedes, m.superseded_by) for m in rows] == [
            ("2025-01-02T03:04:05.000000+00:00", None, None), ("2026-05-06T07:08:09.000000+00:00", None, None)]
        indexes = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert sqlite_migrations.HAPPENED_BY_STATUS in indexes
    finally:
        opened.store.close()


@pytest.mark.backends("postgres")
def test_a_schema_5_postgres_store_gets_event_times_from_what_it_knows(pg_server, embedder):
    import psycopg

    from memsafe.store.postgres import PgConnection, close_pool, migrations

    pg_server.admin("CREATE DATABASE schema_five")
    url = pg_server.url("schema_five")
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            conn = PgConnection(raw)
            conn.script("CREATE EXTENSION vector; CREATE EXTENSION pg_trgm;")
            for _name, fn in migrations.MIGRATIONS[:5]:
                fn(conn)
            conn.script("CREATE TABLE memsafe_schema (version INTEGER NOT NULL); "
                        "INSERT INTO memsafe_schema VALUES (5);")
            conn.execute("INSERT INTO memories(uid, content, source, created_at, updated_at, content_updated_at, "
                         "content_hash) VALUES ('u1', 'memory one', 'git', '2025-01-02T03:04:05.000000+00:00', "
                         "'2025-01-02T03:04:05.000000+00:00', '2025-01-02T03:04:05.000000+00:00', 'h1')")
        store = api.open_store(url).store
        try:
            assert store.schema_version() == migrations.latest()
            m = store.get_memory(1)
            assert (m.happened_at, m.supersedes, m.superseded_by) == ("2025-01-02T03:04:05.000000+00:00", None, None)
        finally:
            store.close()
    finally:
        close_pool(url)
        pg_server.admin("DROP DATABASE schema_five WITH (FORCE)")
