"""The word index finds and ranks the same memories on both backends (lexical quality on
PostgreSQL within 2 points of SQLite): the words FTS5's `porter unicode61 remove_diacritics 2`
cuts, not PostgreSQL's parser (paths, versions, e-mail addresses and dotted names kept whole,
hyphenated words indexed whole and in parts) nor its Snowball stemmer; and a PostgreSQL store made
before this change gets its word index rebuilt, with nothing lost."""

from __future__ import annotations

import pytest

from memsafe import api
from memsafe.models import Scope
from memsafe.recall import terms
from memsafe.store.sqlite.fulltext import SQLiteFullText

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

TEXTS = [
    "restart the checkout api pod when the queue backs up",  # 0: `checkout-api` as two words
    "the checkout-api service retries each webhook three times, then the checkout-api gives up",
    "settings live in /etc/harbor/config.toml on every host",  # 2: a path
    "the outage ended after we upgraded to v2.4.7 last week",  # 3: a version
    "page alice@example.com when the ledger lags",  # 4: an e-mail address
    "call rich.console.print to colour the output",  # 5: a dotted name
    "the nightly build broke on the release branch",  # 6: Porter keeps `nightli`; Snowball says `night`
    "we generate the client from the OpenAPI schema",  # 7: Porter `gener` (as `general`); Snowball `generat`
    "the Café order form rejects empty names",  # 8: a diacritic
    "a night of downtime is in the general plan, that is all it is",  # 9
    "the api of checkout calls the api of billing: checkout-api, api, api",  # 10: a phrase once, its words often
]

# query -> the memories (indexes into TEXTS) the word index finds, as FTS5 finds them
FOUND = {
    "checkout-api": {0, 1, 10},  # a phrase: the two words in a row, hyphen or not
    "harbor config": {2},  # inside a path
    "v2": {3},  # a version's first part
    "alice": {4},  # an e-mail address's name
    "console": {5},  # a dotted name's part
    "night": {9},  # not `nightly`: Porter does not fold them
    "general": {7, 9},  # Porter folds `generate` with `general`
    "cafe": {8},  # diacritics removed
    "that is it": {9},  # only stop words: kept, and found (no stop-word list in the index)
}


@pytest.fixture
def filled(store):
    return store, [api.remember(store, text, embed_now=False).id for text in TEXTS]


def _words(store, query: str, limit: int = 20) -> list[tuple[int, float]]:
    """The word index's hits for a free-text query, best first, with their BM25 scores."""
    match = terms.fts_query(query)
    return list(store.fts_search(match, Scope(), limit))


@pytest.mark.parametrize("query", list(FOUND))
def test_the_word_index_finds_what_fts5_finds(filled, query):
    store, ids = filled
    found = {ids.index(i) for i, _ in _words(store, query)}
    assert found == FOUND[query]


@pytest.mark.parametrize("query", list(FOUND) + ["checkout webhook retries", "the host that lags"])
def test_bm25_scores_and_order_are_fts5s(filled, query):
    """The scores are those of an FTS5 table holding the same texts (document lengths, term
    frequencies and document frequencies all counted on FTS5's tokens)."""
    store, ids = filled
    expected, _, _ = SQLiteFullText.scratch_lexical(dict(zip(ids, TEXTS)), terms.fts_terms(query), 20)
    got = _words(store, query)
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)


def test_rewritten_text_is_found_by_its_new_words_only(filled):
    store, ids = filled
    api.update(store, ids[3], content="the outage ended after we moved to release 3.0.1")
    assert {ids.index(i) for i, _ in _words(store, "v2")} == set()
    assert {ids.index(i) for i, _ in _words(store, "release")} == {3, 6}
    assert store.consistency_problems() == []


def test_a_stale_word_index_entry_is_reported(filled, backend):
    store, ids = filled
    assert store.consistency_problems() == []
    if backend == "sqlite":
        return  # FTS5's own triggers: no entry of ours to spoil
    store.conn.execute("UPDATE memory_fts SET tsv = to_tsvector('simple', 'something else') WHERE memory_id = ?",
                       (ids[2],))
    assert store.consistency_problems() == ["1 stale full-text row (text changed, index not)"]


def test_a_huge_text_of_distinct_words_is_stored_and_found(store):
    """1 MB of distinct words overflows a PostgreSQL tsvector (1 MB of lexemes and positions): the
    memory is stored all the same, its first words are found, and the index is consistent."""
    from memsafe.bench.inputs import make_input

    text = make_input("base64")
    memory = api.remember(store, text, embed_now=False)
    first = terms.query_terms(text)[0]
    assert [i for i, _ in _words(store, first)] == [memory.id]
    assert store.consistency_problems() == []


