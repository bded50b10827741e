"""A store on a full disk, on a real 16 MiB tmpfs (mounting needs root; skipped where it is not
allowed): every read command answers, skipping its bookkeeping (a recall's embedding of pending
memories, a get's use count) without an error; every write fails in one line naming the full disk,
exit 1, and leaves the store as it was; `doctor` reports it. Both when no other process has the
store open (no `-shm` file exists, and none can be made) and when one has."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import apsw
import pytest
from conftest import Cli
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memsafe import api
from memsafe.store.sqlite import DISK_FULL_BYTES, free_bytes

DEPLOY = "Alice deploys the billing service on Fridays after the freeze"
SECOND = "the staging database is rebuilt every night by Bob"
PENDING = "a note about deploying billing that has no vector yet"


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs mounted at tmp_path/disk for this test (unmounted after it)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip() or done.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write zeros into `folder` until its file system has no byte left."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1 << 9, 1):
            chunk = b"\0" * size
            try:
                while True:
                    f.write(chunk)
            except OSError:
                continue
    assert free_bytes(folder / "x") < DISK_FULL_BYTES


def make_store(db: Path, embedder, *, leave_wal: bool = False) -> dict[str, int]:
    """A store holding two embedded memories (one with an older version), one pending, on `db`;
    with `leave_wal`, the pending one is in the WAL only (closed without a checkpoint)."""
    opened = api.open_store(str(db))
    store = opened.store
    try:
        first = api.remember(store, DEPLOY, kind="fact")
        api.remember(store, SECOND)
        api.update(store, first.id, content=DEPLOY + ", never on holidays")
        api.backfill(store, limit=None)
        if leave_wal:
            store.checkpoint()
            store.no_checkpoint_on_close()
        pending = api.remember(store, PENDING, embed_now=False)
        assert store.pending_count() == 1
    finally:
        store.close()
    return {"first": first.id, "pending": pending.id}


def digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def state_of(db: Path, monkeypatch) -> tuple:
    """(memories, versions, entities, integrity, every content) of the store, read after the disk has room."""
    opened = api.open_store(str(db))
    try:
        counts = opened.store.counts()
        rows = sorted(r[0] for r in opened.store.conn.execute("SELECT content FROM memories"))
        return counts["total"], counts["versions"], counts["entities"], opened.store.integrity_check(), rows
    finally:
        opened.store.close()


@pytest.fixture(params=["closed", "open elsewhere", "encrypted", "WAL left without -shm"])
def full_store(request, small_disk, embedder, monkeypatch):
    """(store path, ids) of a store on a disk with no byte free. "closed": nothing has it open, so
    no `-shm` exists; "open elsewhere": another connection holds it open (as a running server
    does), so its `-shm` exists; "encrypted": closed, and opened with a key; "WAL left without
    -shm": the last memory is in the WAL only, whose index file is gone (as after a crash)."""
    if request.param == "encrypted":
        monkeypatch.setenv("MEMSAFE_KEY", "msk1-" + "ab" * 32)
    db = small_disk / "memory.db"
    leave_wal = request.param == "WAL left without -shm"
    ids = make_store(db, embedder, leave_wal=leave_wal)
    if leave_wal:
        assert PENDING.encode() in Path(f"{db}-wal").read_bytes()
        Path(f"{db}-shm").unlink()
    holder = None
    if request.param == "open elsewhere":
        holder = apsw.Connection(str(db))
        holder.execute("SELECT count(*) FROM memories").fetchone()
        assert Path(f"{db}-shm").exists()
    else:
        assert not Path(f"{db}-shm").exists()
    fill(small_disk)
    yield db, ids
    if holder is not None:
        holder.close()


READS = [
    (("recall", "deploy billing"), DEPLOY),
    (("recall", "deploy billing", "--mode", "lexical"), DEPLOY),
    (("recall", "deploy billing", "--mode", "vector"), DEPLOY),
    (("recall", "deploy billing", "--json"), DEPLOY),
    (("get", "{first}"), DEPLOY),
    (("list",), "staging database"),
    (("history", "{first}"), "2 versions"),
    (("status",), "memories"),
    (("graph", "entities"), "Bob"),
    (("graph", "show", "Bob"), "staging database"),
    (("export",), "staging database is rebuilt"),
]


