"""Responsibility: step "candidates": the memories the retrievers propose for a query (BM25 and
exact terms, vector KNN, the graph hop, the times it names, the conversation turns around them),
each a `Candidate` with every feature the pure ranking steps read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from memsafe import clock
from memsafe.errors import IndexDamaged, repair_hint
from memsafe.models import Kind, Memory, Scope, Source, Status, admits
from memsafe.recall import corrections, dates, related, terms, vectors
from memsafe.store import Store
from memsafe.store.common.fulltext import exact_hits, holds_exact

if TYPE_CHECKING:
    from memsafe.history import PastState


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
        created_at / last_used_at: aware UTC; created_at = when the thing happened
            (`Memory.event_at`); last_used_at = last explicit use, else creation.
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
    exact: int = 0  # how many of the query's exact terms it holds (Store.fts_search `held`; scoring.exact_first)
    dated: bool = False  # created in a time window the query names (`_dated`)
    date_mention: float = 0.0  # its text mentions a time the query names (`dates.mark`): 1.0, else 0.0
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
    kind: str = ""  # the memory's kind and source: read by `scoring.asked_for`
    source: str = ""
    superseded_by: int | None = None  # the memory that corrects this one (`scoring.corrections_first`)
    key: str = ""  # the rarest query term it holds (`lexical_scale`): read by `scoring.current_first`
    held: frozenset[str] = frozenset()  # the query terms it holds (`lexical_scale`)
    changes: bool = False  # its text says something changed (`corrections.announces_change`)


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


def one_voice(a, b) -> bool:
    """True if turns `a` and `b` (`models.Memory` or `history.PastState`) are both messages the
    agent-loop hooks captured (source `hook`): one user's prompts to an assistant, whose replies
    are not stored, so neither answers the other. Each states its own facts; lending the relevance
    of one prompt to the next ranked the prompt after the relevant one above it (on the prompts
    corpus R@1 −2.3 points, docs/recall.md), while between the turns of a conversation among
    people it is worth about 5 points of LoCoMo R@5 (`in_context`)."""
    hook = Source.HOOK.value
    return a.source == hook and b.source == hook


def link_turns(cands: dict[int, Candidate], visible: dict) -> None:
    """Step "candidates", conversation context: link each candidate that is a conversation turn to
    the turns just before and after it (ids ± 1) when `same_conversation` and not `one_voice`, setting
    `Candidate.before` / `after` and adding those turns as candidates with no retriever features.
    A turn added so is not linked back: only a turn a retriever found gains its neighbours'
    relevance (`in_context`). Linking it back moved LoCoMo dev categories 1–4
    R@3/5/10 by −0.9/+0.2/−0.2 and MRR@10 by −0.1, so it was not kept.

    Args:
        cands: {id: Candidate}, changed in place.
        visible: {id: memory (`models.Memory` or `history.PastState`)} holding at least the
            candidates and their ± 1 neighbours that the query's scope may see.
    """
    for i in [i for i in cands if i in visible and visible[i].kind == "conversation"]:
        for n, side in ((i - 1, "before"), (i + 1, "after")):
            near = visible.get(n)
            if near is not None and same_conversation(visible[i], near) and not one_voice(visible[i], near):
                setattr(cands[i], side, n)
                cands.setdefault(n, Candidate(n))


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
                  exact: dict[str, tuple[int, set[int]]] | None = None
                  ) -> tuple[dict[int, float], float, dict[int, tuple[str, frozenset[str]]]]:
    """The two numbers that put a BM25 hit on an absolute scale, from a word index's statistics.

    Args:
        n: memories indexed; df: {term: memories holding it}; matches: {term: candidate ids
            holding it}; exact: {exact term: (memories holding it, candidate ids holding it)},
            counted like the other terms (`exact_terms`: the word index splits them).

    Returns:
        ({id: `term_coverage`}, Σ idf of the terms as FTS5's bm25 computes it,
        ln((n − df + 0.5) / (df + 0.5)) floored at 1e-6: the bm25 of a memory of average length
        holding each term once, by which `Candidate.bm25` is divided, {id: the rarest query term
        it holds (fewest memories; ties by the term)}).
    """
    df, matches = dict(df), dict(matches)
    for term, (count, ids) in (exact or {}).items():
        df[term], matches[term] = min(count, n), ids  # a writer between the counts can make df exceed n
    scale = sum(_fts_idf(n, d) for d in df.values())
    rarest: dict[int, tuple[str, frozenset[str]]] = {}
    for term in sorted(matches, key=lambda t: (df.get(t, n), t), reverse=True):  # the rarest written last
        for i in matches[term]:
            rarest[i] = (term, rarest.get(i, ("", frozenset()))[1] | {term})
    return term_coverage({t: idf(d, n) for t, d in df.items()}, matches), scale, rarest


def _fts_idf(n: int, df: int) -> float:
    """FTS5's bm25 idf of a term in `df` of `n` rows: ln((n − df + 0.5) / (df + 0.5)), at least 1e-6."""
    ratio = (n - df + 0.5) / (df + 0.5)
    return math.log(ratio) if ratio > 1.0 else 1e-6


