"""Times typed by people (`memsafe.when`): calendar names are spans of the local calendar (the zone
of TZ, DST days included) and a flag takes the start of the span a query reads; a date that does
not exist, a bare number, a Unix time in the wrong unit or an unreadable text is a usage error on
every surface that takes a time (`recall --since` and `--as-of`, `hook backfill --since`, the MCP
`recall` tool's `as_of`, the web page's "as of"); dates in every common form inside a recall query,
numeric ones in the locale's order, and a date no memory is near widens the search."""

from __future__ import annotations

import json
import os
import subprocess
import time as system_time
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import anyio
import pytest
from test_server import is_error, text_of, with_session

from memsafe import api, when
from memsafe.errors import InvalidInput, InvalidTime
from memsafe.recall import terms

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: `store` tests run on both

UTC = timezone.utc
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)  # a Thursday; 3 December in every zone used here
NZ = "Pacific/Auckland"  # 23:00 on 3 December at NOW (UTC+13)


@pytest.fixture(autouse=True)
def no_locale(monkeypatch):
    """No locale names dates unless a test sets one (the machine's LANG must not decide). LANG
    itself stays: a PostgreSQL server the session starts here takes its collation from it."""
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.setenv("LC_TIME", "C")


@pytest.fixture
def zone(monkeypatch):
    """`zone(name)`: this process's local time zone is `name` (TZ) for the rest of the test."""

    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        system_time.tzset()

    yield set_zone
    monkeypatch.undo()
    system_time.tzset()


def _repo(tmp_path, commits: list[tuple[str, str]]):
    """A git repository of empty commits, each (ISO-8601 time, message), without user or system config."""
    repo = tmp_path / "repo"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    for at, message in commits:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q",
                        "--allow-empty", "-m", message], check=True,
                       env={**env, "GIT_AUTHOR_DATE": at, "GIT_COMMITTER_DATE": at})
    return repo


def _midnight(day: date, tz: str) -> datetime:
    """Local midnight of `day` in `tz`, aware UTC (zoneinfo: an independent reading of the zone)."""
    return datetime.combine(day, time(0), ZoneInfo(tz)).astimezone(UTC)


# ---------------------------------------------------------------------------------------------
# Calendar names are local spans; a flag takes the start of the span a query reads


