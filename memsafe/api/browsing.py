"""Responsibility: the handlers behind browsing and curating the store as a whole (`memsafe ui`):
filtered, keyset-paginated listing; search that uses `recall` for active memories;
facets; store aggregates for charts; one memory's provenance, audit trail and past text.

Only reads. Changes go through the same handlers as the CLI (update, forget, restore, purge,
confirm, set_confidence), so every change is seen by the CLI and MCP at once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from memsafe import clock, when
from memsafe import history as past
from memsafe.api.core import MAX_QUERY_CHARS, _check_id, _enum_value, clean_text, get, make_scope
from memsafe.api.lifecycle import DecayReport
from memsafe.api.retrieval import recall
from memsafe.errors import InvalidInput, Refused
from memsafe.models import Hit, Memory, Scope, Source, Status
from memsafe.recall import terms
from memsafe.store import Store

__all__ = [
    "PAGE_SIZE", "AGES", "BrowsePage", "SearchPage", "Facets", "StoreCharts", "Provenance", "PastText",
    "browse", "search", "facets", "store_charts", "decay_chart", "provenance", "memory_events", "text_as_of",
    "pin", "PIN_TAG", "store_counts", "top_entities", "ListPage", "list_page",
]

PAGE_SIZE = 50
SEARCH_BUDGET = 200_000  # tokens: large enough that the page shows the top PAGE_SIZE hits, not a packed prompt
PIN_TAG = "pinned"  # one of the tags decay never touches (memsafe.decay)
# Age filters: key -> (label, days, direction). 'newer' = created within the last N days, 'older' = before.
AGES: dict[str, tuple[str, int, str]] = {
    "1d": ("last 24 hours", 1, "newer"),
    "7d": ("last 7 days", 7, "newer"),
    "30d": ("last 30 days", 30, "newer"),
    "365d": ("last 365 days", 365, "newer"),  # not "last year": typed, that is the calendar year before
    "older30d": ("older than 30 days", 30, "older"),
    "older365d": ("older than 365 days", 365, "older"),
}
AGE_EDGES_DAYS = (1, 7, 30, 90, 365)  # bins of the "by age" chart
ACTIVITY_DAYS = 30


@dataclass
class BrowsePage:
    """One page of memories, newest first. `next_after`: pass as `after_id` for the next page
    (None on the last page); `total`: memories matching the filter, or a lower bound when
    `total_capped` (a kind, tag or age filter stops counting at 1,000; see Store.count_browse)."""

    memories: list[Memory]
    total: int
    next_after: int | None
    total_capped: bool = False


@dataclass
class SearchPage:
    """Search results, best first. `how`: 'recall' (the CLI's recall: BM25 + vectors + the
    multi-signal score) or 'words' (BM25 only, for archived and forgotten memories, which recall
    never returns). Each hit carries lexical_rank, vector_rank and score."""

    query: str
    hits: list[Hit]
    how: str
    mode: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Facets:
    """Values the filters offer: projects (None = global) and tags with their memory counts."""

    projects: list[tuple[str | None, int]]
    tags: list[tuple[str, int]]


@dataclass
class StoreCharts:
    """Aggregates for the charts page. Counts are memories; days are UTC 'YYYY-MM-DD'.

    Attributes:
        by_status: every memory by status. by_kind / by_decay / by_age: active memories.
        by_age: [(label, count)] by creation time, newest bin first.
        recall_days: [(day, n)] over the last 30 days, n = memories whose *latest* use (`get`,
            `confirm`, an edit; not being recalled) fell on that day (from `last_accessed_at`; a
            memory used on several days counts once).
        event_days: [(day, {action: n})] audit events (remember, update, forget, …) per day.
    """

    by_status: list[tuple[str, int]]
    by_kind: list[tuple[str, int]]
    by_decay: list[tuple[int, int]]
    by_age: list[tuple[str, int]]
    recall_days: list[tuple[str, int]]
    event_days: list[tuple[str, dict[str, int]]]


@dataclass
class Provenance:
    """Where a memory came from: `source` (user, agent, git, …); for git notes the commit and
    branch read from the note; `author`: the user a team server's token stands for (memories
    written over HTTP), None when not recorded (local use)."""

    source: str
    created_at: str
    project: str | None
    commit: str | None = None
    branch: str | None = None
    author: str | None = None


@dataclass
class PastText:
    """A memory's state at instant `at`: None when it did not exist yet."""

    at: str
    exists: bool
    content: str | None = None
    status: str | None = None
    kind: str | None = None
    tags: list[str] = field(default_factory=list)
    decay_level: int | None = None


