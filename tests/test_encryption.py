"""Encryption at rest: an opt-in encrypted store (SQLite3 Multiple Ciphers through
apsw-sqlite3mc) that the CLI, MCP, hooks and cron keep using without a typed password; keys from
MEMSAFE_KEY, MEMSAFE_KEY_FILE or the OS keyring; no plain text on disk.

The keyring is a real `keyring`. tests/conftest.py selects keyrings.alt's PlaintextKeyring (in the
test's own folder), which memsafe must not take for a safe place for a key; `os_keyring` selects
a stand-in for a secure OS keyring service (tests/keyring_standin.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import apsw
import pytest
from conftest import run_memsafe
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memsafe import api, settings
from memsafe.store import SQLiteStore
from memsafe.store.sqlite import encryption

PHRASE = "ultramarine-platypus-7731 opens the staging vault"
FIXTURES = Path(__file__).parent / "fixtures"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_of(db: Path) -> list[Path]:
    """Every file memsafe keeps beside the store: main file, WAL, shared memory, backups, temporaries."""
    return sorted(p for p in db.parent.iterdir() if p.name.startswith(db.name))


def plain_bytes_anywhere(db: Path, needle: str) -> list[Path]:
    raw = needle.encode("utf-8")
    return [p for p in files_of(db) if p.is_file() and raw in p.read_bytes()]


def env_with(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a real memsafe process: the test's home and keyring, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSAFE_KEY")}
    env.pop("MEMSAFE_NEW_KEY", None)
    env.update(extra)
    return env


def use_keyring(monkeypatch, backend: str) -> None:
    """Select the keyring backend `backend` (`module.Class`) in this process and in every memsafe
    process the test starts (`keyring` chooses its backend once per process)."""
    import keyring

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", backend)
    keyring.core.init_backend()


@pytest.fixture
def reset_keyring():
    """After the test, this process's keyring backend is again the one conftest selects."""
    yield
    import keyring

    keyring.set_keyring(keyring.core.load_keyring("keyrings.alt.file.PlaintextKeyring"))


@pytest.fixture
def os_keyring(monkeypatch, tmp_path, reset_keyring):
    """A secure OS keyring (the stand-in of tests/keyring_standin.py), for this test's processes."""
    import keyring_standin

    tests = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv(keyring_standin.STORE_ENV, str(tmp_path / "os-keyring.json"))
    use_keyring(monkeypatch, "keyring_standin.Keyring")
    return tmp_path / "os-keyring.json"


def test_encrypt_recall_rekey_decrypt_round_trip_with_the_os_keyring(cli, db_path, os_keyring):
    assert cli("remember", PHRASE, "--kind", "fact").exit_code == 0
    assert cli("remember", "the blue deploy runs at noon").exit_code == 0
    plain = cli("recall", "platypus vault", "--json").stdout

    r = cli("encrypt")
    assert r.exit_code == 0, r.stderr
    assert "the OS keyring (keyring standin Keyring)" in r.stdout and "chacha20" in r.stdout
    assert "Warning" not in r.stderr
    assert encryption.is_encrypted(db_path)
    assert plain_bytes_anywhere(db_path, "ultramarine-platypus") == []
    secret = encryption.keyring_keys(db_path)[0].secret
    assert secret.startswith("msk1-")

    # FTS5 and sqlite-vec keep working inside the encrypted file, in every mode
    for mode in ("lexical", "vector", "hybrid"):
        r = cli("recall", "platypus vault", "--mode", mode, "--json")
        assert r.exit_code == 0, r.stderr
        assert PHRASE in r.stdout
    assert cli("recall", "platypus vault", "--json").stdout.count(PHRASE) == plain.count(PHRASE)

    # writes after encryption (WAL included) stay encrypted
    assert cli("remember", "zanzibar-lighthouse-4410 is the backup host").exit_code == 0
    assert plain_bytes_anywhere(db_path, "zanzibar-lighthouse") == []

    # status and doctor say so, and no output ever shows the key
    status = cli("status")
    assert "encrypted, cipher chacha20" in status.stdout
    assert json.loads(cli("status", "--json").stdout)["encryption"]["key_source"] == \
        "the OS keyring (keyring standin Keyring)"
    outputs = [status.stdout, cli("status", "--json").stdout, cli("config", "list").stdout,
               cli("doctor", "--no-model").stdout, cli("export").stdout]
    assert not any(secret in text for text in outputs)
    exported = cli("export")
    assert "plain JSON Lines" in exported.stderr and PHRASE in exported.stdout

    r = cli("rekey")
    assert r.exit_code == 0, r.stderr
    new_secret = encryption.keyring_keys(db_path)[0].secret
    assert new_secret != secret and len(encryption.keyring_keys(db_path)) == 1
    assert PHRASE in cli("recall", "platypus", "--json").stdout

    r = cli("decrypt")
    assert r.exit_code == 0, r.stderr
    assert not encryption.is_encrypted(db_path)
    assert encryption.keyring_keys(db_path) == []
    assert PHRASE in cli("recall", "platypus", "--json").stdout