# (in a query, as a flag, first local day, the day after the last), asked at NOW
NAMES = [
    ("what did we do today?", "today", date(2026, 12, 3), date(2026, 12, 4)),
    ("deploys yesterday", "yesterday", date(2026, 12, 2), date(2026, 12, 3)),
    ("this week", "this week", date(2026, 11, 30), date(2026, 12, 7)),  # weeks start on Monday
    ("last week", "last week", date(2026, 11, 23), date(2026, 11, 30)),
    ("this month", "this month", date(2026, 12, 1), date(2027, 1, 1)),
    ("last month", "last month", date(2026, 11, 1), date(2026, 12, 1)),
    ("this year", "this year", date(2026, 1, 1), date(2027, 1, 1)),
    ("last year", "last year", date(2025, 1, 1), date(2026, 1, 1)),
    ("last Tuesday", "last Tuesday", date(2026, 12, 1), date(2026, 12, 2)),
    ("two Fridays ago", "two Fridays ago", date(2026, 11, 20), date(2026, 11, 21)),
    ("over the weekend", "the weekend", date(2026, 11, 28), date(2026, 11, 30)),
    ("last weekend", "last weekend", date(2026, 11, 28), date(2026, 11, 30)),
    ("on 3 December", "3 December", date(2026, 12, 3), date(2026, 12, 4)),
    ("on 4 December", "4 December", date(2025, 12, 4), date(2025, 12, 5)),  # the latest 4 December: last year's
    ("Dec 3rd, 2024", "Dec 3rd, 2024", date(2024, 12, 3), date(2024, 12, 4)),
    ("2024-12-03", "2024-12-03", date(2024, 12, 3), date(2024, 12, 4)),
    ("03.12.2024", "03.12.2024", date(2024, 12, 3), date(2024, 12, 4)),
    ("2024/12/03", "2024/12/03", date(2024, 12, 3), date(2024, 12, 4)),
    ("in May", "May", date(2026, 5, 1), date(2026, 6, 1)),
    ("last December", "last December", date(2025, 12, 1), date(2026, 1, 1)),
    ("in 2023", "2023", date(2023, 1, 1), date(2024, 1, 1)),
    ("in spring", "spring", date(2026, 3, 1), date(2026, 6, 1)),
    ("last winter", "last winter", date(2025, 12, 1), date(2026, 3, 1)),
    ("in winter", "winter", date(2026, 12, 1), date(2027, 3, 1)),  # under way
    ("in the summer of 2023", "summer 2023", date(2023, 6, 1), date(2023, 9, 1)),
    ("winter 2024", "winter 2024", date(2023, 12, 1), date(2024, 3, 1)),  # its January is in 2024
    ("at Christmas", "Christmas", date(2025, 12, 24), date(2025, 12, 27)),
    ("on Christmas Eve 2023", "Christmas Eve 2023", date(2023, 12, 24), date(2023, 12, 25)),
    ("at Easter 2024", "Easter 2024", date(2024, 3, 29), date(2024, 4, 2)),  # Good Friday to Easter Monday
    ("on New Year's Eve", "New Year's Eve", date(2025, 12, 31), date(2026, 1, 1)),
]


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("tz", ["UTC", NZ, "America/Los_Angeles"])
def test_calendar_names_are_local_spans_and_a_flag_takes_the_start_a_query_reads(zone, tz):
    zone(tz)
    for query, flag, first, after in NAMES:
        span = (_midnight(first, tz), _midnight(after, tz))
        assert [(w.start, w.end) for w in when.find(query, NOW)[0]] == [span], query
        assert when.parse_when(flag, NOW) == span[0], flag


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("tz, day", [
    ("America/Los_Angeles", date(2026, 3, 8)), ("America/Los_Angeles", date(2026, 11, 1)),
    (NZ, date(2026, 4, 5)), (NZ, date(2026, 9, 27)),
    ("America/Santiago", date(2026, 9, 6)),  # the clocks skip 00:00-01:00: the day starts at 01:00
])
def test_today_starts_at_local_midnight_on_a_day_the_clocks_change(zone, tz, day):
    zone(tz)
    start, end = _midnight(day, tz), _midnight(day + timedelta(days=1), tz)
    assert end - start != timedelta(hours=24)  # a day of 23 or 25 hours
    noon = datetime.combine(day, time(12), ZoneInfo(tz)).astimezone(UTC)
    [w] = when.find("what did we deploy today?", noon)[0]
    assert (w.start, w.end) == (start, end)
    assert when.parse_when("today", noon) == start
    next_noon = datetime.combine(day + timedelta(days=1), time(12), ZoneInfo(tz)).astimezone(UTC)
    [w] = when.find("what broke yesterday?", next_noon)[0]
    assert (w.start, w.end) == (start, end)
    assert when.parse_when("yesterday", next_noon) == start


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("tz", ["UTC", NZ])
def test_a_time_counted_back_is_elapsed_time_in_every_zone(zone, tz):
    zone(tz)
    for text, back in [("the last 30 days", timedelta(days=30)), ("past week", timedelta(days=7)),
                       ("3 days ago", timedelta(days=3)), ("two weeks ago", timedelta(days=14)),
                       ("24h", timedelta(hours=24)), ("the past 3 hours", timedelta(hours=3))]:
        assert when.parse_when(text, NOW) == NOW - back, text
    [w] = when.find("deploys in the last 30 days", NOW)[0]
    assert w.start == NOW - timedelta(days=30) and w.end > NOW
    # in a query, "3 days ago" is the local day that holds that instant
    [w] = when.find("what did we deploy 3 days ago?", NOW)[0]
    assert (w.start, w.end) == (_midnight(date(2026, 11, 30), tz), _midnight(date(2026, 12, 1), tz))


# ---------------------------------------------------------------------------------------------
# Every surface that takes a time: the same good and bad inputs


