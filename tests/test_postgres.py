"""The PostgreSQL backend: choosing it by URL, its bad-input messages, and export/import
between the two backends with nothing lost. Runs against the session's real server (conftest)."""

from __future__ import annotations

import io
import json
import os

import pytest
from conftest import run_memsafe

from memsafe import api, settings
from memsafe.errors import InvalidInput, SchemaTooNew


@pytest.fixture
def pg_url(pg_server):
    url = pg_server.new_database()
    yield url
    pg_server.drop(url)


def _one_line_error(result, *needles: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_url_selects_postgres_everywhere(pg_url, monkeypatch, tmp_path):
    """--db, MEMSAFE_DB and `config set db` all take a postgresql:// URL; the store is PostgreSQL."""
    r = run_memsafe("--db", pg_url, "remember", "we deploy on Tuesdays", "--json")
    assert r.returncode == 0, r.stderr
    r = run_memsafe("recall", "when do we deploy?", "--json", env={"MEMSAFE_DB": pg_url})
    assert r.returncode == 0, r.stderr
    assert "Tuesdays" in r.stdout
    r = run_memsafe("config", "set", "db", pg_url)
    assert r.returncode == 0, r.stderr
    assert settings.resolve_db_path() == (pg_url, f"config ({settings.config_file()})")
    r = run_memsafe("status", "--json")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["db_path"] == pg_url and status["counts"]["active"] == 1
    assert status["sqlite_version"].startswith("PostgreSQL 18")


def test_unreachable_server_is_one_line_naming_host_and_port():
    r = run_memsafe("--db", "postgresql://memsafe@127.0.0.1:9/memsafe", "status")
    _one_line_error(r, "127.0.0.1:9")


def test_password_in_the_url_is_refused(tmp_path):
    r = run_memsafe("--db", "postgresql://memsafe:hunter2@127.0.0.1:9/memsafe", "status")
    _one_line_error(r, "PGPASSWORD")
    assert "hunter2" not in r.stderr
    with pytest.raises(InvalidInput):
        api.set_db_path("postgresql://memsafe:hunter2@db.example/memsafe")
    assert "db" not in settings.read_user_config()


@pytest.mark.parametrize("args", [("status",), ("recall", "deploy"), ("remember", "we deploy on Tuesdays"),
                                  ("export", "-o", "out.jsonl"), ("config", "set", "db", "URL")])
def test_without_the_postgres_extra_a_url_is_one_line_naming_what_to_install(args, tmp_path):
    """memsafe installed without its postgres extra (psycopg missing), given a PostgreSQL URL: one
    line saying how to add the driver, on every path (it was a traceback ending in
    ModuleNotFoundError; the README's `pip install 'memsafe[postgres]'` finds no memsafe on the
    package index, so the line names the driver's own requirements)."""
    url = "postgresql://memsafe@127.0.0.1:9/memsafe"
    hidden = tmp_path / "no-driver"
    hidden.mkdir()
    (hidden / "psycopg.py").write_text("raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))}
    args = tuple(url if a == "URL" else a for a in args)
    r = run_memsafe("--db", url, *args, env=env, cwd=tmp_path)
    _one_line_error(r, "postgres extra", "psycopg is not installed", "pipx inject memsafe 'psycopg[binary]>=3.2'")
    assert "db" not in settings.read_user_config()


def test_missing_vector_extension_names_the_sql_to_run(pg_server):
    """A role that may not create the extension gets the exact SQL an administrator must run."""
    pg_server.admin("DROP ROLE IF EXISTS plain_user")
    pg_server.admin("CREATE ROLE plain_user LOGIN")
    pg_server.admin("CREATE DATABASE no_vector OWNER plain_user")
    url = pg_server.url("no_vector").replace("postgresql://postgres:@", "postgresql://plain_user@")
    try:
        r = run_memsafe("--db", url, "status")
        _one_line_error(r, "CREATE EXTENSION vector")
    finally:
        pg_server.admin("DROP DATABASE no_vector WITH (FORCE)")
        pg_server.admin("DROP ROLE plain_user")


def test_newer_schema_is_refused_and_left_untouched(pg_url):
    from memsafe.store.postgres import close_pool

    opened = api.open_store(pg_url)
    api.remember(opened.store, "kept as it is", embed_now=False)
    opened.store.conn.execute("UPDATE memsafe_schema SET version = 99")
    opened.store.close()
    close_pool(pg_url)  # a new process would check the schema: so does a new pool
    with pytest.raises(SchemaTooNew, match="schema version 99"):
        api.open_store(pg_url)
    r = run_memsafe("--db", pg_url, "status")
    _one_line_error(r, "schema version 99")
    import psycopg

    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM memsafe_schema").fetchone()[0] == 99
        assert conn.execute("SELECT content FROM memories").fetchall() == [("kept as it is",)]


def test_encryption_commands_refuse_a_postgres_store(pg_url):
    for command in ("encrypt", "decrypt", "rekey"):
        r = run_memsafe("--db", pg_url, command)
        _one_line_error(r, "SQLite stores only")


def _fill(store) -> None:
    """History, graph, a forgotten memory, vectors and authors: what a lossless transfer keeps."""
    a = api.remember(store, "the billing service retries webhooks three times", author="alice")
    api.update(store, a.id, content="the billing service retries webhooks five times", author="bob")
    b = api.remember(store, "checkout-api depends on billing", project="web")
    api.remember(store, "an old note nobody needs", tags=["ops"])
    api.forget(store, b.id, reason="moved")
    api.relate(store, "checkout-api", "depends_on", "billing", weight=0.7, create=True)


def _export(store) -> list[dict]:
    buf = io.StringIO()
    api.export(store, buf, all_projects=True, include_forgotten=True, vectors=True)
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    for key in ("exported_at", "schema_version"):  # the moment, and each backend's own schema numbering
        records[0].pop(key)
    return records


@pytest.mark.parametrize("source", ["sqlite", "postgres"])
def test_export_import_between_backends_is_lossless(source, pg_url, tmp_path, embedder):
    sqlite_db = str(tmp_path / "memory.db")
    first, second = (sqlite_db, pg_url) if source == "sqlite" else (pg_url, sqlite_db)
    a = api.open_store(first).store
    _fill(a)
    exported = _export(a)
    a.close()
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in exported), encoding="utf-8")
    b = api.open_store(second).store
    report = api.import_file(b, path)
    assert report.memories_added == 3
    assert report.vectors_imported == sum(1 for r in exported if "vector" in r) >= 2
    again = _export(b)
    assert again == exported
    memories = [r for r in again if r.get("type") == "memory"]
    assert {m["status"] for m in memories} == {"active", "forgotten"}
    assert [v["author"] for m in memories for v in m["versions"]] == ["alice"]
    assert sum(1 for r in again if r.get("type") == "relation") == 1
    assert b.consistency_problems() == []
    b.close()


