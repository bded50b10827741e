"""Responsibility: small helpers for the SQL both backends share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

# Post-filtering (fts_search, the in-memory vector search): rank everything, take the best
# max(limit × OVERFETCH, OVERFETCH_MIN), keep those in scope by primary key. If `limit` of them are
# in scope, they are exactly the best `limit` in scope (nothing outside the fetched set ranks
# higher); else the scope is narrow and is applied first instead. At 100k memories this made
# BM25 search 3x faster than joining every match to its row (scripts/recall_phases.py).
OVERFETCH, OVERFETCH_MIN = 10, 500


def chunked(ids: Iterable, size: int = 500) -> Iterator[tuple[list, str]]:
    """The distinct `ids`, in order, in chunks of `size` (under SQLite's bound-parameter limit),
    each with its `?,?,…` placeholder list for an `IN (…)` clause."""
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), size):
        chunk = unique[start : start + size]
        yield chunk, ",".join("?" * len(chunk))


def one(cursor: Any) -> tuple:
    """The row of a query that always yields one (an aggregate, a PRAGMA, `SELECT EXISTS`): a
    cursor's `fetchone()` is typed as possibly None, which such a query never is."""
    row = cursor.fetchone()
    assert row is not None, "an aggregate or PRAGMA query returned no row"
    return row


def scalar(cursor: Any) -> Any:
    """The first column of `one(cursor)`."""
    return one(cursor)[0]