# ---------------------------------------------------------------------------------------------
# Listing and search


def _age_bounds(age: str | None) -> tuple[str | None, str | None]:
    """(since, before) UTC ISO-8601 for an AGES key. Raises InvalidInput for an unknown one."""
    if not age:
        return None, None
    if age not in AGES:
        raise InvalidInput(f"unknown age filter {age!r}; use one of: {', '.join(AGES)}")
    _, days, direction = AGES[age]
    edge = clock.to_iso(clock.shift(clock.now(), -timedelta(days=days)))
    return (edge, None) if direction == "newer" else (None, edge)


def _status_list(status: str) -> list[str]:
    return [s.value for s in Status] if status == "all" else [_enum_value(Status, status, "status")]


def browse(
    store: Store,
    *,
    project: str | None = None,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    status: str = "active",
    age: str | None = None,
    after_id: int | None = None,
    limit: int = PAGE_SIZE,
) -> BrowsePage:
    """One page of memories matching the filters, newest first (keyset pagination on id).

    Args:
        project: this project plus global memories (as the CLI's --project); None = every project.
        status: 'active', 'archived', 'forgotten' or 'all'.
        age: a key of AGES, or None.
        after_id: the `next_after` of the previous page.
        limit: page size, 1–500.

    Raises:
        InvalidInput: unknown kind, status or age; bad tag; limit out of range.
    """
    if not isinstance(limit, int) or not 1 <= limit <= 500:
        raise InvalidInput(f"page size must be between 1 and 500, got {limit}")
    if after_id is not None:
        _check_id(after_id)
    since, before = _age_bounds(age)
    scope = make_scope(project=project, all_projects=project is None, kinds=kinds, tags=tags, since=since)
    scope.statuses = _status_list(status)
    ids = store.browse_ids(scope, after_id=after_id, created_before=before, limit=limit + 1)
    more = len(ids) > limit
    ids = ids[:limit]
    found = store.get_memories(ids)
    memories = [found[i] for i in ids if i in found]
    total, capped = store.count_browse(scope, created_before=before)
    return BrowsePage(memories, total, ids[-1] if more and ids else None, capped)


@dataclass
class ListPage:
    """One page of a listing (`list_page`), newest first. `next_after`: the id to continue after
    (None when nothing is left); `walked`: memories looked at for this page (a source filter
    skips some)."""

    memories: list[Memory]
    next_after: int | None
    walked: int = 0


LIST_WALK_MAX = 5_000  # memories one page looks at when a source filter skips most of them