# (text, a fragment of the one-line reason) every surface refuses, asked at NOW with no locale
BAD_TIMES = [
    ("2026-02-30", "not a date"), ("2026-13-01", "not a date"), ("31 April", "no day"),
    ("30 February 2024", "no day"), ("31/04/2026", "no day"), ("13/13", "no day"),
    ("5", "bare number"), ("-7", "bare number"), ("86400", "bare number"),
    ("1764547200000", "milliseconds"), ("@1764547200000", "milliseconds"), ("1764547200000000", "microseconds"),
    ("03/12/2026", "ambiguous"), ("the day after never", "cannot read"), ("3 Decembr", "cannot read"),
    ("next week", "future"), ("2027", "future"), ("@1893456000", "future"),
]
GOOD_TIMES = ["today", "yesterday", "this week", "last week", "this month", "last month", "this year", "2026",
              "2026-12-01", "1 December", "13/03/2026", "last Tuesday", "3 days ago", "the last 30 days", "24h",
              "@1764547200", "1764547200", "2026-12-01T10:00:00+02:00"]


def test_the_instant_of_each_good_time_and_the_reason_for_each_bad_one():
    for text, reason in BAD_TIMES:
        with pytest.raises(InvalidTime, match=reason):
            when.parse_when(text, NOW)
    assert InvalidTime.exit_code == 2 and issubclass(InvalidTime, InvalidInput)
    assert when.parse_when("2026", NOW) == datetime(2026, 1, 1, tzinfo=UTC)  # a 4-digit number is a year
    assert when.parse_when("@1764547200", NOW) == when.parse_when("1764547200", NOW) == datetime(2025, 12, 1,
                                                                                                   tzinfo=UTC)
    assert when.parse_when("13/03/2026", NOW) == datetime(2026, 3, 13, tzinfo=UTC)  # only one order names a day
    for text in GOOD_TIMES:
        assert when.parse_when(text, NOW) <= NOW, text


