"""Responsibility: the time a query asks about. Finds date expressions in free text ("in May
2023", "last December", "early June", "last week", "3 days ago", "2022") and turns them into a
UTC time window, so recall can favour memories dated in or near it, and so the date words do not
count as query terms that no memory holds. Pure: "now" is a parameter; no database, no model.

Spans are found by a regular expression (cheap, so a query without a date word costs nothing),
each ending where a word ends ("the last decade" names no December); each span is read by
`dateparser` (the library memsafe already uses for `--as-of`), whose `period` (day, week, month,
year) gives the window's length. A span counting back from now ("the last 30 days", "the past
two weeks", "past month", "the last 24 hours", "past hour") is the window from then until now;
"last week" (no number, no "past") stays the calendar week before this one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from calendar import monthrange
from collections.abc import Callable
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, datetime, timedelta, timezone

from memsafe import clock

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december"
           "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_NUM = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a|an|a few|couple of|a couple of)"
_YEAR = r"(?:19|20)\d\d"  # a year standing alone: other 4-digit numbers are mostly not years
_ANY_YEAR = r"[1-9]\d{3}"  # a year beside a month ("May 1850", "December 9999")
_PART = r"(?:(?:early|beginning of|start of|mid|middle of|late|end of)\s+(?:in\s+)?)?"
_UNITS = "minute|hour|day|week|month|year"  # what a time counted back from now counts (`_ROLLING`)
# A unit joined by a hyphen to a word is part of an adjective, not a time: "the last hour-long
# meeting" is the latest meeting of an hour, "the past week-long sprint" a sprint (break-it, session
# 14); but for "-end", the end of that time ("the past year-end close": the past year).
_NOT_COMPOUND = r"(?!-(?!end\b)[^\W\d_])"

# Alternatives, longest first. A bare month name counts only beside a day, a year, a part of
# month or a preposition of time ("in May", "of June"), so "may" the verb is never a date.
_SPAN_SOURCE = (
    r"\b(?:"
    rf"{_PART}(?:(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?)?,?\s+{_ANY_YEAR}\b)"
    rf"|\d{{4}}-\d{{2}}-\d{{2}}(?!\d)"
    rf"|(?:the\s+)?(?:(?:last|past|previous)\s+(?:{_NUM}|few)\s+(?:{_UNITS})s?|past\s+(?:{_UNITS})|last\s+hour)\b{_NOT_COMPOUND}"
    rf"|{_PART}(?:last|this|next|past|previous)\s+(?:week(?:end)?|month|year|{_MONTHS}|{_DAYS})\b{_NOT_COMPOUND}"
    rf"|{_NUM}\s+(?:days?|weeks?|months?|years?)\s+ago\b"
    rf"|(?:yesterday|today|tonight)\b"
    rf"|{_PART}(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})|(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?)\b"
    rf"|(?:(?<=\bin\s)|(?<=\bduring\s)|(?<=\bof\s)|(?<=\bsince\s))(?:{_MONTHS})\b"
    rf"|(?:early|mid|late)\s+(?:{_MONTHS}|{_YEAR})\b"
    rf"|(?:(?<=\bin\s)|(?<=\bduring\s)|(?<=\bsince\s)|(?<=\bof\s)){_YEAR}\b"
    rf"|{_YEAR}(?=\s*[?.!,]|\s*$)"
    r")"
)
# Every alternative of _SPAN holds a digit or one of these (lower case): an ASCII text holding
# none names no time, and `find` answers it without compiling _SPAN (~4-7 ms of a recall).
_NEEDED = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
           *_UNITS.split("|"), "tonight", "ago")


@functools.cache
def _span() -> re.Pattern:
    return re.compile(_SPAN_SOURCE, re.IGNORECASE)


def _may_name_time(text: str) -> bool:
    """False only when `_span()` cannot match `text`: ASCII (re.IGNORECASE lets a few non-ASCII
    letters match ASCII ones), no digit and none of `_NEEDED`."""
    if not text.isascii():
        return True
    lowered = text.lower()
    return any(c.isdigit() for c in lowered) or any(word in lowered for word in _NEEDED)
_PARTS = {"early": (0.0, 1 / 3), "beginning of": (0.0, 1 / 3), "start of": (0.0, 1 / 3),
          "mid": (1 / 3, 2 / 3), "middle of": (1 / 3, 2 / 3),
          "late": (2 / 3, 1.0), "end of": (2 / 3, 1.0)}
_WORDS_NUM = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
              "eight": "8", "nine": "9", "ten": "10", "a": "1", "an": "1", "a few": "3", "couple of": "2",
              "a couple of": "2"}


# Date expressions read per query: dateparser takes 1-2 ms a span, and a query repeating "in May
# 2023" 8,000 times (100,000 characters, MAX_QUERY_CHARS) took 13 s to recall (break-it, session 11).
MAX_SPANS = 16


@dataclass(frozen=True)
class Window:
    """A time a query asks about: [start, end) in UTC, and the query's text span that named it."""

    start: datetime
    end: datetime
    span: str


