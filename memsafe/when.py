"""Responsibility: times typed by people. Finds the date expressions of free text (a recall query:
"in May 2023", "3 December", "12/03", "last Tuesday", "in spring", "the last 30 days") and turns
each into a UTC time window, so recall can favour memories dated in or near it and the date words
do not count as query terms that no memory holds (`find`); and reads one time typed whole
(`--since`, `--as-of`, MCP `as_of`, the web page's "as of") into one instant (`parse_when`), with
the same reading. Pure: "now" is a parameter; no database, no model.

What the words mean:
  * Calendar names are spans of the user's local calendar (the zone of `TZ`, DST included;
    `clock.local_wall`): "today", "yesterday", "this/last/next week|month|year", a weekday ("last
    Tuesday", "two Fridays ago"), the weekend ("over the weekend", "last weekend"), a month ("in
    May", "May 2023"), a day ("3 December", "Dec 3rd", "2024-12-03", "12/03", "03.12.2024"), a
    year ("in 2023"), a season ("in spring", "summer 2023"), a holiday ("at Christmas"). Weeks
    start on Monday (ISO 8601). A name without a year is its latest occurrence that has begun ("in
    May" asked in March is last May; "3 December" asked on 3 December is today); with "last" the
    latest one that has ended; with "this" the one under way, else the one of this year; with
    "next" the first to begin after now.
  * A time counted back from now is elapsed time, the same in every zone: "the last 30 days",
    "past week", "the past 3 hours" are [now − that, now]. "3 days ago" names the local day
    holding now − 3 days in a query, and the instant now − 3 days in a flag, as git reads it.
  * A flag takes the start of the span it names: `--since today` includes this morning, `--since
    "last week"` starts at last week's Monday, 00:00 local; `--as-of May` at May 1, 00:00.
  * Numeric dates: year first (2024-12-03, 2024/12/03, 2024.12.03) is year-month-day; with dots and a
    4-digit year (03.12.2024) day first; with slashes or dashes (12/03, 12/03/2024, 12/03/24) in the
    order of `date_order` (MEMSAFE_DATE_ORDER, else the locale's: LC_ALL, LC_TIME or LANG; en_US
    month first, en_GB and de day first), and in the other where that order names no day (13/03 is
    13 March everywhere). Without either (no locale: unset, C, POSIX) a query reads both days where
    both exist and a flag refuses the ambiguity. A form that names no day (2026-02-30, 31/04/2026,
    31 April, 13/13) is refused by a flag and is no window in a query. A slash date without a year
    counts in a query only with a zero ("12/03", "3/04") or after "on", "since", "by", ... ("24/7"
    and "1/2" are not dates), and no numeric form counts after a word that names what it counts ("a
    ratio of 12/03", "version 3.12.2024"); dots need a 4-digit year ("Python 3.12" is no date).
  * Seasons are meteorological (spring March-May, summer June-August, autumn or fall
    September-November, winter December-February), of the northern hemisphere unless the
    locale's territory is in the southern one (`_SOUTHERN`: en_AU, en_NZ, es_AR, pt_BR, en_ZA,
    ...), where they are six months apart. A season named with a year is the one whose middle
    month falls in that year ("winter 2024" = December 2023 to February 2024, as NOAA names
    winters). A bare season counts after "in", "during", "over", ... and before a pause or a
    function word ("in spring we", "in the summer."), so "Spring Boot" and "in spring water" are
    none.
  * Holidays: Christmas (24-26 December), Christmas Eve, Christmas Day, Boxing Day, New Year's
    Eve, New Year's Day, Easter (Good Friday to Easter Monday, the Western date: dateutil),
    Easter Sunday and Monday, Good Friday, Halloween; bare ones only after a preposition of time
    ("at Christmas", not "the Easter egg"). Holidays whose date differs by country
    (Thanksgiving) are not read.
  * "may" the verb is no month: a month name counts beside a day, a year, a part of a month or a
    preposition of time ("in May"), and "may" or "march" before or after a bare day number only
    when capitalised or after a preposition ("option 3 may break", "we march 3 miles": none).

Spans are found by a regular expression (cheap, so a query without a date word costs nothing),
each ending where a word ends ("the last decade" names no December). The commonest are read here
without `dateparser` (its import and first use cost a CLI recall ~0.4 s); the long tail of a flag
("yesterday at 10:00", "vor 3 Tagen", "24h") is read by `dateparser`.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from calendar import monthrange
from collections.abc import Callable
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, datetime, timedelta, timezone

from memsafe import clock, settings
from memsafe.errors import InvalidInput, InvalidTime

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december"
           "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_NUM = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|a|an|a few|couple of|a couple of)"
_YEAR = r"(?:19|20)\d\d"  # a year standing alone: other 4-digit numbers are mostly not years
_ANY_YEAR = r"[1-9]\d{3}"  # a year beside a month ("May 1850", "December 9999")
_PART = r"(?:(?:early|beginning of|start of|mid|middle of|late|end of)\s+(?:in\s+|the\s+)?)?"
_UNITS = "minute|hour|day|week|month|year"  # what a time counted back from now counts (`_ROLLING`)
_SEASONS = "spring|summer|autumn|fall|winter"
_HOLIDAYS = (r"christmas(?:\s+(?:eve|day))?|xmas|boxing\s+day|new\s+year(?:'s|\u2019s|s)?\s+(?:eve|day)"
             r"|easter(?:\s+(?:sunday|monday))?|good\s+friday|halloween")
_RELATION = r"(?:last|this|next|past|previous)"
# A unit joined by a hyphen to a word is part of an adjective, not a time: "the last hour-long
# meeting" is the latest meeting of an hour, "the past week-long sprint" a sprint; but for "-end",
# the end of that time ("the past year-end close": the past year).
_NOT_COMPOUND = r"(?!-(?!end\b)[^\W\d_])"
# Before a name that is a time only in context (a bare season or holiday): a preposition of time.
# Not "of": "an aspect of autumn" is a topic ("the end of summer" is a part, "summer of 2023" a year).
_TIME_PREP = "".join(rf"|(?<=\b{p}\s)" for p in ("in", "during", "over", "since", "at", "on", "through",
                                                  "around"))[1:]
# Before a slash date without a year or a zero ("on 3/4"): a preposition that takes a day.
_DAY_PREP = "".join(rf"|(?<=\b{p}\s)" for p in ("on", "since", "from", "until", "till", "by", "before",
                                                 "after"))[1:]
_ISO = r"(?<!\d)\d{4}-\d{2}-\d{2}(?!\d)"  # ISO-8601, also before a clock time (2024-12-03T10:00)
_NUMERIC = (  # the other numeric forms
    r"(?<![\w.,/:-])(?:\d{4}(?P<ys>[/.])\d{1,2}(?P=ys)\d{1,2}"
    r"|\d{1,2}(?P<ds>[/-])\d{1,2}(?P=ds)(?:\d{4}|\d{2})|\d{1,2}\.\d{1,2}\.\d{4}"
    rf"|0\d/\d{{1,2}}|\d{{1,2}}/0\d|(?:{_DAY_PREP})\d{{1,2}}/\d{{1,2}})(?![\w%/:-]|[.,]\d)"
)

# Alternatives, longest first. A bare month name counts only beside a day, a year, a part of
# month or a preposition of time ("in May", "of June"), so "may" the verb is never a date. The
# named groups are checked in context by `_plausible`.
_SPAN_SOURCE = (
    r"\b(?:"
    rf"{_PART}(?:(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?)?,?\s+{_ANY_YEAR}\b)"
    rf"|{_PART}(?:the\s+)?(?:{_SEASONS}|{_HOLIDAYS})(?:\s+of)?,?\s+{_ANY_YEAR}\b"
    rf"|{_ISO}|(?P<numeric>{_NUMERIC})"
    rf"|(?:the\s+)?(?:(?:last|past|previous)\s+(?:{_NUM}|few)\s+(?:{_UNITS})s?|past\s+(?:{_UNITS})|last\s+hour)\b{_NOT_COMPOUND}"
    rf"|{_PART}{_RELATION}\s+(?:week(?:end)?|month|year|{_MONTHS}|{_DAYS}|{_SEASONS}|{_HOLIDAYS})\b{_NOT_COMPOUND}"
    rf"|{_NUM}\s+(?:days?|weeks?|months?|years?|(?:{_DAYS})s)\s+ago\b"
    rf"|(?:yesterday|today|tonight)\b"
    rf"|(?:{_TIME_PREP})the\s+weekend\b(?!\s+(?:before|after|of)\b)"
    rf"|(?P<dm>{_PART}(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})|(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?))\b"
    rf"|(?:(?<=\bin\s)|(?<=\bduring\s)|(?<=\bof\s)|(?<=\bsince\s))(?:{_MONTHS})\b"
    rf"|(?P<bare>(?:(?:early|mid|late|(?:beginning|start|middle|end)\s+of(?:\s+the)?)\s+(?:{_SEASONS})"
    rf"|(?:{_TIME_PREP})(?:the\s+)?(?:{_SEASONS}|{_HOLIDAYS}))\b)"
    rf"|(?:early|mid|late)\s+(?:{_MONTHS}|{_YEAR})\b"
    rf"|(?:(?<=\bin\s)|(?<=\bduring\s)|(?<=\bsince\s)|(?<=\bof\s)){_YEAR}\b"
    rf"|(?<![.,/:-]){_YEAR}(?=\s*[?.!,]|\s*$)"  # not the end of a version or a path ("1.3.12.2024")
    r")"
)
# Every alternative of _SPAN holds a digit or one of these (lower case): an ASCII text holding
# none names no time, and `find` answers it without compiling _SPAN (~4-7 ms of a recall).
_NEEDED = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
           *_UNITS.split("|"), "tonight", "ago", *_SEASONS.split("|"), "christmas", "xmas", "easter", "halloween")


class _Lazy:
    """A pattern compiled on its first match, not at import: most texts name no time (`find`
    answers them before any pattern runs), and compiling these costs every recall's process a
    few milliseconds."""

    __slots__ = ("_source", "_flags", "_compiled")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source, self._flags = source, flags
        self._compiled: re.Pattern | None = None

    def _rx(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    def match(self, text: str, pos: int = 0) -> re.Match | None:
        return self._rx().match(text, pos)

    def fullmatch(self, text: str) -> re.Match | None:
        return self._rx().fullmatch(text)


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
# Words after which a number counts something other than days ("a ratio of 12/03", "version
# 3.12.2024", "page 12/03"): a numeric form right after one of them (or after it and "of") is no date.
_COUNTED = frozenset("""ratio ratios rate rates score scores scored odds fraction fractions version versions
    release releases build builds v ver revision rev page pages step steps chapter section sections issue
    issues pr python node php java ruby ios android macos windows""".split())
# Words that may follow a bare season or holiday that is a time ("in spring we moved", "over
# Christmas and"): a pause or one of these. Any other word makes it part of a name or a noun phrase
# ("Spring Boot", "in spring water", "the Easter egg").
_FUNCTION_WORDS = frozenset("""a an the and or but so then when while as if of in on at to for from by with
    about after before since until during i we you he she it they my our your his her its their me us them
    this that these those was were is are be been had has have did do does will would could should can may
    might must not no also too again last next this year month week""".split())
# Prepositions that make "may" or "march" beside a bare day number a month ("on may 5").
_DAY_MONTH_PREPS = frozenset("on in since by from until till before after of".split())

# Date expressions read per query: reading a span takes up to 1-2 ms (dateparser), and a query
# repeating "in May 2023" 8,000 times (100,000 characters, MAX_QUERY_CHARS) took 13 s to recall.
MAX_SPANS = 16


@dataclass(frozen=True)
class Window:
    """A time a query asks about: [start, end) in UTC, and the query's text span that named it."""

    start: datetime
    end: datetime
    span: str


