"""Upgrades and paths: the committed v1 fixture (tests/fixtures/v1.db, written
by tests/fixtures/make_v1.py with the first released schema) opens with today's code with every
memory intact, and migrates with a backup; a file from a newer memsafe is refused and left
byte-identical; a read-only file that needs a migration gives a clear error and is not touched,
and no new empty store appears; `~` and spaces in MEMSAFE_DB work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest

from memsafe import api
from memsafe.errors import SchemaTooNew, StoreUnavailable
from memsafe.store.sqlite import migrations

FIXTURE = Path(__file__).parent / "fixtures" / "v1.db"
sys.path.insert(0, str(FIXTURE.parent))
import make_v1  # noqa: E402

sys.path.pop(0)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _raw_rows(path: Path) -> dict[int, tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    sql = "SELECT id, uid, content, kind, project, status, created_at FROM memories"
    rows = {r[0]: r[1:] for r in conn.execute(sql)}
    conn.close()
    return rows


@pytest.fixture
def v1_copy(tmp_path) -> Path:
    dest = tmp_path / "old" / "memory.db"
    dest.parent.mkdir()
    shutil.copyfile(FIXTURE, dest)
    return dest


def test_fixture_is_the_first_schema():
    conn = apsw.Connection(str(FIXTURE), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 300
    assert conn.execute("SELECT count(*) FROM memories WHERE status = 'forgotten'").fetchone()[0] == 12
    conn.close()


def test_v1_opens_with_every_memory_intact(v1_copy, embedder):
    before = _raw_rows(v1_copy)
    opened = api.open_store(str(v1_copy))
    store = opened.store
    assert store.schema_version() == migrations.latest()
    if migrations.latest() > 1:
        assert opened.store.backup_path is not None and opened.store.backup_path.exists()
    after = {m.id: m for m in store.get_memories(list(before)).values()}
    assert len(after) == len(before) == 300
    for memory_id, (uid, content, kind, project, status, created_at) in before.items():
        m = after[memory_id]
        assert (m.uid, m.content, m.kind, m.project, m.status, m.created_at) == (
            uid, content, kind, project, status, created_at
        )
        assert m.content == make_v1.content(memory_id - 1)
    assert api.get(store, 1).status == "forgotten"
    assert api.config_get(store, "token_budget") == 1500
    # A known query finds the known memory; vectors are backfilled on the way.
    hits = api.recall(store, "Note 137 service-4 option 5", all_projects=True, mode="lexical").hits
    assert hits[0].memory.id == 138
    hits = api.recall(store, "Note 137", all_projects=True).hits
    assert 138 in [h.memory.id for h in hits]
    assert store.consistency_problems() == []
    store.close()


def _probe_migration(conn):
    conn.execute("CREATE TABLE upgrade_probe (x)")


def test_future_migration_runs_with_backup_and_is_idempotent(v1_copy, monkeypatch):
    """The migration machinery, exercised now with a stand-in m002: backup first, counts equal."""
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m002_probe", _probe_migration)])
    before = _raw_rows(v1_copy)
    opened = api.open_store(str(v1_copy))
    assert opened.store.schema_version() == migrations.latest() >= 2
    backup = opened.store.backup_path
    assert backup is not None and backup.name == "memory.db.bak-v1"
    assert any("backup" in w for w in opened.warnings)
    assert _raw_rows(backup) == before
    opened.store.close()
    assert _raw_rows(v1_copy) == before
    again = api.open_store(str(v1_copy))  # second open: nothing to do, no second backup
    assert again.store.backup_path is None
    again.store.close()
    assert sorted(p.name for p in v1_copy.parent.iterdir() if ".bak" in p.name) == ["memory.db.bak-v1"]


def test_newer_schema_is_refused_untouched(v1_copy, memsafe_proc):
    conn = apsw.Connection(str(v1_copy))
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    digest = _sha(v1_copy)
    with pytest.raises(SchemaTooNew, match="newer than this memsafe"):
        api.open_store(str(v1_copy))
    r = memsafe_proc("--db", str(v1_copy), "status")
    assert r.returncode == 1
    assert "schema version 99" in r.stderr and "Traceback" not in r.stderr
    r = memsafe_proc("--db", str(v1_copy), "remember", "must not land", "--no-embed")
    assert r.returncode == 1
    assert _sha(v1_copy) == digest
    assert not list(v1_copy.parent.glob("*.bak*"))


@contextmanager
def _read_only(*paths: Path):
    """Make files/folders unwritable even for root (`chattr +i`), or by mode bits for other users."""
    done: list[Path] = []
    try:
        for p in paths:
            if os.geteuid() == 0:
                r = subprocess.run(["chattr", "+i", str(p)], capture_output=True, text=True)
                if r.returncode != 0:
                    pytest.skip(f"cannot make {p} read-only as root here: {r.stderr.strip()}")
            else:
                os.chmod(p, 0o555 if p.is_dir() else 0o444)
            done.append(p)
        yield
    finally:
        for p in done:
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", str(p)], capture_output=True)
            else:
                os.chmod(p, 0o755 if p.is_dir() else 0o644)


@pytest.mark.parametrize("folder_writable", [False, True])
def test_read_only_file_needing_migration(tmp_path, monkeypatch, folder_writable):
    """A failed upgrade: clear error, no partial migration, no new empty store."""
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m002_probe", _probe_migration)])
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "memory.db"
    shutil.copyfile(FIXTURE, db)
    digest, listing = _sha(db), set(os.listdir(folder))
    with _read_only(db, *([] if folder_writable else [folder])):
        with pytest.raises(StoreUnavailable) as info:
            api.open_store(str(db))
        message = str(info.value)
        assert str(db) in message and "read-only" in message
        with pytest.raises(StoreUnavailable):  # and again: still refused, still nothing created
            api.open_store(str(db))
    assert _sha(db) == digest
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'upgrade_probe'").fetchone()
    conn.close()
    leftovers = sorted(set(os.listdir(folder)) - listing)
    assert all(".bak-v1" in name for name in leftovers), leftovers  # at most a backup; never a fresh DB


def test_missing_folder_without_create_is_not_created(tmp_path):
    with pytest.raises(StoreUnavailable):
        api.open_store(str(tmp_path / "nowhere" / "memory.db"), create=False)
    assert not (tmp_path / "nowhere").exists()


def test_tilde_and_space_path(tmp_path, memsafe_proc):
    """A path with `~` and a space: `~` expanded, the folder with a space created, status shows the absolute path."""
    home = tmp_path / "userhome"
    home.mkdir()
    env = {"HOME": str(home), "MEMSAFE_DB": "~/mem safe/dir/test.db"}
    r = memsafe_proc("remember", "tilde path works", "--no-embed", "--global", env=env)
    assert r.returncode == 0, r.stderr
    expected = home / "mem safe" / "dir" / "test.db"
    assert expected.is_file()
    r = memsafe_proc("status", "--json", env=env)
    report = json.loads(r.stdout)
    assert report["db_path"] == str(expected)
    assert report["counts"]["total"] == 1
    assert not (Path.cwd() / "~").exists()


def test_upgrade_keeps_ids_history_and_links_and_never_reuses_ids_purged_before_it(v1_copy, embedder):
    """m004 rebuilds `memories` with AUTOINCREMENT: every id, tag, history
    version, graph link and FTS entry survives, and ids purged under the old schema, the largest
    one included, are never handed out again."""
    conn = apsw.Connection(str(v1_copy))
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:  # what the old code's purge left: rows gone, a content-free 'purge' event
        for memory_id in (300, 150):
            conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            conn.execute("INSERT INTO events(at, action, memory_id) VALUES ('2026-01-16T00:00:00Z', 'purge', ?)",
                         (memory_id,))
        conn.execute(
            "INSERT INTO memory_versions(memory_id, content, kind, project, tags, importance, confidence, "
            "valid_from, valid_to, cause) VALUES (7, 'older text', 'fact', NULL, '[]', 0.5, 0.8, 'a', 'b', 'update')"
        )
        conn.execute("INSERT INTO entities(name, key, type, created_at) VALUES ('Kafka', 'kafka', 'tool', 'a')")
        conn.execute("INSERT INTO memory_entities(memory_id, entity_id) VALUES (7, last_insert_rowid())")
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("memories", "memory_tags", "memory_versions", "memory_entities", "events")}
    conn.close()
    before = _raw_rows(v1_copy)

    store = api.open_store(str(v1_copy)).store
    assert "AUTOINCREMENT" in store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories'").fetchone()[0]
    assert _raw_rows(v1_copy) == before
    for table, n in counts.items():
        assert store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == n, table
    assert store.versions(7)[0]["content"] == "older text"
    assert store.entity_names(7) == ["Kafka"]
    assert store.consistency_problems() == []
    assert store.memory_id_taken(150) and store.memory_id_taken(300) and not store.memory_id_taken(301)
    new = api.remember(store, "a memory made after the upgrade: zymurgy notes")
    assert new.id == 301
    # both full-text indexes follow inserts and updates through the re-created triggers
    assert [h.memory.id for h in api.recall(store, "zymurgy", mode="lexical").hits] == [301]
    found = api.recall(store, "日本", mode="lexical", all_projects=True, include_forgotten=True).hits
    assert {h.memory.id for h in found} == {1, 51, 101, 151, 201, 251}  # the trigram index was built
    api.update(store, 301, content="now about fermentation_v2 instead")
    assert api.recall(store, "zymurgy", mode="lexical").hits == []
    assert [h.memory.id for h in api.recall(store, "fermentation_v2", mode="lexical").hits] == [301]
    store.close()