def find(text: str, now: datetime) -> tuple[list[Window], str]:
    """The time windows a query names, and the query with their spans removed.

    Args:
        text: free text (a recall query).
        now: aware datetime, "now" for relative expressions (memsafe's clock).

    Returns:
        ([Window] in the order named, one per distinct span, text without the date spans). A span
        dateparser cannot read is left in the text and yields no window. The same span (case and
        spacing aside) is read once, and at most MAX_SPANS distinct spans are read: past them the
        text is kept as it is. "The last N units of/in <date>" ("the last week of March", "the last
        3 months of 2023") is one span: the end of that date's window (`_ending`), not a time
        counted back from now beside it.
    """
    if not _may_name_time(text):
        return [], " ".join(text.split())
    windows: list[Window] = []
    kept: list[str] = []
    last = pos = 0
    read: dict[str, Window | None] = {}
    while (m := _span().search(text, pos)) is not None:
        tail, outer = _tail_of(text, m)
        start, pos = m.start(), (outer or m).end()
        key = _folded(text[start:pos])
        if key not in read:
            if len(read) >= MAX_SPANS:
                break
            read[key] = _read(m.group(0), now) if outer is None else _ending(tail, outer.group(0), now, text[start:pos])
            if read[key] is not None:
                windows.append(read[key])
        if read[key] is None:
            continue
        kept.append(text[last:start])
        last = pos
    kept.append(text[last:])
    return windows, " ".join(" ".join(kept).split())


def _read(span: str, now: datetime) -> Window | None:
    """One span → its Window, or None when dateparser cannot read it."""
    raw = _folded(span)
    back = _ROLLING.fullmatch(raw)
    if back:
        return _rolling(back, now, span)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):  # ISO-8601: dateparser reads 2024-13-01 as January 13
        try:
            day = datetime.strptime(raw, "%Y-%m-%d")
        except ValueError:
            return None
        start, end = _period(day, "day")
        return Window(start.replace(tzinfo=timezone.utc), end.replace(tzinfo=timezone.utc), span)
    part = None
    for name in sorted(_PARTS, key=len, reverse=True):
        if raw.startswith(name + " "):
            part, raw = name, raw[len(name):].strip()
            raw = raw[3:] if raw.startswith("in ") else raw
            break
    previous = raw.startswith(("last ", "past ", "previous "))
    words = raw.split(" ", 1)
    if previous and len(words) == 2 and re.fullmatch(f"(?:{_MONTHS})", words[1]):
        raw = words[1]  # "last December": the latest December before this month
    for word, digit in _WORDS_NUM.items():
        raw = re.sub(rf"^{word}\s+(?=(?:day|week|month|year)s?\s+ago)", digit + " ", raw)
    base = now.astimezone(timezone.utc).replace(tzinfo=None)
    try:
        data = _relative(raw, base) or _parse(raw, base)
    except Exception:  # dateparser raises assorted errors on odd input
        return None
    if data is None:
        return None
    date, period = data
    if previous and raw == words[-1] and date.month == base.month and date.year == base.year:
        if date.year == MINYEAR:
            return None
        # the same month a year before; Feb 29 (asked on Feb 29) has no day in most years
        date = _in_month(date, date.year - 1, date.month)
    start, end = _period(date, period)
    if part:
        lo, hi = _PARTS[part]
        length = end - start
        start, end = start + length * lo, start + length * hi
    return Window(start.replace(tzinfo=timezone.utc), end.replace(tzinfo=timezone.utc), span)


# The letters that re.IGNORECASE matches to ASCII ones (long s, Kelvin sign, dotless i, dotted
# capital I): a span such as "the laſt 3 days" is read as "the last 3 days", not left unread.
_FOLD = str.maketrans({"\u017f": "s", "\u212a": "k", "\u0131": "i", "\u0130": "i"})


def ascii_digits(text: str) -> str:
    """`text` with every decimal digit of any script ("２０２３", "٣": what `\\d` matches) as its
    ASCII digit; other characters unchanged."""
    if text.isascii():
        return text
    return "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in text)


