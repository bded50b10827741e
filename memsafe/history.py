"""Responsibility: the pure parts of history and time travel: reconstructing what a memory was at
a past instant from its stored versions and status events (the instant a person types is read by
`memsafe.when.parse_when`).

How a past state is found (no reliance on `valid_from`, so a metadata-only change such as a
confidence edit can never hide an older text):
  * `memory_versions` holds every earlier state of a memory, each ending at `valid_to`; the
    state at instant T is the first of the memory's own versions (origin_id NULL) that ends
    after T, or the current row if none does.
  * status at T comes from the audit events `forget`, `restore`, `archive` at or before T
    (the last one wins); with none the memory was active. Purged memories are gone entirely.
"""

from __future__ import annotations

from dataclasses import dataclass

STATUS_AFTER = {"forget": "forgotten", "restore": "active", "archive": "archived"}


@dataclass
class PastState:
    """A memory as it was at one instant (content and metadata then; usage counters now)."""

    id: int
    uid: str
    content: str
    kind: str
    project: str | None
    source: str
    tags: list[str]
    importance: float
    confidence: float
    decay_level: int
    status: str
    created_at: str
    last_accessed_at: str | None
    access_count: int
    current_content: str
    embedded: bool
    happened_at: str | None = None  # when the thing happened (UTC ISO-8601); None: created_at

    @property
    def event_at(self) -> str:
        """When the thing happened (UTC ISO-8601): `happened_at`, else the time it was stored."""
        return self.happened_at or self.created_at

    @property
    def same_as_now(self) -> bool:
        """True when the text then is the text now (its stored vector can be reused)."""
        return self.content == self.current_content


def states_at(at: str, rows: list[dict], versions: list[dict], status_events: list[tuple],
              current_tags: dict[int, list[str]]) -> list[PastState]:
    """Reconstruct every memory at instant `at` (UTC ISO-8601).

    Args:
        rows: current memory rows created at or before `at` (`Store.rows_created_until`).
        versions: own versions ending after `at`, ordered per memory by end
            (`Store.own_versions_ending_after`).
        status_events: (memory id, action, at) up to `at`, in order (`Store.status_events_until`).
        current_tags: current tags per memory id.

    Returns: one PastState per memory that existed then (any status then).
    """
    first: dict[int, dict] = {}
    for version in versions:
        first.setdefault(version["memory_id"], version)
    status: dict[int, str] = {}
    for memory_id, action, _ in status_events:
        status[memory_id] = STATUS_AFTER[action]
    out = []
    for r in rows:
        v = first.get(r["id"])
        src = v if v is not None else r
        last = r["last_accessed_at"] if r["last_accessed_at"] and r["last_accessed_at"] <= at else None
        out.append(
            PastState(
                id=r["id"], uid=r["uid"], content=src["content"], kind=src["kind"], project=src["project"],
                source=r["source"], tags=list(v["tags"]) if v is not None else current_tags.get(r["id"], []),
                importance=src["importance"], confidence=src["confidence"], decay_level=src["decay_level"],
                status=status.get(r["id"], "active"), created_at=r["created_at"], last_accessed_at=last,
                access_count=r["access_count"], current_content=r["content"], embedded=bool(r["embedded"]),
                happened_at=r.get("happened_at"),
            )
        )
    return out
