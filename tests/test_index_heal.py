"""Derived indexes heal: the word index, the trigram index and the vectors are derived from the
memories, so damage to them (a crash, a sync tool, a co-writer, a tool writing the file with the
sync triggers off) is named by `doctor`, rebuilt from the memories by `doctor --repair` (and by a
write that meets it), never taken for damage to the memories, and never stops recall or remember:
recall answers from the other half meanwhile, with one note saying what is damaged and how to
repair it. Each damage is done for real to the store file (or the PostgreSQL database), and the
memories, their history and ids are compared byte for byte before and after the repair."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Cli, run_memsafe
from test_full_disk import small_disk  # noqa: F401, F811 (a fixture)
from test_upgrade import _read_only

from memsafe import api
from memsafe.api import checkup

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

TEXTS = [
    "we squash commits before merging to main",
    "the staging database is rebuilt every night by the cron job",
    "deploys go out on Tuesdays after the release review",
    "the checkout-api service retries each webhook three times",
    "alice owns the billing ledger and its nightly export",
    "use ruff for linting and pytest for the test suite",
    "the VPN config lives in /etc/wireguard/wg0.conf on every laptop",
    "postgres upgrades need a maintenance window announced a week ahead",
]
QUERY, FOUND = "how do we merge branches", 0  # found by its words and by its meaning
EXACT = "wg0.conf"  # an exact term: the trigram index finds it
NEW = "the on-call rotation changes every Monday at noon"


def _digest(store) -> str:
    """sha256 of every memory row, every history version and every tag, by id: every column but
    a memory's `embedded` flag, which is the vectors' bookkeeping (whether its vector exists)."""
    h = hashlib.sha256()
    columns = ", ".join(c for c in store.memory_columns() if c != "embedded")
    for table, select, order in (("memories", columns, "id"), ("memory_versions", "*", "id"),
                                 ("memory_tags", "*", "memory_id, tag")):
        for row in store.conn.execute(f"SELECT {select} FROM {table} ORDER BY {order}"):
            h.update(repr(tuple(row)).encode())
    return h.hexdigest()


@pytest.fixture
def filled(db_path, embedder):
    """A store holding TEXTS (embedded; the first one updated once, so it has a version): (opened, ids)."""
    opened = api.open_store(str(db_path))
    ids = [api.remember(opened.store, text, project=None).id for text in TEXTS]
    api.update(opened.store, ids[1], content=TEXTS[1] + ", then checked at six")
    api.backfill(opened.store, limit=None)
    assert opened.store.index_damage() == [] and opened.store.pending_count() == 0
    yield opened, ids
    opened.store.close()


def _raw(store, backend: str, statements: list[str]) -> None:
    """Run `statements` straight on the store's own connection, as another tool would."""
    if backend == "postgres":
        for sql in statements:
            store.conn.execute(sql)
        return
    for sql in statements:
        store.conn.execute(sql)


def _vec8(store) -> list[str]:
    """SQLite: the vector table replaced by one of 8 dimensions holding a vector per memory."""
    ids = [r[0] for r in store.conn.execute("SELECT id FROM memories")]
    values = ", ".join(f"({i}, '[{', '.join(['0.5'] * 8)}]')" for i in ids)
    return ["DROP TABLE vec_memories",
            "CREATE VIRTUAL TABLE vec_memories USING vec0(memory_id INTEGER PRIMARY KEY, "
            "embedding float[8] distance_metric=cosine)",
            f"INSERT INTO vec_memories(memory_id, embedding) VALUES {values}"]


def _out_of_step(store) -> list[str]:
    """SQLite: a memory's text rewritten with the word index's sync trigger off, then put back."""
    from memsafe.store.sqlite.indexes import canonical_schema

    return ["DROP TRIGGER memories_fts_au",
            "UPDATE memories SET content = 'we squash and merge branches into main' "
            "WHERE id = (SELECT min(id) FROM memories)",
            canonical_schema()["memories_fts_au"]]