class _NoSuchDay(ValueError):
    """A text shaped like a date names no day of the calendar (2026-02-30, 31 April, 13/13)."""


def find(text: str, now: datetime) -> tuple[list[Window], str]:
    """The time windows a query names, and the query with their spans removed.

    Args:
        text: free text (a recall query).
        now: aware datetime, "now" for relative expressions (memsafe's clock).

    Returns:
        ([Window] in the order named, one per distinct span, two for a numeric date that reads
        as two days (`date_order` unknown), text without the date spans). A span that names no
        day, or that cannot be read, is left in the text and yields no window; so is a span that
        context shows is no time (`_plausible`). The same span (case and spacing aside) is read
        once, and at most MAX_SPANS distinct spans are read: past them the text is kept as it
        is. "The last N units of/in <date>" ("the last week of March", "the last 3 months of
        2023") is one span: the end of that date's window (`_ending`), not a time counted back
        from now beside it.
    """
    if not _may_name_time(text):
        return [], " ".join(text.split())
    windows: list[Window] = []
    kept: list[str] = []
    last = pos = 0
    read: dict[str, list[Window]] = {}
    while (m := _span().search(text, pos)) is not None:
        if not _plausible(text, m):
            pos = m.end()
            continue
        tail, outer = _tail_of(text, m)
        start, pos = m.start(), (outer or m).end()
        key = _folded(text[start:pos])
        if key not in read:
            if len(read) >= MAX_SPANS:
                break
            read[key] = (_read(m.group(0), now) if outer is None or tail is None  # (both None, or neither)
                         else _ending(tail, outer.group(0), now, text[start:pos]))
            windows += read[key]
        if not read[key]:
            continue
        kept.append(text[last:start])
        last = pos
    kept.append(text[last:])
    return windows, " ".join(" ".join(kept).split())


