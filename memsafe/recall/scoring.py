"""Responsibility: steps "fusion" and "scoring" of recall, pure: lexical and vector relevance on
absolute scales, fused with the time and graph terms (`fuse`), the context of conversation turns
(`in_context`), answers before questions (`answers_first`), tiers for a time-only query and for
exact terms (`time_first`, `exact_first`), and the multi-signal score (`rank`); `score_candidates`
runs them in order. No database, no model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime

from memsafe import clock
from memsafe.recall import weights
from memsafe.recall.candidates import Candidate
from memsafe.recall.terms import Query
from memsafe.recall.weights import Fusion, Weights


def lexical_relevance(bm25: float, coverage: float, coverage_power: float) -> float:
    """Absolute lexical relevance in [0, 1] of one BM25 hit, comparable across queries and with
    the vector half (no score relative to the best hit):

        coverage^p · min(1, bm25)

    with `bm25` as in `Candidate` (BM25 over its value for a memory of average length holding
    each query term once: FTS5 bm25, k1 = 1.2, b = 0.75; Robertson & Zaragoza 2009) and coverage
    the share of the query's IDF mass the memory holds (`term_coverage`); p = `coverage_power`.
    """
    return max(0.0, coverage) ** coverage_power * min(1.0, max(0.0, bm25))


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
    less (`when.closeness`), and so does one whose text mentions a time inside it
    (`Candidate.date_mention`, `recall.dates`: "2024-12-03" for "Dec 3rd"), whenever it was made.

    Returns:
        {id: relevance ≥ 0}; candidates with nothing (no lexical match, vector below the floor,
        no hop) are absent, but for a `dated` one (created in a window the query names), whose
        relevance is then 0, and one whose text mentions such a time, whose relevance is w_t
        (it tells of that time, whenever it was made): "what happened last week?" finds last
        week's memories, below any memory that matches what the query says. A query that names a time and nothing else
        puts that time's memories first after fusion (`time_first`).
    """
    from memsafe import when

    out: dict[int, float] = {}
    for c in cands:
        lex = f.weight_lexical * lexical_relevance(c.bm25, c.coverage, f.coverage_power) if c.bm25 is not None else 0.0
        vec = f.weight_vector * vector_relevance(c.similarity, c.words, f) if c.similarity is not None else 0.0
        hop = f.weight_hop * c.hop
        if lex <= 0 and vec <= 0 and hop <= 0:
            if c.dated or c.date_mention > 0:  # only its date matches
                out[c.id] = f.weight_time * c.date_mention
            continue
        score = lex + vec + hop
        if (query.windows and c.created_at is not None or c.date_mention > 0) and f.weight_time:
            near = when.closeness(c.created_at, query.windows) if query.windows and c.created_at is not None else 0.0
            score += f.weight_time * max(near, c.date_mention)  # dated then, or telling of that time
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
    one step away, never chained). On the LoCoMo development split, with the other
    defaults, weight 0.4 raised R@5 of categories 1–4 by about 5 points (weights.KEYS).

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


def answers_first(relevance: dict[int, float], cands: Sequence[Candidate], weight: float) -> dict[int, float]:
    """Step "context", second half: a memory that asks a question holds what someone wanted to
    know, not the answer, so it loses `weight` × its `question_share` (`Candidate.asks`) of its
    relevance: rel' = rel · (1 − weight · asks). It runs after `in_context`, so the turn that
    answers a question still gains from the question's full relevance ("What dance were you
    doing?" → "Contemporary, it is so expressive"). A memory that is nothing but the question
    asked is still found, below a statement of equal relevance. On the LoCoMo
    development split, where a fifth of the turns ask something, question turns were 45% of the
    wrong first hits; weight and figures in weights.KEYS (`weight_question`).

    Returns `relevance` unchanged when `weight` ≤ 0 or no candidate asks, else new scores."""
    asking = {c.id: c.asks for c in cands if c.asks > 0 and c.id in relevance}
    if weight <= 0 or not asking:
        return relevance
    damp = min(1.0, weight)
    return {i: r * (1.0 - damp * asking.get(i, 0.0)) for i, r in relevance.items()}


