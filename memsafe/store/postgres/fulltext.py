"""Responsibility: lexical search in a PostgreSQL store: the word index (`memory_fts`, a tsvector
per memory, GIN) ranked by BM25 computed in SQL, and exact substrings through pg_trgm (a mixin of
`PostgresStore`).

Ranking (measured with `memsafe bench --db postgresql://…`, README): PostgreSQL's
own `ts_rank` and `ts_rank_cd` are not BM25 (no inverse document frequency, no length
saturation), and recall fuses lexical scores on BM25's absolute scale (`recall.candidates.Candidate.bm25`).
So the score here is Okapi BM25 exactly as FTS5 computes it (k1 = 1.2, b = 0.75; idf =
ln((N - df + 0.5) / (df + 0.5)), at least 1e-6; Robertson & Zaragoza 2009; sqlite.org/fts5.html
section 5.1.1), over PostgreSQL's lexemes: N and the average length over every memory, df per
query term from the GIN index, a term's frequency in a memory from its tsvector positions (a
phrase term, e.g. `checkout-api`: how often its words stand in a row, as FTS5 counts a phrase).
Negative, lower is better, like SQLite's `bm25()`, so both backends feed the same numbers to fusion.

The word index holds the tokens SQLite's FTS5 index holds (`words`: made by SQLite's own
tokenizer, written by `_index_words` in the transaction that writes the text). The MATCH
expressions come from `recall.terms.fts_query`: double-quoted terms joined by OR; each term is cut by
the same tokenizer into a phrase tsquery literal (`words.tsquery`), so no input can form tsquery
syntax.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from memsafe import textform
from memsafe.models import Scope
from memsafe.store.common.fulltext import FullTextFusion, holds_exact
from memsafe.store.common.tokenizer import NAME
from memsafe.store.postgres import words
from memsafe.store.postgres.base import PostgresBase
from memsafe.store.postgres.migrations import TRIGRAM_MAX_CHARS
from memsafe.store.sqlite.fulltext import SQLiteFullText

BM25_K1, BM25_B = 1.2, 0.75  # FTS5's bm25() defaults
TEXT_BATCH = 500  # memories per statement when the word index is rebuilt or checked
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')

# Terms → per-term tsquery, lexemes and idf → every matching memory in scope with its BM25.
_BM25_SQL = """
WITH t AS (
    SELECT q.tq::tsquery AS tq, string_to_array(q.lx, ' ') AS lx FROM unnest(?::text[], ?::text[]) AS q(tq, lx)
), st AS (
    SELECT count(*)::float8 AS n, coalesce(avg(dl), 1)::float8 AS avgdl FROM memory_fts
), ti AS (
    SELECT t.tq, t.lx, greatest(ln((st.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) AS idf
    FROM t CROSS JOIN st
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM memory_fts f WHERE f.tsv @@ t.tq) AS d
)
SELECT f.memory_id, -sum(ti.idf * (tf.n * {k1_plus_1}) / (tf.n + {k1} * ({one_minus_b} + {b} * f.dl / st.avgdl))) AS s
FROM memory_fts f
JOIN memories m ON m.id = f.memory_id
CROSS JOIN st
JOIN ti ON f.tsv @@ ti.tq
CROSS JOIN LATERAL (
    SELECT (CASE WHEN cardinality(ti.lx) = 1 THEN (
        SELECT cardinality(u.positions) FROM unnest(f.tsv) AS u WHERE u.lexeme = ti.lx[1]
    ) ELSE (  -- a phrase: the positions of its first word where each next word follows
        SELECT count(*) FROM unnest(f.tsv) AS u CROSS JOIN LATERAL unnest(u.positions) AS p(at)
        WHERE u.lexeme = ti.lx[1] AND NOT EXISTS (
            SELECT 1 FROM generate_subscripts(ti.lx, 1) AS i WHERE i > 1 AND NOT EXISTS (
                SELECT 1 FROM unnest(f.tsv) AS v WHERE v.lexeme = ti.lx[i] AND p.at + i - 1 = ANY(v.positions)))
    ) END)::float8 AS n
) AS tf
WHERE f.tsv @@ (SELECT string_agg('(' || ti.tq::text || ')', ' | ')::tsquery FROM ti) AND {where}
GROUP BY f.memory_id
ORDER BY s, f.memory_id
LIMIT ?
"""


def match_terms(match: str) -> list[str]:
    """The terms of a `recall.terms.fts_query` expression (`"a" OR "b c"` → ['a', 'b c'])."""
    return [t.replace('""', '"') for t in _QUOTED.findall(match)]


_ENTRIES = "unnest(?::bigint[], ?::text[], ?::int[]) AS e(id, tsv, dl)"  # the parameters `_entries` makes


def index_rows(conn, rows: Sequence[tuple[int, str]], *, named: bool = True, folded: bool = True) -> None:
    """Write the word-index entries of `rows` ([(memory id, text)]) into `memory_fts`, replacing
    any there, each naming the tokenizer that made it (`tokenizer.NAME`, the column migration m003
    adds; `named=False` for migration m002, which runs before it exists) and holding the text's
    first TRIGRAM_MAX_CHARS characters in matching form (`textform.fold`; the column `folded`
    and its trigram index, migration m005; `folded=False` for migrations before it): one
    statement (the caller's transaction)."""
    if rows and not named:
        conn.execute(
            "INSERT INTO memory_fts(memory_id, tsv, dl) SELECT e.id, e.tsv::tsvector, e.dl "
            f"FROM {_ENTRIES} ON CONFLICT (memory_id) DO UPDATE SET tsv = excluded.tsv, dl = excluded.dl",
            _entries(rows),
        )
    elif rows and not folded:
        conn.execute(
            "INSERT INTO memory_fts(memory_id, tsv, dl, tokenizer) SELECT e.id, e.tsv::tsvector, e.dl, ? "
            f"FROM {_ENTRIES} ON CONFLICT (memory_id) DO UPDATE SET tsv = excluded.tsv, dl = excluded.dl, "
            "tokenizer = excluded.tokenizer",
            [NAME, *_entries(rows)],
        )
    elif rows:
        conn.execute(
            "INSERT INTO memory_fts(memory_id, tsv, dl, tokenizer, folded) "
            "SELECT e.id, e.tsv::tsvector, e.dl, ?, f.folded "
            f"FROM {_ENTRIES} JOIN unnest(?::bigint[], ?::text[]) AS f(id, folded) ON f.id = e.id "
            "ON CONFLICT (memory_id) DO UPDATE SET tsv = excluded.tsv, dl = excluded.dl, "
            "tokenizer = excluded.tokenizer, folded = excluded.folded",
            [NAME, *_entries(rows), [i for i, _ in rows], [textform.fold(t[:TRIGRAM_MAX_CHARS]) for _, t in rows]],
        )


def stale_rows(conn, rows: Sequence[tuple[int, str]]) -> int:
    """How many of `rows` ([(memory id, text)]) have a `memory_fts` entry other than the one
    `words.tsvector` makes of their text (a missing entry is not counted here)."""
    if not rows:
        return 0
    return conn.execute(
        f"SELECT count(*) FROM memory_fts f JOIN {_ENTRIES} ON e.id = f.memory_id "
        "WHERE f.tsv IS DISTINCT FROM e.tsv::tsvector OR f.dl <> e.dl",
        _entries(rows),
    ).fetchone()[0]


def _entries(rows: Sequence[tuple[int, str]]) -> list[list]:
    """[ids, tsvector literals, document lengths] of `rows` ([(memory id, text)]), for `_ENTRIES`."""
    entries = [(memory_id, *words.tsvector(text)) for memory_id, text in rows]
    return [[e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]]


def text_batches(conn, size: int = TEXT_BATCH) -> Iterator[list[tuple[int, str]]]:
    """Every memory's (id, text), by id, `size` at a time (the word index rebuilt or checked)."""
    last = 0
    while rows := conn.execute("SELECT id, content FROM memories WHERE id > ? ORDER BY id LIMIT ?",
                               (last, size)).fetchall():
        yield rows
        last = rows[-1][0]


def _queries(terms: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The `words.tsquery` of each term that has one, in order."""
    return [q for q in map(words.tsquery, terms) if q is not None]


def _like_escaped(term: str) -> str:
    """`%term%` for LIKE with the pattern characters of `term` escaped (escape char `\\`)."""
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _like_pattern(term: str) -> str:
    """`%term%` for LIKE/ILIKE with the pattern characters of `term` escaped (escape char `\\`),
    and each Greek sigma (σ, final ς) any one character: Python lower-cases a word-final Σ to ς
    (`recall.terms.exact_terms`), PostgreSQL's ILIKE to σ, so without this `ΣΊΣΥΦΟΣ_v2` is never found
    by the typed `σίσυφος_v2` here while SQLite's trigram index (which folds ς to σ) finds it. Every
    candidate is checked with `holds_exact` after."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "%" + escaped.replace("σ", "_").replace("ς", "_") + "%"


class PostgresFullText(FullTextFusion, PostgresBase):
    """See the module docstring."""

    scratch_lexical = staticmethod(SQLiteFullText.scratch_lexical)  # in memory, touches no stored data

    def _index_words(self, rows: Sequence[tuple[int, str]]) -> None:
        """Index `rows` ([(memory id, text)]) in `memory_fts`: `SQLMemories` calls this whenever
        it writes a text, in the same transaction (no trigger does it here: see `words`)."""
        index_rows(self.conn, rows)

    def compact_word_index(self, max_seconds: float | None = None,
                           stop: Callable[[], bool] | None = None) -> bool:
        """See `FullText.compact_word_index`: nothing to merge here. The word index is plain
        tables with b-tree indexes, which PostgreSQL keeps balanced as it writes (and its
        autovacuum reclaims dead rows)."""
        return True

    def _bm25_search(self, match: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
        queries = _queries(match_terms(match))
        if limit <= 0 or not queries:
            return []
        where, params = self._scope_sql(scope)
        sql = _BM25_SQL.format(where=where, k1=BM25_K1, b=BM25_B, k1_plus_1=BM25_K1 + 1, one_minus_b=1 - BM25_B)
        tq, lx = [q[0] for q in queries], [" ".join(q[1]) for q in queries]
        return [(r[0], r[1]) for r in self.conn.execute(sql, [tq, lx, *params, limit])]

    def exact_search(self, terms: Sequence[str], scope: Scope, limit: int) -> dict[str, tuple[int, set[int]]]:
        """See `Store.exact_search`. Each term (in matching form, `recall.terms.exact_terms`) is a
        LIKE pattern on the first TRIGRAM_MAX_CHARS characters of each text in matching form
        (`memory_fts.folded`, pg_trgm's GIN index, as SQLite's trigram index reads them), plus an
        ILIKE on the memories longer than that (a term shorter than a trigram, a single CJK
        character, is a scan); every candidate is checked with `holds_exact`; the document
        frequency counts the candidates in the whole store."""
        out: dict[str, tuple[int, set[int]]] = {}
        if not terms or limit <= 0:
            return out
        where, params = self._scope_sql(scope)
        folded_held = "f.folded LIKE ?"
        long_held = f"length(m.content) > {TRIGRAM_MAX_CHARS} AND m.content ILIKE ?"
        for term in terms:
            folded, pattern = _like_escaped(term), _like_pattern(term)
            (df,) = self.conn.execute(
                f"SELECT (SELECT count(*) FROM memory_fts f WHERE {folded_held}) "
                f"+ (SELECT count(*) FROM memories m WHERE {long_held})", (folded, pattern)).fetchone()
            rows = self.conn.execute(
                f"(SELECT m.id, m.content FROM memory_fts f JOIN memories m ON m.id = f.memory_id "
                f"WHERE {folded_held} AND {where} ORDER BY m.id DESC LIMIT ?) UNION "
                f"(SELECT m.id, m.content FROM memories m WHERE {long_held} AND {where} ORDER BY m.id DESC LIMIT ?)",
                [folded, *params, limit, pattern, *params, limit],
            )
            out[term] = (df, {i for i, text in rows if holds_exact(text, term)})
        return out

    def fts_term_stats(
        self, terms: Sequence[str], ids: Sequence[int]
    ) -> tuple[int, dict[str, int], dict[str, set[int]]]:
        n = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        df: dict[str, int] = {}
        matches: dict[str, set[int]] = {}
        wanted = list(ids)
        for term in terms:
            query = words.tsquery(" ".join(match_terms(term)) or term)
            if query is None:
                df[term], matches[term] = 0, set()
                continue
            df[term], found = self.conn.execute(
                "SELECT count(*), array_agg(memory_id) FILTER (WHERE memory_id = ANY(?)) FROM memory_fts "
                "WHERE tsv @@ ?::tsquery", (wanted, query[0]),
            ).fetchone()
            matches[term] = set(found or ())
        return n, df, matches