@pytest.mark.backends("sqlite")
def test_every_cli_time_flag_refuses_a_bad_time_with_one_line_and_exit_2(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    assert cli("remember", "Rotated the staging keys").exit_code == 0
    repo = _repo(tmp_path, [("2026-12-01T10:00:00Z", "first")])
    recall = ("recall", "staging", "--mode", "lexical")
    flags = [(*recall, "--since"), (*recall, "--as-of"), ("hook", "backfill", "--repo", str(repo), "--since")]
    for flag in flags:
        for text, reason in BAD_TIMES:
            done = cli(*flag, text)
            lines = done.stderr.strip().splitlines()
            assert done.exit_code == 2 and len(lines) == 1 and reason in lines[0], (flag, text, done.stderr)
            assert "Traceback" not in done.output
        for text in GOOD_TIMES:
            done = cli(*flag, text)
            assert done.exit_code == 0, (flag, text, done.stderr)
    done = cli("recall", "staging", "--since", "31 April", "--json")
    assert done.exit_code == 2 and json.loads(done.stdout)["error"]["type"] == "InvalidTime"


@pytest.mark.backends("sqlite")
def test_the_mcp_recall_as_of_refuses_a_bad_time_as_a_tool_error(tmp_path, embedder):
    db = tmp_path / "db" / "memory.db"
    work = tmp_path / "srv"
    work.mkdir()

    async def body(session):
        await session.call_tool("remember", {"content": "Rotated the staging keys"})
        bad = [await session.call_tool("recall", {"query": "staging", "as_of": t}) for t, _ in BAD_TIMES]
        good = [await session.call_tool("recall", {"query": "staging", "as_of": t}) for t in GOOD_TIMES]
        return bad, good

    bad, good = anyio.run(with_session, db, work, tmp_path / "home", tmp_path / "server.err", body,
                          {"MEMSAFE_NOW": NOW.isoformat()})
    for (text, reason), result in zip(BAD_TIMES, bad):
        assert is_error(result) and reason in text_of(result) and len(text_of(result).splitlines()) == 1, text
    for text, result in zip(GOOD_TIMES, good):
        assert not is_error(result), (text, text_of(result))


@pytest.fixture
def page(db_path, embedder):
    """(client with the token cookie, store) of the web page on the test's store."""
    from starlette.testclient import TestClient

    from memsafe.ui import server

    opened = api.open_store(str(db_path))
    state = server.UiState(opened, 18391)
    client = TestClient(server.build_app(state), base_url="http://127.0.0.1:18391", follow_redirects=False)
    assert client.get("/", params={"token": state.token}).status_code == 303
    yield client, opened.store
    client.close()
    opened.store.close()


def test_the_web_pages_as_of_refuses_a_bad_time_with_its_reason(page, monkeypatch):
    client, store = page
    monkeypatch.setenv("MEMSAFE_NOW", "2026-11-01T00:00:00+00:00")
    m = api.remember(store, "Rotated the staging keys")
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    for text, reason in BAD_TIMES:
        shown = client.get(f"/m/{m.id}", params={"as_of": text})
        assert shown.status_code == 400 and reason in shown.text, text
    for text in GOOD_TIMES:
        shown = client.get(f"/m/{m.id}", params={"as_of": text})
        assert shown.status_code == 200 and "Rotated the staging keys" in shown.text.split('id="asof-text"')[1], text


@pytest.mark.backends("sqlite")
def test_the_web_pages_age_filters_mean_what_their_labels_mean_typed(monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    for key, (label, days, direction) in api.AGES.items():
        since, before = api.browsing._age_bounds(key)
        edge = since or before
        assert edge == (NOW - timedelta(days=days)).isoformat(timespec="microseconds"), key
        if direction == "newer":  # the label, typed as a query or a flag, names the same window
            assert [w.start for w in when.find(label, NOW)[0]] == [NOW - timedelta(days=days)], label
            assert when.parse_when(label, NOW) == NOW - timedelta(days=days), label


# ---------------------------------------------------------------------------------------------
# "today" is today in the user's zone on every surface: it includes this morning


NIGHT = "2026-12-02T10:00:00+00:00"  # 23:00 on 2 December in Auckland
MORNING = "2026-12-02T19:00:00+00:00"  # 08:00 on 3 December in Auckland (still 2 December in UTC)


def test_since_today_includes_this_morning_in_the_users_zone(store, remember_at, zone, cli, monkeypatch):
    zone(NZ)
    night = remember_at(NIGHT, "Rotated the staging keys after the evening deploy.").id
    morning = remember_at(MORNING, "Rotated the staging keys before the standup.").id
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())

    def since(text):
        return {h.memory.id for h in api.recall(store, "staging keys", since=api.parse_when(text), mode="lexical").hits}

    assert since("today") == {morning} and since("yesterday") == {night, morning}
    as_of = api.recall_as_of(store, "staging keys", as_of="today", mode="lexical")
    assert [h.memory.id for h in as_of.hits] == [night]  # what was known at midnight
    # the same words in a query name the same day
    assert [h.memory.id for h in api.recall(store, "staging keys today", mode="lexical").hits][0] == morning
    done = cli("recall", "staging keys", "--since", "today", "--mode", "lexical", "--json")
    assert [r["id"] for r in json.loads(done.stdout)["results"]] == [morning], done.stderr


@pytest.mark.backends("sqlite")
def test_a_served_as_of_today_reads_the_zone_the_server_runs_in(tmp_path, memsafe_proc, embedder):
    db = tmp_path / "db" / "memory.db"
    for at, text in ((NIGHT, "Rotated the staging keys after the evening deploy."),
                     (MORNING, "Rotated the staging keys before the standup.")):
        assert memsafe_proc("--db", str(db), "remember", text, env={"MEMSAFE_NOW": at}).returncode == 0
    work = tmp_path / "srv"
    work.mkdir()

    async def body(session):
        return await session.call_tool("recall", {"query": "staging keys", "as_of": "today"})

    found = anyio.run(with_session, db, work, tmp_path / "home", tmp_path / "server.err", body,
                      {"MEMSAFE_NOW": NOW.isoformat(), "TZ": NZ})
    assert not is_error(found) and "evening deploy" in text_of(found) and "standup" not in text_of(found)
    done = memsafe_proc("--db", str(db), "recall", "staging keys", "--since", "today", "--json",
                        env={"MEMSAFE_NOW": NOW.isoformat(), "TZ": NZ})
    assert [r["content"] for r in json.loads(done.stdout)["results"]] == [
        "Rotated the staging keys before the standup."], done.stderr


@pytest.mark.backends("sqlite")
def test_backfill_since_today_takes_this_mornings_commits_in_the_users_zone(cli, zone, monkeypatch, tmp_path):
    zone(NZ)
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    repo = _repo(tmp_path, [(NIGHT, "evening: retry the payment webhook"), (MORNING, "morning: pin the TLS version")])
    done = cli("hook", "backfill", "--repo", str(repo), "--since", "today", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["seen"] == 1, done.output


def test_the_web_pages_as_of_today_is_local_midnight(page, zone, monkeypatch):
    client, store = page
    zone(NZ)
    monkeypatch.setenv("MEMSAFE_NOW", MORNING)
    m = api.remember(store, "Rotated the staging keys before the standup.")
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    assert "did not exist yet" in client.get(f"/m/{m.id}", params={"as_of": "today"}).text
    assert "did not exist yet" not in client.get(f"/m/{m.id}", params={"as_of": "3 hours ago"}).text


# ---------------------------------------------------------------------------------------------
# Dates in every common form inside a query


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("env, days", [
    ({}, [date(2026, 12, 3), date(2026, 3, 12)]),  # no locale: both days
    ({"LC_TIME": "en_US.UTF-8"}, [date(2026, 12, 3)]),  # month first
    ({"LC_TIME": "en_GB.UTF-8"}, [date(2026, 3, 12)]),  # day first
    ({"LANG": "de_DE.UTF-8"}, [date(2026, 3, 12)]),
    ({"LC_ALL": "en_US.UTF-8", "LC_TIME": "en_GB.UTF-8"}, [date(2026, 12, 3)]),  # LC_ALL decides
])
def test_an_ambiguous_numeric_date_is_read_in_the_locales_order_or_as_both_days(monkeypatch, env, days):
    for var in ("LC_TIME", "LANG"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert [w.start for w in when.find("what did we ship on 12/03?", NOW)[0]] == [_midnight(d, "UTC") for d in days]
    assert [w.start for w in when.find("the 12/03/26 release", NOW)[0]] == [_midnight(d.replace(year=2026), "UTC")
                                                                             for d in days]
    # dots are day first, a year first is year-month-day, in every locale
    assert [w.start for w in when.find("03.12.2024 and 2024/03/12", NOW)[0]] == [
        _midnight(date(2024, 12, 3), "UTC"), _midnight(date(2024, 3, 12), "UTC")]
    # where the locale's order names no day, the other is read
    assert [w.start for w in when.find("on 13/03", NOW)[0]] == [_midnight(date(2026, 3, 13), "UTC")]
    if env:
        assert when.parse_when("12/03/2026", NOW) == _midnight(days[0], "UTC")


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("locale, spring, summer", [
    (None, (date(2026, 3, 1), date(2026, 6, 1)), (date(2026, 6, 1), date(2026, 9, 1))),
    ("en_AU.UTF-8", (date(2026, 9, 1), date(2026, 12, 1)), (date(2026, 12, 1), date(2027, 3, 1))),
    ("pt_BR.UTF-8", (date(2026, 9, 1), date(2026, 12, 1)), (date(2026, 12, 1), date(2027, 3, 1))),
])
def test_seasons_are_meteorological_in_the_hemisphere_of_the_locale(monkeypatch, locale, spring, summer):
    if locale:
        monkeypatch.setenv("LC_TIME", locale)
    [w] = when.find("what did we ship in spring?", NOW)[0]
    assert (w.start, w.end) == tuple(_midnight(d, "UTC") for d in spring)
    [w] = when.find("this summer", NOW)[0]
    assert (w.start, w.end) == tuple(_midnight(d, "UTC") for d in summer)


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("text", [
    "we upgraded to Python 3.12", "version 3.12.2024 of the SDK", "a ratio of 12/03 on the dashboard",
    "page 12/03 of the report", "you may go ahead", "March on with the migration", "we march 3 miles",
    "option 3 may break the build", "configure logging in Spring Boot", "filter in spring water",
    "the Easter egg in the CLI", "24/7 support", "3/4 of the tests pass", "his son may fall off his bike",
    "what aspect of autumn is beautiful", "build 1.3.12.2024", "see docs/12/03/intro", "v3.12.2024",
])
def test_numbers_and_words_that_only_look_like_dates_name_no_time(text):
    assert when.find(text, NOW) == ([], text)


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("text, first, after", [
    ("what did we ship on may 5?", date(2026, 5, 5), date(2026, 5, 6)),
    ("May 5 release notes", date(2026, 5, 5), date(2026, 5, 6)),
    ("the 5th of may outage", date(2026, 5, 5), date(2026, 5, 6)),
    ("In May we moved", date(2026, 5, 1), date(2026, 6, 1)),
    ("deploys in spring, then", date(2026, 3, 1), date(2026, 6, 1)),
    ("at Christmas we froze deploys", date(2025, 12, 24), date(2025, 12, 27)),
    ("what changed on 13/04?", date(2026, 4, 13), date(2026, 4, 14)),  # only one order names a day
    ("towards the end of summer 2023", date(2023, 8, 1), None),
])
def test_dates_in_context_are_still_read(text, first, after):
    [w] = when.find(text, NOW)[0]
    assert w.start.date() == first and (after is None or w.end == _midnight(after, "UTC")), w


def _ids(result):
    return [h.memory.id for h in result.hits]


def test_a_numeric_date_in_a_query_ranks_the_memories_of_its_day_first(store, remember_at, monkeypatch):
    march = remember_at("2026-03-12T10:00:00+00:00", "Released the billing service to all regions.").id
    december = remember_at("2026-12-03T09:00:00+00:00", "Released the billing service hotfix.").id
    other = remember_at("2026-07-01T10:00:00+00:00", "Released the billing service dashboard.").id
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    assert set(_ids(api.recall(store, "billing release on 12/03"))[:2]) == {march, december}
    monkeypatch.setenv("LC_TIME", "en_GB.UTF-8")
    assert _ids(api.recall(store, "billing release on 12/03"))[0] == march
    monkeypatch.setenv("LC_TIME", "en_US.UTF-8")
    assert _ids(api.recall(store, "billing release on 12/03"))[0] == december
    assert _ids(api.recall(store, "billing release in summer"))[0] == other


def test_a_date_no_memory_is_near_widens_the_search_to_its_words(store, remember_at, monkeypatch):
    # No memory was made near 3 December 2024: the date selects no time, and its words are searched
    # as words, so the memory that names that day comes first (the date's words were dropped, and
    # the latest memory holding the rest came first).
    names = remember_at("2026-06-01T10:00:00+00:00", "The billing freeze begins on 3 December 2024 for the audit.").id
    remember_at("2026-06-20T10:00:00+00:00", "Billing freeze lifted for the hotfix release.")
    remember_at("2026-11-30T10:00:00+00:00", "Billing freeze rules: no deploys on Fridays.")
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    for mode in ("hybrid", "lexical"):
        assert _ids(api.recall(store, "billing freeze 3 December 2024", mode=mode))[0] == names, mode
        assert _ids(api.recall_as_of(store, "billing freeze 3 December 2024", as_of=NOW, mode=mode))[0] == names
    # a date near memories still selects its time
    [kept] = terms.parse_query("billing freeze 3 December 2024", NOW, lambda w: True).windows
    assert kept.span == "3 December 2024"


@pytest.mark.backends("sqlite")
def test_locomo_reads_the_dates_its_questions_name_in_the_calendar_of_its_sessions(zone):
    # session times are written without a zone and read as UTC: so is "20 May 2023" in a question
    from memsafe import clock
    from memsafe.bench import locomo

    zone(NZ)
    at = locomo.session_time("4:30 pm on 20 May, 2023")
    with locomo._now(at):
        [w] = when.find("Where did Ana run on 20 May 2023?", clock.now())[0]
    assert (w.start, w.end) == (datetime(2023, 5, 20, tzinfo=UTC), datetime(2023, 5, 21, tzinfo=UTC))
    assert os.environ["TZ"] == NZ and when.find("on 20 May 2023", NOW)[0][0].start == _midnight(date(2023, 5, 20), NZ)