def test_term_counts_follow_every_write_to_the_file(store, db_path):
    """Document frequencies feed the vector half's common words and the lexical coverage; SQLite
    keeps the ones it counted while the file is unchanged. A write on this connection
    or a commit by another connection (another process: the MCP server beside the CLI) must be
    seen by the next count, on both backends."""
    term = '"zebra"'
    assert store.fts_term_stats([term], [])[:2] == (0, {term: 0})
    first = api.remember(store, "a zebra crossed the parking lot").id
    assert store.fts_term_stats([term], [])[:2] == (1, {term: 1})
    other = api.open_store(str(db_path)).store
    try:
        second = api.remember(other, "the zebra came back the next morning").id
    finally:
        other.close()
    n, df, matches = store.fts_term_stats([term], [first, second])
    assert (n, df, matches) == (2, {term: 2}, {term: {first, second}})
    assert store.fts_term_stats([term], [])[:2] == (2, {term: 2})
    api.purge(store, [first])
    assert store.fts_term_stats([term], [])[:2] == (1, {term: 1})


def test_term_counts_never_keep_a_write_that_rolled_back(store):
    """A write that fails half-way leaves nothing behind, and no count remembers it either: a
    document frequency counted inside a transaction that then rolls back is not kept (SQLite's
    `total_changes()` still counts the rolled-back rows, so the connection's state looks the same
    before and after: the count would outlive the write), on both backends."""
    term = '"zebra"'
    api.remember(store, "a zebra crossed the parking lot", embed_now=False)
    assert store.fts_term_stats([term], [])[:2] == (1, {term: 1})
    with pytest.raises(RuntimeError, match="half-way"), store.write():
        added = api.remember(store, "the zebra came back the next morning", embed_now=False).id
        assert store.fts_term_stats([term], [])[:2] == (2, {term: 2})  # this write sees its own row
        assert store.fts_term_stats([term], [added])[1:] == ({term: 2}, {term: {added}})
        raise RuntimeError("half-way")
    assert store.get_memory(added) is None
    assert store.fts_term_stats([term], [])[:2] == (1, {term: 1})
    assert store.fts_term_stats([term], [added])[1:] == ({term: 1}, {term: set()})


def _unmerged(store) -> list[str]:
    """The SQLite lexical indexes still held in more than one piece: one page of FTS5's
    incremental optimize, rolled back, changes at least 2 rows exactly when there is something
    to merge (FTS5 documentation, the 'merge' command)."""
    out = []
    for table in ("memories_fts", "memories_tri"):
        store.conn.execute("SAVEPOINT probe")
        before = store.conn.total_changes()
        store.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', -1)")
        if store.conn.total_changes() - before >= 2:
            out.append(table)
        store.conn.execute("ROLLBACK TO probe")
        store.conn.execute("RELEASE probe")
    return out


def _written_one_by_one(store, n: int = 40, start: int = 0) -> list[int]:
    return [api.remember(store, f"rollout {i} of the zq{i} billing worker in region {i % 5}", embed_now=False).id
            for i in range(start, start + n)]


@pytest.mark.backends("sqlite")
def test_compacting_merges_the_word_index_and_finds_the_same(store):
    """Memories written one transaction each leave FTS5's indexes in pieces (each query term is
    looked up in every piece: ~0.8 ms of a recall at 1,000 memories); compacting
    merges them into one and changes no search result, exact matches included."""
    _written_one_by_one(store)
    assert _unmerged(store) == ["memories_fts", "memories_tri"]
    queries = ["billing worker region", "zq17", "rollout"]
    before = [(_words(store, q), store.exact_search(["zq17"], Scope(), 20)) for q in queries]
    assert store.compact_word_index() is True
    assert _unmerged(store) == []
    assert [(_words(store, q), store.exact_search(["zq17"], Scope(), 20)) for q in queries] == before
    assert store.consistency_problems() == []
    assert store.compact_word_index() is True  # nothing left: a no-op


@pytest.mark.backends("sqlite")
def test_compacting_yields_to_the_callers_transaction_and_to_its_deadline(store):
    _written_one_by_one(store)
    with store.write():
        assert store.compact_word_index() is False  # the caller's writes come first
    assert _unmerged(store) == ["memories_fts", "memories_tri"]
    assert store.compact_word_index(max_seconds=0) is False
    assert _unmerged(store) == ["memories_fts", "memories_tri"]


