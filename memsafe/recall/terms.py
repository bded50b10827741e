"""Responsibility: the words recall reads. A query read once (`parse_query`: the time it names and
the text without it), its terms for each index (`fts_terms` for the word index, `exact_terms` for
exact identifiers, `vector_text` for the vector half), and what a memory's text says beyond the
query (`content_words`, `question_share`). Pure: no database, no model.

Every term is quoted or stripped of FTS5 syntax here, so no input can form a query expression.
The word index cuts CJK runs as `memsafe.store.common.tokenizer` does, and queries are cut the
same way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from memsafe import textform
from memsafe.store.common.tokenizer import CJK_RUN
from memsafe.tokens import SHORT_TEXT  # texts up to this long are kept by the per-process caches here too

if TYPE_CHECKING:
    from memsafe.when import Window

# Words too common to help BM25 rank; dropped from a query unless nothing else is left.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves we've i'm don't use used using
    """.split()
)


_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Word tokens of a free-text query, case-folded (`textform.fold`), in order, without duplicates.

    Mirrors FTS5's unicode61 tokenizer closely enough: runs of letters, digits and underscore.
    Every FTS5 operator character is dropped, so no input can form FTS5 syntax.
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(textform.fold(text)):
        seen.setdefault(word, None)
    return list(seen)


_IDENTIFIER = re.compile(r"[_.:/@+]|\d")


MAX_EXACT_TERMS = 16


_COMPOUND = re.compile(r"\w+(?:[.\-/:@+]\w+)*", re.UNICODE)