def test_concurrent_writers_share_one_pool_and_take_turns(pg_url):
    """Threads opening stores on one URL at once (a server's tool calls) share one pool, and
    writers take turns: every remember lands, and one text written by all of them lands once."""
    from concurrent.futures import ThreadPoolExecutor

    from memsafe.errors import Duplicate
    from memsafe.store.postgres import close_pool

    close_pool(pg_url)  # the first opens race for the pool

    def work(n: int) -> int:
        duplicates = 0
        for i in range(15):
            opened = api.open_store(pg_url)
            try:
                api.remember(opened.store, f"writer {n} note {i}", embed_now=False)
                try:
                    api.remember(opened.store, f"the shared note {i}", embed_now=False)
                except Duplicate:
                    duplicates += 1
            finally:
                opened.store.close()
        return duplicates

    with ThreadPoolExecutor(6) as pool:
        duplicates = sum(pool.map(work, range(6)))
    opened = api.open_store(pg_url)
    assert opened.store.counts()["active"] == 6 * 15 + 15
    assert duplicates == 5 * 15
    opened.store.close()


def test_a_schema_1_store_gets_its_word_index_rebuilt_with_nothing_lost(pg_server):
    """A database as m001 made it (the word index cut by PostgreSQL's parser and Snowball stemmer,
    kept by a trigger) is migrated in one go: every entry rebuilt from FTS5's tokens, the rows as
    they were, the trigger gone (the store indexes what it writes)."""
    import psycopg

    from memsafe.models import Scope
    from memsafe.store.postgres import PgConnection, close_pool, migrations

    texts = ["settings live in /etc/harbor/config.toml", "we upgraded to v2.4.7", "the Café form"]
    pg_server.admin("CREATE DATABASE schema_one")
    url = pg_server.url("schema_one")
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            conn = PgConnection(raw)
            conn.script("CREATE EXTENSION vector; CREATE EXTENSION pg_trgm;")
            migrations.m001_initial(conn)
            conn.script("CREATE TABLE memsafe_schema (version INTEGER NOT NULL); "
                        "INSERT INTO memsafe_schema VALUES (1);")
            for n, text in enumerate(texts):
                conn.execute("INSERT INTO memories(uid, content, created_at, updated_at, content_updated_at, "
                             "content_hash) VALUES (?, ?, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', "
                             "'2026-01-01T00:00:00Z', ?)", (f"u{n}", text, f"h{n}"))
            before = conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
            old = conn.execute("SELECT tsv::text FROM memory_fts ORDER BY memory_id").fetchall()
        assert "'/etc/harbor/config.toml'" in old[0][0]  # PostgreSQL's parser kept the path whole
        store = api.open_store(url).store
        try:
            assert store.schema_version() == migrations.latest()
            after = store.conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
            assert [row[:len(before[0])] for row in after] == before  # every column as it was
            # the columns later migrations add: event time from the stored time, no correction links
            assert [row[len(before[0]):] for row in after] == [("2026-01-01T00:00:00Z", None, None)] * len(before)
            assert store.consistency_problems() == []
            for query, text in (("harbor", texts[0]), ("v2", texts[1]), ("cafe", texts[2])):
                hits = store.fts_search(f'"{query}"', Scope(), 5)
                assert [store.get_memories([i])[i].content for i, _ in hits] == [text]
            assert store.conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'memories_fts_sync'"
                                      ).fetchone()[0] == 0
            added = api.remember(store, "a new note about harbor", embed_now=False)
            assert {i for i, _ in store.fts_search('"harbor"', Scope(), 5)} == {1, added.id}
            assert store.consistency_problems() == []
        finally:
            store.close()
    finally:
        close_pool(url)
        pg_server.admin("DROP DATABASE schema_one WITH (FORCE)")


