"""The SQLite file: schema versions and migrations, refusal of newer files, permissions, paths
and running without sqlite-vec or the model."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat

import pytest

from memsafe import api, embed
from memsafe.errors import SchemaTooNew, StoreUnavailable
from memsafe.models import Memory
from memsafe.store import SQLiteStore
from memsafe.store.sqlite import migrations

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_store(path, *texts):
    with SQLiteStore(path) as store:
        for text in texts:
            api.remember(store, text, embed_now=False)


@pytest.mark.backends("sqlite")  # the file itself: PostgreSQL has no file of ours (test_postgres.py)
def test_new_store_is_private_and_current(db_path):
    make_store(db_path, "hello")
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700
    with SQLiteStore(db_path) as store:
        assert store.schema_version() == migrations.latest()
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.integrity_check() == "ok"


@pytest.mark.backends("sqlite")  # the file itself: PostgreSQL has no file of ours (test_postgres.py)
def test_newer_schema_is_refused_and_left_byte_identical(db_path):
    make_store(db_path, "a memory from the future")
    with SQLiteStore(db_path) as store:
        store.conn.execute("PRAGMA user_version = 99")
        store.checkpoint()
    before = sha(db_path)
    with pytest.raises(SchemaTooNew, match="upgrade memsafe"):
        SQLiteStore(db_path)
    assert sha(db_path) == before


@pytest.mark.backends("sqlite")  # the file itself: PostgreSQL has no file of ours (test_postgres.py)
def test_migration_writes_a_backup_first_and_keeps_every_row(db_path, monkeypatch):
    make_store(db_path, "first", "second")

    def m999_add_column(conn):
        conn.execute("ALTER TABLE memories ADD COLUMN extra TEXT")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m999_add_column", m999_add_column)])
    old_version = len(migrations.MIGRATIONS) - 1
    with SQLiteStore(db_path) as store:
        assert store.schema_version() == old_version + 1
        assert store.backup_path is not None and store.backup_path.exists()
        assert [r[0] for r in store.conn.execute("SELECT content FROM memories ORDER BY id")] == ["first", "second"]
    import apsw

    backup = apsw.Connection(str(store.backup_path))  # the backup is the old file, unmigrated
    assert backup.execute("PRAGMA user_version").fetchone()[0] == old_version
    assert backup.execute("SELECT count(*) FROM memories").fetchone()[0] == 2
    backup.close()
    assert store.backup_path.name == f"memory.db.bak-v{old_version}"


def test_failing_migration_rolls_back_and_reports(db_path, monkeypatch):
    make_store(db_path, "keep me")

    def m999_broken(conn):
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("THIS IS NOT SQL")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m999_broken", m999_broken)])
    with pytest.raises(StoreUnavailable, match="cannot migrate"):
        SQLiteStore(db_path)
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])
    with SQLiteStore(db_path) as store:
        assert store.schema_version() == len(migrations.MIGRATIONS)
        assert not store.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchone()
        assert store.conn.execute("SELECT content FROM memories").fetchone()[0] == "keep me"


def test_read_only_file_needing_migration_is_a_clear_error(db_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    make_store(db_path, "x")
    monkeypatch.setattr(
        migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m999_noop", lambda c: c.execute("CREATE TABLE t(x)"))]
    )
    db_path.chmod(0o400)
    with pytest.raises(StoreUnavailable):
        SQLiteStore(db_path)


@pytest.mark.parametrize("content", [b"this is not sqlite at all" * 100, b"\x00" * 4096])
def test_a_file_that_is_not_a_memsafe_db_is_refused(tmp_path, content):
    path = tmp_path / "other.db"
    path.write_bytes(content)
    before = sha(path)
    with pytest.raises(StoreUnavailable):
        SQLiteStore(path)
    assert sha(path) == before


def test_a_foreign_sqlite_db_is_refused(tmp_path):
    import apsw

    path = tmp_path / "foreign.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE people(name)")
    conn.close()
    with pytest.raises(StoreUnavailable, match="not a memsafe database"):
        SQLiteStore(path)


def test_tilde_and_spaces_in_the_path_are_expanded_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user home"))
    monkeypatch.setenv("MEMSAFE_DB", "~/mem safe/dir/test.db")
    opened = api.open_store()
    opened.store.close()
    expected = tmp_path / "user home" / "mem safe" / "dir" / "test.db"
    assert opened.path == expected and expected.exists()


def test_relative_db_in_config_is_saved_absolute(tmp_path, monkeypatch):
    first = tmp_path / "first"
    first.mkdir()
    monkeypatch.chdir(first)
    saved = api.set_db_path("./rel.db")
    assert saved == first / "rel.db"
    with api.open_store().store as store:
        api.remember(store, "written from the first directory", embed_now=False)
    monkeypatch.chdir("/")
    opened = api.open_store()
    with opened.store as store:
        assert opened.path == first / "rel.db"
        assert store.counts()["active"] == 1


def test_new_store_elsewhere_warns_when_default_store_exists(tmp_path, monkeypatch):
    with api.open_store().store as store:  # the default location, under MEMSAFE_HOME
        api.remember(store, "lives at the default place", embed_now=False)
    opened = api.open_store(str(tmp_path / "typo" / "memroy.db"))
    opened.store.close()
    assert any("existing store was found" in w for w in opened.warnings)


def test_unopenable_path_is_an_error_not_a_store_elsewhere(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailable):
        api.open_store(str(blocker / "sub" / "memory.db"))
    with pytest.raises(StoreUnavailable):
        api.open_store(str(tmp_path))  # a directory
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.db"))


def test_without_sqlite_vec_everything_works_lexically(db_path, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NO_VEC", "1")
    with SQLiteStore(db_path) as store:
        assert not store.vector_available
        m = api.remember(store, "The release train leaves every second Tuesday")
        assert not api.get(store, m.id).embedded
        result = api.recall(store, "release train")
        assert [h.memory.id for h in result.hits] == [m.id]
        assert result.mode == "lexical" and any("vector search unavailable" in n for n in result.notes)
    monkeypatch.delenv("MEMSAFE_NO_VEC")
    with SQLiteStore(db_path) as store:  # the next process with the model fills the pending vector
        result = api.recall(store, "when does the train depart")
        assert api.get(store, m.id).embedded and result.hits[0].memory.id == m.id


def test_without_the_model_recall_is_lexical(db_path, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path / "nowhere"))
    embed.reset()
    try:
        with api.open_store(str(db_path)).store as store:
            m = api.remember(store, "Kafka topics are compacted weekly")
            result = api.recall(store, "Kafka")
            assert result.hits[0].memory.id == m.id and result.mode == "lexical"
            assert "model.onnx not found" in result.notes[0]
    finally:
        embed.reset()


@pytest.mark.parametrize("index", ["memories_fts", "memories_tri"])
def test_consistency_check_covers_both_full_text_indexes(db_path, monkeypatch, index):
    """doctor (`consistency_problems`) notices a memory missing from the word or the trigram index."""
    monkeypatch.setenv("MEMSAFE_NO_MODEL", "1")
    store = SQLiteStore(db_path)
    with store.write():
        memory_id = store.insert_memory(
            {"uid": "u1", "content": "kept in both indexes", "created_at": "2026-01-01T00:00:00Z",
             "updated_at": "2026-01-01T00:00:00Z", "content_updated_at": "2026-01-01T00:00:00Z",
             "content_hash": "h"}, [])
    assert store.consistency_problems() == []
    with store.write():
        store.conn.execute(f"INSERT INTO {index}({index}, rowid, content) VALUES ('delete', ?, ?)",
                           (memory_id, "kept in both indexes" + (" " if index == "memories_tri" else "")))
    problems = store.consistency_problems()
    assert any(("trigram" if index == "memories_tri" else "word") + " index" in p for p in problems), problems
    store.close()


def test_a_memory_read_back_holds_each_column_in_its_own_field(db_path):
    """`get_memories` builds each Memory positionally (the fast way, ~130 rows a recall): every
    field must hold its own column, so columns of one type set to distinct values catch a swap."""
    opened = api.open_store(str(db_path))
    store = opened.store
    try:
        m = api.remember(store, "the deploy pipeline runs on merge", project="web", tags=["ci", "deploy"],
                         embed_now=False)
        with store.write():
            store.update_memory(m.id, {
                "importance": 0.31, "confidence": 0.72, "created_at": "2026-01-02T00:00:00.000000+00:00",
                "updated_at": "2026-02-03T00:00:00.000000+00:00",
                "last_accessed_at": "2026-03-04T00:00:00.000000+00:00",
                "access_count": 5, "decay_level": 2, "status": "archived", "status_reason": "old", "author": "ana",
                "source": "git", "happened_at": "2025-12-01T00:00:00.000000+00:00", "supersedes": 7,
                "superseded_by": 9,
            })
        row = store.raw_row(m.id)
        got = store.get_memories([m.id])[m.id]
        for field in dataclasses.fields(Memory):
            if field.name in ("tags", "near_duplicate", "replaces"):
                continue
            stored = bool(row[field.name]) if field.name == "embedded" else row[field.name]
            assert getattr(got, field.name) == stored, field.name
        assert got.tags == ["ci", "deploy"]
    finally:
        store.close()


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("statuses", [("active",), ("active", "archived")])
def test_the_memories_of_a_time_window_are_read_by_index_not_by_scanning_the_scope(db_path, monkeypatch, statuses):
    # `created_between` (the memories of the time a query names: "what happened last week?") reads
    # the window alone from m014's index of event times, latest first, not the event time of every
    # memory in scope (7 ms at 10,000 memories).
    from memsafe.api import core

    ids = {}
    for day in ("2026-11-02", "2026-11-24", "2026-11-25", "2026-11-27", "2026-11-30"):
        monkeypatch.setenv("MEMSAFE_NOW", f"{day}T09:00:00+00:00")
        with SQLiteStore(db_path) as store:
            ids[day] = api.remember(store, f"note of {day}", project="web", embed_now=False).id
    with SQLiteStore(db_path) as store:
        scope = dataclasses.replace(core.make_scope(project="web"), statuses=list(statuses))
        seen = []
        store.conn.exec_trace = lambda _cursor, sql, bindings: seen.append((sql, bindings)) or True
        found = store.created_between(scope, "2026-11-23T00:00:00+00:00", "2026-11-30T00:00:00+00:00", 2)
        store.conn.exec_trace = None
        assert found == [ids["2026-11-27"], ids["2026-11-25"]]  # in the window, latest first, at most 2
        sql, bindings = seen[-1]
        plan = " ".join(r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", bindings))
        assert migrations.HAPPENED_BY_STATUS in plan and "happened_at>" in plan, plan