def _folded(span: str) -> str:
    """A span as it is read and compared: those letters and every decimal digit as ASCII
    (`ascii_digits`), lower case, single spaces."""
    return " ".join(ascii_digits(span.translate(_FOLD)).lower().split())


# The plural only after a count, as in _SPAN: "past hours" and "last hours" name no time there, so
# `counted_back` (--since) does not read them as the last hour either (break-it, session 14).
_ROLLING = re.compile(
    rf"(?:the )?(?:(?:last|past|previous) (?P<n>{_NUM}|few) |past |last (?=hour))(?P<unit>{_UNITS})(?(n)s?)")
# A count past this (10 digits) reaches back further than the calendar (years 1-9999) in any unit,
# minutes included; int() refuses a text of more than 4,300 digits, and a query may hold 100,000.
_MAX_COUNT = 10**10


def _count(word: str | None) -> int:
    """How many units a span counts back (`word` from a `_folded` span): 1 when it gives no
    number ("past week"), its digits, a number word, or 3 for "few"; at most _MAX_COUNT."""
    if word is None:
        return 1
    if word.isdecimal():
        digits = word.lstrip("0")
        return int(digits or "0") if len(digits) <= 10 else _MAX_COUNT
    return int(_WORDS_NUM.get(word, "3"))


def _in_month(at: datetime, year: int, month: int) -> datetime:
    """`at` moved to `month` of `year`, its day held to that month's last (Jan 31 → Feb 28)."""
    return at.replace(year=year, month=month, day=min(at.day, monthrange(year, month)[1]))


def _back(end: datetime, n: int, unit: str) -> datetime:
    """`end` less n units (minute, hour, day, week, month, year; n < 0 moves forward); months and
    years are calendar ones (`_in_month`), as dateparser's relativedelta moves them.

    Raises:
        OverflowError: the result is before year 1 or after year 9999.
    """
    months = {"month": n, "year": 12 * n}.get(unit, 0)
    if not months:  # timedelta raises OverflowError past ~2.7 million years, end − it past year 1
        return end - timedelta(minutes=n * {"minute": 1, "hour": 60, "week": 7 * 1440}.get(unit, 1440))
    year, month = divmod(end.year * 12 + end.month - 1 - months, 12)
    if not MINYEAR <= year <= MAXYEAR:
        raise OverflowError(f"year {year} is out of range")
    return _in_month(end, year, month + 1)


def _back_within(end: datetime, n: int, unit: str) -> datetime:
    """`_back`, or the first instant a datetime holds (`end`'s tzinfo) when that is further back."""
    try:
        return _back(end, n, unit)
    except OverflowError:
        return datetime.min.replace(tzinfo=end.tzinfo)


def _rolling(m: re.Match, now: datetime, span: str) -> Window:
    """The window of a span counting back from `now` (`_ROLLING`): [now − n units, now] (n from
    `_count`, `_back`); now at the last instant a datetime holds ends the window there."""
    end = now.astimezone(timezone.utc)
    return Window(_back_within(end, _count(m["n"]), m["unit"]), clock.shift(end, timedelta(microseconds=1)), span)


# "the last week of March", "the past 3 months in 2023": a span that counts back (with or without a
# number) and, after "of" or "in", another span: the end of that one's window, not of now.
_TAIL = re.compile(rf"(?:the )?(?:last|past|previous) (?:(?P<n>{_NUM}|few) )?(?P<unit>{_UNITS})s?")
_OF = re.compile(r"\s+(?:of|in)\s+(?:the\s+)?", re.IGNORECASE)


def _tail_of(text: str, m: re.Match) -> tuple[re.Match | None, re.Match | None]:
    """(`_TAIL` match of span `m`, the span of `text` it is the end of), or (None, None)."""
    tail = _TAIL.fullmatch(_folded(m.group(0)))
    of = _OF.match(text, m.end()) if tail else None
    outer = _span().match(text, of.end()) if of else None
    return (tail, outer) if outer else (None, None)


def _ending(tail: re.Match, outer: str, now: datetime, span: str) -> Window | None:
    """The window of "the last n units of <outer>": the last n units of `outer`'s window (all
    of it when shorter), or None when `outer` cannot be read."""
    whole = _read(outer, now)
    if whole is None:
        return None
    return Window(max(whole.start, _back_within(whole.end, _count(tail["n"]), tail["unit"])), whole.end, span)


