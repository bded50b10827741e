"""Responsibility: lexical search in a PostgreSQL store: the word index (`memory_fts`, a tsvector
per memory, GIN) ranked by BM25 computed in SQL, and exact substrings through pg_trgm (a mixin of
`PostgresStore`).

Ranking (issue 14.3, measured with `memsafe bench --db postgresql://…`, README): PostgreSQL's
own `ts_rank` and `ts_rank_cd` are not BM25 (no inverse document frequency, no length
saturation), and recall fuses lexical scores on BM25's absolute scale (`retrieve.Candidate.bm25`).
So the score here is Okapi BM25 exactly as FTS5 computes it (k1 = 1.2, b = 0.75; idf =
ln((N - df + 0.5) / (df + 0.5)), at least 1e-6; Robertson & Zaragoza 2009; sqlite.org/fts5.html
section 5.1.1), over PostgreSQL's lexemes: N and the average length over every memory, df per
query term from the GIN index, a term's frequency in a memory from its tsvector positions (a
phrase term, e.g. `checkout-api`: the least frequent of its lexemes). Negative, lower is better,
like SQLite's `bm25()`, so both backends feed the same numbers to fusion.

The MATCH expressions come from `retrieve.fts_query`: double-quoted terms joined by OR; each term
becomes `phraseto_tsquery('memsafe', term)`, so no input can form tsquery syntax.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memsafe import retrieve
from memsafe.models import Scope
from memsafe.store.common.fulltext import FullTextFusion
from memsafe.store.postgres.migrations import TRIGRAM_MAX_CHARS
from memsafe.store.sqlite.fulltext import SQLiteFullText

BM25_K1, BM25_B = 1.2, 0.75  # FTS5's bm25() defaults
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_INDEXED = f"left(content, {TRIGRAM_MAX_CHARS})"  # the expression pg_trgm's index holds (migrations)

# Terms → per-term tsquery, lexemes and idf → every matching memory in scope with its BM25.
_BM25_SQL = """
WITH t AS (
    SELECT phraseto_tsquery('memsafe', q.term) AS tq, tsvector_to_array(to_tsvector('memsafe', q.term)) AS lx
    FROM unnest(?::text[]) AS q(term)
), st AS (
    SELECT count(*)::float8 AS n, coalesce(avg(dl), 1)::float8 AS avgdl FROM memory_fts
), ti AS (
    SELECT t.tq, t.lx, greatest(ln((st.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) AS idf
    FROM t CROSS JOIN st
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM memory_fts f WHERE f.tsv @@ t.tq) AS d
    WHERE numnode(t.tq) > 0
)
SELECT f.memory_id, -sum(ti.idf * (tf.n * {k1_plus_1}) / (tf.n + {k1} * ({one_minus_b} + {b} * f.dl / st.avgdl))) AS s
FROM memory_fts f
JOIN memories m ON m.id = f.memory_id
CROSS JOIN st
JOIN ti ON f.tsv @@ ti.tq
CROSS JOIN LATERAL (
    SELECT min(coalesce(array_length(u.positions, 1), 1))::float8 AS n FROM unnest(f.tsv) AS u
    WHERE u.lexeme = ANY(ti.lx)
) AS tf
WHERE f.tsv @@ (SELECT string_agg('(' || ti.tq::text || ')', ' | ')::tsquery FROM ti) AND {where}
GROUP BY f.memory_id
ORDER BY s, f.memory_id
LIMIT ?
"""


def match_terms(match: str) -> list[str]:
    """The terms of a `retrieve.fts_query` expression (`"a" OR "b c"` → ['a', 'b c'])."""
    return [t.replace('""', '"') for t in _QUOTED.findall(match)]


def _like_pattern(term: str) -> str:
    """`%term%` for LIKE/ILIKE with the pattern characters of `term` escaped (escape char `\\`)."""
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class PostgresFullText(FullTextFusion):
    """See the module docstring."""

    scratch_lexical = staticmethod(SQLiteFullText.scratch_lexical)  # in memory, touches no stored data

    def _bm25_search(self, match: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
        terms = match_terms(match)
        if limit <= 0 or not terms:
            return []
        where, params = self._scope_sql(scope)
        sql = _BM25_SQL.format(where=where, k1=BM25_K1, b=BM25_B, k1_plus_1=BM25_K1 + 1, one_minus_b=1 - BM25_B)
        return [(r[0], r[1]) for r in self.conn.execute(sql, [terms, *params, limit])]

    def exact_search(self, terms: Sequence[str], scope: Scope, limit: int) -> dict[str, tuple[int, set[int]]]:
        """See `Store.exact_search`. Each term is an ILIKE pattern, served by pg_trgm's GIN index
        over the first TRIGRAM_MAX_CHARS characters (as on SQLite) plus the memories longer than
        that (a term shorter than a trigram, 1-2 CJK characters, is a scan), every candidate checked
        with `retrieve.holds_exact`; the document frequency counts the candidates in the whole store."""
        out: dict[str, tuple[int, set[int]]] = {}
        if not terms or limit <= 0:
            return out
        where, params = self._scope_sql(scope)
        for term in terms:
            pattern = _like_pattern(term)
            # the index holds each memory's first TRIGRAM_MAX_CHARS characters; the few longer
            # memories (their own partial index) are searched whole
            held = (f"({_INDEXED} ILIKE ? OR (length(content) > {TRIGRAM_MAX_CHARS} AND content ILIKE ?))")
            (df,) = self.conn.execute(f"SELECT count(*) FROM memories WHERE {held}", (pattern, pattern)).fetchone()
            rows = self.conn.execute(
                f"SELECT m.id, m.content FROM memories m WHERE {held.replace('content', 'm.content')} "
                f"AND {where} ORDER BY m.id LIMIT ?",
                [pattern, pattern, *params, limit],
            )
            out[term] = (df, {i for i, text in rows if retrieve.holds_exact(text, term)})
        return out

    def fts_term_stats(
        self, terms: Sequence[str], ids: Sequence[int]
    ) -> tuple[int, dict[str, int], dict[str, set[int]]]:
        n = self.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        df: dict[str, int] = {}
        matches: dict[str, set[int]] = {}
        wanted = list(ids)
        for term in terms:
            text = " ".join(match_terms(term)) or term
            df[term], found = self.conn.execute(
                "SELECT count(*), array_agg(memory_id) FILTER (WHERE memory_id = ANY(?)) FROM memory_fts "
                "WHERE tsv @@ phraseto_tsquery('memsafe', ?)", (wanted, text),
            ).fetchone()
            matches[term] = set(found or ())
        return n, df, matches