def gather(store: Store, q: terms.Query, scope: Scope, depth: int, mode: str, cfg: dict, notes: list[str]
           ) -> tuple[list[Candidate], dict[int, Memory], str]:
    """Step "candidates": BM25 (on the query without its date words) and vector KNN (on the query
    without the words half the store holds, `query_text`; in vector mode the memories holding
    an exact term join too) in `scope`, plus memories one relation away from an entity the query
    names (when weight_hop > 0), with the features the pure steps read. Returns (candidates in
    scope, their memories, mode used)."""
    # The query is embedded on a worker thread (loading the model first in a fresh process) while
    # this thread runs the BM25 search: ONNX Runtime and SQLite both release the GIL.
    # Everything that does not need the query's vector runs before waiting for it, the rows and
    # features of the lexical and graph candidates included: a new query's embedding (~8 ms on 2
    # cores) outlasts the BM25 search at 10,000 memories, and what follows the wait is the latency
    # that remains (6.6 ms after the wait, of 16.4 at the median).
    damage: list[IndexDamaged] = []  # a damaged word or trigram index: the vector half answers alone

    def words(call, fallback):
        try:
            return call()
        except IndexDamaged as exc:
            damage.append(exc)
            return fallback

    query_vector = (vectors.embed_query_async(store, words(lambda: vectors.query_text(store, q.text), q.text),
                                              scope, depth) if mode in ("hybrid", "vector") else None)
    lexical = words(lambda: _lexical(store, q.lexical_text, scope, depth), []) if mode in ("hybrid", "lexical") else []
    if damage and mode == "lexical":  # the other half answers
        mode = "vector"
        query_vector = vectors.embed_query_async(store, q.text, scope, depth)
    coverage, idf_sum, keys = (words(lambda: _coverage(store, q.lexical_text, lexical), ({}, 0.0, {})) if lexical
                               else ({}, 0.0, {}))
    # no BM25 in vector mode, but the memories holding an exact term still come first
    exact = (words(lambda: store.fts_search(None, scope, depth, terms.exact_terms(q.lexical_text)), [])
             if mode == "vector" and not damage else lexical)
    held = getattr(exact, "held", {}) if mode == "vector" else {}
    notes += _unheld_notes(q.text, getattr(exact, "exact", {}))
    named = related.query_entities(store, q.text, scope) if cfg["weight_hop"] > 0 else []
    hops = related.one_hop(store, named, scope)[0] if cfg["weight_hop"] > 0 else {}
    rows = _Rows(store, scope, cfg["weight_context"] > 0)
    dated = _dated(store, q, scope, depth) if cfg["weight_time"] > 0 else []
    # memories whose text spells a day the query names: candidates only if `dates.mark` reads it there
    spelled = words(lambda: dates.mentioning(store, q.named, scope, depth), []) if cfg["weight_time"] > 0 else []
    by_id = _lexical_candidates(held, lexical, coverage, idf_sum, hops, dated, keys, spelled)
    rows.read(list(by_id))
    _memory_features([c for i, c in by_id.items() if i in rows.memories], rows.memories, rows.degrees)
    vector, used_mode = (([], mode) if query_vector is None
                         else vectors.search(store, query_vector, mode, scope, depth, notes))
    if mode == "vector" and used_mode == "lexical" and not damage:  # vectors unavailable: fall back to BM25
        lexical, held = words(lambda: _lexical(store, q.lexical_text, scope, depth), []), {}
        coverage, idf_sum, keys = (words(lambda: _coverage(store, q.lexical_text, lexical), ({}, 0.0, {}))
                                   if lexical else ({}, 0.0, {}))
        by_id = _lexical_candidates(held, lexical, coverage, idf_sum, hops, dated, keys, spelled)
    if damage:
        half = "by meaning" if used_mode != "lexical" else "without it (vectors are unavailable too)"
        notes.append(f"the {damage[0].index} index is damaged ({damage[0].detail}); recall answers {half} "
                     f"meanwhile; {repair_hint(store)}")
        used_mode = "vector" if used_mode == "hybrid" else used_mode
    for rank, (i, sim) in enumerate(vector, start=1):
        c = by_id.setdefault(i, Candidate(i))
        c.similarity, c.vector_rank = sim, rank
    rows.read(list(by_id))
    memories = rows.memories
    if rows.turns:
        link_turns(by_id, {i: m for i, m in memories.items()
                           if i in by_id or (m.status in scope.statuses and admits(scope, m))})
    shown = {i: c for i, c in by_id.items() if i in memories and memories[i].status in scope.statuses}
    _memory_features([c for c in shown.values() if c.created_at is None], memories, rows.degrees)
    _word_features(shown.values(), memories, cfg, q.words)
    if cfg["weight_time"] > 0:
        dates.mark(shown.values(), memories, q.named)
    return list(shown.values()), memories, used_mode


