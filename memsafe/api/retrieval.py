"""Responsibility: the recall handlers, `recall` (what is known now) and `recall_as_of` (what was
known at an instant). Each is one composition of the steps in `memsafe.recall` (DESIGN.md,
"Recall pipeline"): the same arguments, query reading, scoring and result; the candidates and
packing of time travel read the texts as they were.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from memsafe import clock
from memsafe.api.config import _config_snapshot
from memsafe.api.hygiene import MAX_QUERY_CHARS, _shown, _whole, clean_text, make_scope
from memsafe.errors import IndexDamaged, InvalidInput
from memsafe.models import Hit, RecallResult, Scope, Status, in_scope
from memsafe.plural import count_of
from memsafe.recall import candidates, packing, scoring, terms
from memsafe.store import Store

__all__ = ["recall", "recall_as_of"]

MODES = ("hybrid", "lexical", "vector")


def recall(
    store: Store,
    query: str,
    *,
    project: str | None = None,
    all_projects: bool = False,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    budget: int | None = None,
    limit: int | None = None,
    mode: str = "hybrid",
    sources: Sequence[str] = (),
    exclude_sources: Sequence[str] = (),
    include_forgotten: bool = False,
    include_archived: bool = False,
    framed: bool = False,
) -> RecallResult:
    """Find the memories most relevant to `query`, packed into a token budget.

    Pipeline (DESIGN.md), one named step each: scope → time (the windows the query names,
    `terms.parse_query`) → candidates (BM25 and vector KNN, plus memories one relation away
    from entities the query names; `candidates.gather`) → fusion on absolute scales with the time
    and graph terms, then the multi-signal score (`scoring.score_candidates`) → packing into
    effective budget = budget × safety_multiplier (tokens, cl100k_base, counted on the exact
    returned text), of which `graph_share` is reserved for graph context (`packing.pack_hits`). No
    bookkeeping: being returned by recall is not a use (it would feed itself); only
    explicit use counts (`get` from a person or an agent, `confirm`, `update`).
    `tokens_used` = memory tokens + `graph_tokens` ≤ effective.

    Args:
        mode: 'hybrid' (default), 'lexical' or 'vector'.
        sources / exclude_sources: only memories from these sources (`models.Source` values:
            user, agent, git, ...) / none from these.
        budget: tokens; default from config `token_budget`.
        limit: maximum memories; default from config `recall_limit`.
        since / until: only memories whose event happened at or after `since` / before `until`
            (UTC ISO-8601; `Memory.event_at`).
        include_archived: return archived memories too, each with its original text (decay
            compressed it before archiving; the full text is in its history). Without it an
            archived memory that scores above the best memory returned is named in a note.
        framed: each memory costs its block in a reply framed for a model (`memsafe.framing`:
            header line and indented text, as MCP replies and agent hooks show it), and the graph
            context its `[graph]` block; otherwise the text alone (the CLI's table and JSON).

    A memory that replaces another (`remember`'s correction link) ranks just above the one it
    replaces (`scoring.corrections_first`) and is found through it; when both are returned, or
    only the replaced one, a note says which replaced which.

    Raises:
        InvalidInput: empty query, budget or limit < 1, unknown kind, source or mode, `until` not after
            `since`.
    """
    text = clean_text(query, "query", MAX_QUERY_CHARS)
    cfg = _config_snapshot(store)
    _check_mode(mode)
    budget_v, limit_v, scope, effective, depth = _arguments(cfg, budget, limit, project, all_projects, kinds, tags,
                                                            since, until, sources, exclude_sources)
    if include_forgotten:  # forgotten memories are otherwise invisible to every path
        scope.statuses = [Status.ACTIVE.value, Status.FORGOTTEN.value]
    if include_archived:
        scope.statuses = [*scope.statuses, Status.ARCHIVED.value]
    shown_scope = scope
    notes: list[str] = []
    now = clock.now()
    q = terms.parse_query(text, now, lambda w: bool(store.created_between(
        shown_scope, clock.to_iso(w.start), clock.to_iso(w.end), 1)))
    cands, memories, used_mode = candidates.gather(store, q, scope, depth, mode, cfg, notes)
    candidates.add_corrections(store, cands, memories, shown_scope)
    weights = scoring.one_half_weight(cfg, used_mode, notes)
    ranked = scoring.score_candidates(cands, q, weights)
    if include_archived:
        archived = [(s, c) for s, c in ranked if memories[c.id].status == Status.ARCHIVED.value]
        _original_texts(store, memories, [c.id for _, c in archived])
    else:
        archived = _archived_matches(store, q, scope, cfg, weights)
    heads = packing.Heads(store, [memories[c.id] for _, c in ranked], now, framed=framed, tagged=bool(scope.tags))
    hits, graph_text, graph_tokens = packing.pack_hits(store, ranked, memories, effective, cfg["graph_share"],
                                                       limit_v, shown_scope, notes, heads)
    notes += _correction_notes(store, hits)
    if archived and not include_archived and (not hits or archived[0][0] > hits[0].score):
        best = archived[0][1].id
        notes.append(f"archived memory #{best} matches better than what was returned; --include-archived "
                     "(MCP: status=archived) returns archived memories with their original text")
    if ranked and not hits:
        notes.append(f"a budget of {count_of(budget_v, 'token')} is too small for any memory")
    elif not ranked and not archived and scope.projects is not None:
        notes += _found_elsewhere(store, q.lexical_text, shown_scope)
    return _result(text, budget_v, effective, hits, used_mode, shown_scope, notes, now, graph_text, graph_tokens)


ARCHIVED_PROBE = 5  # archived memories a recall looks at, by keywords, to say one matches better


def _archived_matches(store: Store, q, scope: Scope, cfg: dict, weights) -> list:
    """The best (score, candidate) pairs among the archived memories of `scope`, found by keywords
    alone (no vector: a bounded probe beside the recall, not a second one), best first; scored as
    the recall scores. Its own candidate pool, so archived memories never take a slot of the
    recall's depth."""
    probe = dataclasses.replace(scope, statuses=[Status.ARCHIVED.value])
    if not store.list_ids(probe, 1):  # none to probe (most stores): a keyword search of nothing saved
        return []
    cands, _memories, _mode = candidates.gather(store, q, probe, ARCHIVED_PROBE, "lexical", cfg, [])
    return scoring.score_candidates(cands, q, weights)


def _original_texts(store: Store, memories: dict, ids: Sequence[int]) -> None:
    """Put the full original text (before decay compressed it: the latest own version at level 0)
    in place of each of `ids`' compressed text in `memories`, as copies (the store keeps the rows
    it read)."""
    for memory_id in ids:
        m = memories[memory_id]
        if m.decay_level == 0:
            continue
        for v in reversed(store.versions(memory_id)):
            if v.get("origin_id") is None and v["decay_level"] == 0:
                memories[memory_id] = dataclasses.replace(m, content=v["content"])
                break


def _correction_notes(store: Store, hits: Sequence[Hit]) -> list[str]:
    """Which returned memory replaced which (`Memory.superseded_by`): 'memory #9 replaces #4 (a
    correction; #4 is kept as history)', or for a replaced memory returned without its
    correction (outside the filters, the budget or the limit), 'memory #4 was replaced by #9',
    when #9 is active."""
    shown = {h.memory.id for h in hits}
    out = []
    unseen = [i for h in hits if (i := h.memory.superseded_by) is not None and i not in shown]
    active = {i for i, m in store.get_memories(unseen, tags=False).items() if m.status == Status.ACTIVE.value}
    for h in hits:
        fresh = h.memory.superseded_by
        if fresh in shown:
            out.append(f"memory #{fresh} replaces #{h.memory.id} (a correction; #{h.memory.id} is kept as history)")
        elif fresh in active:
            out.append(f"memory #{h.memory.id} was replaced by #{fresh}")
    return out


def recall_as_of(
    store: Store,
    query: str,
    *,
    as_of: str | datetime,
    project: str | None = None,
    all_projects: bool = False,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    budget: int | None = None,
    limit: int | None = None,
    mode: str = "hybrid",
    sources: Sequence[str] = (),
    exclude_sources: Sequence[str] = (),
    framed: bool = False,
) -> RecallResult:
    """Recall from what was known at instant `as_of`: memories created by then and active then
    (not forgotten, archived or purged), each with the text and metadata it had then.

    Ranked by `recall`'s own steps (candidates → fusion on absolute scales with the time the
    query names → multi-signal score, `scoring.score_candidates`) with `as_of` as "now", without
    the graph hop (relations are not versioned), and packed the same way. BM25 and its term
    statistics come from the past texts in a private in-memory FTS5 table
    (`candidates.gather_past`); vectors are the stored ones for unchanged texts and computed on
    the fly for past texts. Usage counters (access_count) are today's. Writes nothing.

    Args:
        as_of: a datetime, or text for `when.parse_when`.
        framed: as `recall`'s (ages in the headers are counted to now, not to `as_of`).

    Raises:
        InvalidInput: empty query, unparseable/future `as_of`, bad budget/limit/mode/kind.
    """
    text = clean_text(query, "query", MAX_QUERY_CHARS)
    _check_mode(mode)
    at_dt = _instant(as_of)
    at = clock.to_iso(at_dt)
    cfg = {**_config_snapshot(store), "weight_hop": 0.0}  # no graph hop: relations are not versioned
    budget_v, limit_v, scope, effective, depth = _arguments(cfg, budget, limit, project, all_projects, kinds, tags,
                                                            since, until, sources, exclude_sources)
    visible = candidates.past_states(store, at, scope)
    notes = [f"as of {at}: {count_of(len(visible), 'memory')} in scope known and active then"]
    q = terms.parse_query(text, at_dt, lambda w: any(
        clock.to_iso(w.start) <= s.event_at < clock.to_iso(w.end) for s in visible.values()))
    cands, used_mode = candidates.gather_past(store, q, visible, depth, mode, cfg, notes)
    ranked = scoring.score_candidates(cands, q, scoring.one_half_weight(cfg, used_mode, notes))
    now = clock.now()
    hits = packing.pack_past(ranked, visible, at, effective, limit_v, notes, framed=framed, now=now)
    return _result(text, budget_v, effective, hits, used_mode, scope, notes, now)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InvalidInput(f"unknown mode {_shown(mode)}; use hybrid, lexical or vector")


def _instant(as_of: str | datetime) -> datetime:
    """The aware instant `as_of` names: a datetime (refused in the future), or text read by
    `when.parse_when`. Raises InvalidInput."""
    if isinstance(as_of, datetime):
        at_dt = as_of.astimezone(clock.now().tzinfo)
        if at_dt > clock.now():
            raise InvalidInput(f"as-of {clock.to_iso(at_dt)} is in the future; memsafe cannot look ahead")
        return at_dt
    from memsafe import when

    return when.parse_when(as_of, clock.now(), what="as-of time")


def _arguments(cfg: dict, budget: int | None, limit: int | None, project: str | None, all_projects: bool,
               kinds: Sequence[str], tags: Sequence[str], since: str | None, until: str | None = None,
               sources: Sequence[str] = (), exclude_sources: Sequence[str] = ()) -> tuple[int, int, Scope, int, int]:
    """(budget, limit, scope, effective budget, candidate depth) of a recall: the budget and limit
    given (checked within their config keys' bounds) or the config's, the scope of `make_scope`,
    effective = budget × safety_multiplier (at least 1), depth = max(candidate_depth, limit).

    Raises: InvalidInput."""
    budget_v = cfg["token_budget"] if budget is None else _whole(budget, "token_budget", "budget")
    limit_v = cfg["recall_limit"] if limit is None else _whole(limit, "recall_limit", "limit")
    scope = make_scope(project=project, all_projects=all_projects, kinds=kinds, tags=tags, since=since, until=until,
                       sources=sources, exclude_sources=exclude_sources)
    if scope.since and scope.until and scope.until <= scope.since:
        raise InvalidInput(f"--until {scope.until} is not after --since {scope.since}; nothing matches")
    effective = max(1, int(budget_v * cfg["safety_multiplier"]))
    return budget_v, limit_v, scope, effective, max(cfg["candidate_depth"], limit_v)


def _result(text: str, budget: int, effective: int, hits: list[Hit], mode: str, scope: Scope, notes: list[str],
            now: datetime, graph_text: str = "", graph_tokens: int = 0) -> RecallResult:
    return RecallResult(
        query=text,
        budget=budget,
        effective_budget=effective,
        tokens_used=sum(h.tokens for h in hits) + graph_tokens,
        hits=hits,
        mode=mode,
        scope=None if scope.projects is None else [*scope.projects, None],
        notes=notes,
        graph_context=graph_text,
        graph_tokens=graph_tokens,
        at=clock.to_iso(now),
    )


ELSEWHERE_CAP = 100  # keyword matches counted in other projects when a recall finds nothing in its own


def _found_elsewhere(store: Store, text: str, scope: Scope) -> list[str]:
    """For a recall that found nothing in `scope` (a project and global memories): a note saying
    how many memories of other projects match `text` by keyword (the same filters; one word-index
    query of at most ELSEWHERE_CAP hits, and their rows; no vector search) and how to reach them,
    as `core.reachable` says for ids; no note when none does."""
    match, exact = terms.fts_query(text), terms.exact_terms(text)
    if match is None and not exact:
        return []
    try:
        hits = store.fts_search(match, dataclasses.replace(scope, projects=None, include_global=True), ELSEWHERE_CAP,
                                exact)
    except IndexDamaged:  # said already by the recall's own note
        return []
    found = store.get_memories([i for i, _ in hits], tags=False)
    projects = Counter(m.project for m in found.values() if not in_scope(m.project, scope))
    if not projects:
        return []
    n = sum(projects.values())
    here = (f"project {scope.projects[0]} or global memories" if scope.projects
            else "global memories (no project here)")
    most = sorted(projects.items(), key=lambda item: (-item[1], item[0]))[:3]  # most matches first, then by name
    named = ", ".join(f"{name} {k}" for name, k in most) + (", …" if len(projects) > 3 else "")
    return [f"nothing in {here}; {'at least ' if len(hits) >= ELSEWHERE_CAP else ''}"
            f"{count_of(n, 'match')} in other projects ({named}): --all-projects (MCP: all_projects=true) "
            "searches them"]
