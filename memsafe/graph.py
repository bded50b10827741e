"""Responsibility: the pure parts of the knowledge graph: entity extraction from free text, the
identity key of an entity name, compact rendering of relations. No database, no model.

Extraction is rule-based and conservative: it keeps what looks like a name a developer would
look up (code identifiers, CamelCase and snake_case names, dotted module names, file paths,
capitalised multi-word names, versions attached to names, `@handles`, CLI flags, error codes),
and never a stop-word. A capitalised word at the start of a sentence is a name when it is not a
common English word (`common_words`: "Postgres keeps ..." names Postgres, "Keeps ..." names
nothing) or when the caller already knows it as an entity (`extract_entities(is_known=...)`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memsafe import textform
from memsafe.recall.terms import STOP_WORDS

MAX_ENTITY_CHARS = 120
MAX_ENTITIES_PER_TEXT = 32
QUERY_CHARS = 2000  # a query's entities are looked for in its first 2000 characters
QUERY_WORDS = 64  # ... and word runs in its first 64 words
TEXT_CHARS = 100_000  # a memory's entities are looked for in its first 100,000 characters


def entity_key(name: str) -> str:
    """Identity key of an entity name: its matching form (`textform.fold`: NFKC, case fold,
    invisible characters dropped), whitespace trimmed and runs collapsed.

    `MyService`, `myservice `, full-width `ＭｙＳｅｒｖｉｃｅ`, `Café` with a decomposed accent and
    `My\u200bService` share one key. The store's migrations recompute keys when this form changes.
    """
    return textform.name_key(name)


def clean_name(name: str) -> str:
    """A display name as stored: NFC, whitespace trimmed and collapsed (case kept)."""
    return " ".join(unicodedata.normalize("NFC", name).split())


@dataclass(frozen=True)
class Entity:
    """One extracted entity: the name as first written in the text, and a coarse type."""

    name: str
    type: str

    @property
    def key(self) -> str:
        return entity_key(self.name)


# -- extraction patterns ----------------------------------------------------------------------------
# Repeated parts are bounded ({0,63}) or anchored by a look-behind so no pattern rescans a long
# run from every position (linear time on hostile input such as `x-v` repeated 100,000 times).

_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]{0,31}://\S+", re.IGNORECASE)
_EMAIL = re.compile(r"(?<![\w.+\-])[\w.+\-]{1,64}@[\w\-]{1,63}(?:\.[\w\-]{1,63}){1,8}\b")
# Absolute, home or dot-relative paths; or relative paths whose last part has an extension.
_PATH = re.compile(
    r"(?<![\w/])(?:~|\.{1,2})?/(?:[\w.\-]+/)*[\w.\-]*[\w]"
    r"|(?<![\w/.\-])(?:[\w.\-]+/)+[\w\-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b"
)
_FILE = re.compile(
    r"(?<![\w/.\-])[\w\-]+(?:\.[\w\-]+)*\.(?:py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonl|ya?ml|toml|ini|cfg|conf|md|rst|"
    r"txt|sh|bash|zsh|sql|db|rs|go|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|lock|env|log|csv|html|css|scss|xml|"
    r"proto|tf|gradle|dockerfile|mk|err|pem|crt|service|timer|sock)\b"
    r"|\b(?:Dockerfile|Makefile|Procfile|Justfile|Gemfile|Vagrantfile|Containerfile)\b"
)
_HANDLE = re.compile(r"(?<![\w.@])@[A-Za-z][\w\-]{1,38}\b(?!\.\w)")
_FLAG = re.compile(r"(?<![\w\-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*\b")
_VERSION = re.compile(
    r"(?<![\w.\-])([A-Za-z][\w\-]{0,63}(?:\.[A-Za-z][\w\-]{0,63}){0,4})"  # the name
    # how the version is attached; `\s+v?` and not `\s*\s\s*v?`: whitespace split between two
    # stars is tried every way, quadratic in its length (a word then 40,000 spaces took 49 s)
    r"(?:\s*(?:==|>=|<=|~=|@)\s*v?|\s+v?|-v|@v?)"
    r"(\d+(?:\.\d+){1,3}(?:[\-+.]?[A-Za-z0-9]+)?)\b"
)
_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w{1,63}(?:\.[A-Za-z_]\w{1,63}){1,8}\b")
_WORD = re.compile(r"(?<![\w\-])[A-Za-z_][\w\-]{0,118}\w|(?<![\w\-])[A-Za-z]\w?")
_CAPSEQ = re.compile(r"(?<![\w\-])[A-Z][a-z][\w\-]{0,40}(?:[ \t]+[A-Z][a-z][\w\-]{0,40}){1,6}\b")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n\-•*#>|(\[\"'`]\s*)$")

# Hyphenated English words that are not names.
_KEBAB_STOP = frozenset(
    """long-term short-term up-to-date read-only write-only built-in follow-up one-off opt-in opt-out
    real-time well-known so-called end-to-end day-to-day re-run e-mail non-blocking self-hosted
    open-source high-level low-level first-class third-party same-day next-day in-place""".split()
)
_NOT_NAMES = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday january february march april may june
    july august september october november december today tomorrow yesterday also however please
    note never always every still yes okay todo fixme mondays tuesdays wednesdays thursdays fridays
    saturdays sundays weekends""".split()
)
_ACRONYM_STOP = frozenset("the and not but for you all any can our out new now".split())
# Compound adjectives (`cursor-based`, `multi-row`) are not names.
_KEBAB_SUFFIX_STOP = frozenset(
    "based facing row like friendly aware driven level wide free safe specific related only time side style "
    "compatible heavy ready proof oriented bound".split()
)
_KEBAB_PREFIX_STOP = frozenset("multi non self semi cross well anti".split())