def _dated(store: Store, q: terms.Query, scope: Scope, depth: int) -> list[int]:
    """Step "time", as a candidate source: the `depth` latest memories in `scope` created in each
    window the query names. A query such as "what happened last week?" says nothing a memory
    holds but its time, and found nothing; these rank below every memory that
    matches what the query says (`scoring.fuse`), and one that does gains the time term."""
    ids: dict[int, None] = {}
    for w in q.windows:
        ids.update(dict.fromkeys(store.created_between(scope, clock.to_iso(w.start), clock.to_iso(w.end), depth)))
    return list(ids)


def _lexical_candidates(held: dict[int, int], lexical: list[tuple[int, float]], coverage: dict[int, float],
                        idf_sum: float, hops: dict[int, float], dated: Sequence[int],
                        keys: dict[int, tuple[str, frozenset[str]]] | None = None,
                        spelled: Sequence[int] = ()) -> dict[int, Candidate]:
    """Step "candidates": {id: Candidate} of the memories holding exact terms (`held`: how many),
    the BM25 hits (`lexical`, best first; bm25 over `idf_sum`, with their `coverage`), the
    memories one relation away from a named entity (`hops`: strength), those created in a time
    the query names (`dated`, `_dated`) and those whose text may mention one (`spelled`,
    `dates.mentioning`): every candidate that needs no query vector. `keys`: {id: the rarest
    query term it holds} (`lexical_scale`)."""
    by_id = {i: Candidate(i, exact=n) for i, n in held.items()}
    exact = getattr(lexical, "held", {})
    for rank, (i, bm25) in enumerate(lexical, start=1):
        by_id[i] = Candidate(i, bm25=-bm25 / idf_sum if idf_sum > 0 else 0.0,
                             coverage=coverage.get(i, 0.0), lexical_rank=rank, exact=exact.get(i, 0),
                             key=(keys or {}).get(i, ("",))[0], held=(keys or {}).get(i, ("", frozenset()))[1])
    for i, strength in hops.items():
        by_id.setdefault(i, Candidate(i)).hop = strength
    for i in dated:
        by_id.setdefault(i, Candidate(i)).dated = True
    for i in spelled:
        by_id.setdefault(i, Candidate(i))
    return by_id