OWN_SOURCES = frozenset(("user", "agent"))  # what a user or their agent wrote, not imported or captured history


def asked_for(relevance: dict[int, float], cands: Sequence[Candidate], query: Query, weight_kind: float,
              weight_voice: float) -> dict[int, float]:
    """Step "context", the kind and source a question asks for (`terms.asked_for`): a memory of a
    kind the question names ("what did we decide ..." → decision) or from a source it names
    ("which commit ..." → git) gains `weight_kind` × its relevance; in a question asked in the
    first person ("we", "our", "I") a memory not written by the user or an agent (OWN_SOURCES:
    a backfilled commit, an import) loses `weight_voice` × its relevance, unless the question
    names its source. rel' = rel · (1 + w_k · named) · (1 − w_v · other voice). A whole store of
    one source is reordered by neither.

    Returns `relevance` unchanged when the question names no kind or source and is not in the
    first person, or both weights are ≤ 0, else new scores."""
    voice = query.own_voice and weight_voice > 0
    if not (query.kinds or query.sources or voice) or (weight_kind <= 0 and weight_voice <= 0):
        return relevance
    by_id = {c.id: c for c in cands}
    damp = min(1.0, max(0.0, weight_voice))
    out = {}
    for i, r in relevance.items():
        c = by_id.get(i)
        if c is None:
            out[i] = r
            continue
        named = c.kind in query.kinds or c.source in query.sources
        other = voice and c.source not in OWN_SOURCES and c.source not in query.sources
        out[i] = r * (1.0 + max(0.0, weight_kind) * named) * (1.0 - damp * other)
    return out


def time_first(relevance: dict[int, float], cands: Sequence[Candidate], query: Query, weight_time: float
               ) -> dict[int, float]:
    """When the query names a time and nothing else (`Query.only_time`: "what did we do in the
    last 24 hours?"), the time is all it says: the memories created inside a window it names come
    before the rest, keeping the fused order inside each tier (rel' = rel + R + 1 inside, R = the
    highest relevance; tiers at least 1 apart, more than the other signals of `final_score` add
    together, as `exact_first`). Applied after `in_context` and `answers_first`, so neither a
    neighbour's lift nor a question's damping crosses the tier. An old memory holding the query's
    time words ("Summary of the last 24 hours"; a word match and a near meaning) came before
    every memory of that time.

    Returns `relevance` unchanged when the query says more than a time, `weight_time` ≤ 0 (time
    turned off: config `weight_time`) or no candidate is inside a window, else new scores.
    """
    if not query.only_time or weight_time <= 0:
        return relevance
    inside = {c.id for c in cands if c.id in relevance and (c.date_mention >= 1 or c.created_at is not None
              and any(w.start <= c.created_at < w.end for w in query.windows))}
    return _tiered(relevance, dict.fromkeys(inside, 1))


def exact_first(relevance: dict[int, float], held: dict[int, int]) -> dict[int, float]:
    """Put memories holding more of the query's exact terms (identifiers, versions, single CJK characters;
    `Store.fts_search`'s `held`) above the rest, keeping the fused order inside each tier:
    rel' = rel + h · (R + 1), h = terms held, R = the highest relevance. Tiers are at least 1
    apart whatever the scale of `relevance` (absolute, `fuse`), more than the other signals of
    `final_score` add together (≤ 0.16 by default), so they never reorder tiers. So
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


TIE_FLOOR = 1e-6  # the least share of the small signals a memory keeps (one matched by its date alone: 0)


def final_score(c: Candidate, relevance: float, w: Weights, now: datetime) -> float:
    """relevance + s · (w_r·recency + w_a·access + w_g·graph + w_c·confidence − w_d·decay_level/3)
    of candidate `c`, s = min(1, max(relevance, TIE_FLOOR)).

    s keeps the small signals small beside a weak match too: a query whose rarest word no memory
    holds gives every match a relevance near 0, and at full weight recency and confidence alone
    ordered them, not the words they share or the kind and source the question asks for.

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
    small = (w.recency * recency + w.access * access + w.graph * graph + w.confidence * c.confidence
             - w.decay * (c.decay_level / 3.0))
    return relevance + min(1.0, max(relevance, TIE_FLOOR)) * small