def test_a_key_file_is_created_by_encrypt_and_used_by_every_process(cli, db_path, tmp_path, monkeypatch):
    key_file = tmp_path / "keys" / "memsafe.key"
    assert cli("remember", PHRASE).exit_code == 0
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(key_file))
    r = cli("encrypt")
    assert r.exit_code == 0, r.stderr
    assert key_file.exists() and (key_file.stat().st_mode & 0o777) == 0o600
    assert encryption.keyring_keys(db_path) == []  # the file, not the keyring

    # a real process (what the git hook, cron and serve are) reads the key file by itself
    env = env_with(tmp_path, MEMSAFE_KEY_FILE=str(key_file))
    r = run_memsafe("--db", str(db_path), "recall", "platypus", "--mode", "lexical", "--json", env=env)
    assert r.returncode == 0 and PHRASE in r.stdout

    # rekey writes the new key into the same file
    old = key_file.read_text()
    assert cli("rekey").exit_code == 0
    assert key_file.read_text() != old and len(key_file.read_text().split()) == 1
    assert PHRASE in cli("recall", "platypus", "--mode", "lexical", "--json").stdout


@pytest.mark.parametrize("command", [("recall", "platypus", "--mode", "lexical"), ("decay", "--quiet"),
                                     ("remember", "something new")])
def test_without_a_key_unattended_commands_fail_in_one_line_and_store_nothing(db_path, tmp_path, command):
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    key_file = tmp_path / "k"
    encryption.write_key_file(key_file, encryption.new_key() + "\n")
    os.environ["MEMSAFE_KEY_FILE"] = str(key_file)
    settings.reload()
    try:
        assert api.encrypt(str(db_path)).memories == 1
    finally:
        del os.environ["MEMSAFE_KEY_FILE"]
        settings.reload()
    before = sha(db_path)

    r = run_memsafe("--db", str(db_path), *command, env=env_with(tmp_path))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "MEMSAFE_KEY_FILE" in lines[0] and "keyring" in lines[0]
    assert "Traceback" not in r.stderr
    assert sha(db_path) == before
    assert [p.name for p in files_of(db_path)] == [db_path.name]  # no plain-text store made beside it


def test_a_wrong_key_is_one_line_and_leaves_the_file_untouched(db_path, tmp_path):
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    os.environ["MEMSAFE_KEY"] = "correct horse battery staple"
    settings.reload()
    try:
        api.encrypt(str(db_path))
    finally:
        del os.environ["MEMSAFE_KEY"]
        settings.reload()
    before = sha(db_path)
    r = run_memsafe("--db", str(db_path), "status", env=env_with(tmp_path, MEMSAFE_KEY="wrong horse"))
    assert r.returncode == 1
    assert "wrong key or not a memsafe store" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sha(db_path) == before
    r = run_memsafe("--db", str(db_path), "status", env=env_with(tmp_path, MEMSAFE_KEY="correct horse battery staple"))
    assert r.returncode == 0 and "encrypted, cipher chacha20" in r.stdout and "battery" not in r.stdout