def _plausible(text: str, m: re.Match) -> bool:
    """Whether span `m` of `text` is a time in its context (see the module's rules): a numeric
    form not after a word that names what it counts (`_COUNTED`), a bare season or holiday
    before a pause or a function word, "may" or "march" beside a bare day only capitalised or
    after a preposition."""
    before = re.findall(r"[^\W_]+", text[max(0, m.start() - 40):m.start()].lower())[-2:]
    if m["numeric"] is not None:  # "version 3.12.2024", "a ratio of 12/03"
        counted = before[-1:] if before[-1:] != ["of"] else before[-2:-1]
        return not _COUNTED.intersection(counted)
    if m["bare"] is not None:
        after = re.match(r"\s*([^\W\d_]+)", text[m.end():])
        return after is None or after.group(1).lower() in _FUNCTION_WORDS
    if m["dm"] is not None:
        word = re.search(rf"(?i)\b(?:{_MONTHS})\b", m["dm"])
        verb = word is not None and word.group(0).lower() in ("may", "march")
        ordinal = re.search(r"\d(?:st|nd|rd|th)\b", m["dm"], re.IGNORECASE) is not None
        return (not verb or ordinal or word is not None and word.group(0)[0].isupper()
                or bool(before[-1:]) and before[-1] in _DAY_MONTH_PREPS)
    return True