def rank(cands: Sequence[Candidate], relevance: dict[int, float], w: Weights, now: datetime
         ) -> list[tuple[float, Candidate]]:
    """Step "scoring": [(`final_score`, candidate)] best first (ties: lower id first), for the
    candidates with a relevance."""
    out = [(final_score(c, relevance[c.id], w, now), c) for c in cands if c.id in relevance]
    out.sort(key=lambda pair: (-pair[0], pair[1].id))
    return out


def corrections_first(ranked: list[tuple[float, Candidate]]) -> list[tuple[float, Candidate]]:
    """Step "scoring", corrections: a memory that replaces another (`Candidate.superseded_by`)
    ranks just above the memory it replaces when both are ranked and it ranked below it, with
    the replaced one's score if that is higher (so scores stay in order); every other memory keeps
    its place. A chain of corrections (#3 replaced by #7, replaced by #9) ends in the current one
    first. Returns `ranked` unchanged when no candidate is replaced by another that ranks below it."""
    out = list(ranked)
    for _ in range(len(out)):
        where = {c.id: i for i, (_, c) in enumerate(out)}
        move = next(((i, where[c.superseded_by]) for i, (_, c) in enumerate(out)
                     if c.superseded_by is not None and where.get(c.superseded_by, -1) > i), None)
        if move is None:
            return out
        stale, fresh = move
        score, c = out.pop(fresh)
        out.insert(stale, (max(score, out[stale][0]), c))
    return out


# The current fact first (`current_first`): which sources it reorders and how near two memories
# must be. Only prompts the agent-loop hooks captured: a note (user, agent) that corrects another
# is linked to it by `remember` (`corrections_first`); reordering notes by time cost developer prose
# hybrid R@1 0.796 → 0.699. A commit or an import is a record of its own time.
CAPTURED = frozenset(("hook",))
SAME_RATIO, SAME_COVER = 0.6, 0.9  # a later memory holding nearly as much of the query, near in score
SAID_RATIO, SAID_COVER = 0.3, 0.3  # ... or one that says the thing changed (`corrections.announces_change`)
# A question about what was true before ("what was the first ...", "originally", "used to") asks for
# the earlier value: the current fact does not go first.
_PAST = re.compile(r"\b(?:first|originally|initially|previously|formerly|earlier|before|old|older|original|"
                   r"used to|prior)\b", re.IGNORECASE)


def current_first(ranked: list[tuple[float, Candidate]], query: Query, depth: int
                  ) -> list[tuple[float, Candidate]]:
    """Step "scoring", the current fact first: among the first `depth` hits, a later memory that
    restates an earlier one ranked above it ranks just above it (with its score, so scores stay in
    order), when both are captured prompts (source hook, CAPTURED). Restates: both keyword matches,
    the later holds its rarest query term (`Candidate.key`) among the earlier one's (`held`), and
    either scores at least SAME_RATIO × its score holding SAME_COVER × its coverage, or says the
    thing changed (`Candidate.changes`: "we moved from Postgres 14 to 16") and scores SAID_RATIO ×
    and holds SAID_COVER × as much. A prompt that gives a new value asks for something as well, so
    `remember` marks no correction, and it ranked below the stale value (on the prompts corpus,
    update-first@10 0.52). Time is `Candidate.created_at`, when the thing happened.

    Returns `ranked` unchanged when `depth` < 2, when the query names a time or asks what was
    true before (`_PAST`), or when no pair is out of order."""
    if depth < 2 or len(ranked) < 2 or query.windows or _PAST.search(query.text):
        return ranked
    out = list(ranked)
    head = min(depth, len(out))
    for _ in range(head * head):  # each move puts a later memory above an earlier one: bounded
        move = next(((i, j) for j in range(1, head) for i in range(j) if _restates(out[i], out[j])), None)
        if move is None:
            return out
        i, j = move
        score, c = out.pop(j)
        out.insert(i, (max(score, out[i][0]), c))
    return out


