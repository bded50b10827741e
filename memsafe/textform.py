"""Responsibility: the Unicode forms of text, in one place: the form memsafe stores (`canonical`),
the key it matches on (`fold`), the form duplicates are recognised by (`duplicate_form`) and the
form the embedding model reads (`embed_form`). Pure: no database, no model.

One text, one meaning, whatever its Unicode form:
- stored text is NFC (`canonical`): `café` typed as `e` + U+0301 (macOS file names, some input
  methods) looks the same and is stored as the one code point `é`; nothing visible changes;
- matching (word index tokens, trigram index, exact identifiers, tags, entity names, query
  terms) reads the NFKC case fold (`fold`, close to Unicode's NFKC_Casefold): full-width
  `ＡＰＩ ｖ２` is `api v2`, the ligature `ﬁ` is `fi`, superscript `²` is `2`, `ß` is `ss`,
  invisible characters inside a word (zero-width space U+200B, joiners, a BOM U+FEFF, soft
  hyphen, emoji variation selectors: Unicode's Default_Ignorable_Code_Point) are dropped, so
  `pass\\u200bword` is `password` and `❤️` is `❤`;
- Turkish: dotted capital `İ` and dotless `ı` both fold to `i` (so `İSTANBUL`, `istanbul`,
  `ISTANBUL` agree, and a capitalised Turkish `KIRMIZI` finds `kırmızı`): a case fold that does
  not know the text's language cannot tell Turkish `I` (lower `ı`) from English `I` (lower `i`),
  and a missed memory costs more than a word matched with its dotless twin.

What Unicode itself keeps apart stays apart: letters of different scripts, and accents (the word
index removes them, `remove_diacritics 2`, as it always did; exact identifiers keep them).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1): characters that
# render as nothing (zero-width space, joiners, bidi marks, BOM, soft hyphen, variation selectors,
# Hangul fillers, tags). NFKC_Casefold removes them; so does `fold`.
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _IGNORABLE_RANGES) + "]")
# Those of the Basic Multilingual Plane one by one: most texts hold none, and looking for each (a C
# substring search) is several times faster than running the pattern over a long text.
_IGNORABLE_BMP = [chr(c) for a, b in _IGNORABLE_RANGES if b <= 0xFFFF for c in range(a, b + 1)]

# After the case fold: `İ` became `i` + combining dot above; dotless `ı` (see the module docstring).
_TURKISH_I = re.compile("i\u0307|\u0131")


def _visible_only(text: str) -> str:
    """`text` without default-ignorable characters."""
    if max(text) >= "\U00010000" or any(c in text for c in _IGNORABLE_BMP):
        return _IGNORABLE.sub("", text)
    return text


def canonical(text: str) -> str:
    """`text` as stored: NFC (canonically equivalent, looks the same). ASCII returns unchanged."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def fold(text: str) -> str:
    """The matching key of `text`: default-ignorable characters removed, NFKC, case-folded (`ß` is
    `ss`, final `ς` is `σ`), `İ`/`ı` as `i`, NFKC again (a case fold may leave text unnormalised).
    Its length may differ from `text`'s (`ﬁ` → `fi`). ASCII text: `str.lower`."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", _visible_only(text)).casefold()
    if "\u0131" in folded or "\u0307" in folded:
        folded = _TURKISH_I.sub("i", folded)
    return unicodedata.normalize("NFKC", folded)


def name_key(name: str) -> str:
    """The matching key of a name (a tag, an entity): `fold`, whitespace trimmed and runs collapsed."""
    return " ".join(fold(name).split())


def duplicate_form(text: str) -> str:
    """The form two texts must share to be duplicates: NFKC, default-ignorable characters removed,
    whitespace runs collapsed to one space. Case is kept (`Deploy` and `deploy` notes are told
    apart, as they always were)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", _visible_only(text))
    return " ".join(text.split())


def duplicate_key(text: str) -> str:
    """sha256 (64 hex digits) of `duplicate_form(text)`: a memory's `content_hash`."""
    return hashlib.sha256(duplicate_form(text).encode("utf-8", "surrogatepass")).hexdigest()


def embed_form(text: str) -> str:
    """The text the embedding model reads: NFC, default-ignorable characters removed, and each
    character whose compatibility form is letters or digits replaced by it (full-width `ＡＰＩ`,
    `ﬁ`, `²`, `①`): the model's word-piece vocabulary has `api` and `postgres`, not `ＡＰＩ`,
    and it lower-cases by itself. Other compatibility characters (`…`, full-width punctuation)
    are kept: the model reads them as punctuation either way, and rewriting them moved rankings
    (`memsafe bench`, developer prose) for no gain."""
    if text.isascii():
        return text
    text = _visible_only(text)
    if unicodedata.is_normalized("NFKC", text):
        return text
    return _NON_ASCII.sub(_alnum_compat, unicodedata.normalize("NFC", text))


# One non-ASCII character, or a run of half-width katakana (its voiced marks are characters of
# their own there, and compose with the letter before only when the run is normalised whole).
_NON_ASCII = re.compile(r"[\uff65-\uff9f]+|[^\x00-\x7f]")


def _alnum_compat(match: re.Match) -> str:
    char = match.group()
    compat = unicodedata.normalize("NFKC", char)
    return compat if compat != char and compat.isalnum() else char