def list_page(store: Store, scope: Scope, *, source: str | None = None, after_id: int | None = None,
              limit: int = 20) -> ListPage:
    """One page of the memories of `scope` (its projects, kinds, tags, since, statuses), newest
    first (keyset on id, so writes between pages neither repeat nor skip a memory), optionally
    only those from `source` (user, agent, git, import, document, web).

    A page looks at no more than LIST_WALK_MAX memories: with a rare source it may come back
    short, or empty, with `next_after` still set; the next page goes on from there.

    Raises:
        InvalidInput: limit outside 1–500, a bad `after_id`, an unknown source.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 500:
        raise InvalidInput(f"limit must be between 1 and 500, got {limit}")
    if after_id is not None:
        _check_id(after_id)
    wanted = _enum_value(Source, source, "source") if source else None
    found: list[Memory] = []
    walked = 0
    cursor = after_id
    while len(found) < limit:
        step = limit + 1 if wanted is None else min(500, LIST_WALK_MAX - walked)
        if step <= 0:
            return ListPage(found, cursor, walked)
        ids = store.browse_ids(scope, after_id=cursor, limit=step)
        if not ids:
            return ListPage(found, None, walked)
        rows = store.get_memories(ids)
        for memory_id in ids:
            memory = rows.get(memory_id)
            if memory is None:
                continue
            if len(found) == limit:  # one more exists: the page ends before it
                return ListPage(found, found[-1].id, walked)
            walked += 1
            cursor = memory_id
            if wanted is None or memory.source == wanted:
                found.append(memory)
        if len(ids) < step:
            return ListPage(found, None, walked)
    # exactly `limit` found: whether more exist is known only by looking
    more = store.browse_ids(scope, after_id=cursor, limit=1)
    return ListPage(found, cursor if more else None, walked)


def search(
    store: Store,
    query: str,
    *,
    project: str | None = None,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    status: str = "active",
    age: str | None = None,
    limit: int = PAGE_SIZE,
) -> SearchPage:
    """Search memories matching the filters, best first, at most `limit`.

    Active memories: `recall` itself (the same pipeline and ranking as `memsafe recall`, with a
    budget large enough for `limit` hits); like every recall it does not count as using a memory.
    Archived or forgotten memories, which recall never returns: BM25 over their words (each hit
    has a lexical rank only).

    Raises:
        InvalidInput: empty query; unknown kind, status or age; bad tag.
    """
    since, before = _age_bounds(age)
    statuses = _status_list(status)
    if statuses == [Status.ACTIVE.value]:
        result = recall(store, query, project=project, all_projects=project is None, kinds=kinds, tags=tags,
                        since=since, until=before, budget=SEARCH_BUDGET, limit=limit)
        hits = result.hits
        return SearchPage(result.query, hits, "recall", result.mode, result.notes)
    text = clean_text(query, "query", MAX_QUERY_CHARS)
    scope = make_scope(project=project, all_projects=project is None, kinds=kinds, tags=tags, since=since)
    scope.statuses = statuses
    match = terms.fts_query(text)
    ranked = store.fts_search(match, scope, limit * 4) if match is not None else []
    found = store.get_memories([i for i, _ in ranked])
    hits = []
    for rank, (memory_id, bm25) in enumerate(ranked, start=1):
        m = found.get(memory_id)
        if m is None or (before is not None and m.event_at >= before):
            continue
        hits.append(Hit(memory=m, text=m.content, tokens=0, score=round(-bm25, 6), lexical_rank=rank))
        if len(hits) >= limit:
            break
    return SearchPage(text, hits, "words", "lexical",
                      ["archived and forgotten memories are never recalled; they are found here by their words (BM25)"])


def store_counts(store: Store) -> dict[str, int]:
    """Memories by status plus totals of versions, entities and relations (as `status` counts them)."""
    return store.counts()


def top_entities(store: Store, limit: int = 24) -> list[tuple[str, int]]:
    """[(entity name, active memories naming it)] for the `limit` most mentioned entities."""
    return store.top_entities(limit)


def facets(store: Store) -> Facets:
    """Projects and the 200 most used tags, with counts (memories of any status)."""
    return Facets(store.project_counts(), store.tag_counts())


# ---------------------------------------------------------------------------------------------
# Charts


def _age_label(days: int) -> str:
    return {1: "1 day", 7: "1 week", 30: "1 month", 90: "3 months", 365: "1 year"}.get(days, f"{days} days")


def store_charts(store: Store) -> StoreCharts:
    """Aggregates for charts (see StoreCharts). Reads only: one pass over the active memories
    (kind × decay level × age), an index count by status, and the last 30 days of access times
    and audit events."""
    now = clock.now()
    edges = [clock.to_iso(clock.shift(now, -timedelta(days=d))) for d in AGE_EDGES_DAYS]
    kinds: dict[str, int] = {}
    levels = [0, 0, 0]
    bins = [0] * (len(edges) + 1)
    for kind, level, age_bin, n in store.active_profile(edges):
        kinds[kind] = kinds.get(kind, 0) + n
        levels[min(max(level, 0), 2)] += n
        bins[age_bin] += n
    labels = [f"under {_age_label(AGE_EDGES_DAYS[0])}"]
    labels += [f"{_age_label(a)} – {_age_label(b)}" for a, b in zip(AGE_EDGES_DAYS, AGE_EDGES_DAYS[1:])]
    labels.append(f"over {_age_label(AGE_EDGES_DAYS[-1])}")
    since = clock.to_iso(clock.shift(now, -timedelta(days=ACTIVITY_DAYS - 1)))[:10]
    days = list(dict.fromkeys(clock.to_iso(clock.shift(now, -timedelta(days=ACTIVITY_DAYS - 1 - i)))[:10]
                              for i in range(ACTIVITY_DAYS)))  # one day each, also in the first days of year 1
    recalled = dict(store.last_access_days(since))
    events: dict[str, dict[str, int]] = {d: {} for d in days}
    for day, action, n in store.event_days(since):
        events.setdefault(day, {})[action] = n
    statuses = store.status_counts()
    return StoreCharts(
        by_status=[(s.value, statuses.get(s.value, 0)) for s in Status],
        by_kind=sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])),
        by_decay=list(enumerate(levels)),
        by_age=list(zip(labels, bins)),
        recall_days=[(d, recalled.get(d, 0)) for d in days],
        event_days=[(d, events.get(d, {})) for d in days],
    )


def decay_chart(report: DecayReport) -> dict[str, dict[str, int]]:
    """A decay dry run grouped for a chart: {action: {kind: count}}, actions in order
    summary (→ level 1), brief (→ level 2), archived (→ level 3)."""
    out: dict[str, dict[str, int]] = {"summary": {}, "brief": {}, "archived": {}}
    for change in report.changes:
        per_kind = out.setdefault(change.action, {})
        per_kind[change.kind] = per_kind.get(change.kind, 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# One memory


_COMMIT_NOTE = re.compile(r"^git commit ([0-9a-f]{4,40})(?: on (\S+))?(?: \(detached HEAD\))?:")


def provenance(memory: Memory) -> Provenance:
    """Where `memory` came from (see Provenance). Git notes (source git) name their commit and
    branch on their first line (`memsafe.hooks.commit_note`)."""
    out = Provenance(memory.source, memory.created_at, memory.project, author=memory.author)
    if memory.source == "git":
        found = _COMMIT_NOTE.match(memory.content)
        if found:
            out.commit, out.branch = found.group(1), found.group(2)
    return out


def memory_events(store: Store, memory_id: int) -> list[dict]:
    """A memory's content-free audit trail, oldest first: [{at, action, detail}].

    Raises: NotFound, InvalidInput."""
    get(store, _check_id(memory_id))
    return store.memory_events(memory_id)


def text_as_of(store: Store, memory_id: int, at: str) -> PastText:
    """The memory as it was at `at` (a time typed by a person, see `parse_when`): its text,
    status, kind and tags then, rebuilt from its own versions and status events as time travel
    does (`history.states_at`).

    Raises: NotFound; InvalidInput (unparseable or future time).
    """
    memory = get(store, _check_id(memory_id))
    instant = clock.to_iso(when.parse_when(at, clock.now(), what="time"))
    row = store.raw_row(memory_id)
    assert row is not None  # `get` found it
    if row["created_at"] > instant:
        return PastText(instant, False)
    versions = [v for v in store.versions(memory_id) if v.get("origin_id") is None and v["valid_to"] > instant]
    events = [(memory_id, e["action"], e["at"]) for e in store.memory_events(memory_id, limit=10_000)
              if e["action"] in past.STATUS_AFTER and e["at"] <= instant]
    (state,) = past.states_at(instant, [row], versions, events, {memory_id: memory.tags})
    return PastText(instant, True, state.content, state.status, state.kind, state.tags, state.decay_level)


def pin(store: Store, memory_id: int, *, pinned: bool = True) -> Memory:
    """Pin (tag `pinned`, which decay never compresses or archives) or unpin a memory, through
    `update` (the previous tags become a version).

    Raises: NotFound; Refused (memory not active, or already in that state)."""
    from memsafe.api.lifecycle import update

    memory = get(store, _check_id(memory_id))
    has = PIN_TAG in memory.tags
    if has == pinned:
        raise Refused(f"memory {memory_id} is {'already' if pinned else 'not'} pinned")
    tags = [*memory.tags, PIN_TAG] if pinned else [t for t in memory.tags if t != PIN_TAG]
    return update(store, memory_id, tags=tags)