def _restates(first: tuple[float, Candidate], later: tuple[float, Candidate]) -> bool:
    """True if `later` (ranked below `first`) restates what `first` says, later in time (`current_first`)."""
    (s_old, old), (s_new, new) = first, later
    if not (old.source in CAPTURED and new.source in CAPTURED and old.bm25 is not None and new.bm25 is not None
            and old.created_at is not None and new.created_at is not None and new.created_at > old.created_at
            and new.key and new.key in old.held):
        return False
    ratio, cover = (SAID_RATIO, SAID_COVER) if new.changes else (SAME_RATIO, SAME_COVER)
    return s_new >= ratio * s_old and new.coverage >= cover * old.coverage


def one_half_weight(cfg: dict, mode: str, notes: list[str]) -> dict:
    """The config a recall of one half alone ranks with (`mode` 'lexical' or 'vector': asked
    for, or lexical when vectors are unavailable): `cfg` with that half's fusion weight at its
    default when it is set to 0, and a note saying so. A fusion weight scales one half against the
    other; 0 is allowed beside a non-zero other half (`check_config_pair`), and alone it ranked
    nothing: `weight_lexical 0` made every recall without the model, and `--mode lexical`, return
    nothing. A lexical-only recall ranks with `coverage_power_lexical` as its coverage_power: in
    hybrid a steep coverage (3) leaves a memory holding few of the query's words to the vector
    half, which finds paraphrases; alone, BM25's own order is the better guess (weights.KEYS).
    `cfg` itself is returned unchanged otherwise."""
    key = {"lexical": "weight_lexical", "vector": "weight_vector"}.get(mode)
    if mode == "lexical" and cfg.get("coverage_power_lexical", cfg["coverage_power"]) != cfg["coverage_power"]:
        cfg = {**cfg, "coverage_power": cfg["coverage_power_lexical"]}
    if key is None or cfg[key] > 0:
        return cfg
    default = weights.KEYS[key].default
    notes.append(f"{key} is 0, which ranks nothing in a {mode}-only recall; {default:g} (its default) was used")
    return {**cfg, key: default}


def score_candidates(cands: Sequence[Candidate], q: Query, cfg: dict) -> list[tuple[float, Candidate]]:
    """Steps fusion (with time and graph), context (answers before questions, the kind and source
    asked for: `asked_for`), a time-only query's time first (`time_first`), exact terms first,
    scoring, the current prompt before the one it restates (`current_first`) and corrections
    before the memories they replace (`corrections_first`), pure:
    [(score, candidate)] best first."""
    fusion = weights.fusion_of(cfg)
    relevance = in_context(cands, fuse(cands, q, fusion), fusion.weight_context)
    relevance = answers_first(relevance, cands, cfg["weight_question"])
    relevance = asked_for(relevance, cands, q, cfg["weight_kind"], cfg["weight_voice"])
    relevance = time_first(relevance, cands, q, cfg["weight_time"])
    held = {c.id: c.exact for c in cands if c.exact}
    for i in held:  # a memory holding an exact term ranks first in every mode, found by meaning or not
        relevance.setdefault(i, 0.0)
    ranked = rank(cands, exact_first(relevance, held), weights.weights_of(cfg), q.now or clock.now())
    return corrections_first(current_first(ranked, q, cfg["current_depth"]))