def test_a_plain_store_opened_with_a_key_is_refused_untouched(db_path, tmp_path):
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    opened.store.close()
    before = sha(db_path)
    r = run_memsafe("--db", str(db_path), "recall", "platypus", "--mode", "lexical",
                    env=env_with(tmp_path, MEMSAFE_KEY="some key"))
    assert r.returncode == 1
    assert "plain (unencrypted) store but MEMSAFE_KEY is set" in r.stderr and "memsafe encrypt" in r.stderr
    assert sha(db_path) == before


def test_a_new_store_is_created_encrypted_when_a_key_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSAFE_KEY", "team passphrase")
    db = tmp_path / "new" / "memory.db"
    opened = api.open_store(str(db))
    api.remember(opened.store, PHRASE, embed_now=False)
    assert opened.store.encrypted
    opened.store.close()
    assert encryption.is_encrypted(db) and plain_bytes_anywhere(db, "ultramarine") == []


def test_migration_backups_are_encrypted_too_and_new_ones_are_born_encrypted(tmp_path, monkeypatch):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v1.db", db)
    SQLiteStore(db).close()  # migrates, leaving a plain backup of the v1 file
    backups = encryption.backups_of(db)
    assert backups and not encryption.is_encrypted(backups[0])
    raw = apsw.Connection(str(backups[0]), flags=apsw.SQLITE_OPEN_READONLY)
    some_text = raw.execute("SELECT content FROM memories LIMIT 1").fetchone()[0]
    raw.close()
    key_file = tmp_path / "key"
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(key_file))
    report = api.encrypt(str(db))
    assert report.backups == backups
    assert all(encryption.is_encrypted(p) for p in backups)
    assert plain_bytes_anywhere(db, some_text[:40]) == []

    # a backup written by a migration of an encrypted store is encrypted with its key
    with SQLiteStore(db) as store:
        key = store.key
    encrypted_backup = tmp_path / "copy.db"
    shutil.copy(backups[0], encrypted_backup)
    assert encryption.is_encrypted(encrypted_backup)
    assert encryption.working_key(encrypted_backup, [key]) == key


def test_purge_of_an_encrypted_store_reads_its_backups_with_its_key(tmp_path, monkeypatch):
    """Purge names the copies that still hold the text. An encrypted store's
    backups are read with its key, so only those that hold a purged memory are named (they were
    all named, unreadable); a conversion killed before its rename leaves `<db>.convert-tmp`,
    which is named too."""
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v1.db", db)
    SQLiteStore(db).close()  # migrates, leaving a backup of the v1 file
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(tmp_path / "key"))
    api.encrypt(str(db))
    backup = encryption.backups_of(db)[0]
    opened = api.open_store(str(db))
    try:
        store = opened.store
        assert store.encrypted
        everywhere = api.make_scope(project=None, all_projects=True)
        assert api.purge(store, [2], scope=everywhere).backups == [str(backup)]
        made_later = api.remember(store, "made after the upgrade", embed_now=False)
        assert api.purge(store, [made_later.id]).backups == []
        leftover = db.with_name(db.name + ".convert-tmp")  # as a kill -9 during `decrypt` leaves it
        shutil.copy(FIXTURES / "v1.db", leftover)
        journal = db.with_name(db.name + ".convert-tmp-journal")  # its rollback journal holds pages too
        journal.write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + b"\0" * 504)
        assert api.purge(store, [3], scope=everywhere).backups == [str(backup), str(leftover), str(journal)]
    finally:
        opened.store.close()


