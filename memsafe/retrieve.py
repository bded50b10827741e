"""Responsibility: the pure parts of recall: a safe FTS5 query from free text, rank fusion, the
multi-signal score, and packing hits into a token budget. No database, no model.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memsafe.tokens import SHORT_TEXT  # texts up to this long are kept by the per-process caches here too

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
    """Word tokens of a free-text query, lower-cased, in order, without duplicates.

    Mirrors FTS5's unicode61 tokenizer closely enough: runs of letters, digits and underscore.
    Every FTS5 operator character is dropped, so no input can form FTS5 syntax.
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        seen.setdefault(word, None)
    return list(seen)


# Chinese, Japanese and Korean letters (Han, kana, Hangul): written without spaces between words,
# so unicode61 keeps a whole run as one token. The word index cuts each run into overlapping
# bigrams instead (`memsafe.store.common.tokenizer`), and queries are cut the same way
# (`fts_terms`). Part of the stored index: changing this set needs a migration rebuilding it.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002ebef"
)
CJK_RUN = re.compile(f"[{_CJK}]+")
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
    lowered = text.lower()
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
    """The parts of a query that must be found exactly as typed (issue 12 item 9, issue 17 item 3),
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
      exact term ranks every memory holding it above the ones holding the words (break-it,
      session 6: "데이터베이스 연결 안 됨" put two greetings holding 안 first).

    Terms of 3+ characters are looked up in the trigram index (`memories_tri`), a 1-character
    CJK term through the trigrams it starts (`Store.exact_search`).
    """
    lowered = text.lower()
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


def _edge_class(ch: str) -> str:
    """'d' digit, 'w' other word character, '' anything else (an identifier's edge may touch it)."""
    if ch.isdigit():
        return "d"
    return "w" if ch.isalpha() or ch == "_" else ""


def holds_exact(content: str, term: str) -> bool:
    """True if `term` (from `exact_terms`) occurs in `content` (case-insensitive) as a whole:
    not continued by a character of the same kind as its edge. `v1.9` is not in `v1.90`,
    `get_user_by_id` is not in `get_user_by_ids`, but `2.4.7` is in `deploy-v2.4.7-hotfix` (a
    letter before a digit is a boundary). CJK terms match anywhere (no spaces between words)."""
    text = content.lower()
    if CJK_RUN.fullmatch(term):
        return term in text
    first, last = _edge_class(term[0]), _edge_class(term[-1])
    start = text.find(term)
    while start >= 0:
        end = start + len(term)
        before = _edge_class(text[start - 1]) if start else ""
        after = _edge_class(text[end]) if end < len(text) else ""
        if not (first and before == first) and not (last and after == last):
            return True
        start = text.find(term, start + 1)
    return False


def exact_hits(hits: Sequence[tuple[int, float]], held: dict[int, int], terms: int, limit: int
               ) -> list[tuple[int, float]]:
    """The exact-first rule of lexical search (`Store.fts_search`, and time travel's scratch
    index): BM25 `hits` ([(id, FTS5 bm25)], best first) with the ids of `held` ({id: exact terms
    it holds}, `holds_exact`) first, most terms first (ties: better bm25, then lower id), each
    scored beyond every other hit: best bm25 × (1 + held / `terms`). At most `limit`."""
    if not held:
        return list(hits)[:limit]
    bm25 = dict(hits)
    best = min([*bm25.values(), -1.0])
    first = sorted(held, key=lambda i: (-held[i], bm25.get(i, 0.0), i))
    out = [(i, best * (1.0 + held[i] / terms)) for i in first]
    return (out + [(i, s) for i, s in hits if i not in held])[:limit]


def term_coverage(idf: dict[str, float], matches: dict[str, set[int]]) -> dict[int, float]:
    """Share of the query's IDF mass each document matches: Σ idf(t)·[d ∋ t] / Σ idf(t), in [0, 1].

    An absolute lexical relevance (unlike BM25, whose scale depends on the query): a memory
    holding every query term scores 1, one sharing a single common word scores little.
    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5)) as in BM25 (Robertson & Zaragoza 2009).
    """
    total = sum(idf.values())
    if total <= 0:
        return {}
    out: dict[int, float] = {}
    for term, docs in matches.items():
        for d in docs:
            out[d] = out.get(d, 0.0) + idf.get(term, 0.0) / total
    return out


