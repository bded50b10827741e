"""Responsibility: lexical search in a SQLite store: the FTS5 word index (porter + unicode61,
CJK runs as bigrams: `memsafe.store.common.tokenizer`; BM25) and the trigram index for exact
substrings (a mixin of `SQLiteStore`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence

import apsw

from memsafe.errors import StoreUnavailable
from memsafe.models import Scope
from memsafe.store.common import sql as shared
from memsafe.store.common import tokenizer
from memsafe.store.common.fulltext import FullTextFusion, holds_exact
from memsafe.store.common.sql import chunked, one, scalar
from memsafe.store.sqlite.base import SQLiteBase
from memsafe.store.sqlite.migrations import SCOPE_BY_ID, TRIGRAM_MAX_CHARS

# A 1-character CJK query term is shorter than a trigram: it is looked up as the OR of the indexed
# trigrams it starts, at most this many (the ones in most memories first).
MAX_TRIGRAMS_PER_TERM = 128
# Pages (4 KiB) one FTS5 'merge' step writes when the indexes are compacted: at most ~100 ms of
# write lock per step on stores of 1,000 to 100,000 memories.
COMPACT_STEP_PAGES = 256
# How long (ms) a compaction step waits for another writer's lock before the compaction gives up:
# a remember or a decay batch holds it for milliseconds, an import for as long as it runs, and
# maintenance never holds up (30 s) nor fails the command that runs it.
COMPACT_WAIT_MS = 1000


class SQLiteFullText(FullTextFusion, SQLiteBase):
    """See the module docstring."""

    def exact_search(self, terms: Sequence[str], scope: Scope, limit: int) -> dict[str, tuple[int, set[int]]]:
        """Memories in scope holding each term exactly as typed (`holds_exact`):
        {term: (document frequency over the whole store, {ids in scope holding it})}.

        Each term is looked up in the trigram index (`memories_tri`, case-insensitive, no
        positions) as the AND of its trigrams, then checked against each candidate's text, at
        most `limit` candidates per term (newest first: ranking them by the trigram index's bm25
        cost 9 of 15 ms for a 33-character path at 10,000 memories); its document frequency counts
        the candidates, an upper bound. A 1-2 character term (a CJK character: below trigram length) is looked
        up as the OR of the indexed trigrams it starts (`memories_tri_vocab`, at most
        MAX_TRIGRAMS_PER_TERM, commonest first); the index is fed the text plus a space, so a word
        at the very end of a memory still starts one. The trigram index holds each memory's first
        TRIGRAM_MAX_CHARS characters; in longer memories a term of words is looked up as a phrase
        of the word index. Indexed lookups only, but for a 1-character term: a character that ends
        a text starts no trigram, so the texts' last characters are scanned too.
        """
        out: dict[str, tuple[int, set[int]]] = {}
        if not terms or limit <= 0:
            return out
        where, params = self._scope_sql(scope)
        for term in terms:
            if len(term) >= 3:  # no positions (detail='none'): every trigram, then check the text
                match = " AND ".join(dict.fromkeys('"' + term[i : i + 3].replace('"', '""') + '"'
                                                   for i in range(len(term) - 2)))
            else:  # shorter than a trigram: the indexed trigrams it starts (the text ends with a space)
                starts = [r[0] for r in self.conn.execute(
                    "SELECT term FROM memories_tri_vocab WHERE term >= ? AND term < ? ORDER BY doc DESC LIMIT ?",
                    (term, term + "\U0010ffff", MAX_TRIGRAMS_PER_TERM),
                )]
                match = " OR ".join('"' + t.replace('"', '""') + '"' for t in starts)
            df, ids = 0, set()
            if match:
                (df,) = one(self.conn.execute("SELECT count(*) FROM memories_tri WHERE memories_tri MATCH ?",
                                                  (match,)))
                rows = self.conn.execute(
                    "SELECT m.id, m.content FROM memories_tri JOIN memories m ON m.id = memories_tri.rowid "
                    f"WHERE memories_tri MATCH ? AND {where} ORDER BY m.id DESC LIMIT ?",
                    [match, *params, limit],
                )
                ids = {i for i, text in rows if holds_exact(text, term)}
            if len(term) < 2:  # a character ending a text starts no trigram ("猫" + the space): a scan
                # of the last characters (without it `recall 猫` misses "我喜欢猫")
                last = {r[0] for r in self.conn.execute(
                    f"SELECT m.id FROM memories m WHERE substr(m.content, -1) = ? AND {where} LIMIT ?",
                    [term, *params, limit])}
                df, ids = df + len(last - ids), ids | last
            # Past TRIGRAM_MAX_CHARS a memory is not in the trigram index: a term made of words
            # (`unique_tail_token`, `v2.4.7`) is looked up there as a phrase of the word index
            # instead, among those long memories only (CJK words of 2+ characters are word-index
            # terms, `recall.terms.fts_terms`, found in a memory of any length).
            longer: Iterable[tuple[int, str]] = self.conn.execute(
                "SELECT m.id, m.content FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
                f"WHERE memories_fts MATCH ? AND length(m.content) > ? AND {where} LIMIT ?",
                ['"' + term.replace('"', '""') + '"', TRIGRAM_MAX_CHARS, *params, limit],
            ) if tokenizer.has_word_terms(term) else []
            extra = {i for i, text in longer if holds_exact(text, term)}
            out[term] = (df + len(extra - ids), ids | extra)
        return out

    def _index_words(self, rows: Sequence[tuple[int, str]]) -> None:
        """Nothing to do: FTS5's triggers (migrations m001) index each text as it is written."""

    def compact_word_index(self, max_seconds: float | None = None,
                           stop: Callable[[], bool] | None = None) -> bool:
        """See `FullText.compact_word_index`. FTS5 writes each transaction's texts as a new b-tree
        (segment) and merges them only in groups (automerge), so a store written memory by memory
        holds dozens of segments, and every query term is looked up in each: on `bench` stores of
        1,000 and 10,000 memories, 70-110 µs a term against 13-20 µs once merged into one, and
        0.7-0.9 ms of CPU a recall. FTS5's incremental optimize (the 'merge' command
        with a negative page count) merges every segment, COMPACT_STEP_PAGES pages a step; a
        step that changed fewer than 2 rows found nothing left to merge (FTS5 documentation).

        It merges everything into one segment, so a text another process writes meanwhile starts
        the rewrite of the whole index again: an index is given at most twice the steps its pages
        take once (a store written to at a remember a second, at 100,000 memories, was rewritten
        without end, 1 MB a step). A step that waits over COMPACT_WAIT_MS for another
        writer's lock, or finds the disk full, ends the compaction (rolled back) with False."""
        if self.conn.in_transaction:
            return False
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        for table in ("memories_fts", "memories_tri"):
            left = None  # steps left, counted once there is work: a compact index costs one step
            while left != 0:
                left = None if left is None else left - 1
                if stop is not None and stop():
                    return False
                merged = self._merge_step(table, deadline)
                if merged is None:
                    return False
                if not merged:
                    break
                if left is None:  # two rewrites of its pages (index rows), and the step that finds none left
                    pages = scalar(self.conn.execute(f"SELECT count(*) FROM {table}_data"))
                    left = 2 * -(-pages // COMPACT_STEP_PAGES) + 1
            else:
                return False  # out of steps: another writer keeps restarting the merge
        return True

    def _merge_step(self, table: str, deadline: float | None) -> bool | None:
        """One step of FTS5's incremental optimize of `table` in its own write transaction: True
        if it merged something, False if nothing was left, None if it gave way (the deadline, a
        lock held past COMPACT_WAIT_MS, a full disk: rolled back)."""
        wait_ms = COMPACT_WAIT_MS
        if deadline is not None:
            wait_ms = min(wait_ms, int((deadline - time.monotonic()) * 1000))
        if wait_ms <= 0:
            return None
        try:
            with self.write(wait_ms=wait_ms):
                before = self.conn.total_changes()
                self.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (-COMPACT_STEP_PAGES,))
                return self.conn.total_changes() - before >= 2
        except (StoreUnavailable, apsw.FullError):
            return None

    def _bm25_search(self, match: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
        """[(memory id, bm25)] of the word index in `scope`, best first: see `fts_search`.

        While the whole file fits the connection's page cache (`_fits_page_cache`), one query
        joins each match to its memory's scope by id (the covering index of m010, not the table
        rows that hold the text) and computes bm25() only for those in scope.
        A larger store ranks every match and keeps the best in scope by id (`shared.OVERFETCH`),
        joining only when too few of those are in scope. Measured on `bench --scale` stores
        (CPU per project-scoped query): at 10,000 memories (30 MB, ~2,000 matches a
        query) the join 2.9 ms against 4.9; at 100,000 (300 MB, ~20,000 matches) 33 against 27.
        With m010's index (under load): 2.5-2.9 against 4.0-5.4, and 29-30 against 27-31.
        """
        if limit <= 0:
            return []
        where, params = self._scope_sql(scope)
        joined = (
            f"SELECT m.id, bm25(memories_fts) AS s FROM memories_fts JOIN memories m INDEXED BY {SCOPE_BY_ID} "
            f"ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND {where} ORDER BY s, m.id LIMIT ?"
        )
        if not self._fits_page_cache():
            fetch = max(limit * shared.OVERFETCH, shared.OVERFETCH_MIN)
            rows = list(self.conn.execute(
                "SELECT rowid, bm25(memories_fts) AS s FROM memories_fts WHERE memories_fts MATCH ? "
                "ORDER BY s, rowid LIMIT ?", (match, fetch)
            ))
            keep = self._in_scope([r[0] for r in rows], where, params)
            hits = [(i, s) for i, s in rows if i in keep]
            if len(hits) >= limit or len(rows) < fetch:
                return hits[:limit]
        return [(r[0], r[1]) for r in self.conn.execute(joined, [match, *params, limit])]

    def _in_scope(self, ids: Sequence[int], where: str, params: list, embedded: bool = False) -> set[int]:
        """The ids among `ids` whose memory is in scope (`where` from `_scope_sql`), by primary key."""
        out: set[int] = set()
        extra = " AND m.embedded = 1" if embedded else ""
        for chunk, marks in chunked(ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT m.id FROM memories m INDEXED BY {SCOPE_BY_ID} WHERE m.id IN ({marks}){extra} AND {where}",
                [*chunk, *params],
            ))
        return out

    @staticmethod
    def scratch_lexical(docs: dict[int, str], terms: Sequence[str], limit: int
                        ) -> tuple[list[tuple[int, float]], dict[str, int], dict[str, set[int]]]:
        """See `FullText.scratch_lexical`: a private in-memory FTS5 table with the same tokenizer
        as `memories_fts`; the statistics as `fts_term_stats` takes them. Touches no file."""
        if not docs or not terms:
            return [], {}, {}
        scratch = apsw.Connection(":memory:")
        try:
            tokenizer.register(scratch)
            scratch.execute(f"CREATE VIRTUAL TABLE d USING fts5(content, tokenize='{tokenizer.TOKENIZE}')")
            scratch.executemany("INSERT INTO d(rowid, content) VALUES (?, ?)", list(docs.items()))
            hits = [(r[0], r[1]) for r in scratch.execute(
                "SELECT rowid, bm25(d) FROM d WHERE d MATCH ? ORDER BY bm25(d), rowid LIMIT ?",
                (" OR ".join(terms), limit))]
            wanted = json.dumps([i for i, _ in hits])
            df: dict[str, int] = {}
            matches: dict[str, set[int]] = {}
            for term in terms:
                count, found = one(scratch.execute(
                    "SELECT count(*), group_concat(rowid) FILTER (WHERE rowid IN (SELECT value FROM json_each(?2))) "
                    "FROM d WHERE d MATCH ?1", (term, wanted)))
                df[term] = count
                matches[term] = {int(x) for x in found.split(",")} if found else set()
            return hits, df, matches
        finally:
            scratch.close()

    # Document frequencies this connection counted, valid while the file is unchanged: an agent's
    # queries share terms, and the vector half asks for them before the lexical half does.
    _term_counts: dict[str, int] | None = None
    _term_counts_state: tuple[int, int] | None = None
    TERM_COUNTS_KEPT = 10_000

    def fts_term_stats(
        self, terms: Sequence[str], ids: Sequence[int]
    ) -> tuple[int, dict[str, int], dict[str, set[int]]]:
        """For each safe FTS5 term (see `recall.terms.fts_terms`): its document frequency over the whole
        index, and which of `ids` match it. Returns (number of indexed memories, {term: df},
        {term: matching ids}). One pass over each term's doclist (the rowid filter inside it); none
        for a term whose count this connection already has while the file is unchanged
        (`_file_state`; not kept inside a transaction) and no id is asked about: at 1,000
        memories, 0.6 ms of a 9 ms recall."""
        state = self._file_state()
        if state is None:
            known: dict[str, int] = {}
        else:
            if (state != self._term_counts_state or self._term_counts is None
                    or len(self._term_counts) > self.TERM_COUNTS_KEPT):
                self._term_counts, self._term_counts_state = {}, state
            known = self._term_counts
        if "" not in known:  # "" is no FTS5 term: the number of memories
            known[""] = scalar(self.conn.execute("SELECT count(*) FROM memories"))
        df: dict[str, int] = {}
        matches: dict[str, set[int]] = {}
        wanted = json.dumps(list(ids))
        for term in terms:
            if not ids:
                if term not in known:
                    known[term] = scalar(self.conn.execute(
                        "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (term,)))
                df[term], matches[term] = known[term], set()
                continue
            count, found = one(self.conn.execute(
                "SELECT count(*), group_concat(rowid) FILTER (WHERE rowid IN (SELECT value FROM json_each(?2))) "
                "FROM memories_fts WHERE memories_fts MATCH ?1", (term, wanted),
            ))
            df[term] = known[term] = count
            matches[term] = {int(x) for x in found.split(",")} if found else set()
        return known[""], df, matches