def test_encrypt_refuses_while_a_server_has_the_store_open(db_path, tmp_path, monkeypatch):
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE, embed_now=False)
    try:
        monkeypatch.setenv("MEMSAFE_KEY", "k")
        before = sha(db_path)
        with pytest.raises(encryption.StoreUnavailable, match="in use by another process"):
            api.encrypt(str(db_path))
        assert not encryption.is_encrypted(db_path) and sha(db_path) == before
    finally:
        opened.store.close()


KILL_SCRIPT = """
import os, sys
os.environ["MEMSAFE_KEY_FILE"] = sys.argv[2]
from memsafe import api
api.{action}(sys.argv[1])
"""


@pytest.mark.parametrize("action", ["encrypt", "rekey", "decrypt"])
def test_kill_9_at_any_instant_leaves_a_store_that_opens(tmp_path, action):
    """All-or-nothing: whatever instant the process dies, the store opens (old or new form) with a
    key from the key file, and holds every memory."""
    db, key_file = tmp_path / "m.db", tmp_path / "key"
    opened = api.open_store(str(db))
    with opened.store.write():
        for i in range(3000):
            api.remember(opened.store, f"memory {i}: {PHRASE} number {i}", embed_now=False)
    opened.store.close()
    if action != "encrypt":
        os.environ["MEMSAFE_KEY_FILE"] = str(key_file)
        settings.reload()
        try:
            api.encrypt(str(db))
        finally:
            del os.environ["MEMSAFE_KEY_FILE"]
            settings.reload()
    script = KILL_SCRIPT.format(action=action)
    outcomes = set()
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.45, 0.7, 1.0):
        proc = subprocess.Popen([sys.executable, "-c", script, str(db), str(key_file)])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        os.environ["MEMSAFE_KEY_FILE"] = str(key_file)
        settings.reload()
        try:
            if encryption.is_encrypted(db):
                store = SQLiteStore(db, create=False)
            else:
                del os.environ["MEMSAFE_KEY_FILE"]
                settings.reload()
                store = SQLiteStore(db, create=False)
            with store:
                assert store.conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 3000
                assert store.integrity_check() == "ok"
            outcomes.add(encryption.is_encrypted(db))
        finally:
            os.environ.pop("MEMSAFE_KEY_FILE", None)
            settings.reload()
    assert outcomes  # every instant checked above


async def _mcp_recall(db: Path, home: Path, env: dict, query: str) -> str:
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve"],
                                   env={**env, "MEMSAFE_HOME": str(home)}, cwd=str(db.parent))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("recall", {"query": query})
    return result.content[0].text


def test_memsafe_serve_reads_the_key_file_by_itself(db_path, tmp_path, embedder):
    key_file = tmp_path / "key"
    opened = api.open_store(str(db_path))
    api.remember(opened.store, PHRASE)
    opened.store.close()
    os.environ["MEMSAFE_KEY_FILE"] = str(key_file)
    settings.reload()
    try:
        api.encrypt(str(db_path))
    finally:
        del os.environ["MEMSAFE_KEY_FILE"]
        settings.reload()
    text = anyio.run(_mcp_recall, db_path, tmp_path / "home", env_with(tmp_path, MEMSAFE_KEY_FILE=str(key_file)),
                     "platypus vault")
    assert "ultramarine-platypus-7731" in text


# --- where a key lives -------------------------------------------------------------------------


def keyring_file(tmp_path: Path) -> Path:
    """The file keyrings.alt's PlaintextKeyring keeps its entries in (XDG_DATA_HOME: conftest)."""
    return tmp_path / "xdg-data" / "python_keyring" / "keyring_pass.cfg"


def memsafe_entries(path: Path) -> str:
    """The memsafe section of a keyrings.alt keyring file ('' when there is none)."""
    text = path.read_text() if path.exists() else ""
    return text[text.index("[memsafe]"):] if "[memsafe]" in text else ""


