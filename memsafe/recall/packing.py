"""Responsibility: step "packing": ranked memories into a token budget, best first, never
dropping a better memory silently (`pack`), and notes naming what was cut or left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from memsafe import clock, framing, tokens
from memsafe.models import Hit, Memory, Scope
from memsafe.plural import count_of
from memsafe.recall import related
from memsafe.recall.candidates import Candidate
from memsafe.store import Store

if TYPE_CHECKING:
    from memsafe.history import PastState

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
       EXCERPT_MIN_TOKENS are left for its text, so a large relevant memory shows instead of vanishing.
    3. The best text of all is always returned: when it did not fit and too little is left for
       its excerpt, the lowest-ranked whole texts make room for it.

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
        framing_cost = extra(first, True)
        need = EXCERPT_MIN_TOKENS + framing_cost
        need = need if first else min(need, budget)
        if first == 0:
            while left < need and whole:  # the best memory always shows: make room for it
                dropped = whole.pop()
                left += dropped.tokens
        if left >= need and (first == 0 or len(whole) < cap) and left - framing_cost >= 1:
            cut = truncate(texts[first], left - framing_cost)
            if cut.strip():
                if len(whole) >= cap:
                    whole.pop()
                whole.append(Packed(first, cut, count(cut) + framing_cost, True))
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


def pack_hits(store: Store, ranked: list[tuple[float, Candidate]], memories: dict[int, Memory], effective: int,
              graph_share: float, limit: int, scope: Scope, notes: list[str], heads: Heads
              ) -> tuple[list[Hit], str, int]:
    """Step "packing": memories first into (effective − graph share); the relations among their
    entities into the graph share; what the graph leaves unused flows back to memories. Each
    memory costs what `heads` says (its text, or its block in a framed reply). Notes name a
    memory cut to fit and better matches that did not fit. Returns (hits, graph text, its tokens)."""
    texts = [memories[c.id].content for _, c in ranked]
    reserve = int(effective * graph_share)

    def fill(room: int) -> tuple[list[Packed], str, int]:
        packed = pack(texts, max(1, room), heads.count, heads.truncate, limit=limit, overhead=heads.overhead)
        used = sum(p.tokens for p in packed)
        text, n = related.context_text(store, [ranked[p.index][1].id for p in packed],
                                       min(reserve, effective - used), scope, framed=heads.framed)
        return packed, text, n

    packed, graph_text, graph_tokens = fill(effective - reserve)
    if reserve and graph_tokens < reserve and (
        any(p.truncated for p in packed) or len(packed) < min(limit, len(texts))
    ):  # a memory was cut or left out: give memories the graph share the relations do not need
        packed, graph_text, graph_tokens = fill(effective - graph_tokens)
    notes += pack_notes(packed, [c.id for _, c in ranked], heads.whole, limit)
    order = {c.id: n for n, (_, c) in enumerate(ranked)}

    def context_of(c: Candidate) -> int | None:  # the neighbour that lent it relevance, ranked highest
        near = [n for n in (c.before, c.after) if n in order]
        return min(near, key=order.__getitem__) if near else None

    return [
        Hit(memory=heads.memory(p.index), text=p.text, tokens=p.tokens, score=round(score, 6), truncated=p.truncated,
            lexical_rank=c.lexical_rank, vector_rank=c.vector_rank, context_of=context_of(c))
        for p in packed
        for score, c in [ranked[p.index]]
    ], graph_text, graph_tokens


class Heads:
    """Step "packing": what each ranked memory (`memories`, best first) costs in the reply, for
    `pack`: with `framed`, its block as a model reads it (`memsafe.framing`: the header line, ages
    as of `now`, and the text indented); otherwise its text alone (the CLI shows it in a table or
    as JSON). Tokens: cl100k_base.

    Returned memories are copies, with their tags (`memory`): the rows `gather` read are shared
    with later recalls (`Store.recall_rows`) and hold none unless `tagged`; tags are read in
    batches of BATCH as packing reaches a memory, one query for a usual recall."""

    BATCH = 16

    def __init__(self, store: Store | None, memories: Sequence[Memory], now: datetime, *, framed: bool,
                 tagged: bool):
        self.store, self.memories, self.now, self.framed = store, memories, now, framed
        self._tags: dict[int, list[str]] = {m.id: list(m.tags) for m in memories} if tagged else {}
        self._cost: dict[tuple[int, bool], int] = {}
        self._copies: dict[int, Memory] = {}
        self.count = framing.body_tokens if framed else tokens.count
        self.truncate = framing.cut_body if framed else tokens.truncate

    def memory(self, index: int) -> Memory:
        """A copy of the memory at `index`, with its tags (one copy per index: the cost of its
        header and the hit returned read the same one)."""
        copy = self._copies.get(index)
        if copy is not None:
            return copy
        m = self.memories[index]
        if m.id not in self._tags:
            batch = [x.id for x in self.memories[index:index + self.BATCH] if x.id not in self._tags]
            assert self.store is not None  # memories without their tags come from a store
            self._tags.update(self.store.tags_of(batch))
        copy = self._copies[index] = dataclasses.replace(m, tags=list(self._tags[m.id]))
        return copy

    def overhead(self, index: int, cut: bool) -> int:
        """Tokens the framing adds to the memory at `index` (its header line, `framing.head_tokens`;
        `cut`: as an excerpt); 0 unframed."""
        if not self.framed:
            return 0
        key = (index, cut)
        if key not in self._cost:
            self._cost[key] = framing.head_tokens(framing.header(self.memory(index), now=self.now, cut=cut))
        return self._cost[key]

    def whole(self, index: int) -> int:
        """Tokens of the memory at `index` whole, framing included."""
        return self.overhead(index, False) + self.count(self.memories[index].content)


def pack_notes(packed: Sequence[Packed], ids: Sequence[int], whole: Callable[[int], int], limit: int) -> list[str]:
    """What a recall's packing (`pack` of the ranked memories `ids`, best first) cut or left out
    for lack of budget, as notes naming the memories and their size (`whole(index)`: tokens of one
    whole, as packing counts it), so nothing relevant vanishes silently: a memory cut
    to fit, better matches that did not fit, and lower-ranked matches that did not fit while the
    limit left room for them."""
    notes = []
    for p in packed:
        if p.truncated:
            notes.append(f"memory {ids[p.index]} cut to {p.tokens} of {whole(p.index)} tokens to fit "
                         f"the budget; `get {ids[p.index]}` shows it whole")
    if not packed:
        return notes  # the caller says the budget is too small for any memory

    def named(indexes: list[int]) -> str:
        shown = ", ".join(f"{ids[i]} ({count_of(whole(i), 'token')})" for i in indexes[:5])
        return shown + (f" and {len(indexes) - 5} more" if len(indexes) > 5 else "")

    above, below = unfitted(packed, len(ids), limit)
    if above:
        notes.append(f"better-ranked memories did not fit the budget: {named(above)}; raise the budget or `get` them")
    if below:
        notes.append(f"lower-ranked matches did not fit the budget: {named(below)}; raise the budget or `get` them")
    return notes


def pack_past(ranked: list[tuple[float, Candidate]], visible: dict[int, PastState], at: str, effective: int,
              limit: int, notes: list[str], *, framed: bool = False, now: datetime | None = None) -> list[Hit]:
    """Step "packing" of time travel: the memories as they were at `at` (`visible`), best first, into
    the whole `effective` budget (no graph context: relations are not versioned); notes as
    `pack_hits` gives them; `framed` as `Heads` (ages counted to `now`, not to `at`)."""
    scored = [(score, _memory_from_state(visible[c.id], at), c) for score, c in ranked]
    heads = Heads(None, [m for _, m, _ in scored], now or clock.now(), framed=framed, tagged=True)
    packed = pack([m.content for _, m, _ in scored], effective, heads.count, heads.truncate, limit=limit,
                  overhead=heads.overhead)
    notes += pack_notes(packed, [m.id for _, m, _ in scored], heads.whole, limit)
    return [
        Hit(memory=m, text=p.text, tokens=p.tokens, score=round(score, 6), truncated=p.truncated,
            lexical_rank=c.lexical_rank, vector_rank=c.vector_rank)
        for p in packed
        for score, m, c in [scored[p.index]]
    ]


def _memory_from_state(s: PastState, at: str) -> Memory:
    return Memory(
        id=s.id, uid=s.uid, content=s.content, kind=s.kind, project=s.project, source=s.source, tags=s.tags,
        importance=s.importance, confidence=s.confidence, created_at=s.created_at, updated_at=at,
        last_accessed_at=s.last_accessed_at, access_count=s.access_count, decay_level=s.decay_level,
        status=s.status, status_reason=None, embedded=s.embedded, happened_at=s.happened_at,
    )
