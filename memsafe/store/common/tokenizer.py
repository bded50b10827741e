"""Responsibility: the tokens of the word index on both backends: FTS5's `porter unicode61
remove_diacritics 2` for every text outside Chinese, Japanese and Korean runs, and overlapping
character bigrams inside them. An FTS5 tokenizer registered on each apsw
connection (`register`): SQLite's `memories_fts` uses it (migration m007), and PostgreSQL's word
index is made of its tokens (`memsafe.store.postgres.words`).

Why bigrams: CJK is written without spaces, and unicode61 keeps a whole run (a clause, often a
sentence) as ONE token, so no word inside it could be found. Overlapping bigrams are the classic
index for unsegmented CJK (Lucene's CJKBigramFilter; Kwok 1997, "Comparing representations in
Chinese information retrieval"): most Chinese words are two characters, every 2-character word is
exactly one bigram, a longer one is the bigrams it spans, and BM25 ranks them like words (a rare
bigram weighs more than a common one). A trigram index cannot match a 2-character word, and a
segmenter is a dictionary per language. A run of one character is one token (the character).
Bigrams are made in the first BIGRAM_MAX_CHARS characters of a text (the bound of the trigram
index): a CJK word further into a huge memory is not found by keyword.

Text without a CJK character is handed to the base tokenizer whole, so its tokens are exactly
the ones FTS5's own tokenizer makes; a text with CJK is cut into its CJK runs (`CJK_RUN`)
and the pieces between them, each piece tokenized by the base tokenizer, so `redis缓存` is the
tokens `redi` (Porter) and `缓存`.

Before cutting, a text is read in its matching form (`memsafe.textform.fold`: NFKC case fold,
invisible characters dropped), so `ＡＰＩ ｖ２`, `ﬁle` and `pass\u200bword` are the tokens of `api v2`,
`file` and `password`, and the index agrees with the trigram index and exact identifiers. ASCII
text is handed to the base tokenizer as it is (its fold is its lower case, which unicode61 makes).
Offsets point into the original text (a token in a stretch whose size folding changed spans the
stretch, `_moved`).

The tokens are part of the stored index (FTS5 is fed the same tokens again to delete an entry):
changing `CJK_RUN` or this module needs a migration that rebuilds the word index on both
backends (as SQLite's m007 and PostgreSQL's m003 do).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import accumulate

from memsafe import textform

# Chinese, Japanese and Korean letters (Han, kana, Hangul): written without spaces between words,
# so unicode61 keeps a whole run as one token. The word index cuts each run into overlapping
# bigrams instead (here), and queries are cut the same way (`memsafe.recall.terms.fts_terms`).
# Part of the stored index: changing this set needs a migration rebuilding it.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002ebef"
)
CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD_CHAR = re.compile(r"\w")

NAME = "cjk_bigram"
FOLD_FUNCTION = "memsafe_fold"  # SQL function `textform.fold`: the trigram index reads texts through it
BASE = "porter unicode61 remove_diacritics 2"  # FTS5's own tokenizer for everything else
TOKENIZE = f"{NAME} {BASE}"  # the `tokenize=` option of SQLite's `memories_fts` since m007
# CJK runs are cut into bigrams in the first this many characters of a text (as the trigram index
# holds them: `memsafe.store.sqlite.migrations.TRIGRAM_MAX_CHARS`); past it a run is one token, as
# FTS5 makes it. A 1 MB CJK text is ~333,000 bigrams, and its remember took ~2 s more to index them.
BIGRAM_MAX_CHARS = 65_536


def register(conn) -> None:
    """Make the `cjk_bigram` tokenizer known to `conn` (an apsw.Connection). Every connection
    that writes memories or searches `memories_fts` needs it (SQLite refuses with "no such
    tokenizer: cjk_bigram" otherwise); reading rows, backups and VACUUM do not."""
    conn.register_fts5_tokenizer(NAME, _factory)
    conn.create_scalar_function(FOLD_FUNCTION, _fold_sql, 1, deterministic=True)


def _fold_sql(text):
    """`textform.fold` as SQL sees it (NULL and non-text pass through unchanged)."""
    return textform.fold(text) if isinstance(text, str) else text


def _factory(conn, args: list[str]) -> Callable:
    """The tokenizer FTS5 builds for `tokenize='cjk_bigram BASE...'`: BASE (the rest of the
    arguments, e.g. `porter unicode61 remove_diacritics 2`) for non-CJK text, bigrams for CJK."""
    if not args:
        raise ValueError(f"the {NAME} tokenizer needs a base tokenizer, e.g. '{TOKENIZE}'")
    base = conn.fts5_tokenizer(args[0], args[1:])

    def tokenize(utf8: bytes, flags: int, locale: str | None):
        try:
            text = utf8.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # not valid UTF-8 (never written by memsafe): FTS5's own tokens
            return base(utf8, flags, locale)
        if text.isascii():
            return base(utf8, flags, locale)
        folded, spans = _fold_mapped(text)
        if CJK_RUN.search(folded) is None:
            found = base(folded.encode("utf-8", "surrogatepass"), flags, locale)
        else:
            found = _split(folded, lambda piece: base(piece, flags, locale))
        return found if spans is None else _moved(found, spans)

    return tokenize


# Texts are folded a chunk at a time, each cut at whitespace (never part of a combining sequence, so
# folding the chunks is folding the text), at about this many characters.
FOLD_CHUNK_CHARS = 1024
_SPACE = re.compile(r"\s")


def _fold_mapped(text: str) -> tuple[str, list[tuple[int, int, int, bool]] | None]:
    """(`textform.fold` of `text`, how its UTF-8 byte offsets map back to `text`'s: None when
    the folded text has the same bytes per character as `text` (offsets carry over: NFC text in
    most scripts, whose case fold keeps each letter's size), else [(folded start, original
    start, original end, same size)] per chunk, in order (`_moved`)."""
    folded = textform.fold(text)
    if len(folded) == len(text) and len(folded.encode("utf-8", "surrogatepass")) == \
            len(text.encode("utf-8", "surrogatepass")):
        return folded, None
    pieces: list[str] = []
    spans: list[tuple[int, int, int, bool]] = []
    at = done = done_bytes = 0
    while done < len(text):
        space = _SPACE.search(text, min(done + FOLD_CHUNK_CHARS, len(text)))
        end = space.end() if space else len(text)
        chunk = text[done:end]
        piece = textform.fold(chunk)
        size, new = len(chunk.encode("utf-8", "surrogatepass")), len(piece.encode("utf-8", "surrogatepass"))
        spans.append((at, done_bytes, done_bytes + size, size == new and len(chunk) == len(piece)))
        pieces.append(piece)
        at, done, done_bytes = at + new, end, done_bytes + size
    return "".join(pieces), spans


def _moved(found: list[tuple], spans: list[tuple[int, int, int, bool]]) -> list[tuple]:
    """Tokens `found` in the folded text ([(start, end, token, ...)], in order) with offsets in the
    original text (`_fold_mapped`'s chunks): exact in a chunk whose size folding kept, else the
    chunk's span (nothing in memsafe reads offsets: FTS5's highlight() and snippet() would)."""
    out: list[tuple] = []
    i, last = 0, len(spans) - 1
    for start, end, *rest in found:
        while i < last and spans[i + 1][0] <= start:
            i += 1
        j = i
        while j < last and spans[j + 1][0] < end:
            j += 1
        f0, o0, _e0, same0 = spans[i]
        fj, oj, ej, samej = spans[j]
        out.append((o0 + start - f0 if same0 else o0, oj + end - fj if samej else ej, *rest))
    return out


def _split(text: str, base: Callable[[bytes], list]) -> list[tuple]:
    """[(start byte, end byte, token, ...)] of `text`: `base` on the pieces between CJK runs
    (offsets moved to the whole text), each run's overlapping bigrams (a 1-character run: itself).
    Past BIGRAM_MAX_CHARS characters the rest of the text, from the next CJK character on, goes
    to `base` whole (a CJK run is one token there, as FTS5 makes it)."""
    out: list[tuple] = []
    done_chars = done_bytes = 0

    def pass_on(end: int) -> None:  # text[done_chars:end] to the base tokenizer
        nonlocal done_chars, done_bytes
        piece = text[done_chars:end].encode("utf-8", "surrogatepass")
        if piece.strip():
            out.extend((done_bytes + start, done_bytes + stop, *rest) for start, stop, *rest in base(piece))
        done_chars, done_bytes = end, done_bytes + len(piece)

    for run in CJK_RUN.finditer(text):
        if run.start() >= BIGRAM_MAX_CHARS:
            break
        pass_on(run.start())
        chars = text[run.start() : min(run.end(), BIGRAM_MAX_CHARS)]
        size = len(chars.encode("utf-8", "surrogatepass"))
        if len(chars) == 1:
            out.append((done_bytes, done_bytes + size, chars))
        elif size == 3 * len(chars):  # every character 3 bytes (the BMP: nearly all CJK text)
            at = done_bytes
            out.extend((at + 3 * i, at + 3 * i + 6, chars[i : i + 2]) for i in range(len(chars) - 1))
        else:  # some 4-byte characters (CJK extension B and later)
            ends = list(accumulate((len(c.encode("utf-8", "surrogatepass")) for c in chars), initial=done_bytes))
            out.extend((ends[i], ends[i + 2], chars[i : i + 2]) for i in range(len(chars) - 1))
        done_chars, done_bytes = done_chars + len(chars), done_bytes + size
        if run.end() > BIGRAM_MAX_CHARS:
            break
    pass_on(len(text))
    return out


def has_word_terms(text: str) -> bool:
    """True when the word index holds a term of `text` as a query cuts it (`recall.terms.fts_terms`
    is not empty): a word outside CJK runs, or a CJK run of 2+ characters (its bigrams). A lone
    CJK character is no such term: the trigram index finds it (`Store.exact_search`)."""
    lowered = textform.fold(text)
    return any(len(run) > 1 for run in CJK_RUN.findall(lowered)) or \
        _WORD_CHAR.search(CJK_RUN.sub(" ", lowered)) is not None