def test_a_signal_inside_a_running_statement_rolls_the_write_back_and_closes_cleanly(pg_url):
    """A signal (Ctrl-C, or SIGTERM, which memsafe turns into a KeyboardInterrupt) can land while
    the server still runs a statement; psycopg then refuses a plain rollback ("another command is
    already in progress"), which would end the import in a traceback and exit 1 instead of
    "rolled back" and 143. Here the statement is sent and the interrupt raised before its result
    is read, as such a signal leaves it. The write ends with the interrupt itself, nothing of it
    is kept, the same store still answers (an interrupted import asks it whether anything was
    committed, and must not meet "the connection is closed" in a traceback), and it closes and
    opens again."""
    store = api.open_store(pg_url).store
    try:
        with pytest.raises(KeyboardInterrupt):
            with store.write():
                api.remember(store, "written before the interrupted statement", embed_now=False)
                store.conn.raw.pgconn.send_query(b"SELECT pg_sleep(30)")  # running on the server
                raise KeyboardInterrupt
        assert store.counts().get("active", 0) == 0 and not store.conn.in_transaction
        api.remember(store, "written after it", embed_now=False)  # and writes
    finally:
        store.close()
    again = api.open_store(pg_url).store
    try:
        assert [h.memory.content for h in api.recall(again, "written", mode="lexical").hits] == ["written after it"]
    finally:
        again.close()
