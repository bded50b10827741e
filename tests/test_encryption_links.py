"""A store reached through symbolic links: `encrypt`, `rekey` and `decrypt` convert the file the
links lead to and leave every link as it was, so no plain copy stays at a link's target (a synced
folder, say); migration backups are written and converted beside that file. A dangling link, a
loop of links and a file with other hard links are refused in one line, changing nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import apsw
import pytest
from conftest import run_memsafe
from test_encryption import PHRASE, env_with, os_keyring, reset_keyring  # noqa: F401 (fixtures)

from memsafe import api, settings
from memsafe.store.sqlite import encryption

FIXTURES = Path(__file__).parent / "fixtures"
MARK = "ultramarine-platypus"  # a word of PHRASE: found in a file, plain text is there
LATER = "zanzibar-lighthouse-4410 is the backup host"  # written into the WAL, never checkpointed


def plain_copies(*folders: Path) -> list[Path]:
    """Every file under `folders` whose bytes hold the plain text of a memory."""
    found = []
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                if MARK.encode() in data or b"zanzibar-lighthouse" in data:
                    found.append(p)
    return found


def layouts(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """(the path memsafe is given, the store file it leads to) for one layout of links."""
    real = tmp_path / "synced" / "memory.db"
    real.parent.mkdir()
    links = tmp_path / "links"
    links.mkdir()
    if kind == "link beside the file":
        path = real.with_name("link.db")
        path.symlink_to("memory.db")
    elif kind == "link into another folder":
        path = links / "memory.db"
        path.symlink_to(os.path.relpath(real, links))
    elif kind == "link to a link":
        (links / "middle.db").symlink_to(real)
        path = links / "outer.db"
        path.symlink_to("middle.db")
    elif kind == "chain across folders":
        other = tmp_path / "other"
        other.mkdir()
        (other / "b.db").symlink_to(real)
        (links / "a.db").symlink_to(other / "b.db")
        path = tmp_path / "start.db"
        path.symlink_to(links / "a.db")
    elif kind == "folder that is a link":
        (links / "folder").symlink_to(real.parent)
        path = links / "folder" / "memory.db"
    else:
        raise AssertionError(kind)
    return path, real


def make_store(real: Path) -> None:
    """A plain store at `real` holding PHRASE in the main file and LATER in its WAL only (as a
    store that a server still has open, or one closed without a checkpoint, holds it)."""
    opened = api.open_store(str(real))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    opened = api.open_store(str(real))
    opened.store.no_checkpoint_on_close()
    api.remember(opened.store, LATER, embed_now=False)
    opened.store.close()
    assert Path(f"{real}-wal").stat().st_size > 0 and LATER.encode() in Path(f"{real}-wal").read_bytes()


def link_state(tmp_path: Path) -> dict[str, str]:
    """Every symbolic link under `tmp_path` and where it points."""
    return {str(p): os.readlink(p) for p in tmp_path.rglob("*") if p.is_symlink()}


@pytest.fixture
def scratch_tmp(tmp_path, monkeypatch):
    """TMPDIR and SQLITE_TMPDIR in a folder of the test's own, to look for temporary copies."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setenv("SQLITE_TMPDIR", str(folder))
    return folder


@pytest.mark.parametrize("kind", ["link beside the file", "link into another folder", "link to a link",
                                  "chain across folders", "folder that is a link"])
def test_encrypt_rekey_decrypt_through_links_convert_the_file_and_keep_the_links(tmp_path, monkeypatch, kind,
                                                                                 scratch_tmp):
    path, real = layouts(tmp_path, kind)
    make_store(real)
    links = link_state(tmp_path)
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(tmp_path / "keys" / "key"))

    report = api.encrypt(str(path))
    assert report.memories == 2
    assert link_state(tmp_path) == links  # every link still there, pointing where it pointed
    assert real.is_file() and not real.is_symlink() and encryption.is_encrypted(real)
    assert plain_copies(tmp_path) == []  # the file, its folder, the links' folders, WAL/SHM, temp dirs
    assert not Path(f"{real}-wal").exists() and not Path(f"{real}-shm").exists()
    assert report.notes == [f"{path} is a symbolic link: converted the file it points to, {real}"]

    env = env_with(tmp_path, MEMSAFE_KEY_FILE=str(tmp_path / "keys" / "key"))
    for via in (path, real):  # the link and the file are one store
        r = run_memsafe("--db", str(via), "recall", "zanzibar lighthouse", "--mode", "lexical", "--json", env=env)
        assert r.returncode == 0 and "zanzibar-lighthouse-4410" in r.stdout, r.stderr

    old_key = (tmp_path / "keys" / "key").read_text()
    api.rekey(str(path))
    assert link_state(tmp_path) == links and encryption.is_encrypted(real)
    assert (tmp_path / "keys" / "key").read_text() != old_key and plain_copies(tmp_path) == []

    api.decrypt(str(path))
    assert link_state(tmp_path) == links
    assert not encryption.is_encrypted(real) and real.is_file() and not real.is_symlink()


@pytest.mark.usefixtures("os_keyring")
def test_a_keyring_key_is_found_through_the_link_and_through_the_file(tmp_path, monkeypatch):
    """The keyring entry is saved under the file's path: any path that leads to it finds it."""
    entries_file = tmp_path / "os-keyring.json"
    path, real = layouts(tmp_path, "link into another folder")
    make_store(real)
    report = api.encrypt(str(path))
    assert f"user '{real}'" in report.key_location
    entries = json.loads(entries_file.read_text())["memsafe"]
    assert list(entries) == [str(real)]
    for via in (path, real):
        opened = api.open_store(str(via))
        try:
            assert opened.store.encrypted and "the OS keyring" in opened.store.key.source
        finally:
            opened.store.close()
    api.rekey(str(path))
    assert list(json.loads(entries_file.read_text())["memsafe"]) == [str(real)]
    api.decrypt(str(real))
    assert json.loads(entries_file.read_text())["memsafe"] == {}


