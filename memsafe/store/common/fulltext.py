"""Responsibility: how word hits and exact-substring hits make one lexical ranking, the same on
both backends (a mixin; each backend brings `_bm25_search` and `exact_search`)."""

from __future__ import annotations

from collections.abc import Sequence

from memsafe.models import Scope
from memsafe.recall import scoring as retrieve
from memsafe.store.common import sql
from memsafe.store.interface import LexicalHits


class FullTextFusion:
    """See the module docstring."""

    def fts_search(self, match: str | None, scope: Scope, limit: int, exact: Sequence[str] = ()) -> LexicalHits:
        """See `Store.fts_search`. Exact candidates are looked up at most max(limit × OVERFETCH,
        OVERFETCH_MIN) per term; memories holding exact terms come first (`retrieve.exact_hits`)."""
        fetch = max(limit * sql.OVERFETCH, sql.OVERFETCH_MIN)
        found = self.exact_search(exact, scope, fetch) if exact and limit > 0 else {}
        words = self._bm25_search(match, scope, limit) if match is not None else []
        held: dict[int, int] = {}
        for _df, ids in found.values():
            for i in ids:
                held[i] = held.get(i, 0) + 1
        if not held:
            return LexicalHits(words, {}, found)
        return LexicalHits(retrieve.exact_hits(words, held, len(exact), limit), held, found)