def fts_terms(text: str) -> list[str]:
    """The quoted FTS5 terms of a free-text query, in order, without duplicates (at most 64).

    Words joined by `. - / : @ +` stay together as one quoted phrase (`v2.4.0`, `checkout-api`,
    `deploy.yml`), so identifiers match exactly. A CJK run of 2+ characters gives its overlapping
    bigrams, each a term, as the word index holds them (`memsafe.store.common.tokenizer`):
    `悬空指针` → `悬空`, `空指`, `指针`, so BM25 ranks a memory holding more of them, and the
    rarer ones, first; a 1-character run is left to `exact_terms`. Stop-words are dropped unless
    nothing else is left. Every FTS5 operator character is outside the quotes' content or doubled,
    so no input can form FTS5 syntax.
    """
    seen: dict[str, None] = {}
    lowered = textform.fold(text)  # the word index folds texts the same way (full-width, ligatures)
    done = 0
    for run in [*CJK_RUN.finditer(lowered), None]:
        for word in _COMPOUND.findall(lowered[done : run.start() if run else len(lowered)]):
            seen.setdefault(word, None)
        if run is not None:
            chars = run.group()
            for i in range(len(chars) - 1):
                seen.setdefault(chars[i : i + 2], None)
            done = run.end()
    terms = list(seen)
    content = [t for t in terms if t not in STOP_WORDS]
    chosen = content or terms
    return ['"' + t.replace('"', '""') + '"' for t in chosen[:64]]


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression for free text: the `fts_terms` joined by OR.

    Returns None when the text has no word at all (e.g. `*`, `^`, `"`), in which case lexical
    search is skipped.
    """
    terms = fts_terms(text)
    return " OR ".join(terms) if terms else None


def exact_terms(text: str) -> list[str]:
    """The parts of a query that must be found exactly as typed,
    lower-cased, in order, without duplicates (at most MAX_EXACT_TERMS):

    - identifiers, versions and codes: `fts_terms` compounds of 3+ characters holding a digit,
      `_` or one of `. : / @ +` (`get_user_by_id`, `v1.9`, `2.4.7`, `deploy.yml`, `e2e`), but not
      bare numbers; the porter index folds `get_user_by_id` with `get_users_by_ids` and splits
      `v2.4.7` into `v2`, `4`, `7`, so a typed `2.4.7` never matches it there. Words joined by
      hyphens only (`checkout-api`) stay with the word index, which matches them as a phrase:
      they mostly name services the graph knows, and the memory that answers a question about
      one often does not hold the name (bench graph queries);
    - a CJK run of one character (see `_CJK`), which the word index holds only where it stands
      alone; longer runs are word-index terms (`fts_terms`: bigrams, ranked by BM25). Only when
      the query has no longer CJK run: beside words of two or more characters a lone character
      is mostly a particle or function word (Korean 안, 을; Chinese 用, 在; Japanese の), and an
      exact term ranks every memory holding it above the ones holding the words
      ("데이터베이스 연결 안 됨" would put two greetings holding 안 first).

    Terms of 3+ characters are looked up in the trigram index (`memories_tri`), a 1-character
    CJK term through the trigrams it starts (`Store.exact_search`). Terms are in matching form
    (`textform.fold`), as the trigram index holds texts: `ＳＮＡＫＥ＿ＣＡＳＥ` is `snake_case`.
    """
    lowered = textform.fold(text)
    seen: dict[str, None] = {}
    for word in _COMPOUND.findall(CJK_RUN.sub(" ", lowered)):
        word = word.strip("_")
        if len(word) >= 3 and _IDENTIFIER.search(word) and not word.isdigit():
            seen.setdefault(word, None)
    runs = CJK_RUN.findall(lowered)
    if all(len(run) == 1 for run in runs):
        for run in runs:
            seen.setdefault(run, None)
    return list(seen)[:MAX_EXACT_TERMS]


COMMON_MIN_MEMORIES = 10  # a word must be in at least this many memories to count as common


def common_words(df: dict[str, int], n: int) -> set[str]:
    """The query's words that say nothing about which memory is meant: held by at least half of
    the `n` memories (and by at least COMMON_MIN_MEMORIES of them, so a small store's counts do
    not decide), where FTS5's BM25 idf, ln((n − df + 0.5) / (df + 0.5)), is ≤ 0 (Robertson &
    Zaragoza 2009; FTS5 floors it to 1e-6): the lexical half already ignores them.

    Args:
        df: {`fts_terms` term (quoted, as the word index matches it): memories holding it}.
        n: memories in the store.

    Returns:
        The common words, lower-cased and unquoted.
    """
    return {t[1:-1].replace('""', '"') for t, d in df.items()
            if d >= COMMON_MIN_MEMORIES and d >= n / 2}


_POSSESSIVE = re.compile(r"^['\u2019]s\b", re.IGNORECASE)


def vector_text(text: str, common: set[str]) -> str:
    """The text the vector half embeds: `text` without its `common_words` (and the possessive
    `'s` after one). A name that most memories hold (a speaker's, a project's) carries
    no information for ranking, but it dominates a small model's embedding of a short question,
    so every memory of the person named came first, and a question naming the wrong person
    (LoCoMo's adversarial ones) found none of the memories that answer it. The text is kept
    whole when every word is common or none is.
    """
    if not common:
        return text
    kept: list[str] = []
    last = 0
    dropped = False
    for m in _COMPOUND.finditer(text):
        if m.group(0).lower() not in common:
            continue
        kept.append(text[last:m.start()])
        last = m.end()
        possessive = _POSSESSIVE.match(text[last:])
        if possessive:
            last += possessive.end()
        dropped = True
    if not dropped:
        return text
    kept.append(text[last:])
    out = " ".join("".join(kept).split())
    return out if query_terms(out) and any(w not in STOP_WORDS for w in query_terms(out)) else text


@dataclass
class Query:
    """A recall query read once: the cleaned text, the text the lexical half searches (the date
    expressions taken out: they name a time, not a word a memory holds), the time windows it
    names (see `memsafe.when`) and the instant it is asked."""

    text: str
    lexical_text: str
    windows: list = field(default_factory=list)
    now: datetime | None = None
    words: frozenset[str] = frozenset()  # `query_words` of `text`: what a memory says beyond them counts
    only_time: bool = False  # it names a time and nothing else ("what did we do in the last 24 hours?")
    kinds: frozenset[str] = frozenset()  # the kinds of memory it asks for (`asked_for`): "what did we decide"
    sources: frozenset[str] = frozenset()  # the sources it asks for: "which commit ..." asks for git
    own_voice: bool = False  # asked in the first person ("we", "our", "I"): what its user or agent said
    # every window the query names, those no memory's event time is near too: a memory whose text
    # mentions one (`recall.dates`) matches it whenever it was stored
    named: list = field(default_factory=list)


def parse_query(text: str, now: datetime, held: Callable[[Window], bool] | None = None) -> Query:
    """Step "time" (reading): the windows a query names and its text without them.

    A query that is only a date ("May 2023", "what happened in May 2023?": what is left is stop
    words, which `fts_terms` would search when nothing else is left, so every memory holding "in"
    matched in full) keeps its text for the lexical half. `held(window)` (`when.Window`) says
    whether a memory in the recall's scope was created in it; a window with no memory near it
    (`when.around(window)` holds none) is dropped, and a query left with none is read as one naming
    no time (its date words searched as words), so a date that matches nothing widens the search
    instead of emptying it or pulling the few memories least far from it to the top."""
    from memsafe import when

    windows, rest = when.find(text, now)
    named = windows
    if held is not None and windows:
        windows = [w for w in windows if held(when.around(w))]
        rest = rest if windows else " ".join(text.split())
    words = query_terms(rest)
    says_more = any(w not in STOP_WORDS for w in words)
    kinds, sources, own_voice = asked_for(query_terms(text))
    return Query(text, rest if says_more else text, windows, now, query_words(text), bool(windows) and not says_more,
                 kinds, sources, own_voice, named)


# Words by which a question asks for a kind or a source of memory ("what did we decide ..." wants
# decisions, "which commit ..." the git history), and the words of a question asked in the first
# person (what the user or their agent wrote, not imported history).
KIND_WORDS = {
    **dict.fromkeys(("decide", "decided", "decides", "decision", "decisions"), "decision"),
    **dict.fromkeys(("prefer", "prefers", "preferred", "preference", "preferences"), "preference"),
    **dict.fromkeys(("task", "tasks", "todo", "todos"), "task"),
}
SOURCE_WORDS = dict.fromkeys(("commit", "commits", "committed"), "git")
FIRST_PERSON = frozenset(("we", "our", "ours", "us", "ourselves", "i", "my", "me", "mine", "myself"))


def asked_for(words: list[str]) -> tuple[frozenset[str], frozenset[str], bool]:
    """(kinds, sources, own voice) that a question's words (`query_terms`) ask for: the memory
    kinds (`KIND_WORDS`) and sources (`SOURCE_WORDS`) it names, and whether it is asked in the
    first person (`FIRST_PERSON`). Read by `scoring.asked_for`."""
    kinds = frozenset(KIND_WORDS[w] for w in words if w in KIND_WORDS)
    sources = frozenset(SOURCE_WORDS[w] for w in words if w in SOURCE_WORDS)
    return kinds, sources, any(w in FIRST_PERSON for w in words)


def content_words(text: str, limit: int = 64, known: frozenset[str] = frozenset()) -> int:
    """Distinct words of at least 3 letters that are not stop-words and not in `known`, counted up
    to `limit`: a measure of how much a memory says beyond `known` (the query's own words,
    `Query.words`: "Jon: See ya Gina!" says little to a question about Jon and Gina, and "We squash
    commits before merging to main" says four things to "how do we combine branches?"). CJK has
    no spaces to count words by: each distinct CJK run counts one word per two characters (at
    least one; most Chinese words are two characters), so `释放内存以后指针变成悬空状态` says as
    much as its seven words. An ASCII text is read only until enough words are found (the ranking
    asks for `substance_words` of them: at 10,000 memories, reading whole texts took ~1 ms of a
    recall); a short text's count without `known` is kept per process (the same
    memories come back recall after recall in `serve`), and a text that holds `limit` + len(known)
    words is counted from it, so `known` costs a recount only for texts shorter than that."""
    if limit <= 0:
        return 0
    enough = limit + len(known)
    counted = _content_words(text, enough) if len(text) <= SHORT_TEXT else _count_content_words(text, enough)
    if not known or counted >= enough:
        return min(counted, limit)
    return _count_content_words(text, limit, known)


@functools.lru_cache(maxsize=8192)
def _content_words(text: str, limit: int) -> int:
    return _count_content_words(text, limit)


_LONG_WORD = re.compile(r"\w{3,}")  # on ASCII text: the words of `_WORD` with at least 3 letters


def _count_content_words(text: str, limit: int, known: frozenset[str] = frozenset()) -> int:
    lowered = text.lower()
    if lowered.isascii():  # no CJK: stop at `limit` distinct words
        seen: set[str] = set()
        for match in _LONG_WORD.finditer(lowered):
            word = match.group()
            if word not in STOP_WORDS and word not in known and word not in seen:
                seen.add(word)
                if len(seen) >= limit:
                    break
        return len(seen)
    words = set(_WORD.findall(CJK_RUN.sub(" ", lowered)))
    words.difference_update(STOP_WORDS)
    words.difference_update(known)
    cjk = sum(max(1, len(run) // 2) for run in set(CJK_RUN.findall(lowered)))
    return min(limit, sum(len(w) >= 3 for w in words) + cjk)


def query_words(text: str) -> frozenset[str]:
    """The words of a query that `content_words` counts (at least 3 letters, lower case, no
    stop-words; CJK runs are not among them): what a memory repeats of them says nothing new."""
    lowered = text.lower()
    words = _LONG_WORD.findall(lowered) if lowered.isascii() else _WORD.findall(CJK_RUN.sub(" ", lowered))
    return frozenset(w for w in words if len(w) >= 3 and w not in STOP_WORDS)


QUESTION_CHARS = 2048  # a memory's questions are read in its first this many characters


# a sentence ends at . ! ? followed by a space (so "v1.2?" is one sentence), or at 。！？ (CJK text has no spaces)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def question_share(text: str) -> float:
    """Share in [0, 1] of a memory's text held by sentences that end in a question mark (? or ？),
    counted in characters of its first QUESTION_CHARS, spaces between sentences aside: 1 for
    "Jon: What dance were you doing at the recital?", 0.5 or so for "That's great! Where was it?",
    0 for a text asking nothing. Read by `answers_first`. The answers for the last 8,192 heads
    read are kept per process (the same memories come back recall after recall in `serve`)."""
    head = text[:QUESTION_CHARS]
    if "?" not in head and "？" not in head:
        return 0.0
    return _question_share(head)


@functools.lru_cache(maxsize=8192)
def _question_share(head: str) -> float:
    asked = total = 0
    for sentence in _SENTENCE_END.split(head):
        sentence = sentence.strip()
        total += len(sentence)
        if sentence.endswith(("?", "？")):
            asked += len(sentence)
    return asked / total if total else 0.0
