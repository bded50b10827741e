"""Responsibility: the lifecycle handlers: update and history, decay, review and confidence,
near-duplicate consolidation, and listing by status (time travel, recall as of an instant, is
`api.retrieval`).

Policy and text compression live in `memsafe.decay`, past-state reconstruction and time parsing
in `memsafe.history`; this module reads, decides with those, and writes in short transactions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memsafe import clock, conflicts, when
from memsafe import decay as decay_rules
from memsafe.api import graph as graph_api
from memsafe.api.config import config_value
from memsafe.api.core import (
    _check_id,
    _enum_value,
    _screen_secrets,
    _unit_interval,
    again_after_heal,
    clean_author,
    clean_project,
    clean_tags,
    clean_text,
    content_hash,
    get,
    make_scope,
)
from memsafe.errors import Duplicate, InvalidInput, Refused
from memsafe.models import Kind, Memory, Scope, Source, Status
from memsafe.recall.vectors import backfill, embedder_for, ensure_table, vector_bytes
from memsafe.store import Store

__all__ = [
    "Version", "HistoryReport", "DecayChange", "DecayReport", "ConfidenceChange", "ReviewResult",
    "MergePair", "PossibleConflict", "ConsolidateReport", "parse_when", "update", "history", "decay",
    "decay_policy", "confirm", "set_confidence", "consolidate", "list_memories", "restore",
    "CONFIDENCE_MIN", "CONFIDENCE_MAX",
]

CONFIDENCE_MIN, CONFIDENCE_MAX = 0.01, 0.99
BANK_BATCH = 200  # bookkeeping rows written per decay transaction
CHANGE_BATCH = 32  # compressed/archived memories written per decay transaction


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class Version:
    """One state of a memory. `cause` is what ended it (update, decay, restore, merge) or
    `current`; `valid_to` is None for the current state; `origin_id` names the memory a merged-in
    version came from (None for the memory's own past)."""

    number: int
    content: str
    kind: str
    project: str | None
    tags: list[str]
    importance: float
    confidence: float
    decay_level: int
    status: str
    valid_from: str
    valid_to: str | None
    cause: str
    origin_id: int | None = None
    author: str | None = None  # who wrote this state (None: unknown)


@dataclass
class HistoryReport:
    """Every version of one memory, oldest first, ending with the current state."""

    memory_id: int
    versions: list[Version]


@dataclass
class DecayChange:
    """One memory that decay compressed or archived (or would, in a dry run)."""

    id: int
    kind: str
    from_level: int
    to_level: int
    action: str  # summary | brief | archived
    strength: float
    idle_days: float
    half_life_days: float
    reason: str
    preview: str


@dataclass
class DecayReport:
    """What one `decay` run did (or, with dry_run, would do) at instant `now` (UTC ISO-8601).

    Attributes:
        examined: active memories looked at; protected: skipped for a protected tag.
        banked: memories whose decay bookkeeping (bank, check time) was written.
        skipped: memories changed by another process during the run (left for the next run).
    """

    now: str
    dry_run: bool
    examined: int
    protected: int
    banked: int
    skipped: int
    changes: list[DecayChange] = field(default_factory=list)


@dataclass
class ConfidenceChange:
    """A confidence change (0.01–0.99) and why."""

    memory_id: int
    before: float
    after: float
    how: str
    reason: str | None


@dataclass
class ReviewResult:
    """A `confirm`: FSRS stability (days) before/after and the resulting decay half-life (days)."""

    memory: Memory
    stability_before: float | None
    stability_after: float
    half_life_days: float
    next_review: str


@dataclass
class MergePair:
    """Two near-duplicates: `merged_id` is folded into `survivor_id`."""

    survivor_id: int
    merged_id: int
    similarity: float
    project: str | None


@dataclass
class PossibleConflict:
    """Two memories that read alike (cosine ≥ the threshold) but say different things, so they
    were not merged: `reasons` name how they differ (`conflicts.Difference` as text, e.g.
    `version (v1.8 / v1.9)`), for a person to review (keep both, update or forget one)."""

    first_id: int
    second_id: int
    similarity: float
    project: str | None
    reasons: list[str]


@dataclass
class ConsolidateReport:
    """Near-duplicate pairs found (dry run) or merged, with the threshold used (cosine), and the
    pairs that read alike but differ in fact (`conflicts`: never merged)."""

    dry_run: bool
    threshold: float
    pairs: list[MergePair] = field(default_factory=list)
    skipped: int = 0
    embedded: int = 0  # memories still waiting for a vector, embedded (in memory) to be compared
    conflicts: list[PossibleConflict] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Times typed by people


def parse_when(text: str, *, what: str = "time") -> str:
    """A time typed by a person (ISO-8601, date, or relative like `3 days ago`) as stored UTC
    ISO-8601. Naive = local time; relative to the memsafe clock; a calendar name is its start in
    local time. See `when.parse_when`.

    Raises:
        InvalidInput: unparseable or in the future.
    """
    return clock.to_iso(when.parse_when(text, clock.now(), what=what))


# ---------------------------------------------------------------------------------------------
# Update and history


def _snapshot(store: Store, memory_id: int) -> tuple[dict, list[str]]:
    row = store.raw_row(memory_id)
    assert row is not None  # every caller found the memory first, in the same transaction
    return row, store.tags_of([memory_id]).get(memory_id, [])


@again_after_heal
def update(
    store: Store,
    memory_id: int,
    *,
    content: str | None = None,
    tags: Sequence[str] | None = None,
    kind: str | None = None,
    importance: float | None = None,
    project: str | None = None,
    clear_project: bool = False,
    redact: bool = False,
    embed_now: bool = True,
    scope: Scope | None = None,
    author: str | None = None,
) -> Memory:
    """Change a memory, keeping its previous state as a version (cause `update`, with its author).
    The new state's author is `author` (`clean_author`; None: unknown): whoever wrote a change
    is its author, so history tells who wrote what.

    `embed_now=False` leaves the new text's vector pending (deferred embedding, as `remember`).
    `scope` as in `api.get`: a memory outside it is NotFound (it can still be moved to another
    project with `project`, once reached).

    New content goes through the same credential check as `remember` (refused, or redacted with
    `redact`).

    A content change re-embeds the text and replaces the vector (DELETE + INSERT) in the same
    transaction as the row, its FTS entry (triggers) and the version; it sets
    `content_updated_at` (the content-version time) and resets decay (level 0, empty bank).
    Metadata changes leave `content_updated_at` alone.

    Raises:
        NotFound; InvalidInput (nothing to change, bad value); Refused (memory not active);
        Duplicate (another memory in the project holds the new content); SecretDetected.
    """
    get(store, _check_id(memory_id), scope=scope)  # before any work on the new text
    changes: dict = {}
    text = _screen_secrets(clean_text(content), redact) if content is not None else None
    if kind is not None:
        changes["kind"] = _enum_value(Kind, kind, "kind")
    if importance is not None:
        changes["importance"] = _unit_interval(importance, "importance", 0.5)
    if clear_project:
        changes["project"] = None
    elif project is not None:
        changes["project"] = clean_project(project)
    tag_list = clean_tags(tags) if tags is not None else None
    author_v = clean_author(author)
    if text is None and not changes and tag_list is None:
        raise InvalidInput("nothing to update; give --content, --tag/--no-tags, --kind, --importance, --project "
                           "or --global (MCP/API: content, tags, kind, importance)")

    embedder = embedder_for(store) if text is not None and embed_now else None
    vector = embedder.embed_one(text) if embedder is not None and text is not None else None
    now = clock.now_iso()
    with store.write():
        memory = get(store, memory_id, scope=scope)
        if memory.status != Status.ACTIVE.value:
            raise Refused(f"memory {memory_id} is {memory.status}; `memsafe restore {memory_id}` first")
        row, old_tags = _snapshot(store, memory_id)
        if text is not None and text != row["content"]:
            digest = content_hash(text)
            other = store.find_duplicate(digest, changes.get("project", row["project"]))
            if other is not None and other != memory_id:
                raise Duplicate(f"memory {other} already holds that content", other)
            changes.update(content=text, content_hash=digest, content_updated_at=now, decay_level=0,
                           decay_bank=0.0, decay_checked_at=now, embedded=0)
        elif "project" in changes and changes["project"] != row["project"]:
            other = store.find_duplicate(row["content_hash"], changes["project"])
            if other is not None:
                raise Duplicate(f"memory {other} holds the same content in that project", other)
        changed = [k for k in ("content", "kind", "importance", "project") if k in changes and changes[k] != row[k]]
        if tag_list is not None and set(tag_list) != set(old_tags):  # tags are a set: order and case do not count
            changed.append("tags")
        if not changed:
            return memory
        store.add_version(row, old_tags, now, "update")
        changes["author"] = author_v
        changes["updated_at"] = changes["last_accessed_at"] = now  # an edit is an explicit use (decay, recency)
        store.update_memory(memory_id, changes)
        if tag_list is not None:
            store.set_tags(memory_id, tag_list)
        if "project" in changes and changes["project"] != row["project"]:
            graph_api.move_links(store, memory_id, changes["project"], now)
        if "content" in changes:
            if vector is not None and embedder is not None:  # (a vector only from an embedder)
                ensure_table(store, embedder)
                store.put_vector(memory_id, vector_bytes(vector))
            else:
                _drop_stale_vector(store, memory_id)
        store.add_event(now, "update", memory_id, ",".join(changed))
    return get(store, memory_id)


def _drop_stale_vector(store: Store, memory_id: int) -> None:
    """The text changed but no model is at hand: remove the old vector if sqlite-vec is loaded,
    and in any case mark the memory pending so a later backfill embeds the new text."""
    if store.vector_available and store.vector_table_exists():
        store.delete_vector(memory_id)
    store.update_memory(memory_id, {"embedded": 0})


def history(store: Store, memory_id: int, *, scope: Scope | None = None) -> HistoryReport:
    """All versions of a memory, oldest first, the current state last (cause `current`).
    `scope` as in `api.get` (None: any project).

    Raises: NotFound, InvalidInput.
    """
    memory = get(store, _check_id(memory_id), scope=scope)
    row = store.raw_row(memory_id)
    assert row is not None  # `get` found it
    out = []
    own_end = None  # when the memory's own previous state ended: the next one began then
    for n, v in enumerate(store.versions(memory_id), start=1):
        # (a tag-only update leaves content_updated_at alone, so the stored start repeated the
        # previous state's: two identical rows)
        began = own_end if own_end and not v.get("origin_id") else v["valid_from"]
        out.append(Version(n, v["content"], v["kind"], v["project"], v["tags"], v["importance"], v["confidence"],
                           v["decay_level"], v["status"], began, v["valid_to"], v["cause"], v.get("origin_id"),
                           v.get("author")))
        if not v.get("origin_id"):
            own_end = v["valid_to"]
    began = own_end or row["content_updated_at"]
    out.append(Version(len(out) + 1, memory.content, memory.kind, memory.project, memory.tags, memory.importance,
                       memory.confidence, memory.decay_level, memory.status, began, None, "current",
                       author=memory.author))
    return HistoryReport(memory_id, out)


# ---------------------------------------------------------------------------------------------
# Decay


def _policy(store: Store) -> dict[str, decay_rules.PolicyRow]:
    return decay_rules.parse_policy(config_value(store, "decay_policy"))


def decay_policy(store: Store) -> decay_rules.PolicyView:
    """The effective decay policy (defaults + config `decay_policy`), as users see it."""
    return decay_rules.policy_view(_policy(store))


def _original_text(store: Store, memory_id: int, row: dict) -> str:
    """The full text before compression: the latest own version at level 0, else the current text."""
    if row["decay_level"] == 0:
        return row["content"]
    for v in reversed(store.versions(memory_id)):
        if v.get("origin_id") is None and v["decay_level"] == 0:
            return v["content"]
    return row["content"]


_ACTION = {1: "summary", 2: "brief", 3: "archived"}
_WATCHED = ("content", "decay_level", "status", "last_accessed_at", "content_updated_at", "updated_at",
            "decay_checked_at")


def decay(store: Store, *, dry_run: bool = False, now: datetime | None = None,
          progress: Callable[[int, int], None] | None = None) -> DecayReport:
    """Run the decay policy (see `memsafe.decay`) over every active memory at instant `now`
    (default: the memsafe clock).

    Compresses (level 1 summary, level 2 brief) and archives (level 3) what has weakened,
    keeping every previous text as a version (cause `decay`); never deletes. Idempotent: a
    second run at the same instant changes nothing. With `dry_run`, nothing at all is written.
    A run also compacts the word index (`Store.compact_word_index`): cron's daily decay is the
    store's maintenance.

    Safe beside other writers: changes are written in short transactions of at most 32 memories
    that re-read each row and skip it if anything moved since planning (`skipped`); bookkeeping
    is written in batches of 200 with the same check.

    `progress`, when given, is called with (memories done, memories to do): once planned, and
    after each batch written.
    """
    now_dt = now or clock.now()
    now_iso = clock.to_iso(now_dt)
    if dry_run:
        store.no_checkpoint_on_close()  # not even WAL frames of other writers reach the main file
    policy = _policy(store)
    rows = store.decay_rows()
    plans = [decay_rules.plan_memory(r, policy, now_dt, clock.parse_iso) for r in rows]
    by_id = {r["id"]: r for r in rows}
    report = DecayReport(now_iso, dry_run, len(rows), sum(p.protected for p in plans), 0, 0)

    work = []  # (plan, row, original, final text, names)
    for p in plans:
        if p.protected or not p.changes_level:
            continue
        row = by_id[p.id]
        original = _original_text(store, p.id, row)
        names = store.entity_names(p.id)
        text = row["content"]
        for level in range(p.from_level + 1, min(p.to_level, 2) + 1):
            text = decay_rules.compress(original, level, names)
        work.append((p, row, original, text, names))
        report.changes.append(DecayChange(
            p.id, p.kind, p.from_level, p.to_level, _ACTION[p.to_level], round(p.strength, 4),
            round(p.idle_days, 1), round(p.half_life_days, 1), p.reason, text[:120],
        ))
    if progress:
        progress(0 if work and not dry_run else len(work), len(work))
    if dry_run:
        report.banked = sum(1 for p in plans if p.write_bank and not p.protected)
        return report

    applied: set[int] = set()
    embedder = None
    for start in range(0, len(work), CHANGE_BATCH):
        batch = work[start : start + CHANGE_BATCH]
        changed_texts = [(p.id, text) for p, row, _, text, _ in batch if text != row["content"]]
        if changed_texts and embedder is None:
            embedder = embedder_for(store)  # no model load when nothing is rewritten
        vectors = {}
        if embedder is not None and changed_texts:
            vectors = dict(zip([i for i, _ in changed_texts], embedder.embed([t for _, t in changed_texts])))
        with store.write():  # one short transaction per small batch; each row re-checked inside
            for p, row, original, _, names in batch:
                if _apply_change(store, p, row, original, names, vectors, embedder, now_iso):
                    applied.add(p.id)
                else:
                    report.skipped += 1
        if progress:
            progress(min(start + CHANGE_BATCH, len(work)), len(work))
    report.changes = [c for c in report.changes if c.id in applied]

    pending = [p for p in plans if p.write_bank and not p.protected and p.id not in applied and not p.changes_level]
    for start in range(0, len(pending), BANK_BATCH):
        with store.write():
            for p in pending[start : start + BANK_BATCH]:
                row = by_id[p.id]
                if store.bank_decay(p.id, p.bank, now_iso, row["decay_checked_at"], row["last_accessed_at"]):
                    report.banked += 1
                else:
                    report.skipped += 1
    report.banked += len(applied)
    store.compact_word_index()  # the scheduled maintenance: queries look up each term in fewer index pieces
    return report


def _apply_change(store: Store, p, row: dict, original: str, names: list[str], vectors: dict, embedder,
                  now_iso: str) -> bool:
    """Inside a write transaction: take one memory through its owed levels, each previous state a
    version (cause `decay`). Returns False (nothing written) if the row moved since planning."""
    current, tags = _snapshot(store, p.id)
    if current is None or any(current[k] != row[k] for k in _WATCHED):
        return False
    for level in range(p.from_level + 1, p.to_level + 1):
        store.add_version(current, tags, now_iso, "decay")
        change = {"decay_level": level, "updated_at": now_iso}
        if level <= 2:
            new_text = decay_rules.compress(original, level, names)
            if new_text != current["content"]:
                change.update(content=new_text, content_updated_at=now_iso)
        else:
            change.update(status=Status.ARCHIVED.value, status_changed_at=now_iso,
                          status_reason=f"decay: strength {p.strength:.3f}")
            store.add_event(now_iso, "archive", p.id, f"decay strength {p.strength:.3f}")
        store.update_memory(p.id, change)
        current = {**current, **change}
    store.update_memory(p.id, {"decay_bank": p.bank, "decay_checked_at": now_iso})
    if current["content"] != row["content"]:
        if p.id in vectors:
            ensure_table(store, embedder)
            store.put_vector(p.id, vector_bytes(vectors[p.id]))
        else:
            _drop_stale_vector(store, p.id)
    store.add_event(now_iso, "decay", p.id, f"level {p.from_level}->{p.to_level}")
    return True


def restore(store: Store, memory_id: int, *, scope: Scope | None = None) -> Memory:
    """Bring a forgotten or archived memory back to active; a compressed memory (decay level
    1–3) also gets its full original text back from history (exact bytes; the compressed state
    becomes a version, cause `restore`). `scope` as in `api.get`.

    Raises:
        NotFound (also outside `scope`); Refused if it is already active and uncompressed;
        Duplicate if an active memory with the same content now exists in its project.
    """
    get(store, _check_id(memory_id), scope=scope)  # before any work on its text
    prepared = uncompress_prepare(store, memory_id)  # embeds outside the transaction
    now = clock.now_iso()
    with store.write():
        memory = get(store, memory_id, scope=scope)
        if memory.status == Status.ACTIVE.value and memory.decay_level == 0:
            raise Refused(f"memory {memory_id} is already active")
        row = store.raw_row(memory_id)
        assert row is not None  # `get` found it, in this transaction
        other = store.find_duplicate(row["content_hash"], row["project"])
        if other is not None and other != memory_id:
            raise Duplicate(f"memory {other} holds the same content; forget it first", other)
        if memory.status != Status.ACTIVE.value:
            store.update_memory(
                memory_id,
                {"status": Status.ACTIVE.value, "status_reason": None, "status_changed_at": now, "updated_at": now},
            )
            store.add_event(now, "restore", memory_id, f"from {memory.status}")
        if memory.decay_level and prepared is not None:
            uncompress_apply(store, memory_id, prepared, now)
            store.add_event(now, "uncompress", memory_id, f"from level {memory.decay_level}")
    return get(store, memory_id)


def uncompress_prepare(store: Store, memory_id: int) -> tuple[str, bytes | None] | None:
    """Read-only part of restoring a compressed memory: (original text, its vector bytes or
    None), or None if the memory is not compressed. Embeds outside any transaction."""
    row = store.raw_row(memory_id)
    if row is None or row["decay_level"] == 0:
        return None
    original = _original_text(store, memory_id, row)
    embedder = embedder_for(store)
    vec = vector_bytes(embedder.embed_one(original)) if embedder is not None else None
    return original, vec


def uncompress_apply(store: Store, memory_id: int, prepared: tuple[str, bytes | None], now: str) -> None:
    """Inside a write transaction: put the original text back (the compressed state becomes a
    version, cause `restore`), level 0, empty bank, vector replaced."""
    original, vec = prepared
    row, tags = _snapshot(store, memory_id)
    store.add_version(row, tags, now, "restore")
    change = {"decay_level": 0, "decay_bank": 0.0, "decay_checked_at": now, "updated_at": now}
    if original != row["content"]:
        change.update(content=original, content_updated_at=now)
    store.update_memory(memory_id, change)
    if "content" in change:
        if vec is not None:
            embedder = embedder_for(store)
            assert embedder is not None  # `vec` was embedded for this store: it has vectors
            ensure_table(store, embedder)
            store.put_vector(memory_id, vec)
        else:
            _drop_stale_vector(store, memory_id)


# ---------------------------------------------------------------------------------------------
# Review and confidence


def confirm(store: Store, memory_id: int, *, reason: str | None = None, scope: Scope | None = None) -> ReviewResult:
    """A review: the memory was checked and is still right. Raises its stability with the FSRS
    model (py-fsrs, FSRS-6 default parameters, rating Good, no fuzzing) so it decays slower
    (half-life × 1 + log2(1 + stability / 2.3065 d)), and counts as a real access (the decay
    bank restarts). Audit event `confirm` with the reason.

    Raises: NotFound (also outside `scope`, as in `api.get`); Refused (not active).
    """
    from fsrs import Card, Rating, Scheduler, State

    now_dt = clock.now()
    now = clock.to_iso(now_dt)
    scheduler = Scheduler(learning_steps=(), enable_fuzzing=False)
    with store.write():
        memory = get(store, _check_id(memory_id), scope=scope)
        if memory.status != Status.ACTIVE.value:
            raise Refused(f"memory {memory_id} is {memory.status}; restore it before confirming")
        row = store.raw_row(memory_id)
        assert row is not None  # found above, in this transaction
        before = row["stability"]
        if before:
            last = store.last_event_at(memory_id, "confirm") or row["created_at"]
            card = Card(state=State.Review, stability=before, difficulty=_FSRS_DIFFICULTY,
                        last_review=clock.parse_iso(last), due=clock.parse_iso(last))
        else:
            card = Card()
        card, _ = scheduler.review_card(card, Rating.Good, now_dt)
        assert card.stability is not None  # a reviewed card has a stability
        after = float(card.stability)
        store.update_memory(memory_id, {"stability": after, "last_accessed_at": now, "updated_at": now})
        store.add_event(now, "confirm", memory_id, _detail(f"stability {before or 0:.2f} -> {after:.2f} d", reason))
        pol = _policy(store).get(row["kind"]) or decay_rules.DEFAULT_POLICY["general"]
        degree = store.connected_entity_counts([memory_id]).get(memory_id, 0)
        h_eff = decay_rules.effective_half_life(pol.half_life_days, row["access_count"], degree, after)
    return ReviewResult(get(store, memory_id), before, after, round(h_eff, 1), clock.to_iso(card.due))


_FSRS_DIFFICULTY = 2.118103970459016  # FSRS-6 difficulty after a first "Good" (default parameters)


def _detail(text: str, reason: str | None) -> str:
    if reason:
        why = " ".join(reason.split())[:200]
        return f"{text}; reason: {why}"
    return text


def set_confidence(
    store: Store,
    memory_id: int,
    *,
    value: float | None = None,
    boost: bool = False,
    weaken: bool = False,
    reason: str | None = None,
    scope: Scope | None = None,
) -> ConfidenceChange:
    """Set, boost or weaken a memory's confidence (kept within 0.01–0.99).

    Boost doubles the odds c/(1−c), weaken halves them (so repeated boosts approach but never
    reach 0.99). Confidence feeds ranking (`weight_confidence`) and decay (initial strength).
    It is metadata: no version is made and `content_updated_at` is unchanged, so older texts stay
    reachable by time travel. Audit event `confidence` with old → new and the reason.

    Raises: NotFound (also outside `scope`, as in `api.get`); InvalidInput (not exactly one of
    value/boost/weaken, or out of range).
    """
    if sum([value is not None, boost, weaken]) != 1:
        raise InvalidInput("give exactly one of VALUE, --boost or --weaken")
    if value is not None and (not isinstance(value, (int, float)) or math.isnan(value)
                              or not CONFIDENCE_MIN <= value <= CONFIDENCE_MAX):
        raise InvalidInput(f"confidence must be between {CONFIDENCE_MIN} and {CONFIDENCE_MAX}, got {value}")
    now = clock.now_iso()
    with store.write():
        memory = get(store, _check_id(memory_id), scope=scope)
        before = memory.confidence
        if value is not None:
            after, how = float(value), "set"
        else:
            c = min(max(before, CONFIDENCE_MIN), CONFIDENCE_MAX)
            odds = c / (1 - c) * (2.0 if boost else 0.5)
            after, how = odds / (1 + odds), "boost" if boost else "weaken"
        after = round(min(max(after, CONFIDENCE_MIN), CONFIDENCE_MAX), 4)
        store.update_memory(memory_id, {"confidence": after, "updated_at": now})
        store.add_event(now, "confidence", memory_id, _detail(f"{before:.4f} -> {after:.4f} ({how})", reason))
    return ConfidenceChange(memory_id, before, after, how, reason)


# ---------------------------------------------------------------------------------------------
# Near-duplicates


def consolidate(store: Store, *, dry_run: bool = False, threshold: float | None = None) -> ConsolidateReport:
    """Merge near-duplicates in one run, to the fixpoint: active memories of one project whose
    vectors have cosine similarity ≥ threshold (default config `near_duplicate_threshold`) are
    linked, and each connected group (a cluster: three near-copies, or a chain of them) merges
    into one survivor. A second run finds nothing more.

    Two memories that differ in fact are never joined, neither directly nor through a chain of
    near-copies: a negation or an opposite verb, a number, a version, a date or time, an
    identifier (hash, path, ticket, flag, code), a commit and its revert, two different commits
    (`memsafe.conflicts.differences`). Such pairs with cosine ≥ threshold are reported in
    `ConsolidateReport.conflicts` ("possible conflicts", for review) instead.

    The survivor is the most used one (access_count), then the oldest. It keeps every history:
    each merged memory's versions and its last state are copied into the survivor's history
    (cause `merge`, origin = the merged id), and it takes the union of tags and the highest
    importance and confidence (its previous state becomes a version, cause `merge`). Merged
    memories are forgotten with reason `merged into N`. Nothing is deleted.

    Memories still waiting for their vector (`remember --no-embed`, an import, the git hook) are
    compared too, so that one run is the fixpoint: a run stores their vectors first (`backfill`),
    a dry run embeds them in memory only (`ConsolidateReport.embedded` counts them).

    Returns one `MergePair` per merged memory (`similarity`: its cosine with the survivor, which
    a chain member may hold below the threshold; it joined through a near-copy).
    """
    import numpy as np

    limit = config_value(store, "near_duplicate_threshold") if threshold is None else threshold
    report = ConsolidateReport(dry_run, limit)
    embedder = embedder_for(store)
    if embedder is None:
        return report
    if not dry_run and store.vector_available:
        backfill(store, limit=None)
    if store.vector_table_exists() and not store.vectors_ready(embedder.model_id):
        return report  # the stored vectors come from another model: not comparable with this one's
    info = store.get_memories([r["id"] for r in store.decay_rows()])
    vectors = store.get_vectors(list(info)) if store.vector_table_exists() else {}
    waiting = [i for i in sorted(info) if i not in vectors]
    if waiting:  # a dry run's, or changed while the run stored vectors: embedded here, not stored
        fresh = embedder.embed([info[i].content for i in waiting])
        vectors.update((i, vector_bytes(fresh[k])) for k, i in enumerate(waiting))
        report.embedded = len(waiting)
    by_project: dict[str | None, list[int]] = {}
    for memory_id in sorted(vectors):
        by_project.setdefault(info[memory_id].project, []).append(memory_id)
    for project, ids in by_project.items():
        if len(ids) < 2:
            continue
        matrix = np.stack([np.frombuffer(vectors[i], dtype="<f4") for i in ids]).astype(np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        parent = list(range(len(ids)))  # union-find over the near-duplicate links

        def root(i: int, parent: list[int] = parent) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        links: list[tuple[float, int, int]] = []
        block = max(1, 4_000_000 // len(ids))  # rows of the similarity matrix at once (≤ 16 MB)
        for start in range(0, len(ids), block):
            sims = matrix[start:start + block] @ matrix.T
            for r, c in zip(*np.nonzero(sims >= limit)):
                if start + int(r) < int(c):
                    links.append((float(sims[r, c]), start + int(r), int(c)))
        members: dict[int, list[int]] = {i: [i] for i in range(len(ids))}
        apart = _Apart([info[i] for i in ids])
        for similarity, i, j in sorted(links, key=lambda link: (-link[0], link[1], link[2])):
            reasons = apart(i, j)
            if reasons:
                report.conflicts.append(PossibleConflict(ids[i], ids[j], round(similarity, 4), project, reasons))
                continue
            a, b = root(i), root(j)
            # closest pairs join first; a group never takes in a member that differs from one of its own
            if a != b and not any(apart(x, y) for x in members[a] for y in members[b]):
                parent[max(a, b)] = min(a, b)
                members[min(a, b)].extend(members.pop(max(a, b)))
        for group in members.values():
            if len(group) < 2:
                continue
            best = max(group, key=lambda i: (info[ids[i]].access_count, -ids[i]))
            for i in sorted(group):
                if i != best:
                    similarity = float(matrix[i] @ matrix[best])
                    report.pairs.append(MergePair(ids[best], ids[i], round(similarity, 4), project))
    report.pairs.sort(key=lambda p: (p.survivor_id, p.merged_id))
    report.conflicts.sort(key=lambda c: (c.first_id, c.second_id))
    if dry_run:
        return report
    done = []
    for pair in report.pairs:
        with store.write():
            s_row, s_tags = _snapshot(store, pair.survivor_id)
            m_row, m_tags = _snapshot(store, pair.merged_id)
            if s_row is None or m_row is None or s_row["status"] != "active" or m_row["status"] != "active":
                report.skipped += 1
                continue
            _merge(store, s_row, s_tags, m_row, m_tags)
            done.append(pair)
    report.pairs = done
    return report


class _Apart:
    """How two of `memories` (by position) differ in fact (`conflicts.differences`, as text),
    each pair read once. A memory with source git is a commit."""

    def __init__(self, memories: list[Memory]):
        self.memories = memories
        self.known: dict[tuple[int, int], list[str]] = {}

    def __call__(self, i: int, j: int) -> list[str]:
        pair = (min(i, j), max(i, j))
        if pair not in self.known:
            a, b = self.memories[pair[0]], self.memories[pair[1]]
            self.known[pair] = [str(d) for d in conflicts.differences(
                a.content, b.content, a_commit=a.source == "git", b_commit=b.source == "git")]
        return self.known[pair]


def _merge(store: Store, s_row: dict, s_tags: list[str], m_row: dict, m_tags: list[str]) -> None:
    now = clock.now_iso()
    sid, mid = s_row["id"], m_row["id"]
    for v in store.versions(mid):
        store.add_foreign_version(sid, v, "merge", v.get("origin_id") or mid)
    store.add_foreign_version(
        sid, {**m_row, "tags": m_tags, "valid_from": m_row["content_updated_at"], "valid_to": now}, "merge", mid
    )
    store.add_version(s_row, s_tags, now, "merge")
    store.update_memory(sid, {
        "importance": max(s_row["importance"], m_row["importance"]),
        "confidence": max(s_row["confidence"], m_row["confidence"]),
        "access_count": s_row["access_count"] + m_row["access_count"],
        "updated_at": now,
    })
    store.set_tags(sid, list(dict.fromkeys([*s_tags, *m_tags])))
    store.update_memory(mid, {"status": Status.FORGOTTEN.value, "status_reason": f"merged into {sid}",
                              "status_changed_at": now, "updated_at": now})
    store.add_event(now, "forget", mid, f"merged into {sid}")
    store.add_event(now, "merge", sid, json.dumps({"merged": mid}))


# ---------------------------------------------------------------------------------------------
# Listing


def list_memories(
    store: Store,
    *,
    status: str = "active",
    project: str | None = None,
    all_projects: bool = False,
    limit: int | None = None,
    source: str | None = None,
) -> list[Memory]:
    """Memories by lifecycle status ('active', 'archived', 'forgotten' or 'all'), newest first,
    in the project (plus global memories) or every project; only those of `source` (user, agent,
    git, hook, …) when given.

    Raises: InvalidInput (unknown status or source, limit < 1).
    """
    statuses = [s.value for s in Status] if status == "all" else [_enum_value(Status, status, "status")]
    if limit is not None and limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")
    wanted = None if source is None else _enum_value(Source, source, "source")
    scope = make_scope(project=project, all_projects=all_projects)
    scope.statuses = statuses
    ids = store.list_ids(scope, None if wanted else limit)
    found = store.get_memories(ids)
    out = [found[i] for i in ids if i in found and (wanted is None or found[i].source == wanted)]
    return out[:limit] if limit else out