@pytest.mark.usefixtures("os_keyring")
def test_a_keyring_entry_saved_under_the_link_path_still_opens_and_is_moved_by_rekey(tmp_path):
    """Before links were followed the entry's user was the path as given; such an entry keeps working."""
    entries_file = tmp_path / "os-keyring.json"
    import keyring

    path, real = layouts(tmp_path, "link into another folder")
    make_store(real)
    os.environ["MEMSAFE_KEY"] = secret = encryption.new_key()
    settings.reload()
    try:
        api.encrypt(str(path))
    finally:
        del os.environ["MEMSAFE_KEY"]
        settings.reload()
    keyring.get_keyring().set_password("memsafe", str(path), secret)
    opened = api.open_store(str(path))
    opened.store.close()
    api.rekey(str(path))
    assert list(json.loads(entries_file.read_text())["memsafe"]) == [str(real)]  # the old entry is gone


@pytest.mark.parametrize("action", ["encrypt", "decrypt", "rekey"])
def test_a_dangling_link_is_refused_in_one_line_and_nothing_is_created(tmp_path, monkeypatch, action):
    path = tmp_path / "links" / "memory.db"
    path.parent.mkdir()
    target = tmp_path / "gone" / "memory.db"
    path.symlink_to(target)
    r = run_memsafe("--db", str(path), action, env=env_with(tmp_path, MEMSAFE_KEY_FILE=str(tmp_path / "key")))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert f"{path} is a symbolic link to {target}, which does not exist" in r.stderr
    assert not target.parent.exists() and not (tmp_path / "key").exists() and path.is_symlink()


def test_a_loop_of_links_is_refused_in_one_line(tmp_path, monkeypatch):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    a.symlink_to(b)
    b.symlink_to(a)
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(encryption.StoreUnavailable, match="cannot follow .*a.db: Too many levels of symbolic links"):
        api.encrypt(str(a))
    assert a.is_symlink() and b.is_symlink() and not (tmp_path / "key").exists()


def test_a_store_with_another_hard_link_is_refused_unchanged(tmp_path, monkeypatch, db_path):
    """Renaming the encrypted copy over one name would leave the plain file under the other."""
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    other = tmp_path / "elsewhere.db"
    os.link(db_path, other)
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(encryption.StoreUnavailable, match="has 1 other hard link") as caught:
        api.encrypt(str(db_path))
    assert "Nothing was changed" in str(caught.value) and "\n" not in str(caught.value)
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before and os.path.samefile(db_path, other)
    assert not encryption.is_encrypted(db_path) and not (tmp_path / "key").exists()


def test_migration_backups_go_beside_the_file_and_are_encrypted_through_the_link(tmp_path, monkeypatch):
    path, real = layouts(tmp_path, "link into another folder")
    shutil.copy(FIXTURES / "v1.db", real)
    raw = apsw.Connection(str(real), flags=apsw.SQLITE_OPEN_READONLY)
    text = raw.execute("SELECT content FROM memories LIMIT 1").fetchone()[0][:40]
    raw.close()
    api.open_store(str(path)).store.close()  # migrates through the link
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing beside the link
    backups = encryption.backups_of(path)
    assert backups and all(b.parent == real.parent for b in backups)
    # a backup an older memsafe wrote beside the link is a plain copy too
    stray = path.with_name(path.name + ".bak-v1")
    shutil.copy(backups[0], stray)

    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(tmp_path / "keys" / "key"))
    report = api.encrypt(str(path))
    assert sorted(report.backups) == sorted([*backups, stray])
    held = [p for p in tmp_path.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]
    assert held == []


def test_a_key_file_behind_a_link_is_rewritten_where_it_is(tmp_path, monkeypatch, db_path):
    """`rekey` renames the new key file over the link's target, not over the link: the old key
    would stay readable there."""
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    keys = tmp_path / "vault"
    keys.mkdir()
    link = tmp_path / "key-link"
    link.symlink_to(keys / "memsafe.key")
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(link))
    api.encrypt(str(db_path))
    assert link.is_symlink() and (keys / "memsafe.key").is_file()
    old = (keys / "memsafe.key").read_text().strip()
    api.rekey(str(db_path))
    assert link.is_symlink() and os.readlink(link) == str(keys / "memsafe.key")
    new = (keys / "memsafe.key").read_text().strip()
    assert new != old and all(old not in p.read_text(errors="replace") for p in tmp_path.rglob("*")
                              if p.is_file() and p.suffix != ".db" and "memory.db" not in p.name)


def test_export_over_a_link_rewrites_the_file_it_points_to(tmp_path, db_path, cli):
    """The old export (every memory it held, in plain text) must not stay at the link's target."""
    assert cli("remember", PHRASE).exit_code == 0
    real = tmp_path / "synced" / "backup.jsonl"
    real.parent.mkdir()
    link = tmp_path / "backup.jsonl"
    link.symlink_to(real)
    assert cli("export", "-o", str(real)).exit_code == 0
    assert cli("export", "-o", str(link)).exit_code == 0
    assert link.is_symlink() and MARK in real.read_text()
    assert cli("forget", "1").exit_code == 0 and cli("purge", "1", "--yes").exit_code == 0
    assert cli("export", "-o", str(link)).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert plain_copies(tmp_path / "synced") == [] and MARK not in real.read_text()
