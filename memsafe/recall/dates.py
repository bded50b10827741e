"""Responsibility: the dates a memory's text mentions, matched against the dates a recall query
names, whatever form each is written in. A memory "deploy on 2024-12-03" answers "what happened
on Dec 3rd?", "on 03.12.2024" or "on 3 December 2024"; its event time (`happened_at`) may be
months later than the day it tells of, so the event-time window (`when.closeness`) alone misses it.

Both sides are read by `memsafe.when` (one reading of every form: ISO, numeric in the locale's
order or both, day and month names, weekdays, seasons), the memory's relative words ("yesterday",
"last Tuesday") counted from the memory's own event time. A mention matches a query's window when
it lies inside it (a day inside "May 2023", the same day); a day named without a year ("Dec 3rd",
"12/03") matches that day of any year, as the person asking may not say which year they mean. It
is a soft signal: a mention lifts a memory as an event time inside the window does (scoring
`weight_time`), never filters, and a query date no memory mentions changes nothing.

Candidates: the memories the word index finds for the spellings of each day the query names
(`match`: "12 03", "3 december", "dec 3rd", ... as phrases; the same tokens on SQLite FTS5 and
PostgreSQL), each then checked by reading its text, so a "12:03" or a "v12.03" never counts.
Pure, but for `mentioning`, which reads the store.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from memsafe import clock, settings

if TYPE_CHECKING:  # the query parser loads only when a query names a time (a session start names none)
    from memsafe.when import Window

# A memory's text is read for dates up to here: the dates that matter are near the start of a
# note or a commit message, and `when.find` reads at most MAX_SPANS spans anyway.
MAX_TEXT_CHARS = 4000
MAX_DAYS = 4  # days of a query spelled out for the word index (`match`); more are rare and costly
_MONTH_NAMES = ("january february march april may june july august september october november december").split()
_YEARLESS = re.compile(r"\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?[^\W\d_]+\.?|[^\W\d_]+\.?\s+\d{1,2}(?:st|nd|rd|th)?"
                       r"|\d{1,2}/\d{1,2}")


def _local_day(at: datetime) -> datetime:
    """The naive local midnight of the day holding aware instant `at`."""
    return clock.local_wall(at).replace(hour=0, minute=0, second=0, microsecond=0)


def is_day(w: Window) -> bool:
    """Whether window `w` is one local calendar day (midnight to midnight, DST days included)."""
    start = clock.local_wall(w.start)  # (a subtraction: a day at the end of the calendar does not overflow)
    return start == _local_day(w.start) and clock.local_wall(w.end) - start == timedelta(days=1)


def yearless(w: Window) -> bool:
    """Whether `w` is a day named by its day and month only ("Dec 3rd", "3 December", "12/03"):
    read as its latest occurrence, but a mention of that day in any year matches it."""
    return is_day(w) and _YEARLESS.fullmatch(" ".join(w.span.lower().split())) is not None


@functools.lru_cache(maxsize=8192)
def _mentions(text: str, at: datetime, zone: str, locale: str) -> tuple[Window, ...]:
    """`mentions`, kept per (text, event time, TZ, locale): a recall reads ~100-200 candidates,
    mostly the same memories recall after recall."""
    from memsafe import when

    try:
        found, _ = when.find(text[:MAX_TEXT_CHARS], at)
    except Exception:  # an odd text is no date; recall goes on without it
        return ()
    return tuple(w for w in found if w.end > w.start)


def _reading() -> tuple[str, str]:
    """What reads a date besides its text: the zone (TZ) and the order of day and month
    (`when.date_order`: MEMSAFE_DATE_ORDER and the locale)."""
    return (os.environ.get("TZ", ""),
            "|".join([*(os.environ.get(v, "") for v in ("LC_ALL", "LC_TIME", "LANG")),
                      settings.env().date_order or ""]))


def mentions(text: str, at: datetime) -> tuple[Window, ...]:
    """The time windows a memory's `text` mentions (`when.find`; relative words counted from
    `at`, the memory's event time, aware UTC), at most `when.MAX_SPANS`."""
    return _mentions(text, at, *_reading())