@pytest.mark.backends("sqlite")
def test_compacting_gives_up_while_another_writer_keeps_writing(store):
    """FTS5's optimize merges every piece into one, so a text written between two of its steps
    starts the rewrite of the whole index again: beside a writer that never pauses, the
    compaction ran until the writer stopped (without end on a busy server's store: a cron
    decay never returned). It gives up after two rewrites' worth of steps, index sound."""
    _written_one_by_one(store)
    other = api.open_store(str(store.path)).store
    written = []

    def between_steps(cursor, sql, bindings):  # another connection commits a text before each step
        if sql.startswith("BEGIN IMMEDIATE") and len(written) < 100:
            written.append(api.remember(other, f"zq{len(written)} note written during the compaction",
                                        embed_now=False).id)
        return True

    store.conn.exec_trace = between_steps
    try:
        assert store.compact_word_index() is False
        assert len(written) < 100  # it stopped by itself, the writer was still writing
    finally:
        store.conn.exec_trace = None
        other.close()
    assert store.consistency_problems() == []
    assert store.compact_word_index() is True  # once the writer is quiet
    assert _unmerged(store) == []


@pytest.mark.backends("sqlite")
def test_compacting_gives_way_to_another_writers_long_transaction(store, monkeypatch):
    """Maintenance after an import, a decay or `memsafe embed` that are done: another writer holding
    the lock (an import in progress) made `memsafe embed` with nothing to do wait 30 s, then exit 1
    ("stayed locked ... try again"). The compaction waits COMPACT_WAIT_MS and stops (False)."""
    import apsw

    from memsafe.store.sqlite import fulltext

    monkeypatch.setattr(fulltext, "COMPACT_WAIT_MS", 50, raising=False)
    _written_one_by_one(store)
    other = apsw.Connection(str(store.path))
    other.execute("BEGIN IMMEDIATE")  # another writer, in the middle of a long transaction
    try:
        assert store.compact_word_index() is False
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _unmerged(store) == ["memories_fts", "memories_tri"]
    assert store.compact_word_index() is True


@pytest.mark.backends("sqlite")
def test_compacting_on_a_full_disk_stops_and_a_write_says_the_disk_is_full(store):
    """The compaction rewrites the whole index: on a full disk it stops (rolled back, False) instead
    of failing the command that ran it; and a write that fills the disk says so, not "cannot
    rollback - no transaction is active" (SQLite had rolled the transaction back itself)."""
    from memsafe.store.sqlite import DiskFull

    _written_one_by_one(store)
    store.checkpoint()
    store.conn.execute(f"PRAGMA max_page_count = {store.conn.execute('PRAGMA page_count').fetchone()[0]}")
    assert store.compact_word_index() is False  # the merged index needs pages the file cannot have
    assert not store.conn.in_transaction
    with pytest.raises(DiskFull, match="cannot grow"), store.write():
        api.remember(store, "a text too long for the pages left " * 200, embed_now=False)
    store.conn.execute("PRAGMA max_page_count = 1073741823")
    assert store.consistency_problems() == []
    assert store.compact_word_index() is True


@pytest.mark.backends("sqlite")
def test_maintenance_leaves_the_word_index_compact(store, tmp_path):
    """Where memsafe already does maintenance, the word index ends compact: a decay run (cron's)
    and an import of at least a tenth of the store (a bulk write). A compaction rewrites the whole
    index (~2.5 s at 100,000 memories): a smaller import, or `memsafe embed` (which writes no
    text), leaves it as it is."""
    from memsafe.api import transfer

    def exported(n: int, start: int):
        path = tmp_path / f"import-{start}.jsonl"
        other = api.open_store(str(tmp_path / f"other-{start}.db")).store
        try:
            _written_one_by_one(other, n, start=start)
            api.export_to_path(other, path)
        finally:
            other.close()
        return path

    _written_one_by_one(store)
    assert _unmerged(store)
    api.decay(store)
    assert _unmerged(store) == []
    _written_one_by_one(store, 10, start=100)
    pieces = _unmerged(store)
    assert pieces
    transfer.embed_pending(store)
    api.import_file(store, exported(4, start=300))  # 4 of 54: under a tenth
    assert _unmerged(store) == pieces
    api.import_file(store, exported(6, start=400))  # 6 of 60: a tenth
    assert _unmerged(store) == []


def test_compacting_is_safe_on_every_backend(filled):
    store, ids = filled
    before = {q: _words(store, q) for q in FOUND}
    assert store.compact_word_index() is True
    assert {q: _words(store, q) for q in FOUND} == before