def idf(df: int, n: int) -> float:
    """BM25 inverse document frequency of a term found in `df` of `n` documents."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def lexical_scale(n: int, df: dict[str, int], matches: dict[str, set[int]],
                  exact: dict[str, tuple[int, set[int]]] | None = None) -> tuple[dict[int, float], float]:
    """The two numbers that put a BM25 hit on an absolute scale, from a word index's statistics.

    Args:
        n: memories indexed; df: {term: memories holding it}; matches: {term: candidate ids
            holding it}; exact: {exact term: (memories holding it, candidate ids holding it)},
            counted like the other terms (`exact_terms`: the word index splits them).

    Returns:
        ({id: `term_coverage`}, Σ idf of the terms as FTS5's bm25 computes it,
        ln((n − df + 0.5) / (df + 0.5)) floored at 1e-6: the bm25 of a memory of average length
        holding each term once, by which `Candidate.bm25` is divided).
    """
    df, matches = dict(df), dict(matches)
    for term, (count, ids) in (exact or {}).items():
        df[term], matches[term] = min(count, n), ids  # a writer between the counts can make df exceed n
    scale = sum(_fts_idf(n, d) for d in df.values())
    return term_coverage({t: idf(d, n) for t, d in df.items()}, matches), scale


def _fts_idf(n: int, df: int) -> float:
    """FTS5's bm25 idf of a term in `df` of `n` rows: ln((n − df + 0.5) / (df + 0.5)), at least 1e-6."""
    ratio = (n - df + 0.5) / (df + 0.5)
    return math.log(ratio) if ratio > 1.0 else 1e-6


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
    `'s` after one). Issue 11: a name that most memories hold (a speaker's, a project's) carries
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


def parse_query(text: str, now: datetime) -> Query:
    """Step "time" (reading): the windows a query names and its text without them.

    A query that is only a date ("May 2023", "what happened in May 2023?": what is left is stop
    words, which `fts_terms` would search when nothing else is left, so every memory holding "in"
    matched in full) keeps its text for the lexical half."""
    from memsafe import when

    windows, rest = when.find(text, now)
    says_more = any(w not in STOP_WORDS for w in query_terms(rest))
    return Query(text, rest if says_more else text, windows, now, query_words(text), bool(windows) and not says_more)


@dataclass
class Candidate:
    """One memory a retriever proposed, with every feature the pure ranking steps read.

    Attributes:
        bm25: −bm25 / Σ idf of the query terms (SQLite's bm25 over its value for a memory of
            average length holding each term once; ~1 for a full match), None when BM25 did not
            find it.
        coverage: share of the query's IDF mass the memory holds (`term_coverage`).
        similarity: cosine similarity of query and memory vectors, None when KNN did not find it.
        hop: strength in [0, 1] of the relation linking it to an entity the query names (graph).
        words: distinct content words of the memory that the query does not hold (`content_words`
            with the query's `Query.words`); set only when `similarity` is.
        created_at / last_used_at: aware UTC; last_used_at = last explicit use, else creation.
        before / after: ids of the turns just before and just after it in the same conversation
            (`same_conversation`), when it is a conversation turn and they are in scope.
    """

    id: int
    bm25: float | None = None
    coverage: float = 0.0
    lexical_rank: int | None = None
    similarity: float | None = None
    vector_rank: int | None = None
    hop: float = 0.0
    exact: int = 0  # how many of the query's exact terms it holds (Store.fts_search `held`; retrieve.exact_first)
    dated: bool = False  # created in a time window the query names (`memsafe.api.core._dated`)
    words: int = 0
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    access_count: int = 0
    graph_degree: int = 0
    confidence: float = 0.8
    decay_level: int = 0
    before: int | None = None
    after: int | None = None
    asks: float = 0.0  # share of its text in questions (`question_share`): read by `answers_first`


CONVERSATION_GAP_SECONDS = 3600.0  # turns written further apart than this are not one conversation