def matches(named: Sequence[Window], mentioned: Iterable[Window]) -> bool:
    """Whether a mentioned window lies inside a window the query names (`named`), or is the day,
    in any year, of a day the query names without a year (`yearless`)."""
    days = [(_local_day(q.start).month, _local_day(q.start).day) for q in named if yearless(q)]
    for m in mentioned:
        if any(q.start <= m.start and m.end <= q.end for q in named):
            return True
        if days and is_day(m) and (_local_day(m.start).month, _local_day(m.start).day) in days:
            return True
    return False


def mark(cands: Iterable, memories: dict, named: Sequence[Window]) -> None:
    """Set `date_mention` (1.0 or 0.0) of each candidate (`recall.candidates.Candidate`) whose
    memory in `memories` ({id: Memory or PastState}: `content`, `event_at`) mentions a time
    inside one of `named` (`matches`). Nothing when the query names no time."""
    if not named:
        return
    reading = _reading()
    for c in cands:
        m = memories.get(c.id)
        if m is None:
            continue
        found = _mentions(m.content, clock.parse_iso(m.event_at), *reading)
        c.date_mention = 1.0 if found and matches(named, found) else 0.0


def spellings(day: datetime, year: bool = False) -> list[str]:
    """The ways a text writes the day and month of naive `day`, as phrases of words the word
    index holds, without the year (any year's is found; ordinals one word, as indexed): "12 03",
    "03 12", "3 december", "december 3", "3rd dec", "dec 3rd", "3rd of december", ... Numbers
    without their zero ("12/3", "3.12") are most often no date ("Python 3.12"): only with the
    year, when `year` ("12 3 2024", "2024 12 3", "3 12 2024")."""
    d, m = day.day, day.month
    ordinal = f"{d}{'th' if 10 <= d % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"
    out = dict.fromkeys((f"{m:02d} {d:02d}", f"{d:02d} {m:02d}"))
    if year and (d < 10 or m < 10):
        y = day.year
        out.update(dict.fromkeys((f"{m} {d} {y}", f"{d} {m} {y}", f"{y} {m} {d}")))
    name = _MONTH_NAMES[m - 1]
    for month in dict.fromkeys((name, name[:3])):
        out.update(dict.fromkeys((f"{d} {month}", f"{month} {d}", f"{ordinal} {month}", f"{month} {ordinal}",
                                  f"{ordinal} of {month}")))
    return list(out)


def phrases(named: Sequence[Window]) -> list[str]:
    """The quoted FTS5 phrases of `spellings` for the first MAX_DAYS days among `named` ([] when
    it names no single day)."""
    days = list(dict.fromkeys((_local_day(w.start), not yearless(w)) for w in named if is_day(w)))[:MAX_DAYS]
    return [f'"{p}"' for p in dict.fromkeys(p for day, year in days for p in spellings(day, year))]


def match(named: Sequence[Window]) -> str | None:
    """An FTS5 MATCH expression (`phrases` joined by OR, the syntax both backends' `fts_search`
    read), or None when `named` holds no single day."""
    return " OR ".join(phrases(named)) or None


def mentioning(store, named: Sequence[Window], scope, depth: int) -> list[int]:
    """Ids of at most `depth` memories in `scope` whose text spells a day `named` holds
    (`match`; unchecked: `mark` reads each). [] when the query names no single day."""
    expression = match(named)
    if expression is None:
        return []
    return [i for i, _ in store.fts_search(expression, scope, depth)]


def spelled_in(store, texts: dict[int, str], named: Sequence[Window], depth: int) -> list[int]:
    """`mentioning` for texts as they were (`texts`: {id: text}, time travel), through the store's
    scratch index (`Store.scratch_lexical`); [] when `named` holds no single day."""
    wanted = phrases(named)
    return [i for i, _ in store.scratch_lexical(texts, wanted, depth)[0]] if wanted else []
