"""Responsibility: the pure parts of history and time travel: reading times typed by people, and
reconstructing what a memory was at a past instant from its stored versions and status events.

How a past state is found (no reliance on `valid_from`, so a metadata-only change such as a
confidence edit can never hide an older text):
  * `memory_versions` holds every earlier state of a memory, each ending at `valid_to`; the
    state at instant T is the first of the memory's own versions (origin_id NULL) that ends
    after T, or the current row if none does.
  * status at T comes from the audit events `forget`, `restore`, `archive` at or before T
    (the last one wins); with none the memory was active. Purged memories are gone entirely.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from memsafe import clock, when
from memsafe.errors import InvalidInput

ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?![\d-])")  # shaped like an ISO-8601 date, valid or not
STATUS_AFTER = {"forget": "forgotten", "restore": "active", "archive": "archived"}
FUTURE_TOLERANCE = timedelta(seconds=1)


def parse_when(text: str, now: datetime, *, what: str = "time") -> datetime:
    """Parse a time typed by a person into an aware UTC datetime, using `dateparser`.

    Accepts ISO-8601 with or without an offset (`2026-03-01T10:00:00+02:00`, `...Z`), dates
    (`2026-03-01` = local midnight), relative forms (`3 days ago`, `24h`, `yesterday`: elapsed
    time back from `now`, so `24h` is 24 hours across a DST change; `yesterday at 10:00` is local), and a
    time counted back from now as a recall query reads it (`the last 30 days`, `past month`:
    the start of that window, `when.counted_back`), relative to `now` (the memsafe clock, so
    MEMSAFE_NOW applies). A time without an offset is local time (the TZ of this machine; UTC
    when local time of `now` is past an end of the calendar). The same instant written with
    different offsets gives the same result.

    Raises:
        InvalidInput: empty, not understood, or later than `now` (one line, fit to show).
    """
    raw = (text or "").strip()
    if not raw:
        raise InvalidInput(f"empty {what}")
    # dateparser returns an aware datetime when the text has an offset and a naive one otherwise;
    # naive results (and the relative base) are local wall-clock time, converted with the OS
    # zone rules for that date (DST-correct), never with a cached zone.
    try:
        base = now.astimezone()
    except OverflowError:  # local time of a clock at an end of the calendar is past it: read as UTC
        base = now
    settings = {"PREFER_DATES_FROM": "past", "RELATIVE_BASE": base.replace(tzinfo=None)}
    typed = when.ascii_digits(raw)  # "２０２３-０５-０１" was refused as "not a date"
    try:
        parsed = datetime.fromisoformat(typed.replace("Z", "+00:00"))  # strict ISO-8601 first (week dates too)
    except ValueError as exc:
        if ISO_DATE.match(typed):  # dateparser would read 2024-13-01 as January 13
            raise InvalidInput(f"{what} {raw!r} is not a date ({exc}); use YYYY-MM-DD") from None
        # dateparser reads none of "the last 30 days", "past month" (break-it, session 13)
        parsed = when.counted_back(typed, now)
        if parsed is None:
            # ~0.1 s to import, ~0.3 s more on first use: only when nothing else reads it
            from dateparser.date import DateDataParser

            try:
                data = DateDataParser(settings=settings).get_date_data(typed)
            except Exception:  # dateparser raises assorted errors on odd input
                data = None
            parsed = data.date_obj if data is not None else None
            if parsed is not None and parsed.tzinfo is None:
                parsed = _elapsed(typed, now, data.locale) or parsed
    if parsed is None:
        raise InvalidInput(
            f"cannot read {what} {raw!r}; use ISO-8601 (2026-03-01T10:00:00+02:00), a date (2026-03-01) "
            "or a relative time (3 days ago)"
        )
    try:
        parsed = parsed.astimezone(timezone.utc)  # naive = local time
    except (ValueError, OverflowError):
        raise InvalidInput(f"{what} {raw!r} is out of range; use a date between the years 2 and 9998") from None
    if parsed > clock.shift(now, FUTURE_TOLERANCE):
        raise InvalidInput(f"{what} {raw!r} is in the future ({parsed.isoformat()}); memsafe cannot look ahead")
    return parsed


def _elapsed(text: str, now: datetime, locale: str | None) -> datetime | None:
    """The instant a relative time without a clock time ("24 hours ago", "24h", "1h 30m",
    "yesterday", "3 days ago"; `text` in dateparser's `locale`) names, counted back from `now` in
    elapsed time (aware UTC), or None for any other text. dateparser counts in local wall-clock
    time, so on the day a DST change falls in, "24h" reached 25 hours back while "the last 24
    hours" (`when.counted_back`) and a recall query reach 24 (break-it, session 14). A text naming a
    clock time ("yesterday at 10:00") gives the same instant from two bases a minute apart: it is
    local time, and None here.
    """
    from dateparser.date import DateDataParser

    base = now.astimezone(timezone.utc).replace(tzinfo=None)
    step = timedelta(minutes=1) if base.year < 9999 else -timedelta(minutes=1)
    found = []
    for at in (base, base + step):
        settings = {"PREFER_DATES_FROM": "past", "RELATIVE_BASE": at, "TIMEZONE": "UTC", "PARSERS": ["relative-time"]}
        try:
            found.append(DateDataParser(locales=[locale] if locale else None, settings=settings
                                        ).get_date_data(text).date_obj)
        except Exception:  # dateparser raises assorted errors (a base at an end of the calendar)
            return None
    if None in found or found[1] - found[0] != step:
        return None
    return found[0].replace(tzinfo=timezone.utc)


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
    for v in versions:
        first.setdefault(v["memory_id"], v)
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
            )
        )
    return out