def same_conversation(a, b) -> bool:
    """True if memories `a` and `b` (`models.Memory`, consecutive ids) are turns of one
    conversation: both of kind `conversation`, in the same project, written at most
    CONVERSATION_GAP_SECONDS apart (created_at, UTC ISO-8601)."""
    from memsafe import clock

    if a.kind != "conversation" or b.kind != "conversation" or a.project != b.project:
        return False
    gap = abs((clock.parse_iso(a.created_at) - clock.parse_iso(b.created_at)).total_seconds())
    return gap <= CONVERSATION_GAP_SECONDS


def link_turns(cands: dict[int, Candidate], visible: dict) -> None:
    """Step "candidates", conversation context: link each candidate that is a conversation turn to
    the turns just before and after it (ids ± 1) when `same_conversation`, setting
    `Candidate.before` / `after` and adding those turns as candidates with no retriever features.
    A turn added so is not linked back: only a turn a retriever found gains its neighbours'
    relevance (`in_context`). Linking it back (session 12) moved LoCoMo dev categories 1–4
    R@3/5/10 by −0.9/+0.2/−0.2 and MRR@10 by −0.1, so it was not kept.

    Args:
        cands: {id: Candidate}, changed in place.
        visible: {id: memory (`models.Memory` or `history.PastState`)} holding at least the
            candidates and their ± 1 neighbours that the query's scope may see.
    """
    for i in [i for i in cands if i in visible and visible[i].kind == "conversation"]:
        for n, side in ((i - 1, "before"), (i + 1, "after")):
            near = visible.get(n)
            if near is not None and same_conversation(visible[i], near):
                setattr(cands[i], side, n)
                cands.setdefault(n, Candidate(n))