class _Rows:
    """Step "candidates": the rows a recall's candidates need, read in batches as the candidates
    become known (the lexical and graph ones before the query's vector is ready, the vector ones
    after), each id once: the memories and their entity degrees (`Store.recall_rows`: shared,
    without tags, so read only; where the scope filters by tags, `admits`, read with them), and
    with `turns` (weight_context > 0) the conversation turns just before and after each candidate
    turn (`link_turns`; a neighbour of another kind is never linked,
    `same_conversation`)."""

    def __init__(self, store: Store, scope: Scope, turns: bool):
        self.store, self.scope, self.turns = store, scope, turns
        self.memories: dict[int, Memory] = {}
        self.degrees: dict[int, int] = {}
        self._read: set[int] = set()  # ids read in full
        self._near: set[int] = set()  # neighbouring turns asked for (read only if conversation turns)
        self._around: set[int] = set()  # candidate turns whose neighbours were asked for

    def read(self, ids: Sequence[int]) -> None:
        """Read the rows of those of `ids` (candidates) not read yet, and with `turns` those of the
        turns just before and after each candidate turn: a turn first read as another's neighbour
        is read again only for its own neighbours."""
        ids = list(dict.fromkeys(ids))
        new = [i for i in ids if i not in self._read and i not in self.memories]
        if new:
            self._read.update(new)
            self._add(new, None)
        if not self.turns:
            return
        turns = [i for i in ids if i not in self._around and i in self.memories
                 and self.memories[i].kind == Kind.CONVERSATION.value]
        self._around.update(turns)
        wanted = {n for i in turns for n in (i - 1, i + 1)} - self._read - self._near - self.memories.keys()
        if wanted:
            self._near.update(wanted)
            self._add(sorted(wanted), Kind.CONVERSATION.value)

    def _add(self, ids: list[int], kind: str | None) -> None:
        if self.scope.tags:
            memories = self.store.get_memories(ids, kind=kind)
            degrees = self.store.entity_degrees(list(memories))
        else:
            memories, degrees = self.store.recall_rows(ids, kind=kind)
        self.memories.update(memories)
        self.degrees.update(degrees)


def fill_features(store: Store, cands: dict[int, Candidate], memories: dict, cfg: dict,
                  known: frozenset[str] = frozenset()) -> None:
    """Step "candidates": set each candidate's features that the memory holds (`Candidate`:
    times, uses, confidence, decay level, entity degree: `_memory_features`; content words beyond
    the query's words `known`: `_word_features`) from `memories` ({id: `Memory` or
    `history.PastState`}, holding every id of `cands`)."""
    _memory_features(cands.values(), memories, store.entity_degrees(list(cands)))
    _word_features(cands.values(), memories, cfg, known)


def _memory_features(cands: Iterable[Candidate], memories: dict, degrees: dict[int, int]) -> None:
    """Set each candidate's times, uses, confidence, decay level, kind, source and entity degree
    (`degrees`, absent: 0) from its memory in `memories`."""
    for c in cands:
        m = memories[c.id]
        c.created_at = clock.parse_iso(m.event_at)
        c.superseded_by = getattr(m, "superseded_by", None)  # a past state has none: links are today's
        c.last_used_at = clock.parse_iso(m.last_accessed_at) if m.last_accessed_at else None
        c.access_count, c.confidence, c.decay_level = m.access_count, m.confidence, m.decay_level
        c.kind, c.source = m.kind, m.source
        c.graph_degree = degrees.get(c.id, 0)


def add_corrections(store: Store, cands: list[Candidate], memories: dict[int, Memory], scope: Scope) -> None:
    """Step "candidates", corrections: for each candidate that another memory replaces
    (`Candidate.superseded_by`) when that correction is no candidate itself, add it, with the
    replaced memory's relevance features (a question worded like the stale fact is answered by
    its correction) and its own memory features; its memory joins `memories`. Only corrections
    in `scope` and of a status it admits; chains are followed to their current end."""
    have = {c.id for c in cands}
    wanted: dict[int, Candidate] = {}
    for c in cands:
        if c.superseded_by is not None and c.superseded_by not in have:
            wanted.setdefault(c.superseded_by, c)
    for _ in range(8):  # a chain of corrections: bounded, each step one read
        if not wanted:
            return
        found = store.get_memories(list(wanted))
        degrees = store.entity_degrees(list(found))
        added: dict[int, Candidate] = {}
        for memory_id, stale in wanted.items():
            m = found.get(memory_id)
            if m is None or m.status not in scope.statuses or not admits(scope, m):
                continue
            c = Candidate(memory_id, bm25=stale.bm25, coverage=stale.coverage, similarity=stale.similarity,
                          hop=stale.hop, exact=stale.exact, dated=stale.dated, words=stale.words)
            memories[memory_id] = m
            _memory_features([c], memories, degrees)
            cands.append(c)
            have.add(memory_id)
            if c.superseded_by is not None and c.superseded_by not in have:
                added.setdefault(c.superseded_by, c)
        wanted = added


