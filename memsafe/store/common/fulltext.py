"""Responsibility: how word hits and exact-substring hits make one lexical ranking, the same on
both backends (a mixin; each backend brings `_bm25_search` and `exact_search`), and what holding
an exact term means (`holds_exact`)."""

from __future__ import annotations

from collections.abc import Sequence

from memsafe import textform
from memsafe.models import Scope
from memsafe.store.common import sql
from memsafe.store.common.base import SQLStoreBase
from memsafe.store.common.tokenizer import CJK_RUN
from memsafe.store.interface import LexicalHits


def _edge_class(ch: str) -> str:
    """'d' digit, 'w' other word character, '' anything else (an identifier's edge may touch it)."""
    if ch.isdigit():
        return "d"
    return "w" if ch.isalpha() or ch == "_" else ""


def holds_exact(content: str, term: str) -> bool:
    """True if `term` (from `recall.terms.exact_terms`) occurs in `content` (in matching form,
    `textform.fold`: case, full-width and invisible characters aside) as a whole:
    not continued by a character of the same kind as its edge. `v1.9` is not in `v1.90`,
    `get_user_by_id` is not in `get_user_by_ids`, but `2.4.7` is in `deploy-v2.4.7-hotfix` (a
    letter before a digit is a boundary). CJK terms match anywhere (no spaces between words)."""
    text = textform.fold(content)
    if CJK_RUN.fullmatch(term):
        return term in text
    first, last = _edge_class(term[0]), _edge_class(term[-1])
    start = text.find(term)
    while start >= 0:
        end = start + len(term)
        before = _edge_class(text[start - 1]) if start else ""
        after = _edge_class(text[end]) if end < len(text) else ""
        if not (first and before == first) and not (last and after == last):
            return True
        start = text.find(term, start + 1)
    return False


def exact_hits(hits: Sequence[tuple[int, float]], held: dict[int, int], terms: int, limit: int
               ) -> list[tuple[int, float]]:
    """The exact-first rule of lexical search (`Store.fts_search`, and time travel's scratch
    index): BM25 `hits` ([(id, FTS5 bm25)], best first) with the ids of `held` ({id: exact terms
    it holds}, `holds_exact`) first, most terms first (ties: better bm25, then lower id), each
    scored beyond every other hit: best bm25 × (1 + held / `terms`). At most `limit`."""
    if not held:
        return list(hits)[:limit]
    bm25 = dict(hits)
    best = min([*bm25.values(), -1.0])
    first = sorted(held, key=lambda i: (-held[i], bm25.get(i, 0.0), i))
    out = [(i, best * (1.0 + held[i] / terms)) for i in first]
    return (out + [(i, s) for i, s in hits if i not in held])[:limit]


class FullTextFusion(SQLStoreBase):
    """See the module docstring."""

    def fts_search(self, match: str | None, scope: Scope, limit: int, exact: Sequence[str] = ()) -> LexicalHits:
        """See `Store.fts_search`. Exact candidates are looked up at most max(limit × OVERFETCH,
        OVERFETCH_MIN) per term; memories holding exact terms come first (`exact_hits`)."""
        fetch = max(limit * sql.OVERFETCH, sql.OVERFETCH_MIN)
        found = self.exact_search(exact, scope, fetch) if exact and limit > 0 else {}
        words = self._bm25_search(match, scope, limit) if match is not None else []
        held: dict[int, int] = {}
        for _df, ids in found.values():
            for i in ids:
                held[i] = held.get(i, 0) + 1
        if not held:
            return LexicalHits(words, {}, found)
        return LexicalHits(exact_hits(words, held, len(exact), limit), held, found)