@functools.lru_cache(maxsize=8192)
def _is_identifier(word: str) -> str | None:
    """The identifier type of one word, or None: snake_case, CamelCase/camelCase, code-with-digits."""
    core = word.strip("_-")
    if len(core) < 3 or not any(c.isalpha() for c in core):
        return None
    if "_" in word:
        return "identifier"
    if any(c.isupper() for c in core[1:]) and any(c.islower() for c in core) and "-" not in core:
        return "identifier"  # CamelCase, camelCase, PostgreSQL, GitHub
    if core[0].isalpha() and any(c.isdigit() for c in core):
        return "code"  # sha256, E11000, ORA-00942, ipv6
    if "-" in core:
        parts = core.split("-")
        if (
            len(parts) >= 2
            and all(len(p) >= 2 and p.isalpha() for p in parts)
            and core.lower() not in _KEBAB_STOP
            and not any(p.lower() in STOP_WORDS for p in parts)
            and parts[-1].lower() not in _KEBAB_SUFFIX_STOP
            and parts[0].lower() not in _KEBAB_PREFIX_STOP
            and len(core) >= 8
        ):
            return "identifier"  # billing-service, pre-commit
        return None
    if core.isupper() and core.isalpha() and len(core) >= 3 and core.lower() not in _ACRONYM_STOP:
        return "acronym"  # AWS, JWT, CORS
    return None


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """The whole English words of the embedding model's vocabulary (lower case, 3+ letters;
    memsafe/data/common_words.txt, made by scripts/gen_common_words.py). Read once per process."""
    path = Path(__file__).resolve().parent / "data" / "common_words.txt"
    try:
        return frozenset(path.read_text(encoding="utf-8").split())
    except OSError:  # a broken install: every sentence-initial word is then a plain word
        return frozenset()


def _sentence_start(before: str) -> bool:
    """Whether a word preceded by `before` (the up to 3 characters before it) starts a sentence."""
    return bool(_SENTENCE_END.search(before))


