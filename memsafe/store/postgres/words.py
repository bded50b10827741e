"""Responsibility: the words of PostgreSQL's word index, cut exactly as SQLite's FTS5 index cuts
them: by the same FTS5 tokenizer (`porter unicode61 remove_diacritics 2`, CJK runs as bigrams:
`memsafe.store.common.tokenizer`, through apsw), turned into `tsvector` and `tsquery` literals.
Pure apart from a private in-memory SQLite connection.

Why not a PostgreSQL text search configuration (measured with `memsafe bench --mode lexical`): its
parser keeps `api.harbor.dev`, `deploy.yml`, `v2.4.0` and `/scripts/backfill.py` as one token and
indexes `checkout-api` three times (whole and parts), its Snowball stemmer (Porter2) and FTS5's
original Porter disagree on common words (`one`, `use`, `generate`, `key`, `days`), and its
letters depend on the server's locale. Built here, both backends index the same tokens at the
same positions with the same document lengths, so BM25 gives the same scores.

PostgreSQL's limits on a tsvector (docs: "Text Search Types"), and what happens here:
- a lexeme holds at most MAX_LEXEME_BYTES bytes: a longer token is not indexed (it still counts
  in the document's length), and a query phrase holding one matches nothing;
- positions run to MAX_POSITION (later tokens share it) and a lexeme keeps at most MAX_POSITIONS
  of them: phrases past the 16,383rd token and term frequencies above 256 are approximate;
- lexemes and positions of one tsvector hold at most MAX_VECTOR_BYTES bytes together: the rest
  of a huge text of distinct words is not indexed (the trigram index holds its first 65,536
  characters).
"""

from __future__ import annotations

import threading

from memsafe.store.common import tokenizer

# The tokenizer of SQLite's `memories_fts` (memsafe/store/sqlite/migrations.py, m007); the tests
# check the two agree.
FTS5_TOKENIZE = tokenizer.TOKENIZE
MAX_LEXEME_BYTES = 2047  # PostgreSQL's MAXSTRLEN
MAX_POSITION = 16383  # MAXENTRYPOS - 1
MAX_POSITIONS = 256  # MAXNUMPOS
MAX_VECTOR_BYTES = (1 << 20) - 1  # MAXSTRPOS: lexemes and positions together
_local = threading.local()


def tokens(text: str) -> list[str]:
    """The tokens FTS5 indexes for `text`, in order (lower-cased, diacritics removed, Porter-stemmed;
    CJK runs as overlapping bigrams).

    Uses one in-memory apsw connection per thread (apsw refuses concurrent use of one object)."""
    cut = getattr(_local, "tokenizer", None)
    if cut is None:
        import apsw

        _local.connection = apsw.Connection(":memory:")
        tokenizer.register(_local.connection)
        name, *args = FTS5_TOKENIZE.split()
        cut = _local.tokenizer = _local.connection.fts5_tokenizer(name, args)
    if not text:
        return []
    import apsw

    return cut(text.encode("utf-8", "surrogatepass"), apsw.FTS5_TOKENIZE_DOCUMENT, None,
               include_offsets=False, include_colocated=False)


def _quoted(lexeme: str) -> str:
    """A lexeme as a quoted tsvector/tsquery literal (`'` doubled, `\\` escaped)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _indexable(lexeme: str) -> bool:
    return len(lexeme.encode("utf-8", "surrogatepass")) <= MAX_LEXEME_BYTES


def tsvector(text: str) -> tuple[str, int]:
    """`text`'s word-index entry: (a tsvector literal: each lexeme with its 1-based positions,
    the number of tokens: BM25's document length, as FTS5 counts it).

    The entry's size is counted as PostgreSQL counts it (each lexeme's bytes rounded up to even,
    2 bytes for its number of positions, 2 per position): the first MAX_VECTOR_BYTES of it are
    kept, the rest of the text is not indexed."""
    found = tokens(text)
    positions: dict[str, list[int]] = {}
    size = 0
    for position, lexeme in enumerate(found, start=1):
        held = positions.get(lexeme)
        if held is None:
            length = len(lexeme.encode("utf-8", "surrogatepass"))
            if length > MAX_LEXEME_BYTES:
                continue
            size += length + (length & 1) + 2
            held = positions[lexeme] = []
        at = min(position, MAX_POSITION)
        if len(held) < MAX_POSITIONS and (not held or held[-1] != at):
            size += 2
            if size > MAX_VECTOR_BYTES:
                if not held:
                    del positions[lexeme]
                break
            held.append(at)
    literal = " ".join(_quoted(lexeme) + ":" + ",".join(map(str, at)) for lexeme, at in positions.items())
    return literal, len(found)


def tsquery(phrase: str) -> tuple[str, list[str]] | None:
    """A query term (one word, or a phrase such as `checkout-api`) as (a tsquery literal matching
    its tokens in a row, like an FTS5 phrase; those tokens), or None when it has no token, or one
    too long to be indexed (then it matches nothing)."""
    found = tokens(phrase)
    if not found or not all(_indexable(t) for t in found):
        return None
    return " <-> ".join(_quoted(t) for t in found), found