def counted_back(text: str, now: datetime) -> datetime | None:
    """The instant a time counted back from `now` names: the start of its window (`_rolling`:
    "the last 30 days" → now − 30 days, aware UTC), or None when `text` (all of it) is not one.
    `--since` and `--as-of` read them with it (`history.parse_when`), as a recall query does."""
    m = _ROLLING.fullmatch(_folded(text))
    return _rolling(m, now, text).start if m else None


_RELATIVE = re.compile(r"(?P<day>today|tonight|yesterday)|(?P<n>\d{1,7}) (?P<ago>day|week|month|year)s? ago"
                       r"|(?P<rel>this|last|next) (?P<unit>week|month|year)"
                       rf"|(?P<month>{_MONTHS})(?:\.?,? (?P<of>[1-9]\d{{3}}))?|(?P<year>[1-9]\d{{3}})")
_MONTH_NUMBERS = {name: n for n, names in enumerate(
    ("january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul", "august aug",
     "september sep sept", "october oct", "november nov", "december dec"), start=1) for name in names.split()}


def _relative(raw: str, base: datetime) -> tuple[datetime, str] | None:
    """`_parse`'s answer for the commonest spans, computed without dateparser: "today",
    "yesterday", "N units ago", "this/last/next week|month|year" (months and years moved as
    dateparser's relativedelta moves them, the day held to the month's last), a month ("May",
    "May 2023") and a year. A CLI recall that
    reads its first date with dateparser spends ~0.3-0.45 s on it (its import, then the
    timezone and locale expressions it compiles on first use; session 13), and these spans are
    most of what people write. tests/recall/test_recall_odd_input.py checks that both give the same
    windows. None for any other span, or one reaching past the calendar (years 1-9999): dateparser
    reads it."""
    m = _RELATIVE.fullmatch(raw)
    if m is None:
        return None
    if m["year"] or m["month"]:  # a month this year (last year if it is still to come), or of a year
        month = _MONTH_NUMBERS[m["month"]] if m["month"] else base.month
        year = int(m["year"] or m["of"] or (base.year if month <= base.month else base.year - 1))
        return (_in_month(base, year, month), "month" if m["month"] else "year") if year >= MINYEAR else None
    if m["day"]:
        n, unit = int(m["day"] == "yesterday"), "day"
    else:
        n, unit = (int(m["n"]), m["ago"]) if m["ago"] else ({"this": 0, "last": 1, "next": -1}[m["rel"]], m["unit"])
    try:
        return _back(base, n, unit), unit
    except OverflowError:
        return None


def _parse(raw: str, base: datetime) -> tuple[datetime, str] | None:
    """(naive UTC date, period: day | week | month | year) of a date expression, or None."""
    from dateparser.date import DateDataParser  # heavy import: only when a query names a date

    settings = {"PREFER_DATES_FROM": "past", "RELATIVE_BASE": base, "RETURN_TIME_AS_PERIOD": True}
    data = DateDataParser(languages=["en"], settings=settings).get_date_data(raw)
    if data is None or data.date_obj is None:
        return None
    return data.date_obj.replace(tzinfo=None), data.period or "day"


def _period(date: datetime, period: str) -> tuple[datetime, datetime]:
    """[start, end) of the day, week, month or year holding `date` (naive). A window reaching past
    9999-12-31 ends at `datetime.max` (the last instant datetime holds): "9999-12-31" or "this
    year" asked in 9999 are windows, not an overflow."""
    day = date.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "year":
        start = day.replace(month=1, day=1)
        step: Callable[[], datetime] = lambda: start.replace(year=start.year + 1)  # noqa: E731
    elif period == "month":
        start = day.replace(day=1)
        step = lambda: (start + timedelta(days=32)).replace(day=1)  # noqa: E731
    elif period == "week":
        start = day - timedelta(days=day.weekday())  # 0001-01-01 is a Monday: never before it
        step = lambda: start + timedelta(days=7)  # noqa: E731
    else:
        start = day
        step = lambda: day + timedelta(days=1)  # noqa: E731
    try:
        return start, step()
    except (OverflowError, ValueError):  # past year 9999
        return start, datetime.max


def closeness(at: datetime, windows: list[Window]) -> float:
    """How well an instant fits the windows: 1 inside one; outside, 0.5^(distance / length),
    the distance to the nearest window edge in units of that window's length (at least a
    day), so a memory a week before "last week" scores 0.5. 0 when there is no window."""
    best = 0.0
    for w in windows:
        if w.start <= at < w.end:
            return 1.0
        length = max((w.end - w.start).total_seconds(), 86400.0)
        distance = (w.start - at).total_seconds() if at < w.start else (at - w.end).total_seconds()
        best = max(best, 0.5 ** (distance / length))
    return best
