"""Responsibility: the single source of "now", the user's wall-clock time, and the UTC ISO-8601
format of stored times.

`MEMSAFE_NOW` (an ISO-8601 instant) fixes the clock for tests, benchmarks and
reproducible decay runs; without it the system clock is used. Local time is the operating
system's zone, which honours `TZ` (`America/Los_Angeles`, `Pacific/Auckland`; UTC when unset on
most servers); calendar words a person types ("today", "last week") are read in it.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone

from memsafe import settings


def now() -> datetime:
    """Return the current instant, timezone-aware UTC.

    Honours `MEMSAFE_NOW` (ISO-8601; naive values are taken as UTC).

    Raises:
        InvalidInput: `MEMSAFE_NOW` is set but not an ISO-8601 instant.
    """
    fixed = settings.env().now
    return fixed if fixed is not None else datetime.now(timezone.utc)


@functools.lru_cache(maxsize=16_384)
def parse_iso(text: str) -> datetime:
    """Parse an ISO-8601 instant to aware UTC (naive means UTC). Results are kept per process
    (datetimes are immutable): a recall reads two times of each of ~130 candidates, mostly the
    same memories recall after recall.

    Raises:
        ValueError: not ISO-8601, or outside the years 1–9999 once converted to UTC.
    """
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        return dt.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(f"{text!r} is outside the years 1-9999 in UTC") from None


def to_iso(dt: datetime) -> str:
    """Format an aware datetime as the stored form: UTC, microseconds, `+00:00` offset."""
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds")


def shift(at: datetime, delta: timedelta) -> datetime:
    """`at + delta`, held to the instants a datetime holds: past year 9999 it is `datetime.max`,
    before year 1 `datetime.min` (with `at`'s tzinfo). A clock set near either end (`MEMSAFE_NOW`
    9999-12-31T23:59:59.999999) made "the last 3 days", `--since "3 days ago"` and `import`
    raise OverflowError."""
    try:
        return at + delta
    except OverflowError:
        return (datetime.max if delta > timedelta(0) else datetime.min).replace(tzinfo=at.tzinfo)


def local_wall(at: datetime) -> datetime:
    """The naive local wall-clock time of aware instant `at` (the zone of `TZ`, DST included);
    `at` in UTC when local time would fall outside the years 1-9999."""
    try:
        return at.astimezone().replace(tzinfo=None)
    except (OverflowError, ValueError):
        return at.astimezone(timezone.utc).replace(tzinfo=None)


def from_local(wall: datetime) -> datetime:
    """The aware UTC instant of naive local wall-clock time `wall` (the inverse of `local_wall`),
    with the zone's offset on that date. A time the clocks skip (a DST change at midnight, as in
    America/Santiago, skips 00:00-01:00) is read with the offset before the change, as PEP 495
    reads it for `fold=0`: local midnight of such a day is the instant the day's clocks start.
    A time outside the instants a datetime holds once in UTC is read as UTC.
    """
    try:
        at = wall.astimezone(timezone.utc)
        back = at.astimezone().replace(tzinfo=None)
    except (OverflowError, ValueError):
        return wall.replace(tzinfo=timezone.utc)
    # CPython reads a skipped time with the offset after the change: `back` is then before `wall`
    return shift(at, wall - back) if back < wall else at


def now_iso() -> str:
    """`to_iso(now())`: the stored form of the current instant."""
    return to_iso(now())


def age(stored_iso: str, reference: datetime | None = None) -> str:
    """Human age of a stored time relative to `reference` (default now): '45s', '3m', '5h', '2d', '7mo', '1y'."""
    seconds = max(0.0, ((reference or now()) - parse_iso(stored_iso)).total_seconds())
    for unit, size in (("y", 365 * 86400), ("mo", 30 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