def test_encrypt_refuses_to_keep_a_key_in_a_plain_keyring_file_and_changes_nothing(cli, db_path, tmp_path):
    assert cli("remember", PHRASE).exit_code == 0
    before = sha(db_path)
    r = cli("encrypt")
    assert r.exit_code == 1
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.stderr
    assert "keyrings.alt.file.PlaintextKeyring" in line and str(keyring_file(tmp_path)) in line
    assert "MEMSAFE_KEY_FILE" in line and "MEMSAFE_ALLOW_INSECURE_KEYRING=1" in line and "Nothing was changed" in line
    assert sha(db_path) == before and not encryption.is_encrypted(db_path)
    assert memsafe_entries(keyring_file(tmp_path)) == ""  # no key was written there
    assert [p.name for p in files_of(db_path)] == [db_path.name]

    r = cli("encrypt", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["type"] == "InsecureKeyring"


@pytest.mark.parametrize("keeper", ["keyring.backends.null.Keyring", "keyring.backends.fail.Keyring"])
def test_a_keyring_that_keeps_nothing_is_never_given_a_key(cli, db_path, monkeypatch, reset_keyring, keeper):
    """The null backend accepts a key and keeps nothing: a store encrypted with it could never open."""
    assert cli("remember", PHRASE).exit_code == 0
    before = sha(db_path)
    use_keyring(monkeypatch, keeper)
    monkeypatch.setenv("MEMSAFE_ALLOW_INSECURE_KEYRING", "1")  # not even when insecure keyrings are allowed
    r = cli("encrypt")
    assert r.exit_code == 1 and "no OS keyring is available here" in r.stderr and "MEMSAFE_KEY_FILE" in r.stderr
    assert sha(db_path) == before


def test_a_keyring_that_does_not_keep_what_it_is_given_is_not_trusted(cli, db_path, monkeypatch, os_keyring):
    assert cli("remember", PHRASE).exit_code == 0
    before = sha(db_path)
    use_keyring(monkeypatch, "keyring_standin.Forgetful")
    r = cli("encrypt")
    assert r.exit_code == 1 and "did not keep the key" in r.stderr and "Nothing was changed" in r.stderr
    assert sha(db_path) == before


def test_with_the_opt_in_a_key_in_a_plain_keyring_file_is_named_as_such_everywhere(cli, db_path, tmp_path,
                                                                                    monkeypatch):
    assert cli("remember", PHRASE).exit_code == 0
    monkeypatch.setenv("MEMSAFE_ALLOW_INSECURE_KEYRING", "1")
    r = cli("encrypt")
    assert r.exit_code == 0, r.stderr
    where = f"the keyring file {keyring_file(tmp_path)} (keyrings.alt.file.PlaintextKeyring)"
    assert f"Key: a new key in {where}" in r.stdout and "OS keyring" not in r.stdout
    assert "Warning: the key is in" in r.stderr and "plain file" in r.stderr
    secret = encryption.keyring_keys(db_path)[0].secret
    from keyrings.alt.file import PlaintextKeyring

    assert PlaintextKeyring().get_password("memsafe", str(db_path)) == secret  # the file alone gives the key

    status = json.loads(cli("status", "--json").stdout)["encryption"]
    assert status["encrypted"] and status["key_source"] == where
    doctor = {c["name"]: c for c in json.loads(cli("doctor", "--json", "--no-model").stdout)["checks"]}
    assert doctor["encryption"]["level"] == "warning" and where in doctor["encryption"]["detail"]
    assert "plain file" in doctor["encryption"]["detail"] and "memsafe decrypt" in doctor["encryption"]["fix"]

    # without the opt-in the key is still read (it is where it is), but no new key goes there
    monkeypatch.delenv("MEMSAFE_ALLOW_INSECURE_KEYRING")
    r = run_memsafe("--db", str(db_path), "recall", "platypus", "--mode", "lexical", env=env_with(tmp_path))
    assert r.returncode == 0 and PHRASE in r.stdout
    before = sha(db_path)
    r = cli("rekey")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "MEMSAFE_ALLOW_INSECURE_KEYRING=1" in r.stderr and "memsafe decrypt" in r.stderr
    assert sha(db_path) == before and encryption.keyring_keys(db_path)[0].secret == secret

    # decrypt needs no opt-in and removes the entry from the file
    r = cli("decrypt")
    assert r.exit_code == 0, r.stderr
    assert PlaintextKeyring().get_password("memsafe", str(db_path)) is None


def test_doctor_says_where_a_new_key_would_go(cli, db_path, monkeypatch, os_keyring, reset_keyring):
    assert cli("remember", PHRASE).exit_code == 0
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json", "--no-model").stdout)["checks"]}
    assert checks["keyring"]["detail"] == \
        "the OS keyring (keyring standin Keyring): `memsafe encrypt` keeps a new key there"
    use_keyring(monkeypatch, "keyrings.alt.file.PlaintextKeyring")
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json", "--no-model").stdout)["checks"]}
    assert checks["keyring"]["level"] == "ok" and "plain file" in checks["keyring"]["detail"]
    assert "does not keep a key there" in checks["keyring"]["detail"]


def doctor_checks(cli) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(cli("doctor", "--json", "--no-model").stdout)["checks"]}