def content_words(text: str, limit: int = 64, known: frozenset[str] = frozenset()) -> int:
    """Distinct words of at least 3 letters that are not stop-words and not in `known`, counted up
    to `limit`: a measure of how much a memory says beyond `known` (the query's own words,
    `Query.words`: "Jon: See ya Gina!" says little to a question about Jon and Gina, and "We squash
    commits before merging to main" says four things to "how do we combine branches?"). CJK has
    no spaces to count words by: each distinct CJK run counts one word per two characters (at
    least one; most Chinese words are two characters), so `释放内存以后指针变成悬空状态` says as
    much as its seven words. An ASCII text is read only until enough words are found (the ranking
    asks for `substance_words` of them: at 10,000 memories, reading whole texts took ~1 ms of a
    recall, session 9); a short text's count without `known` is kept per process (the same
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


def lexical_relevance(bm25: float, coverage: float, coverage_power: float) -> float:
    """Absolute lexical relevance in [0, 1] of one BM25 hit, comparable across queries and with
    the vector half (no score relative to the best hit):

        coverage^p · min(1, bm25)

    with `bm25` as in `Candidate` (BM25 over its value for a memory of average length holding
    each query term once: FTS5 bm25, k1 = 1.2, b = 0.75; Robertson & Zaragoza 2009) and coverage
    the share of the query's IDF mass the memory holds (`term_coverage`); p = `coverage_power`.
    """
    return max(0.0, coverage) ** coverage_power * min(1.0, max(0.0, bm25))


@dataclass
class Fusion:
    """The settings of `fuse` (config keys of the same names; defaults and how they were chosen
    in settings.CONFIG_KEYS)."""

    weight_lexical: float = 14.0
    weight_vector: float = 4.0
    min_similarity: float = 0.15
    coverage_power: float = 3.0
    substance_words: float = 4.0
    weight_time: float = 3.0
    weight_hop: float = 1.0
    weight_context: float = 0.5


def vector_relevance(similarity: float, words: int, f: Fusion) -> float:
    """Absolute vector relevance in [0, 1]: (sim − floor) / (1 − floor) above the floor
    (`min_similarity`), else 0, times min(1, words / substance_words), so a short turn that
    only names a person the query names (MiniLM puts it near any such question) weighs little
    (a memory with no such word counts as one)."""
    if similarity < f.min_similarity or f.min_similarity >= 1:
        return 0.0
    # at least one word's worth: a memory of symbols only (emoji) stays findable by meaning
    substance = min(1.0, max(1, words) / f.substance_words) if f.substance_words > 0 else 1.0
    return (similarity - f.min_similarity) / (1.0 - f.min_similarity) * substance


def fuse(cands: Sequence[Candidate], query: Query, f: Fusion) -> dict[int, float]:
    """Steps "fusion", "time" and "graph": one absolute relevance per candidate.

        relevance = w_l · lexical + w_v · vector + w_h · hop + w_t · closeness(created_at, windows)

    Both halves are on absolute scales (`lexical_relevance`, `vector_relevance`): a memory found
    only by the vector search outranks a strong lexical hit only when its similarity is high in
    absolute terms, and one below `min_similarity` is dropped (the floor holds in every mode).
    Graph: a memory one relation away from an entity the query names gains weight_hop × hop
    strength, so it can answer a question that names the entity it is linked to ("who owns the
    consumer of invoices.v1?") even above the memory that only names that entity. Time: when the
    query names a time (`memsafe.when`), a memory dated in the window gains w_t, one near it
    less (`when.closeness`).

    Returns:
        {id: relevance ≥ 0}; candidates with nothing (no lexical match, vector below the floor,
        no hop) are absent, but for a `dated` one (created in a window the query names), whose
        relevance is then 0: "what happened last week?" finds last week's memories, below any
        memory that matches what the query says. A query that names a time and nothing else
        puts that time's memories first after fusion (`time_first`).
    """
    from memsafe import when

    out: dict[int, float] = {}
    for c in cands:
        lex = f.weight_lexical * lexical_relevance(c.bm25, c.coverage, f.coverage_power) if c.bm25 is not None else 0.0
        vec = f.weight_vector * vector_relevance(c.similarity, c.words, f) if c.similarity is not None else 0.0
        hop = f.weight_hop * c.hop
        if lex <= 0 and vec <= 0 and hop <= 0:
            if c.dated:  # only its date matches: after every match, ordered by the other signals
                out[c.id] = 0.0
            continue
        score = lex + vec + hop
        if query.windows and c.created_at is not None and f.weight_time:
            score += f.weight_time * when.closeness(c.created_at, query.windows)
        out[c.id] = score
    return out


def in_context(cands: Sequence[Candidate], relevance: dict[int, float], weight: float) -> dict[int, float]:
    """Step "context": a conversation turn is read with the turns around it. Each turn gains
    `weight` × the larger relevance of the turn just before and the turn just after it
    (`Candidate.before` / `after`), so the answer to a question asked in the conversation ranks
    next to it ("Got any fave styles?" → "Contemporary dance is so expressive"): the answer alone
    shares no word and little meaning with a query that repeats the question. A turn a retriever
    found with no relevance of its own (a vector match below the floor) can enter this way; one
    only `link_turns` added cannot (it has no links). Relevances are those of `fuse` (before the lift:
    one step away, never chained). Issue 11: on the LoCoMo development split, with the other
    defaults, weight 0.4 raised R@5 of categories 1–4 by about 5 points (settings.CONFIG_KEYS).

    Returns `relevance` unchanged when `weight` ≤ 0 or no candidate has a neighbour, else new
    scores: {id: relevance ≥ 0}.
    """
    if weight <= 0:
        return relevance
    out = dict(relevance)
    for c in cands:
        near = [relevance[n] for n in (c.before, c.after) if n is not None and n in relevance]
        if near and max(near) > 0:
            out[c.id] = relevance.get(c.id, 0.0) + weight * max(near)
    return out


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


def answers_first(relevance: dict[int, float], cands: Sequence[Candidate], weight: float) -> dict[int, float]:
    """Step "context", second half: a memory that asks a question holds what someone wanted to
    know, not the answer, so it loses `weight` × its `question_share` (`Candidate.asks`) of its
    relevance: rel' = rel · (1 − weight · asks). It runs after `in_context`, so the turn that
    answers a question still gains from the question's full relevance ("What dance were you
    doing?" → "Contemporary, it is so expressive"). A memory that is nothing but the question
    asked is still found, below a statement of equal relevance. Session 14: on the LoCoMo
    development split, where a fifth of the turns ask something, question turns were 45% of the
    wrong first hits; weight and figures in settings.CONFIG_KEYS (`weight_question`).

    Returns `relevance` unchanged when `weight` ≤ 0 or no candidate asks, else new scores."""
    asking = {c.id: c.asks for c in cands if c.asks > 0 and c.id in relevance}
    if weight <= 0 or not asking:
        return relevance
    damp = min(1.0, weight)
    return {i: r * (1.0 - damp * asking.get(i, 0.0)) for i, r in relevance.items()}


def time_first(relevance: dict[int, float], cands: Sequence[Candidate], query: Query, weight_time: float
               ) -> dict[int, float]:
    """When the query names a time and nothing else (`Query.only_time`: "what did we do in the
    last 24 hours?"), the time is all it says: the memories created inside a window it names come
    before the rest, keeping the fused order inside each tier (rel' = rel + R + 1 inside, R = the
    highest relevance; tiers at least 1 apart, more than the other signals of `final_score` add
    together, as `exact_first`). Applied after `in_context` and `answers_first`, so neither a
    neighbour's lift nor a question's damping crosses the tier. An old memory holding the query's
    time words ("Summary of the last 24 hours"; a word match and a near meaning) came before
    every memory of that time (break-it, session 14).

    Returns `relevance` unchanged when the query says more than a time, `weight_time` ≤ 0 (time
    turned off: config `weight_time`) or no candidate is inside a window, else new scores.
    """
    if not query.only_time or weight_time <= 0:
        return relevance
    inside = {c.id for c in cands if c.id in relevance and c.created_at is not None
              and any(w.start <= c.created_at < w.end for w in query.windows)}
    return _tiered(relevance, dict.fromkeys(inside, 1))


def exact_first(relevance: dict[int, float], held: dict[int, int]) -> dict[int, float]:
    """Put memories holding more of the query's exact terms (identifiers, versions, single CJK characters;
    `Store.fts_search`'s `held`) above the rest, keeping the fused order inside each tier:
    rel' = rel + h · (R + 1), h = terms held, R = the highest relevance. Tiers are at least 1
    apart whatever the scale of `relevance` (absolute, `fuse`), more than the other signals of
    `final_score` add together (≤ 0.16 by default), so they never reorder tiers. Issue 12 item 9:
    an exact identifier in the query finds the memory holding it first, whatever the vectors say.
    A holder without a relevance of its own (`score_candidates` gives it 0) is lifted too.

    Returns `relevance` unchanged when nothing holds an exact term, else new scores.
    """
    return _tiered(relevance, held)


def _tiered(relevance: dict[int, float], tier: dict[int, int]) -> dict[int, float]:
    """rel' = rel + tier · (R + 1), R = the highest relevance (`exact_first`, `time_first`):
    `relevance` unchanged when no memory of it has a tier above 0."""
    if not any(tier.get(i, 0) for i in relevance):
        return relevance
    step = max(relevance.values()) + 1.0
    return {i: r + tier.get(i, 0) * step for i, r in relevance.items()}


@dataclass
class Weights:
    """Weights of the multi-signal score; defaults and their justification live in settings.CONFIG_KEYS."""

    recency: float = 0.05
    access: float = 0.03
    graph: float = 0.03
    confidence: float = 0.05
    decay: float = 0.05
    recency_half_life_days: float = 30.0


def final_score(c: Candidate, relevance: float, w: Weights, now: datetime) -> float:
    """relevance + w_r·recency + w_a·access + w_g·graph + w_c·confidence − w_d·decay_level/3
    of candidate `c`.

    recency = 2^(−age/half-life), age in days from the last explicit use (else creation, else
    `now`) to `now`; access = 1 − 1/(1 + ln(1 + n)); graph = 1 − 1/(1 + degree). Relevance is
    `fuse`'s absolute score (a full keyword match alone is worth weight_lexical), so with the
    default weights (≤ 0.16 together) the other signals only reorder hits of near-equal relevance.
    """
    anchor = c.last_used_at or c.created_at or now
    age_days = (now - anchor).total_seconds() / 86400
    recency = 0.5 ** (max(0.0, age_days) / w.recency_half_life_days)
    access = 1.0 - 1.0 / (1.0 + math.log1p(max(0, c.access_count)))
    graph = 1.0 - 1.0 / (1.0 + max(0, c.graph_degree))
    return (
        relevance
        + w.recency * recency
        + w.access * access
        + w.graph * graph
        + w.confidence * c.confidence
        - w.decay * (c.decay_level / 3.0)
    )


def rank(cands: Sequence[Candidate], relevance: dict[int, float], w: Weights, now: datetime
         ) -> list[tuple[float, Candidate]]:
    """Step "scoring": [(`final_score`, candidate)] best first (ties: lower id first), for the
    candidates with a relevance."""
    out = [(final_score(c, relevance[c.id], w, now), c) for c in cands if c.id in relevance]
    out.sort(key=lambda pair: (-pair[0], pair[1].id))
    return out


EXCERPT_MIN_TOKENS = 24  # a memory cut to fit gets at least this many tokens, else it is left out


@dataclass
class Packed:
    """One item chosen by `pack`: its index in the input, the text to return and its token count."""

    index: int
    text: str
    tokens: int
    truncated: bool


def pack(texts: Sequence[str], budget: int, count: Callable[[str], int],
         truncate: Callable[[str, int], str], limit: int | None = None,
         overhead: Callable[[int, bool], int] | None = None) -> list[Packed]:
    """Step "packing": texts (sorted best first) into `budget` tokens, in rank order, never
    dropping a better memory silently. A text costs `count(text)` plus `overhead(index, cut)`,
    the tokens its framing adds (its header line, `memsafe.framing`; `cut`: for an excerpt), so
    that `tokens` is what the text adds to the reply.

    1. Whole texts that fit, greedily in rank order.
    2. The best text left out gets an excerpt (cut to what is left) when at least
       EXCERPT_MIN_TOKENS are left for its text, so a large relevant memory shows instead of vanishing
       (issue 17, item 6).
    3. The best text of all is always returned: when it did not fit and too little is left for
       its excerpt, the lowest-ranked whole texts make room for it (issue 11, item 6).

    At most `limit` items; `unfitted` names the texts the budget left out. The sum of
    `tokens` never exceeds `budget`; a budget too small for one visible character returns nothing.
    """
    cap = len(texts) if limit is None else max(0, limit)
    extra = overhead or (lambda index, cut: 0)
    whole: list[Packed] = []
    left = budget
    skipped: list[int] = []
    for i, text in enumerate(texts):
        if len(whole) >= cap:
            break
        n = count(text) + extra(i, False)
        if n <= left:
            whole.append(Packed(i, text, n, False))
            left -= n
        else:
            skipped.append(i)
    if skipped and cap:
        first = skipped[0]
        framing = extra(first, True)
        need = EXCERPT_MIN_TOKENS + framing if first else min(EXCERPT_MIN_TOKENS + framing, budget)
        if first == 0:
            while left < need and whole:  # the best memory always shows: make room for it
                dropped = whole.pop()
                left += dropped.tokens
        if left >= need and (first == 0 or len(whole) < cap) and left - framing >= 1:
            cut = truncate(texts[first], left - framing)
            if cut.strip():
                if len(whole) >= cap:
                    whole.pop()
                whole.append(Packed(first, cut, count(cut) + framing, True))
    return sorted(whole, key=lambda p: p.index)


def unfitted(packed: Sequence[Packed], count: int, limit: int | None = None) -> tuple[list[int], list[int]]:
    """Indexes (of `count` ranked texts) that `pack` left out for lack of budget, as (ranked above
    the last packed one: better matches that did not fit, ranked below it). Those below count only
    when fewer than `limit` texts were packed: otherwise the limit, not the budget, left them out.
    Nothing packed: every text is above."""
    if not packed:
        return list(range(count)), []
    last = max(p.index for p in packed)
    taken = {p.index for p in packed}
    cap = count if limit is None else min(limit, count)
    below = list(range(last + 1, count)) if len(packed) < cap else []
    return [i for i in range(last) if i not in taken], below