# name -> (backend, statements or a function of the store giving them, what doctor names,
#          the half of recall that fails meanwhile: 'word', 'trigram', 'vector' or None: none fails)
DAMAGE = {
    "word index leaves deleted": ("sqlite", ["DELETE FROM memories_fts_data WHERE id > 10"],
                                  "the word index does not match the memories", "word"),
    "word index sizes deleted": ("sqlite", ["DELETE FROM memories_fts_docsize WHERE id % 2 = 0"],
                                 "8 memories but 4 entries in the word index", None),
    "word index stray entry": ("sqlite", ["INSERT INTO memories_fts_docsize VALUES (999, x'01')"],
                               "8 memories but 9 entries in the word index", None),
    "word index dropped": ("sqlite", ["DROP TABLE memories_fts"], "the word index (memories_fts) is missing", "word"),
    "word index config lost": ("sqlite", ["DELETE FROM memories_fts_config WHERE k = 'secure-delete'"],
                               "the word index keeps purged text in its pages (secure-delete is off)", None),
    "word index out of step": ("sqlite", _out_of_step, "the word index does not match the memories", None),
    "word index trigger dropped": ("sqlite", ["DROP TRIGGER memories_fts_ai"],
                                   "the word index's sync trigger memories_fts_ai is missing", None),
    "trigram index leaves deleted": ("sqlite", ["DELETE FROM memories_tri_data WHERE id > 10"],
                                     "the trigram index does not match the memories", "trigram"),
    "trigram index dropped": ("sqlite", ["DROP TABLE memories_tri"], "the trigram index (memories_tri) is missing",
                              "trigram"),
    "vector table dropped": ("sqlite", ["DROP TABLE vec_memories"],
                             "memories marked embedded but there is no vector table", None),
    "vector rows deleted": ("sqlite", ["DELETE FROM vec_memories WHERE memory_id % 2 = 0"],
                            "marked embedded without a vector", None),
    "vector chunks garbled": ("sqlite", ["UPDATE vec_memories_vector_chunks00 SET vectors = zeroblob(16)"],
                              "the vectors cannot be read", "vector"),
    # safe to heal at once: a table no vector of the model fits is made anew, every vector pending
    "vectors of the wrong size": ("sqlite", _vec8, "the vector table holds vectors of 8 dimensions", None),
    "pg word index dropped": ("postgres", ["DROP TABLE memory_fts"], "the word index (memory_fts) is missing", "word"),
    "pg word index GIN dropped": ("postgres", ["DROP INDEX memory_fts_tsv"],
                                  "the word index's GIN index (memory_fts_tsv) is missing", None),
    "pg word index rows deleted": ("postgres", ["DELETE FROM memory_fts WHERE memory_id % 2 = 0"],
                                   "full-text entries", None),
    "pg word index stale": ("postgres", ["UPDATE memory_fts SET tsv = to_tsvector('simple', 'something else') "
                             "WHERE memory_id % 2 = 0"],
                            "stale full-text rows (text changed, index not)", None),
    "pg trigram index dropped": ("postgres", ["DROP INDEX memory_fts_folded"],
                                 "the trigram index (memory_fts_folded) is missing", None),
    "pg vector index dropped": ("postgres", ["DROP INDEX memory_vectors_hnsw"],
                                "the vectors' HNSW index (memory_vectors_hnsw) is missing", None),
    "pg vector rows deleted": ("postgres", ["DELETE FROM memory_vectors WHERE memory_id % 2 = 0"],
                               "marked embedded without a vector", None),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damage_is_named_survived_and_repaired_with_the_memories_untouched(filled, backend, db_path, case):
    on, statements, named, broken = DAMAGE[case]
    if on != backend:
        pytest.skip(f"a {on} index")
    opened, ids = filled
    store = opened.store
    _raw(store, backend, statements(store) if callable(statements) else statements)

    # doctor names the damage as the indexes', not the memories'
    checks = {c.name: c for c in checkup.doctor(opened, load_model=False).checks}
    assert checks["integrity"].level == "ok", checks["integrity"]
    assert checks["indexes"].level == "error" and named in checks["indexes"].detail, checks["indexes"]
    assert "doctor --repair" in checks["indexes"].fix

    # meanwhile recall answers, from the other half when one fails, with one note saying so
    query = EXACT if broken == "trigram" else QUERY
    expected = ids[6] if broken == "trigram" else ids[FOUND]
    for mode in ("hybrid", "lexical", "vector"):
        result = api.recall(store, query, mode=mode)
        damaged = [n for n in result.notes if "index is damaged" in n]
        assert len(damaged) <= 1, (mode, result.notes)
        uses = {"hybrid": {"word", "trigram", "vector"}, "lexical": {"word", "trigram"}, "vector": {"vector"}}[mode]
        if broken in uses:
            assert len(damaged) == 1 and f"the {broken} index" in damaged[0], (mode, result.notes)
            assert "`memsafe doctor --repair`" in damaged[0]
        elif broken is None or mode == "lexical":  # (the vector half reads word counts too)
            assert damaged == [], (mode, result.notes)
        assert expected in [h.memory.id for h in result.hits], (mode, result.notes)

    # remember still stores
    new = api.remember(store, NEW).id
    before = _digest(store)

    # doctor --repair (JSON) rebuilds from the memories, leaving them as they were
    result = Cli(db_path)("doctor", "--repair", "--json", "--no-model")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert report["ok"] and report["repair"]["remaining"] == []
    assert {c["name"]: c["level"] for c in report["checks"]}["indexes"] == "ok"
    api.backfill(store, limit=None)  # what --repair leaves without the model (--no-model)
    assert _digest(store) == before
    assert store.index_damage() == []

    # and recall finds what it did before, and the new memory, by each half
    for mode in ("hybrid", "lexical", "vector"):
        result = api.recall(store, query, mode=mode)
        assert expected in [h.memory.id for h in result.hits] and not result.notes, (mode, result.notes)
        assert new in [h.memory.id for h in api.recall(store, "who is on call on Monday", mode=mode).hits], mode


def test_repair_says_what_it_did_and_reembeds(filled, backend, db_path):
    """`doctor --repair` (plain text) lists each rebuild; vectors it had to drop are recomputed
    with the model, so recall by meaning works at once."""
    opened, ids = filled
    store = opened.store
    statements = (["DROP TABLE memory_fts", "DELETE FROM memory_vectors"] if backend == "postgres"
                  else ["DELETE FROM memories_fts_data WHERE id > 10", "DELETE FROM vec_memories"])
    _raw(store, backend, statements)
    before = _digest(store)
    result = Cli(db_path)("doctor", "--repair", "--no-model")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "repaired         " in result.stdout and "word index" in result.stdout
    assert f"marked {len(TEXTS)} memories without a vector as waiting for one" in result.stdout
    # with the model: recomputed now
    _raw(store, backend, statements)
    result = Cli(db_path)("doctor", "--repair", "--json")
    report = json.loads(result.stdout)
    assert report["repair"]["reembedded"] == len(TEXTS) and report["repair"]["pending"] == 0, report["repair"]
    assert _digest(store) == before
    assert Cli(db_path)("doctor", "--repair", "--no-model").stdout.count("nothing to repair") == 1


def test_a_healthy_store_has_nothing_to_repair(filled, db_path):
    opened, _ = filled
    before = _digest(opened.store)
    result = Cli(db_path)("doctor", "--repair", "--json", "--no-model")
    assert result.exit_code == 0 and json.loads(result.stdout)["repair"]["done"] == []
    assert _digest(opened.store) == before


@pytest.mark.backends("sqlite")  # FTS5's sync triggers are SQLite's
def test_a_write_meeting_a_damaged_word_index_rebuilds_it_and_stores(filled, backend):
    """Safe to heal automatically: rebuilding an index from the rows is what a write needs to go
    on (its trigger feeds the index), writes only derived tables, and runs in the write's own
    transaction. Remember, update and forget all go through."""
    opened, ids = filled
    store = opened.store
    for n, statements in enumerate((["DROP TABLE memories_fts"], ["DROP TABLE memories_tri"],
                                    ["DELETE FROM memories_fts_data WHERE id > 10"], ["DROP TABLE memories_fts_data"],
                                    ["DELETE FROM memories_tri_data WHERE id > 10"])):
        _raw(store, backend, statements)
        before = store.counts()["active"]
        added = api.remember(store, f"note {n} after {statements[0]}").id
        assert store.counts()["active"] == before + 1
        if statements[0].startswith("DROP"):  # the write needed the index: it was made anew
            assert store.word_index_damage() == {}, statements
        else:  # FTS5 writes a new segment without reading the damaged ones: repaired on demand
            store.repair_indexes()
        assert added in [h.memory.id for h in api.recall(store, f"note {n} after", mode="lexical").hits]
    new = api.remember(store, NEW).id
    assert new in [h.memory.id for h in api.recall(store, "on-call rotation", mode="lexical").hits]
    assert store.index_damage() == []


@pytest.mark.backends("sqlite")
def test_recall_over_the_cli_and_mcp_answers_with_one_note(filled, backend, db_path):
    """A real process: recall exits 0 with its results on stdout and the one note on stderr."""
    opened, ids = filled
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10"])
    for mode in ("hybrid", "lexical"):
        done = run_memsafe("--db", str(db_path), "recall", QUERY, "--mode", mode, "--json")
        assert done.returncode == 0, done.stderr
        assert ids[FOUND] in [r["id"] for r in json.loads(done.stdout)["results"]]
        assert sum("index is damaged" in n for n in json.loads(done.stdout)["notes"]) == 1
        done = run_memsafe("--db", str(db_path), "recall", QUERY, "--mode", mode)
        assert done.returncode == 0 and TEXTS[FOUND] in done.stdout, done.stderr
        assert done.stderr.count("index is damaged") == 1 and "Traceback" not in done.stderr
    status = run_memsafe("--db", str(db_path), "doctor", "--no-model")
    assert status.returncode == 1 and "[FAIL] indexes" in status.stdout
    assert "fix: memsafe doctor --repair" in status.stdout


@pytest.mark.backends("sqlite")  # memsafe's own encryption is SQLite's
def test_an_encrypted_store_is_checked_and_repaired_through_its_key(tmp_path, monkeypatch, embedder, backend):
    """The damage is done through the key (SQLite3 Multiple Ciphers); doctor and --repair read
    and write the file through the same key, and the file stays encrypted."""
    from memsafe.store.sqlite import encryption

    monkeypatch.setenv("MEMSAFE_KEY", "a team passphrase for the store")
    db = tmp_path / "enc.db"
    opened = api.open_store(str(db))
    store = opened.store
    try:
        assert store.encrypted
        ids = [api.remember(store, text).id for text in TEXTS]
        store.conn.execute("DELETE FROM memories_fts_data WHERE id > 10")
        store.conn.execute("DELETE FROM vec_memories WHERE memory_id % 2 = 0")
        assert any("word index" in p for p in store.index_damage())
        result = api.recall(store, QUERY, mode="lexical")
        assert ids[FOUND] in [h.memory.id for h in result.hits]
        assert sum("the word index is damaged" in n for n in result.notes) == 1
        before = _digest(store)
        repaired = checkup.repair(opened)
        assert repaired.remaining == [] and repaired.reembedded == len(TEXTS) // 2, repaired
        assert _digest(store) == before and store.index_damage() == []
        assert ids[FOUND] in [h.memory.id for h in api.recall(store, QUERY, mode="lexical").hits]
    finally:
        store.close()
    assert encryption.is_encrypted(db) and b"squash" not in db.read_bytes()


@pytest.mark.backends("sqlite")
def test_mcp_recall_status_and_remember_over_a_damaged_index_reply_not_crash(filled, backend, db_path, tmp_path):
    """Over a real stdio client: recall replies with its memories and the note, status's check
    names the damage, remember stores; none is a tool error."""
    import anyio
    from test_server import is_error, text_of, with_session

    opened, ids = filled
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10", "DROP TABLE vec_memories"])
    opened.store.close()
    work = tmp_path / "srv"
    work.mkdir()

    async def body(s):
        out = {"recall": await s.call_tool("recall", {"query": QUERY, "all_projects": True}),
               "status": await s.call_tool("status", {"check": True}),
               "remember": await s.call_tool("remember", {"content": NEW, "is_global": True})}
        return out

    out = anyio.run(with_session, db_path, work, tmp_path / "home", tmp_path / "server.err", body)
    for name, reply in out.items():
        assert not is_error(reply), (name, text_of(reply))
    assert TEXTS[FOUND] in text_of(out["recall"]) and "the word index is damaged" in text_of(out["recall"])
    assert "doctor --repair" in text_of(out["status"]) and "word index" in text_of(out["status"])
    assert "Traceback" not in (tmp_path / "server.err").read_text()


@pytest.mark.backends("sqlite")
def test_repair_waits_for_another_writer_and_both_land(filled, backend, db_path):
    """A repair takes the write lock like any writer: while another process holds it, the repair
    waits, then rebuilds; the other process's memory is in the rebuilt index."""
    import subprocess
    import sys
    import time

    opened, _ = filled
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10"])
    holder = subprocess.Popen([sys.executable, "-c", f"""
import apsw, sys, time
from memsafe.store.common import tokenizer
c = apsw.Connection({str(db_path)!r}); c.setbusytimeout(30000); tokenizer.register(c)
c.execute("BEGIN IMMEDIATE")
c.execute("INSERT INTO memories(uid, content, created_at, updated_at, content_updated_at, content_hash) "
          "VALUES ('held-1', 'a memory written while the repair waits for the lock', '2026-01-01T00:00:00Z', "
          "'2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 'h')")
print('locked', flush=True); time.sleep(1.5); c.execute("COMMIT")
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        done = opened.store.repair_indexes()
        assert time.monotonic() - started > 0.5 and "rebuilt the word index from the memories" in done, done
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert opened.store.word_index_damage() == {}
    hits = api.recall(opened.store, "written while the repair waits", mode="lexical").hits
    assert "waits for the lock" in hits[0].memory.content


@pytest.mark.backends("sqlite")
def test_on_a_full_disk_repair_says_it_cannot_and_recall_still_answers(small_disk, embedder, backend):  # noqa: F811
    """A repair writes (the rebuilt index takes pages): on a full disk it fails in one line naming
    the disk, exit 1, the file unchanged; recall still answers by vector with the note."""
    from test_full_disk import digest, fill

    db = small_disk / "memory.db"
    opened = api.open_store(str(db))
    try:
        ids = [api.remember(opened.store, text).id for text in TEXTS]
        opened.store.conn.execute("DELETE FROM memories_fts_data WHERE id > 10")
        opened.store.checkpoint()
    finally:
        opened.store.close()
    fill(small_disk)
    before = digest(db)
    repair = run_memsafe("--db", str(db), "doctor", "--repair", "--no-model")
    lines = repair.stderr.strip().splitlines()
    assert repair.returncode == 1 and len(lines) == 1 and "full" in lines[0], repair.stderr
    assert "Traceback" not in repair.stderr and digest(db) == before
    recall = run_memsafe("--db", str(db), "recall", QUERY, "--json")
    assert recall.returncode == 0, recall.stderr
    found = json.loads(recall.stdout)
    assert ids[FOUND] in [r["id"] for r in found["results"]]
    assert sum("the word index is damaged" in n for n in found["notes"]) == 1
    doctor = run_memsafe("--db", str(db), "doctor", "--no-model")
    assert "[FAIL] indexes" in doctor.stdout and "[FAIL] disk" in doctor.stdout


def test_memsafe_embed_recomputes_vectors_lost_from_the_table(filled, backend, db_path):
    """Safe to heal at once: a memory marked embedded whose vector is gone is never found by
    meaning; `memsafe embed` (what the detached embedder and a person run) marks it pending
    and computes it again, writing only vectors and the flag."""
    opened, ids = filled
    store = opened.store
    table = "memory_vectors" if backend == "postgres" else "vec_memories"
    _raw(store, backend, [f"DELETE FROM {table} WHERE memory_id = {ids[FOUND]}"])
    assert store.index_damage() == ["1 memory marked embedded without a vector"]
    before = _digest(store)
    result = Cli(db_path)("embed")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert store.index_damage() == [] and _digest(store) == before
    assert ids[FOUND] in [h.memory.id for h in api.recall(store, "combining branches", mode="vector").hits]


@pytest.mark.backends("sqlite")
def test_update_and_purge_over_a_damaged_word_index_go_through(filled, backend, db_path):
    """An update rewrites the index entry of its text (FTS5 reads the damaged pages to delete the
    old one): rolled back, the index rebuilt, and the update run again; a purge likewise; each
    exits 0 and the index is sound after."""
    opened, ids = filled
    cli = Cli(db_path)
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10"])
    result = cli("update", str(ids[2]), "--content", TEXTS[2] + ", and on Thursdays")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Thursdays" in api.get(opened.store, ids[2]).content
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10"])
    result = cli("purge", str(ids[3]), "--yes")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert opened.store.index_damage() == []
    assert [h.memory.id for h in api.recall(opened.store, "Thursdays release review", mode="lexical").hits][:1] \
        == [ids[2]]


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("heal", ["doctor --repair", "remember"])
def test_leaf_pages_of_the_word_index_overwritten_on_disk(tmp_path, embedder, backend, heal):
    """40 notes; two leaf pages of the word index's data table (found with dbstat) overwritten
    with noise in the file. Recall (hybrid and lexical) answers by meaning with the note, and
    doctor names the word index (not the memories). `doctor --repair` rebuilds it, and so does the
    first remember, which needs it (SQLite cannot even read those pages to drop them: the index
    leaves the schema, and a VACUUM rewrites the file without them), leaving every memory as it
    was and a file that passes `PRAGMA integrity_check`."""
    import os

    db = tmp_path / "pages.db"
    opened = api.open_store(str(db))
    store = opened.store
    for i in range(40):
        api.remember(store, f"note {i}: service {i} is deployed with the {['blue', 'green', 'red', 'amber'][i % 4]} "
                            "switch after the review " * 6, embed_now=False)
    target = api.remember(store, TEXTS[FOUND]).id
    api.backfill(store, limit=None)
    pages = [r[0] for r in store.conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'memories_fts_data' AND pagetype = 'leaf' ORDER BY pageno")]
    page_size = store.conn.execute("PRAGMA page_size").fetchone()[0]
    store.checkpoint()
    before = _digest(store)
    store.close()
    assert len(pages) >= 2
    with open(db, "r+b") as f:
        for page in pages[:2]:
            f.seek((page - 1) * page_size)
            f.write(os.urandom(page_size))

    for mode in ("hybrid", "lexical"):
        done = run_memsafe("--db", str(db), "recall", QUERY, "--mode", mode, "--json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert target in [r["id"] for r in found["results"]], found
        assert sum("the word index is damaged" in n for n in found["notes"]) == 1, found["notes"]
    doctor = json.loads(run_memsafe("--db", str(db), "doctor", "--json", "--no-model").stdout)
    checks = {c["name"]: c for c in doctor["checks"]}
    assert checks["integrity"]["level"] == "ok" and checks["indexes"]["level"] == "error", checks

    if heal == "doctor --repair":
        done = run_memsafe("--db", str(db), "doctor", "--repair", "--json")
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"], done.stdout + done.stderr
        assert "rewrote the file without the unreadable pages (VACUUM)" in report["repair"]["done"]
    added = run_memsafe("--db", str(db), "remember", NEW, "--global")
    assert added.returncode == 0 and "Remembered memory" in added.stdout, added.stderr
    opened = api.open_store(str(db))
    try:
        store = opened.store
        assert store.index_damage() == [] and store.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert store.counts()["active"] == 42
        new = store.conn.execute("SELECT max(id) FROM memories").fetchone()[0]
        with store.write():
            store.delete_memories([new])  # what remember added: the rest as it was
        assert _digest(store) == before
        for mode in ("lexical", "vector"):
            result = api.recall(store, QUERY, mode=mode)
            assert target in [h.memory.id for h in result.hits] and not result.notes, (mode, result.notes)
    finally:
        store.close()


@contextmanager
def _unwritable(how: str, db: Path) -> Iterator[Path]:
    """The store made unwritable for this process, even for root: its file (`chattr +i`, or mode
    0444 for other users), its file and folder, or a read-only bind mount of its folder.
    Yields the path to open it by."""
    if how == "mount":
        view = db.parent.parent / "read-only-view"
        view.mkdir()
        done = subprocess.run(["mount", "--bind", str(db.parent), str(view)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {done.stderr.strip() or done.returncode}")
        try:
            done = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot remount read-only here: {done.stderr.strip() or done.returncode}")
            yield view / db.name
        finally:
            subprocess.run(["umount", "-l", str(view)], check=False)
        return
    with _read_only(db, *([db.parent] if how == "folder" else [])):
        yield db


@pytest.mark.backends("sqlite")  # file modes and mounts are SQLite's; a PostgreSQL role is the server's
@pytest.mark.parametrize("how", ["file", "folder", "mount"])
@pytest.mark.parametrize("case", ["word index leaves deleted", "trigram index leaves deleted",
                                  "vector chunks garbled"])
def test_a_read_only_store_with_a_damaged_index_answers_and_says_to_repair_with_write_access(
        filled, backend, db_path, how, case):
    """Nothing can be rebuilt where the store cannot be written: recall and get answer from the
    intact half with one note saying to run `memsafe doctor --repair` with write access; doctor
    names the damage and the read-only store; repair and writes refuse in one line; nothing
    is written to the file."""
    opened, ids = filled
    _on, statements, named, broken = DAMAGE[case]
    _raw(opened.store, backend, statements)
    opened.store.close()
    query = EXACT if broken == "trigram" else QUERY
    expected = TEXTS[6] if broken == "trigram" else TEXTS[FOUND]
    files = sorted(db_path.parent.iterdir())
    before = {p.name: p.read_bytes() for p in files}
    with _unwritable(how, db_path) as db:
        for mode in ("hybrid", "lexical", "vector"):
            done = run_memsafe("--db", str(db), "recall", query, "--mode", mode)
            assert done.returncode == 0 and expected in done.stdout, (mode, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr
            uses = {"hybrid": {"word", "trigram", "vector"}, "lexical": {"word", "trigram"}, "vector": {"vector"}}
            notes = [line for line in done.stderr.splitlines() if "index is damaged" in line]
            if broken in uses[mode]:
                assert len(notes) == 1 and f"the {broken} index" in notes[0], (mode, done.stderr)
                assert "`memsafe doctor --repair`, run with write access to the store" in notes[0]
        done = run_memsafe("--db", str(db), "recall", query, "--json")
        assert done.returncode == 0 and sum("write access" in n for n in json.loads(done.stdout)["notes"]) == 1
        shown = run_memsafe("--db", str(db), "get", str(ids[FOUND]))
        assert shown.returncode == 0 and TEXTS[FOUND] in shown.stdout, shown.stderr
        doctor = run_memsafe("--db", str(db), "doctor", "--no-model")
        assert doctor.returncode == 1 and "[FAIL] indexes" in doctor.stdout and named in doctor.stdout
        assert "[WARN] access" in doctor.stdout and "run with write access" in doctor.stdout
        for args in (("doctor", "--repair", "--no-model"), ("remember", NEW, "--no-embed")):
            refused = run_memsafe("--db", str(db), *args)
            assert refused.returncode == 1 and "read-only" in refused.stderr, (args, refused.stderr)
            assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    # nothing written: the file as it was; in a writable folder SQLite may add its empty WAL and index
    after = {p.name: p.read_bytes() for p in sorted(db_path.parent.iterdir())}
    assert after[db_path.name] == before[db_path.name]
    assert set(after) - set(before) <= {f"{db_path.name}-wal", f"{db_path.name}-shm"}
    assert after.get(f"{db_path.name}-wal", b"") == before.get(f"{db_path.name}-wal", b"")
    # with write access again, doctor --repair heals it and the note goes
    assert run_memsafe("--db", str(db_path), "doctor", "--repair", "--no-model").returncode == 0
    done = run_memsafe("--db", str(db_path), "recall", query)
    assert done.returncode == 0 and expected in done.stdout and "index is damaged" not in done.stderr


@pytest.mark.backends("sqlite")
def test_mcp_over_a_read_only_store_with_a_damaged_index_answers_and_refuses_writes(filled, backend, db_path,
                                                                                     tmp_path):
    """A real MCP client over stdio, the store on a read-only mount: recall and get_memory answer
    with the note to repair with write access; remember is one tool error; the server logs no
    traceback."""
    import anyio
    from test_server import is_error, text_of, with_session

    opened, ids = filled
    _raw(opened.store, backend, ["DELETE FROM memories_fts_data WHERE id > 10"])
    opened.store.close()
    work = tmp_path / "srv"
    work.mkdir()

    async def body(s):
        return {"recall": await s.call_tool("recall", {"query": QUERY, "all_projects": True}),
                "get": await s.call_tool("get_memory", {"id": ids[FOUND], "all_projects": True}),
                "status": await s.call_tool("status", {"check": True}),
                "remember": await s.call_tool("remember", {"content": NEW, "is_global": True})}

    with _unwritable("mount", db_path) as db:
        out = anyio.run(with_session, db, work, tmp_path / "home", tmp_path / "server.err", body)
    for name in ("recall", "get", "status"):
        assert not is_error(out[name]), (name, text_of(out[name]))
    assert TEXTS[FOUND] in text_of(out["recall"]) and TEXTS[FOUND] in text_of(out["get"])
    assert "`memsafe doctor --repair`, run with write access to the store" in text_of(out["recall"])
    assert is_error(out["remember"]) and "read-only" in text_of(out["remember"])
    assert len(text_of(out["remember"]).strip().splitlines()) == 1
    assert "Traceback" not in (tmp_path / "server.err").read_text()