def extract_entities(text: str, extra: Iterable[str] = (),
                     is_known: Callable[[list[str]], Collection[str]] | None = None) -> list[Entity]:
    """Entities named in `text`, in order of first appearance, one per identity key.

    Args:
        text: free text (a memory's content or a query).
        extra: names given explicitly (e.g. `--entity`); they come first, typed 'entity'.
        is_known: given identity keys, those that are entities already (one call at most, with
            the sentence-initial common words of the text): such a word is kept as a name.

    Returns:
        At most MAX_ENTITIES_PER_TEXT entities (explicit ones are never dropped), each at most
        MAX_ENTITY_CHARS characters, found in the first TEXT_CHARS characters. Plain words and
        stop-words are not entities; a capitalised word inside a sentence is, and so is one at
        the start of a sentence unless it is a common English word (`common_words`) not known
        to `is_known`.
    """
    found: dict[str, tuple[int, Entity]] = {}
    offered: set[str] = set()  # raw names already judged: a repeat can change nothing (linear on repeats)

    def add(name: str, kind: str, pos: int) -> None:
        if name in offered:
            return
        offered.add(name)
        name = clean_name(name).lstrip(" \"'([{<").rstrip(" .,;:!?\"')]}>")
        if len(name) < 2 or len(name) > MAX_ENTITY_CHARS:
            return
        key = entity_key(name)
        if not key or key in STOP_WORDS or key in _NOT_NAMES:
            return
        if key not in found:
            found[key] = (pos, Entity(name, kind))

    explicit: list[Entity] = []
    for raw in extra:
        name = clean_name(str(raw))
        if name and entity_key(name) not in {e.key for e in explicit}:
            explicit.append(Entity(name[:MAX_ENTITY_CHARS], "entity"))

    # At most MAX_ENTITIES_PER_TEXT are kept, in order of first appearance: the start of a long
    # text names them (a 1 MB memory would cost ~1 s to read whole, for nothing).
    # Full-width and other compatibility forms read as their plain letters.
    text = unicodedata.normalize("NFKC", text[:TEXT_CHARS])
    # Mask spans as they are consumed so smaller patterns don't re-read them.
    masked = list(text)

    def consume(m: re.Match, group: int = 0) -> None:
        start, end = m.span(group)
        masked[start:end] = " " * (end - start)

    def current() -> str:
        return "".join(masked)

    def masked_before(pos: int) -> str:  # the 3 masked characters before pos, without a full rebuild
        return "".join(masked[max(0, pos - 3) : pos])

    for m in _URL.finditer(text):
        consume(m)
    for m in _EMAIL.finditer(current()):
        consume(m)
    for m in _BACKTICK.finditer(current()):
        inner = m.group(1).strip()
        if inner and not inner.startswith("-") and len(inner.split()) <= 4:
            add(inner, "code", m.start())
            consume(m)
    for pattern, kind in ((_PATH, "path"), (_FILE, "file")):
        for m in pattern.finditer(current()):
            value = m.group(0)
            if pattern is _PATH and value.count("/") == 1 and value.startswith("/") and len(value) < 3:
                continue
            add(value, kind, m.start())
            consume(m)
    for m in _HANDLE.finditer(current()):
        add(m.group(0), "handle", m.start())
        consume(m)
    for m in _FLAG.finditer(current()):
        add(m.group(0), "flag", m.start())
        consume(m)
    not_a_name: dict[str, bool] = {}
    for m in _VERSION.finditer(current()):
        name = m.group(1)
        if name not in not_a_name:
            key = entity_key(name)
            not_a_name[name] = key in STOP_WORDS or key in _NOT_NAMES or len(name) < 2
        if not_a_name[name]:
            continue
        add(m.group(0), "version", m.start())
        plain_start = name[:1].isupper() and name[1:].islower() and _sentence_start(masked_before(m.start()))
        if not plain_start:  # `Release v2.4.0` names a release, not an entity called Release
            add(name, _is_identifier(name) or "name", m.start())
        consume(m)
    for m in _DOTTED.finditer(current()):
        value = m.group(0)
        if all(len(p) >= 2 for p in value.split(".")) and not value.replace(".", "").isdigit():
            add(value, "module", m.start())
            consume(m)
    snapshot = current()
    for m in _CAPSEQ.finditer(snapshot):
        words = m.group(0).split()
        while words and (words[0].lower() in STOP_WORDS or words[0].lower() in _NOT_NAMES):
            words = words[1:]
        if len(words) >= 2:
            add(" ".join(words), "name", m.start())
            consume(m)
    snapshot = current()
    plain_starts: dict[str, tuple[str, int]] = {}  # key -> (word, position): a common word opening a sentence
    for m in _WORD.finditer(snapshot):
        word = m.group(0)
        ident = _is_identifier(word)
        if ident:
            add(word, ident, m.start())
            continue
        if word[0].isupper() and word[1:].islower() and len(word) >= 3:
            if not _sentence_start(snapshot[max(0, m.start() - 3) : m.start()]) or word.lower() not in common_words():
                add(word, "name", m.start())
            elif is_known is not None:
                plain_starts.setdefault(entity_key(word), (word, m.start()))
    if plain_starts and is_known is not None:
        wanted = [k for k in plain_starts if k not in found and k not in STOP_WORDS and k not in _NOT_NAMES]
        for key in is_known(wanted) if wanted else ():
            if key in plain_starts:
                word, pos = plain_starts[key]
                offered.discard(word)
                add(word, "name", pos)

    ordered = [e for _, e in sorted(found.values(), key=lambda pair: pair[0])]
    explicit_keys = {e.key for e in explicit}
    rest = [e for e in ordered if e.key not in explicit_keys]
    return explicit + rest[: max(0, MAX_ENTITIES_PER_TEXT - len(explicit))]


def query_keys(text: str) -> list[str]:
    """Identity keys a query may name: its extracted entities plus each word and each run of
    2-3 words (so a lower-case `postgres` or `billing service` still finds its entity).
    Only the start of a long query is read (QUERY_CHARS, QUERY_WORDS)."""
    text = text[:QUERY_CHARS]
    keys = [e.key for e in extract_entities(text)]
    words = [w for w in re.findall(r"[\w.\-/@]+", text) if w][:QUERY_WORDS]
    for n in (1, 2, 3):
        for i in range(len(words) - n + 1):
            gram = [w.strip(".,;:!?-") for w in words[i : i + n]]
            if n == 1 and (len(gram[0]) < 3 or gram[0].lower() in STOP_WORDS):
                continue
            if n > 1 and (gram[0].lower() in STOP_WORDS or gram[-1].lower() in STOP_WORDS):
                continue
            keys.append(entity_key(" ".join(gram)))
    return list(dict.fromkeys(k for k in keys if k))


def format_relations(rows: Sequence[tuple[str, str, str, float]]) -> list[str]:
    """Compact lines `source relation target` (weight appended as `×w` when not 1)."""
    lines = []
    for source, relation, target, weight in rows:
        line = f"{source} {relation} {target}"
        if abs(weight - 1.0) > 1e-9:
            line += f" ×{weight:g}"
        lines.append(line)
    return lines