def test_every_read_command_answers_on_a_full_disk(full_store, monkeypatch):
    db, ids = full_store
    cli = Cli(db)
    before = digest(db)
    for args, expected in READS:
        args = tuple(a.format(**ids) for a in args)
        r = cli(*args)
        assert r.exit_code == 0, (args, r.stdout, r.stderr)
        assert expected in r.stdout, (args, r.stdout)
        assert "Error" not in r.stderr and "full" not in r.stderr, (args, r.stderr)
    assert digest(db) == before  # nothing was written into the store
    r = cli("recall", "a note about deploying billing")
    assert r.exit_code == 0 and PENDING in r.stdout  # the pending memory is still found, by its words
    (db.parent / "filler").unlink()
    assert state_of(db, monkeypatch)[3] == "ok"


WRITES = [
    ("remember", "the release train leaves at noon"),
    ("import", "{export}"),
    ("update", "{first}", "--content", "rewritten on a full disk"),
    ("forget", "{first}"),
    ("config", "set", "token_budget", "1500"),
    ("graph", "add-entity", "Carol"),
    ("decay",),
    ("embed",),
]


def test_every_write_fails_in_one_line_and_changes_nothing_on_a_full_disk(full_store, tmp_path, monkeypatch,
                                                                           embedder):
    db, ids = full_store
    source, export = tmp_path / "source.db", tmp_path / "in.jsonl"  # a plain store on a disk with room
    with monkeypatch.context() as m:
        m.delenv("MEMSAFE_KEY", raising=False)
        opened = api.open_store(str(source))
        api.remember(opened.store, "imported while the disk was full", embed_now=False)
        opened.store.close()
        assert Cli(source)("export", "-o", str(export)).exit_code == 0
    cli = Cli(db)
    free = db.parent / "filler"
    fill_size = free.stat().st_size
    for args in WRITES:
        args = tuple(a.format(export=export, **ids) for a in args)
        r = cli(*args)
        assert r.exit_code == 1, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"the disk holding {db} is full" in lines[0], (args, r.stderr)
        assert "Traceback" not in r.stderr
    os.truncate(free, fill_size - 4 * DISK_FULL_BYTES)  # room again: the store is as it was
    total, versions, _entities, integrity, contents = state_of(db, monkeypatch)
    assert (total, versions, integrity) == (3, 1, "ok")
    assert not any("release train" in c or "imported while" in c or "rewritten" in c for c in contents)
    assert Cli(db)("get", str(ids["first"]), "--json").stdout.count('"status": "active"') == 1


def test_doctor_reports_a_full_disk(full_store):
    db, _ = full_store
    r = Cli(db)("doctor", "--no-model")
    assert r.exit_code == 1
    assert f"[FAIL] disk         the disk holding {db.parent} is full" in r.stdout
    assert "Problems found" in r.stdout
    checks = {c["name"]: c for c in json.loads(Cli(db)("doctor", "--no-model", "--json").stdout)["checks"]}
    assert checks["disk"]["level"] == "error" and "free some space" in checks["disk"]["fix"]


def test_doctor_reports_the_free_space_of_a_disk_with_room(cli, db_path):
    assert cli("remember", DEPLOY).exit_code == 0
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--no-model", "--json").stdout)["checks"]}
    assert checks["disk"]["level"] in ("ok", "warning") and "MiB free on the disk holding" in checks["disk"]["detail"]


def test_a_new_store_on_a_full_disk_fails_in_one_line(small_disk, tmp_path):
    fill(small_disk)
    db = small_disk / "new" / "memory.db"
    r = subprocess.run([sys.executable, "-m", "memsafe", "--db", str(db), "remember", "anything"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"Error: cannot create {db}: the disk holding it is full; free some space and try again"
    assert list(db.parent.iterdir()) == []  # no empty file left to be taken for a store later


async def _mcp_calls(db: Path, home: Path, first: int) -> dict[str, tuple[bool, str]]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db), "serve"],
                                   env={**os.environ, "MEMSAFE_HOME": str(home)}, cwd=str(home))
    calls = {"recall": {"query": "deploy billing"}, "get_memory": {"id": first}, "status": {},
             "query_graph": {"entity": "Bob"}, "remember": {"content": "the release train leaves at noon"}}
    out = {}
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for name, arguments in calls.items():
                    result = await session.call_tool(name, arguments)
                    out[name] = (result.is_error, result.content[0].text)
    return out


def test_mcp_tools_read_on_a_full_disk_and_a_remember_is_a_tool_error(full_store, tmp_path, embedder):
    db, ids = full_store
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    out = anyio.run(_mcp_calls, db, home, ids["first"])
    for name in ("recall", "get_memory", "status", "query_graph"):
        assert out[name][0] is False, (name, out[name])
    assert "Alice deploys the billing service" in out["recall"][1] and "never on holidays" in out["get_memory"][1]
    error, text = out["remember"]
    assert error and f"the disk holding {db} is full" in text and "\n" not in text.strip()