def _word_features(cands: Iterable[Candidate], memories: dict, cfg: dict, known: frozenset[str]) -> None:
    """Set each candidate's content words beyond the query's words `known` (`terms.content_words`),
    read by the vector half only (0 for a candidate it did not find) and only up to
    `substance_words`, the most it weighs; the share of its text that asks a question
    (`terms.question_share`), when `weight_question` reads it; and for a captured prompt whether it
    says something changed (`corrections.announces_change`). Its source is set already
    (`_memory_features`)."""
    words = math.ceil(cfg["substance_words"])
    asks = cfg["weight_question"] > 0
    for c in cands:
        content = memories[c.id].content
        c.words = terms.content_words(content, words, known) if c.similarity is not None else 0
        c.asks = terms.question_share(content) if asks else 0.0
        # read only where `scoring.current_first` reads it (captured prompts): a regex over each text
        c.changes = c.source == Source.HOOK.value and corrections.announces_change(content)


_HYPHENATED = re.compile(r'"[^\W\d_]+(?:-[^\W\d_]+)+"')  # a quoted term of words joined by hyphens only


def word_terms(store: Store, text: str) -> list[str]:
    """The quoted FTS5 terms BM25 searches for `text`: `terms.fts_terms`, where a word of letters
    joined by hyphens that no memory holds as such ("full-screen") also searches its parts
    (`"full"`, `"screen"`): a text may say "alternative screen". One that some memory holds
    (`checkout-api`) stays one phrase, as it names one thing. Raises IndexDamaged (word index)."""
    found = terms.fts_terms(text)
    compounds = [t for t in found if _HYPHENATED.fullmatch(t)]
    return widened(found, store.fts_term_stats(compounds, [])[1]) if compounds else found


def widened(found: list[str], df: dict[str, int]) -> list[str]:
    """`found` (quoted FTS5 terms) with the parts of each hyphenated word whose count in `df`
    ({term: memories holding it}) is 0 after it (`word_terms`)."""
    out = dict.fromkeys(found)
    for t in found:
        if _HYPHENATED.fullmatch(t) and t in df and not df[t]:
            out.update(dict.fromkeys(f'"{part}"' for part in t[1:-1].split("-") if part not in terms.STOP_WORDS))
    return list(out)


def _lexical(store: Store, text: str, scope: Scope, depth: int) -> list[tuple[int, float]]:
    """The BM25 hits of the word index (`word_terms`), memories holding the query's exact terms
    (identifiers, versions, single CJK characters: `terms.exact_terms`) first; the evidence rides
    on the result (`memsafe.store.LexicalHits`: `held`, `exact`)."""
    words, exact = word_terms(store, text), terms.exact_terms(text)
    match = " OR ".join(words) if words else None
    return store.fts_search(match, scope, depth, exact) if match is not None or exact else []


def _unheld_notes(text: str, found: dict[str, tuple[int, set[int]]]) -> list[str]:
    """A note for each exact term of the query (an identifier, a version, a path: `terms.exact_terms`)
    that no memory in scope holds (`found`: `LexicalHits.exact`), named as the query wrote it: the
    results then match its words or its meaning, and nothing else says the term itself was not found."""
    notes = []
    for term, (_, ids) in found.items():
        if not ids:
            written = re.search(re.escape(term), text, re.IGNORECASE)
            shown = written.group(0) if written else term
            notes.append(f'no memory here holds "{shown}" as written; any result matches its words or its meaning')
    return notes


def _coverage(store: Store, text: str, hits: list[tuple[int, float]]
              ) -> tuple[dict[int, float], float, dict[int, tuple[str, frozenset[str]]]]:
    """`lexical_scale` of the BM25 hits: the term statistics of the word index, with an
    exact term counted by its exact matches."""
    exact = getattr(hits, "exact", {})
    wanted = [t for t in word_terms(store, text) if t[1:-1].replace('""', '"') not in exact]
    n, df, matches = store.fts_term_stats(wanted, [i for i, _ in hits])
    return lexical_scale(n, df, matches, exact)


def past_states(store: Store, at: str, scope: Scope) -> dict[int, PastState]:
    """Step "scope" of time travel: {id: the memory as it was at `at` (UTC ISO-8601)} of the
    memories created by then, active then and admitted by `scope` (`history.states_at`)."""
    from memsafe import history as past  # time travel only: a recall of now never loads it

    rows = store.rows_created_until(at)
    states = past.states_at(at, rows, store.own_versions_ending_after(at), store.status_events_until(at),
                            store.tags_of([r["id"] for r in rows]))
    return {s.id: s for s in states if s.status == Status.ACTIVE.value and admits(scope, s)}


