"""Responsibility: the pure parts of recall: a safe FTS5 query from free text, rank fusion, the
multi-signal score, and packing hits into a token budget. No database, no model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


_COMPOUND = re.compile(r"\w+(?:[.\-/:@+]\w+)*", re.UNICODE)


def fts_terms(text: str) -> list[str]:
    """The quoted FTS5 terms of a free-text query, in order, without duplicates (at most 64).

    Words joined by `. - / : @ +` stay together as one quoted phrase (`v2.4.0`, `checkout-api`,
    `deploy.yml`), so identifiers match exactly. Stop-words are dropped unless nothing else is
    left. Every FTS5 operator character is outside the quotes' content or doubled, so no input
    can form FTS5 syntax.
    """
    seen: dict[str, None] = {}
    for word in _COMPOUND.findall(text.lower()):
        seen.setdefault(word, None)
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


def rrf(rankings: Sequence[Sequence[int]], weights: Sequence[float], k: float = 60.0) -> dict[int, float]:
    """Weighted reciprocal rank fusion: score(d) = Σ_i w_i / (k + rank_i(d)), ranks 1-based.

    Source: Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
    individual Rank Learning Methods", SIGIR 2009 (k = 60).
    """
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + weight / (k + rank)
    return scores


def fuse(
    lexical: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    *,
    method: str = "convex",
    weight_lexical: float = 1.0,
    weight_vector: float = 1.0,
    min_similarity: float = 0.0,
    rrf_k: float = 60.0,
    coverage: dict[int, float] | None = None,
    coverage_power: float = 3.0,
) -> dict[int, float]:
    """Fuse a BM25 list and a vector list into one relevance per memory, best = 1.0.

    Args:
        lexical: [(id, bm25)] best first, SQLite's bm25 (negative; lower is better).
        vector: [(id, cosine similarity)] best first.
        method: 'convex' (default): w_l·lex + w_v·vec over score-normalised inputs, where
            lex = coverage^p · (0.75 + 0.25 · bm25 / best bm25) (in [0, 1], 0 = no match; coverage
            from `term_coverage`, or 1 when not given; p = `coverage_power`, so a memory sharing
            one common word with a long question adds little while one holding every query
            term adds fully) and
            vec = max(0, sim − floor) / (best sim − floor) (in [0, 1]), floor = min_similarity
            when there is a lexical list (else just below the lowest similarity, so a vector-only
            search keeps its whole order);
            Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval",
            ACM TOIS 2023 (convex combination of normalised scores beats RRF and is
            sample-efficient to tune). 'rrf': weighted reciprocal rank fusion (see `rrf`).
        min_similarity: cosine below which a memory found only by the vector search is dropped
            (an unrelated nearest neighbour is not a hit).

    Returns:
        {id: relevance in (0, 1]}, the best memory at exactly 1.0; {} when both lists are empty.
    """
    scores: dict[int, float] = {}
    coverage = coverage or {}
    if method == "rrf":
        lexical_ids = {i for i, _ in lexical}
        kept = [i for i, sim in vector if sim >= min_similarity or i in lexical_ids or not lexical]
        scores = rrf([[i for i, _ in lexical], kept], [weight_lexical, weight_vector], rrf_k)
    else:
        if lexical:
            best = min(s for _, s in lexical)
            for i, s in lexical:
                ratio = s / best if best < 0 else 1.0
                lex = (coverage[i] ** coverage_power) * (0.75 + 0.25 * ratio) if i in coverage else ratio
                scores[i] = weight_lexical * lex
        if vector:
            top = max(sim for _, sim in vector)
            # With a lexical list, similarity below the floor adds nothing; alone, the vector
            # list keeps its whole order (lowest similarity maps to just above 0).
            floor = min_similarity if lexical else min(min_similarity, min(sim for _, sim in vector) - 1e-3)
            if top > floor:
                for i, sim in vector:
                    if sim > floor:
                        scores[i] = scores.get(i, 0.0) + weight_vector * (sim - floor) / (top - floor)
    scores = {i: s for i, s in scores.items() if s > 0}
    if not scores:
        return {}
    top_score = max(scores.values())
    return {i: s / top_score for i, s in scores.items()}


@dataclass
class Signals:
    """Per-memory inputs to the final score (all in [0, 1] except decay_level, 0–3)."""

    relevance: float
    age_days: float
    access_count: int
    graph_degree: int
    confidence: float
    decay_level: int


@dataclass
class Weights:
    """Weights of the multi-signal score; defaults and their justification live in settings.CONFIG_KEYS."""

    recency: float = 0.05
    access: float = 0.03
    graph: float = 0.03
    confidence: float = 0.05
    decay: float = 0.05
    recency_half_life_days: float = 30.0


def final_score(s: Signals, w: Weights) -> float:
    """relevance + w_r·recency + w_a·access + w_g·graph + w_c·confidence − w_d·decay_level/3.

    recency = 2^(−age/half-life); access = 1 − 1/(1 + ln(1 + n)); graph = 1 − 1/(1 + degree).
    Relevance is normalised to [0, 1] by the caller (best hit = 1), so the other signals only
    reorder hits of similar relevance.
    """
    recency = 0.5 ** (max(0.0, s.age_days) / w.recency_half_life_days)
    access = 1.0 - 1.0 / (1.0 + math.log1p(max(0, s.access_count)))
    graph = 1.0 - 1.0 / (1.0 + max(0, s.graph_degree))
    return (
        s.relevance
        + w.recency * recency
        + w.access * access
        + w.graph * graph
        + w.confidence * s.confidence
        - w.decay * (s.decay_level / 3.0)
    )


@dataclass
class Packed:
    """One item chosen by `pack`: its index in the input, the text to return and its token count."""

    index: int
    text: str
    tokens: int
    truncated: bool


def pack(texts: Sequence[str], budget: int, count: Callable[[str], int],
         truncate: Callable[[str, int], str], limit: int | None = None) -> list[Packed]:
    """Greedy packing of texts (already sorted best first) into `budget` tokens.

    Each text is taken whole if it fits in what is left, otherwise skipped. If nothing fits,
    the best text is truncated to the budget, so at least one item is returned (when `texts` is
    non-empty and the budget holds at least one visible character of the best text). The sum of
    `tokens` never exceeds `budget`.
    """
    chosen: list[Packed] = []
    left = budget
    for i, text in enumerate(texts):
        if limit is not None and len(chosen) >= limit:
            break
        n = count(text)
        if n <= left:
            chosen.append(Packed(i, text, n, False))
            left -= n
    if not chosen and texts and budget >= 1:
        cut = truncate(texts[0], budget)
        if cut.strip():  # a budget too small for even one visible character returns nothing
            chosen.append(Packed(0, cut, count(cut), True))
    return chosen