@pytest.mark.backends("sqlite")
def test_the_server_compacts_the_word_index_once_remembers_stop(db_path, embedder, monkeypatch):
    """An MCP server's remembers leave the word index in pieces; once they have stopped for
    COMPACT_IDLE_S, its warm thread (the one that embeds them) compacts it, and not before."""
    import time

    import anyio
    from mcp import Client

    from memsafe.mcp import tools as server

    monkeypatch.setattr(server, "COMPACT_IDLE_S", 3600.0)
    srv = server.build_server(str(db_path))

    async def remember_all():
        async with Client(srv) as client:
            for i in range(30):
                await client.call_tool("remember", {"content": f"rollout {i} of the zq{i} billing worker"})

    anyio.run(remember_all)
    state = srv.memsafe
    try:
        deadline = time.monotonic() + 60
        while state._embedded < state._submitted and time.monotonic() < deadline:  # all embedded
            time.sleep(0.05)
        time.sleep(1.5)  # a few quiet seconds of the warm thread: still too soon to compact
        opened = api.open_store(str(db_path))
        try:
            assert _unmerged(opened.store) == ["memories_fts", "memories_tri"]
            monkeypatch.setattr(server, "COMPACT_IDLE_S", 0.1)
            while _unmerged(opened.store) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _unmerged(opened.store) == []
            assert len(_words(opened.store, "billing worker")) == 20  # the search's limit: all still found
        finally:
            opened.store.close()
    finally:
        state.stopping.set()


@pytest.mark.backends("sqlite")
def test_the_server_tries_an_unfinished_compaction_again_only_after_as_much_quiet(db_path, embedder, monkeypatch):
    """A compaction the server's warm thread could not finish (here: another process holds the
    write lock, as an import does) is tried again only after COMPACT_IDLE_S more: retried each
    quiet second, a server beside a busy writer rewrote the whole index without end. And it
    never ends the warm thread: waiting 30 s for the lock raised StoreUnavailable there, which
    stopped the server's embedding for good."""
    import time

    import apsw

    from memsafe.mcp import tools as server
    from memsafe.store import SQLiteStore
    from memsafe.store.sqlite import fulltext

    monkeypatch.setattr(fulltext, "COMPACT_WAIT_MS", 50, raising=False)
    opened = api.open_store(str(db_path))
    _written_one_by_one(opened.store)
    tries = []
    compact = SQLiteStore.compact_word_index

    def counted(self, *args, **kwargs):
        tries.append(time.monotonic())
        return compact(self, *args, **kwargs)

    monkeypatch.setattr(SQLiteStore, "compact_word_index", counted)
    state = server.build_server(str(db_path)).memsafe
    state._compact_due, state._last_remember = True, time.monotonic() - server.COMPACT_IDLE_S
    other = apsw.Connection(str(db_path))
    other.execute("BEGIN IMMEDIATE")
    try:
        state._compact_when_quiet()  # the warm thread, after a quiet second
        state._compact_when_quiet()  # the next quiet second
    finally:
        other.execute("ROLLBACK")
        other.close()
    try:
        assert len(tries) == 1 and state._compact_due
        assert _unmerged(opened.store) == ["memories_fts", "memories_tri"]
        monkeypatch.setattr(server, "COMPACT_IDLE_S", 0.0)  # as much quiet again
        state._compact_when_quiet()
        assert not state._compact_due
        assert _unmerged(opened.store) == []
    finally:
        state.stop()
        opened.store.close()


@pytest.mark.backends("sqlite")
def test_a_remember_stops_the_servers_compaction_between_steps(db_path, embedder, monkeypatch):
    """The warm thread that compacts is the one that embeds: a remember arriving meanwhile (its
    wake-up) ends the compaction at the next step (`compact_word_index`'s `stop`), so its memory
    becomes searchable by meaning within a second; the rest waits for the next quiet
    minute."""
    import time

    from memsafe.mcp import tools as server
    from memsafe.store import SQLiteStore

    opened = api.open_store(str(db_path))
    _written_one_by_one(opened.store)
    steps = []
    merge_step = SQLiteStore._merge_step
    state = server.build_server(str(db_path)).memsafe

    def step_then_remember(self, *args):
        steps.append(args[0])
        state._wake.set()  # a remember arrives during this step
        return merge_step(self, *args)

    monkeypatch.setattr(SQLiteStore, "_merge_step", step_then_remember)
    state._compact_due, state._last_remember = True, time.monotonic() - server.COMPACT_IDLE_S
    try:
        state._compact_when_quiet()
        assert steps == ["memories_fts"] and state._compact_due
        assert "memories_tri" in _unmerged(opened.store)  # the rest waits
    finally:
        state.stop()
        opened.store.close()