def gather_past(store: Store, q: terms.Query, visible: dict[int, PastState], depth: int, mode: str,
                cfg: dict, notes: list[str]) -> tuple[list[Candidate], str]:
    """Step "candidates" of time travel, as `gather` takes them now, from the texts as they were
    (`visible`, `past_states`): BM25 and its term statistics from a private in-memory index of
    those texts (`Store.scratch_lexical`), the texts holding an exact term first, vector KNN of the
    texts as they were (`vectors.past_search`), the memories of the times the query names and the
    turns around each; no graph hop (relations are not versioned). Features are filled from the
    past states. Returns (candidates, mode used)."""
    texts = {i: s.content for i, s in visible.items()}
    found = terms.fts_terms(q.lexical_text)
    words, df, matches = store.scratch_lexical(texts, found, depth)
    wider = widened(found, df)  # a hyphenated word no text held then searches its parts, as `word_terms`
    if wider != found:
        words, df, matches = store.scratch_lexical(texts, wider, depth)
    exact_terms = terms.exact_terms(q.lexical_text)
    held, exact = _exact_held(texts, exact_terms)
    lexical = [] if mode == "vector" else exact_hits(words, held, len(exact_terms), depth)
    common = terms.common_words(df, len(texts))
    for term in exact:  # an exact term counts by its exact matches, as in `recall`
        df.pop(f'"{term}"', None)
        matches.pop(f'"{term}"', None)
    vector: list[tuple[int, float]] = []
    used_mode = mode
    if mode in ("hybrid", "vector") and visible:
        embedder = vectors.embedder_for(store)
        if embedder is None:
            notes.append("vector search unavailable; lexical results only")
            used_mode = "lexical"
            if mode == "vector":  # as `recall` does: the BM25 list it falls back to (it returned nothing)
                lexical = exact_hits(words, held, len(exact_terms), depth)
        else:
            vector = vectors.past_search(store, embedder, terms.vector_text(q.text, common), visible, depth,
                                         [i for i, _ in lexical], notes)

    # The same candidates as `gather`, with the scratch index's statistics.
    coverage, scale, keys = lexical_scale(len(texts), df, matches, exact)
    by_id: dict[int, Candidate] = {}
    for rank, (i, bm25) in enumerate(lexical, start=1):
        by_id[i] = Candidate(i, bm25=-bm25 / scale if scale > 0 else 0.0, coverage=coverage.get(i, 0.0),
                             lexical_rank=rank, exact=held.get(i, 0), key=keys.get(i, ("",))[0],
                             held=keys.get(i, ("", frozenset()))[1])
    for i, n in held.items():  # in vector mode too: a memory holding an exact term comes first
        by_id.setdefault(i, Candidate(i)).exact = n
    for rank, (i, sim) in enumerate(vector, start=1):
        c = by_id.setdefault(i, Candidate(i))
        c.similarity, c.vector_rank = sim, rank
    if cfg["weight_time"] > 0:  # as `gather` (`_dated`): the memories of the times named
        for w in q.windows:
            start, end = clock.to_iso(w.start), clock.to_iso(w.end)
            inside = sorted((i for i, s in visible.items() if start <= s.event_at < end),
                            key=lambda i: (visible[i].event_at, i), reverse=True)
            for i in inside[:depth]:
                by_id.setdefault(i, Candidate(i)).dated = True
        for i in dates.spelled_in(store, texts, q.named, depth):  # kept only if `dates.mark` reads the date there
            by_id.setdefault(i, Candidate(i))
    if cfg["weight_context"] > 0:
        link_turns(by_id, visible)
    fill_features(store, by_id, visible, cfg, q.words)
    if cfg["weight_time"] > 0:
        dates.mark(by_id.values(), visible, q.named)
    return list(by_id.values()), used_mode


def _exact_held(texts: dict[int, str], wanted: Sequence[str]) -> tuple[dict[int, int], dict[str, tuple[int, set[int]]]]:
    """The texts holding each exact term (`holds_exact`), as `Store.fts_search` gives
    them for stored texts: ({id: terms it holds}, {term: (texts holding it, their ids)})."""
    exact = {t: {i for i, x in texts.items() if holds_exact(x, t)} for t in wanted}
    held: dict[int, int] = {}
    for ids in exact.values():
        for i in ids:
            held[i] = held.get(i, 0) + 1
    return held, {t: (len(ids), ids) for t, ids in exact.items()}