def test_doctor_warns_of_a_key_file_others_can_read(cli, db_path, tmp_path, monkeypatch):
    assert cli("remember", PHRASE).exit_code == 0
    key_file = tmp_path / "keys" / "k"
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(key_file))
    assert cli("encrypt").exit_code == 0
    assert doctor_checks(cli)["encryption"]["level"] == "ok"
    key_file.chmod(0o644)
    check = doctor_checks(cli)["encryption"]
    assert check["level"] == "warning" and "mode 644 (others can read it)" in check["detail"]
    assert check["fix"] == f"chmod 600 '{key_file}'" and key_file.read_text().strip() not in json.dumps(check)


def test_doctor_warns_of_a_key_file_kept_beside_the_store(cli, db_path, monkeypatch):
    """A copy of the folder (a backup, a synced folder) would carry the key with the store."""
    assert cli("remember", PHRASE).exit_code == 0
    monkeypatch.setenv("MEMSAFE_KEY_FILE", str(db_path.parent / "memory.key"))
    assert cli("encrypt").exit_code == 0
    check = doctor_checks(cli)["encryption"]
    assert check["level"] == "warning" and "in the store's own folder" in check["detail"]


def test_keyring_backends_are_judged_by_where_they_keep_keys():
    """Plain and password files are insecure, so is anything `keyring` does not recommend; a
    backend of priority >= 1 that keeps no file of its own is taken for a secure OS keyring."""
    import keyring_standin
    from keyring.backend import KeyringBackend
    from keyrings.alt import file

    class Low(KeyringBackend):
        priority = 0.5

        def get_password(self, service, username):
            return None

        def set_password(self, service, username, password):
            pass

        def delete_password(self, service, username):
            pass

    # EncryptedKeyring's constructor needs pycryptodome, which is not installed here; judging reads
    # only its class and file
    password_file = object.__new__(file.EncryptedKeyring)
    judged = {name: encryption._judge(backend) for name, backend in [
        ("plain", file.PlaintextKeyring()), ("password file", password_file), ("low", Low()),
        ("secure", keyring_standin.Keyring())]}
    assert "plain file" in judged["plain"].weakness and judged["plain"].file.name == "keyring_pass.cfg"
    assert "password typed at a terminal" in judged["password file"].weakness
    assert judged["password file"].file.name == "crypted_pass.cfg"
    assert "not recommended" in judged["low"].weakness and judged["low"].file is None
    assert judged["secure"].weakness is None and judged["secure"].where.startswith("the OS keyring (")