def _read(span: str, now: datetime) -> list[Window]:
    """One span → its Windows (two for a numeric date read both ways), [] when it names no day
    or cannot be read."""
    raw = _folded(span)
    back = _ROLLING.fullmatch(raw)
    if back:
        return [_rolling(back, now, span)]
    try:
        days = _calendar(raw, now) or []
    except _NoSuchDay:
        return []
    return [Window(clock.from_local(start), clock.from_local(end), span) for start, end in days]


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
# `counted_back` (--since) does not read them as the last hour either.
_ROLLING = _Lazy(
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
_TAIL = _Lazy(rf"(?:the )?(?:last|past|previous) (?:(?P<n>{_NUM}|few) )?(?P<unit>{_UNITS})s?")
_OF = _Lazy(r"\s+(?:of|in)\s+(?:the\s+)?", re.IGNORECASE)


def _tail_of(text: str, m: re.Match) -> tuple[re.Match | None, re.Match | None]:
    """(`_TAIL` match of span `m`, the span of `text` it is the end of), or (None, None)."""
    tail = _TAIL.fullmatch(_folded(m.group(0)))
    of = _OF.match(text, m.end()) if tail else None
    outer = _span().match(text, of.end()) if of else None
    return (tail, outer) if outer else (None, None)


def _ending(tail: re.Match, outer: str, now: datetime, span: str) -> list[Window]:
    """The windows of "the last n units of <outer>": the last n units of each of `outer`'s
    windows (all of one when shorter), or [] when `outer` cannot be read."""
    return [Window(max(w.start, _back_within(w.end, _count(tail["n"]), tail["unit"])), w.end, span)
            for w in _read(outer, now)]


def counted_back(text: str, now: datetime) -> datetime | None:
    """The instant a time counted back from `now` names: the start of its window (`_rolling`:
    "the last 30 days" → now − 30 days, aware UTC), or None when `text` (all of it) is not one."""
    m = _ROLLING.fullmatch(_folded(text))
    return _rolling(m, now, text).start if m else None


# ---------------------------------------------------------------------------------------------
# Calendar spans, in local wall-clock time


Span = tuple[datetime, datetime]  # [start, end), naive local wall-clock time


def _calendar(raw: str, now: datetime, *, guess: bool = True) -> list[Span] | None:
    """The local calendar spans `raw` (a `_folded` text, all of it) names: one, or two for a
    numeric date the locale leaves ambiguous. A part ("early", "end of the") takes that third of
    each. With `guess`, a text none of the readers here knows is read by dateparser (English).

    Returns None when nothing reads it.

    Raises:
        _NoSuchDay: it is shaped like a date that does not exist.
    """
    wall = clock.local_wall(now)
    part = None
    for name in sorted(_PARTS, key=len, reverse=True):
        if raw.startswith(name + " "):
            part, raw = name, raw[len(name):].strip()
            raw = raw.removeprefix("in ").removeprefix("the ")
            break
    for reader in (_numeric, _named, _weekday, _recurring):
        try:
            days = reader(raw, wall)
        except _NoSuchDay:
            raise
        except (OverflowError, ValueError):  # past an end of the calendar
            return None
        if days is not None:
            break
    else:
        days = _guessed(raw, wall) if guess else None
    if not days or part is None:
        return days
    lo, hi = _PARTS[part]
    return [(start + (end - start) * lo, start + (end - start) * hi) for start, end in days]


def _day(year: int, month: int, day: int) -> Span:
    """The span of one day. Raises _NoSuchDay when the calendar has no such day."""
    try:
        start = datetime(year, month, day)
    except ValueError:
        raise _NoSuchDay(f"{year:04d}-{month:02d}-{day:02d} is no day of the calendar") from None
    return _period(start, "day")


def _latest_day(month: int, day: int, wall: datetime) -> Span:
    """The latest `day` of `month` on or before today (`wall`): this year's, else last year's (a
    29 February the latest one). Raises _NoSuchDay when no year has it (31 April)."""
    if not 1 <= month <= 12 or not 1 <= day <= (29 if month == 2 else monthrange(2001, month)[1]):
        raise _NoSuchDay(f"month {month} has no day {day}")
    for year in range(wall.year, max(MINYEAR, wall.year - 8) - 1, -1):
        if day <= monthrange(year, month)[1] and (month, day) <= ((wall.month, wall.day) if year == wall.year
                                                                   else (12, 31)):
            return _day(year, month, day)
    raise OverflowError("before year 1")


_YMD = _Lazy(r"(?P<y>\d{4})(?P<s>[-/.])(?P<m>\d{1,2})(?P=s)(?P<d>\d{1,2})")
_ABC = _Lazy(r"(?P<a>\d{1,2})(?P<s>[-/.])(?P<b>\d{1,2})(?:(?P=s)(?P<y>\d{4}|\d{2}))?")


def _numeric(raw: str, wall: datetime) -> list[Span] | None:
    """A numeric date: Y-M-D (also with / or .), D.M.YYYY, and A/B[/Y] or A-B-Y in the order of
    `date_order` (see the module's rules); a year of two digits is 1969-2068 (POSIX `%y`)."""
    if m := _YMD.fullmatch(raw):
        return [_day(int(m["y"]), int(m["m"]), int(m["d"]))]
    m = _ABC.fullmatch(raw)
    if m is None or (m["s"] == "." and (m["y"] is None or len(m["y"]) != 4)) or (m["s"] == "-" and m["y"] is None):
        return None
    a, b = int(m["a"]), int(m["b"])
    order = "DMY" if m["s"] == "." else date_order()
    readings = [(b, a), (a, b)] if order == "DMY" else [(a, b), (b, a)]  # (month, day), the locale's first
    if m["y"] is None:
        read: Callable[[int, int], Span] = lambda month, day: _latest_day(month, day, wall)  # noqa: E731
    else:
        year = int(m["y"]) if len(m["y"]) == 4 else int(m["y"]) + (2000 if int(m["y"]) < 69 else 1900)
        read = lambda month, day: _day(year, month, day)  # noqa: E731
    days = []
    for month, day in readings:
        try:
            days.append(read(month, day))
        except _NoSuchDay:
            continue
    if not days:
        raise _NoSuchDay(f"{raw} is no day in either order of day and month")
    days = list(dict.fromkeys(days))
    return days if order is None or (order == "YMD" and m["y"] is not None) else days[:1]


def _named(raw: str, wall: datetime) -> list[Span] | None:
    """Today and yesterday, "N units ago", this/last/next week, month and year, a month ("May",
    "last December", "May 2023"), a year, a day of a month ("3 December", "Dec 3rd", "December 3,
    2024")."""
    raw = re.sub(r"^previous (?=week$|month$|year$)", "last ", raw)
    previous = raw.startswith(("last ", "past ", "previous "))
    words = raw.split(" ", 1)
    if previous and len(words) == 2 and re.fullmatch(f"(?:{_MONTHS})", words[1]):
        raw = words[1]  # "last December": the latest December before this month
    for word, digit in _WORDS_NUM.items():
        raw = re.sub(rf"^{word}\s+(?=(?:day|week|month|year)s?\s+ago)", digit + " ", raw)
    if (days := _day_of_month(raw, wall)) is not None:
        return days
    data = _relative(raw, wall)
    if data is None:
        return None
    date, period = data
    if previous and raw == words[-1] and date.month == wall.month and date.year == wall.year:
        if date.year == MINYEAR:
            raise OverflowError("before year 1")
        # the same month a year before; Feb 29 (asked on Feb 29) has no day in most years
        date = _in_month(date, date.year - 1, date.month)
    return [_period(date, period)]


_DAY_OF_MONTH = _Lazy(rf"(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<m1>{_MONTHS})\.?"
                           rf"|(?P<m2>{_MONTHS})\.? (?P<d2>\d{{1,2}})(?:st|nd|rd|th)?)(?:,? (?P<y>[1-9]\d{{3}}))?")


def _day_of_month(raw: str, wall: datetime) -> list[Span] | None:
    """ "3 December", "3rd of Dec", "December 3rd, 2024": that day; without a year the latest one
    on or before today."""
    m = _DAY_OF_MONTH.fullmatch(raw)
    if m is None:
        return None
    month, day = _MONTH_NUMBERS[m["m1"] or m["m2"]], int(m["d1"] or m["d2"])
    return [_day(int(m["y"]), month, day) if m["y"] else _latest_day(month, day, wall)]


_WEEKDAYS = {name: n for n, name in enumerate(_DAYS.split("|"))}
_WEEKDAY = _Lazy(rf"(?:(?P<rel>last|this|next|past|previous) )?(?P<day>{_DAYS})"
                      rf"|(?P<n>\d+) (?P<ago>{_DAYS})s ago|(?:(?P<wrel>the|last|this|next|past|previous) )?weekend")


def _weekday(raw: str, wall: datetime) -> list[Span] | None:
    """A weekday: bare ("Tuesday": the latest on or before today), "last Tuesday" (the latest
    before today), "this Tuesday" (this week's), "next Tuesday" (the first after today), "two
    Fridays ago" (the one a week before last Friday); the weekend: "this weekend" (this week's
    Saturday and Sunday), "last weekend" (last week's), "next weekend", "the weekend" (this one
    on a Saturday or Sunday, else last week's)."""
    raw = re.sub(rf"^({'|'.join(_WORDS_NUM)}) (?=(?:{_DAYS})s ago$)", lambda w: _WORDS_NUM[w.group(1)] + " ", raw)
    m = _WEEKDAY.fullmatch(raw)
    if m is None:
        return None
    today = wall.replace(hour=0, minute=0, second=0, microsecond=0)
    monday = today - timedelta(days=today.weekday())
    if m["wrel"] is not None or raw == "weekend":
        rel = m["wrel"] or "the"
        weeks = {"this": 0, "next": 1}.get(rel, -1 if rel != "the" or today.weekday() < 5 else 0)
        start = monday + timedelta(days=7 * weeks + 5)
        return [(start, start + timedelta(days=2))]
    target = _WEEKDAYS[m["day"] or m["ago"]]
    before = (today.weekday() - target) % 7  # days back to the latest such day, 0 = today
    if m["ago"] is not None:
        start = today - timedelta(days=(before or 7) + 7 * (max(1, min(int(m["n"]), 10**6)) - 1))
    elif m["rel"] in ("last", "past", "previous"):
        start = today - timedelta(days=before or 7)
    elif m["rel"] == "this":
        start = monday + timedelta(days=target)
    elif m["rel"] == "next":
        start = today + timedelta(days=(7 - before) or 7)
    else:
        start = today - timedelta(days=before)
    return [_period(start, "day")]


_RECURRING = _Lazy(rf"(?:the )?(?:(?P<rel>last|this|next|past|previous) )?(?P<name>{_SEASONS}|{_HOLIDAYS})"
                        rf"(?: of)?(?:,? (?P<year>[1-9]\d{{3}}))?")


def _recurring(raw: str, wall: datetime) -> list[Span] | None:
    """A season or a holiday (`_occurrence`): with a year, that year's; bare, the latest that has
    begun; "last", the latest that has ended; "this", the one under way, else this year's;
    "next", the first to begin after now."""
    m = _RECURRING.fullmatch(raw)
    if m is None:
        return None
    name = re.sub(r"^new years?(?:'s|\u2019s)? ", "new year ", " ".join(m["name"].split()))
    if m["year"]:
        return [_occurrence(name, int(m["year"]))]
    near = []
    for year in range(wall.year + 1, wall.year - 3, -1):
        try:
            near.append(_occurrence(name, year))
        except (OverflowError, ValueError):
            continue
    rel = m["rel"]
    if rel == "next":
        found = [s for s in reversed(near) if s[0] > wall][:1]
    elif rel in ("last", "past", "previous"):
        found = [s for s in near if s[1] <= wall][:1]
    elif rel == "this":
        found = [s for s in near if s[0] <= wall < s[1]] or [s for s in near if s[0].year == wall.year][-1:]
    else:
        found = [s for s in near if s[0] <= wall][:1]
    return found or None


# Territories (ISO 3166) south of the equator with four seasons: their seasons are six months on.
_SOUTHERN = frozenset("AR AU BR BW CL FK LS NA NZ PY SZ UY ZA".split())
_SEASON_MONTHS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # first month, north


def _occurrence(name: str, year: int) -> Span:
    """The span of season or holiday `name` (lower case, single spaces) named by `year`: a
    season the one whose middle month is in `year`; a holiday that year's (New Year's Eve ends
    on 1 January of the next). Raises ValueError or OverflowError past the calendar."""
    if name in _SEASON_MONTHS:
        first = _SEASON_MONTHS[name] + (6 if _territory() in _SOUTHERN else 0)
        first = (first - 1) % 12 + 1
        start = datetime(year - (first == 12), first, 1)  # December starts the season of the next year
        return start, _back(start, -3, "month")
    if name.startswith("easter") or name == "good friday":
        from dateutil.easter import easter  # Western (Gregorian) Easter Sunday

        sunday = datetime.combine(easter(year), datetime.min.time())
        first, days = {"easter": (-2, 4), "easter sunday": (0, 1), "easter monday": (1, 1),
                       "good friday": (-2, 1)}[name]
        return sunday + timedelta(days=first), sunday + timedelta(days=first + days)
    month, day, days = {"christmas": (12, 24, 3), "xmas": (12, 24, 3), "christmas eve": (12, 24, 1),
                        "christmas day": (12, 25, 1), "boxing day": (12, 26, 1), "new year eve": (12, 31, 1),
                        "new year day": (1, 1, 1), "halloween": (10, 31, 1)}[name]
    start = datetime(year, month, day)
    return start, start + timedelta(days=days)


def _locale() -> str:
    """The locale that names dates: LC_ALL, else LC_TIME, else LANG (POSIX precedence), as set
    ("en_GB.UTF-8"); "" when none is."""
    return next((os.environ[v] for v in ("LC_ALL", "LC_TIME", "LANG") if os.environ.get(v)), "")


def _territory() -> str:
    """The territory of `_locale` in upper case ("GB" of en_GB.UTF-8), "" when it names none."""
    name = _locale().split(".")[0].split("@")[0]
    return name.partition("_")[2].upper()


DATE_ORDERS = ("DMY", "MDY", "YMD")


def date_order() -> str | None:
    """The order of day, month and year in numeric dates: `MEMSAFE_DATE_ORDER` (DMY, MDY or YMD,
    any case) when set, else the locale's (`_locale`) as CLDR gives it (dateparser's copy of its
    data); None for no locale (unset, C, POSIX) or one CLDR does not know.

    Raises:
        InvalidInput: `MEMSAFE_DATE_ORDER` is set to something else.
    """
    chosen = settings.env().date_order or ""
    if chosen:
        if chosen.upper() not in DATE_ORDERS:
            raise InvalidInput(f"MEMSAFE_DATE_ORDER={chosen!r} is not one of {', '.join(DATE_ORDERS)}")
        return chosen.upper()
    return _order_of(_locale())


@functools.cache
def _order_of(locale: str) -> str | None:
    name = locale.split(".")[0].split("@")[0]
    if name in ("", "C", "POSIX"):
        return None
    language, _, territory = name.partition("_")
    from dateparser.languages.loader import default_loader  # ~0.1 s: only for a numeric date

    for code in ([f"{language}-{territory}"] if territory else []) + [language]:
        try:
            return default_loader.get_locale_map(locales=[code])[code].info.get("date_order")
        except (ValueError, KeyError):
            continue
    return None


_RELATIVE = _Lazy(r"(?P<day>today|tonight|yesterday)|(?P<n>\d{1,7}) (?P<ago>day|week|month|year)s? ago"
                       r"|(?P<rel>this|last|next) (?P<unit>week|month|year)"
                       rf"|(?P<month>{_MONTHS})(?:\.?,? (?P<of>[1-9]\d{{3}}))?|(?P<year>[1-9]\d{{3}})")
_MONTH_NUMBERS = {name: n for n, names in enumerate(
    ("january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul", "august aug",
     "september sep sept", "october oct", "november nov", "december dec"), start=1) for name in names.split()}


def _relative(raw: str, base: datetime) -> tuple[datetime, str] | None:
    """(naive date, period) of the commonest spans, as `_parse` (dateparser) reads them, computed
    without it: "today", "yesterday", "N units ago", "this/last/next week|month|year" (months
    and years moved as dateparser's relativedelta moves them, the day held to the month's last),
    a month ("May", "May 2023": this year's, last year's if it is still to come) and a year. A CLI
    recall that reads its first date with dateparser spends ~0.3-0.45 s on it (its import, then
    the timezone and locale expressions it compiles on first use), and these spans are most of
    what people write; tests/recall/test_recall_odd_input.py checks that both give the same windows.
    None for any other span, or one reaching past the calendar (years 1-9999)."""
    m = _RELATIVE.fullmatch(raw)
    if m is None:
        return None
    if m["year"] or m["month"]:
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
    """(naive date, period: day | week | month | year) of an English date expression as
    dateparser reads it relative to naive `base`, or None."""
    from dateparser.date import DateDataParser  # heavy import: only when a query names such a date

    settings = {"PREFER_DATES_FROM": "past", "RELATIVE_BASE": base, "RETURN_TIME_AS_PERIOD": True}
    data = DateDataParser(languages=["en"], settings=settings).get_date_data(raw)
    if data is None or data.date_obj is None:
        return None
    return data.date_obj.replace(tzinfo=None), data.period or "day"


def _guessed(raw: str, wall: datetime) -> list[Span] | None:
    """The span dateparser reads in `raw` (English; a clock time is its day), or None."""
    try:
        data = _parse(raw, wall)
    except Exception:  # dateparser raises assorted errors on odd input
        return None
    return None if data is None else [_period(*data)]


def _period(date: datetime, period: str) -> Span:
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


NEAR_LENGTHS = 7  # `around`: past this many window lengths a memory's `closeness` is below 1/128


def around(w: Window) -> Window:
    """The stretch of time whose memories `closeness` counts as near `w`: `w` widened by
    NEAR_LENGTHS of its length (at least a day) on each side. A window with no memory in it holds
    nothing to favour, and reading it would only pull the few nearest memories up: recall drops
    it (`recall.terms.parse_query`). Memories a few days from a named day stay near (people speak of
    a day in the days after it)."""
    length = max(w.end - w.start, timedelta(days=1)) * NEAR_LENGTHS
    return Window(clock.shift(w.start, -length), clock.shift(w.end, length), w.span)


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


# ---------------------------------------------------------------------------------------------
# One time typed whole: --since, --as-of, MCP as_of, the web page's "as of"


_ISO_DATE = _Lazy(r"\d{4}-\d{2}-\d{2}(?![\d-])")  # shaped like an ISO-8601 date, valid or not
_NUMBER = _Lazy(r"(?P<at>@)?(?P<sign>[+-])?(?P<int>\d+)(?:\.(?P<frac>\d+))?")
_AGO = _Lazy(rf"(?P<n>{_NUM}) (?P<unit>{_UNITS})s? ago")
_ONLY_NUMBERS = _Lazy(r"[\d\s/.,:+-]+")  # a numeric shape: read strictly or refused, never guessed
FUTURE_TOLERANCE = timedelta(seconds=1)
# The units a too-long bare number is likely counted in, by its digits (Unix time now has 10).
_TIMESTAMP_UNITS = {12: "milliseconds", 13: "milliseconds", 14: "milliseconds", 15: "microseconds",
                    16: "microseconds", 17: "microseconds", 18: "nanoseconds", 19: "nanoseconds"}


def parse_when(text: str, now: datetime, *, what: str = "time") -> datetime:
    """Read a time typed by a person (`--since`, `--as-of`, MCP `as_of`) as one instant, aware UTC.

    Accepts, relative to `now` (the memsafe clock, so MEMSAFE_NOW applies):
      * ISO-8601 with or without an offset (`2026-03-01T10:00:00+02:00`, `...Z`, week dates,
        `20260301`); without one it is local time (`TZ`); a date alone is local midnight;
      * any calendar name `find` reads, taken at its start in local time (see the module's
        rules): `today` (00:00), `yesterday`, `last week` (its Monday), `this month`, `May`,
        `2026` (a 4-digit number is a year), `3 December`, `12/03/2026` (the locale's order),
        `last Tuesday`, `the weekend`, `spring`, `Christmas 2025`;
      * a time counted back, as elapsed time: `3 days ago`, `the last 30 days`, `past week`, and
        what dateparser reads in any language (`24h`, `1h 30m`, `vor 3 Tagen`; across a DST
        change `24h` is 24 hours), and a clock time (`yesterday at 10:00`, local);
      * Unix time in seconds: `@1767225600`, or a bare number of 9-10 digits.

    The same instant written with different offsets gives the same result.

    Raises:
        InvalidTime: (a usage error, one line fit to show) empty; a bare number other than a
            year or Unix seconds (`5`, or 13 digits: milliseconds); a date that does not exist
            (`2026-02-30`, `31 April`, `31/04/2026`); a numeric date the locale leaves
            ambiguous (`03/12/2026` with no locale set); not understood; later than `now`.
    """
    raw = (text or "").strip()
    if not raw:
        raise InvalidTime(f"empty {what}")
    typed = ascii_digits(raw)  # "２０２３-０５-０１" is a date
    parsed = _instant(typed, raw, now, what)
    if parsed is None:
        raise InvalidTime(
            f"cannot read {what} {raw!r}; use ISO-8601 (2026-03-01T10:00:00+02:00), a date (2026-03-01), "
            "a relative time (3 days ago) or a calendar name (yesterday, last week)"
        )
    if parsed > clock.shift(now, FUTURE_TOLERANCE):
        raise InvalidTime(f"{what} {raw!r} is in the future ({parsed.isoformat()}); memsafe cannot look ahead")
    return parsed


def _instant(typed: str, raw: str, now: datetime, what: str) -> datetime | None:
    """`parse_when`'s reading, in the order of its list; None when nothing reads `typed`."""
    number = _NUMBER.fullmatch(typed)
    if number is not None and not (len(number["int"]) in (4, 8) and not (number["at"] or number["sign"]
                                                                          or number["frac"])):
        return _unix(number, raw, what)
    try:
        parsed = datetime.fromisoformat(typed.replace("Z", "+00:00"))  # strict ISO-8601 first (week dates too)
    except ValueError as exc:
        if _ISO_DATE.match(typed) or number is not None and len(number["int"]) == 8:
            raise InvalidTime(f"{what} {raw!r} is not a date ({exc}); use YYYY-MM-DD") from None
    else:
        try:
            if parsed.tzinfo is None and MINYEAR < parsed.year < MAXYEAR:
                return clock.from_local(parsed)  # local time: a DST change on that date applies
            return parsed.astimezone(timezone.utc)  # naive at an end of the calendar: raises
        except (ValueError, OverflowError):
            raise InvalidTime(f"{what} {raw!r} is out of range; use a date between the years 2 and 9998") from None
    folded = _folded(typed)
    if (rolling := counted_back(folded, now)) is not None:
        return rolling
    if (ago := _AGO.fullmatch(folded)) is not None:  # elapsed, not the local day `find` reads it as
        return _back_within(now.astimezone(timezone.utc), _count(ago["n"]), ago["unit"])
    try:
        days = _calendar(folded, now, guess=False)
    except _NoSuchDay as exc:
        raise InvalidTime(f"{what} {raw!r} names no day: {exc}") from None
    if days:
        if len(days) > 1:
            shown = " or ".join(f"{start.day} {start:%B %Y}" for start, _ in days)
            raise InvalidTime(f"{what} {raw!r} is ambiguous ({shown}); write YYYY-MM-DD, or set "
                              "MEMSAFE_DATE_ORDER (DMY, MDY) or LC_TIME (en_US reads month first, en_GB day first)")
        return clock.from_local(days[0][0])
    if _ONLY_NUMBERS.fullmatch(typed):
        return None
    return _dateparser(typed, now)


def _unix(number: re.Match, raw: str, what: str) -> datetime:
    """The instant of a Unix time in seconds (`@N`, or a bare number of 9-10 digits).

    Raises:
        InvalidTime: a bare number of other length (in another unit, or no time), or outside the
            years 1-9999.
    """
    digits = len(number["int"].lstrip("0") or "0")
    unit = _TIMESTAMP_UNITS.get(digits)
    if unit or not number["at"] and not 9 <= digits <= 10:
        if unit:
            raise InvalidTime(f"{what} {raw!r} looks like a Unix time in {unit}; memsafe reads seconds "
                              "(@1767225600) or ISO-8601 (2026-01-01T00:00:00Z)")
        raise InvalidTime(f"{what} {raw!r} is a bare number, no time; write a date (2026-03-01), a year (2026), "
                          "a relative time (5 days ago) or a Unix time in seconds (@1767225600)")
    try:
        seconds = float(f"{number['sign'] or ''}{number['int']}.{number['frac'] or 0}")
        return datetime.fromtimestamp(0, timezone.utc) + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        raise InvalidTime(f"{what} {raw!r} is outside the years 1-9999 as a Unix time in seconds") from None


def _dateparser(typed: str, now: datetime) -> datetime | None:
    """The long tail: what dateparser reads in `typed` (any language it knows), aware UTC, or None.
    A relative time without a clock time is elapsed time (`_elapsed`); a naive result and the
    relative base are local wall-clock time."""
    # ~0.1 s to import, ~0.3 s more on first use: only when nothing else reads it
    from dateparser.date import DateDataParser

    settings = {"PREFER_DATES_FROM": "past", "RELATIVE_BASE": clock.local_wall(now)}
    try:
        data = DateDataParser(settings=settings).get_date_data(typed)
    except Exception:  # dateparser raises assorted errors on odd input
        return None
    parsed = data.date_obj if data is not None else None
    if parsed is None:
        return None
    if parsed.tzinfo is not None:
        return parsed.astimezone(timezone.utc)
    return _elapsed(typed, now, data.locale) or clock.from_local(parsed)


def _elapsed(text: str, now: datetime, locale: str | None) -> datetime | None:
    """The instant a relative time without a clock time ("24 hours ago", "24h", "1h 30m", "vor 3
    Tagen"; `text` in dateparser's `locale`) names, counted back from `now` in elapsed time (aware
    UTC), or None for any other text. dateparser counts in local wall-clock time, so on the day a
    DST change falls in, "24h" reached 25 hours back while "the last 24 hours" reaches 24. A text
    naming a clock time ("yesterday at 10:00") gives the same instant from two bases a minute
    apart: it is local time, and None here.
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
    first, second = found
    if first is None or second is None or second - first != step:
        return None
    return first.replace(tzinfo=timezone.utc)
