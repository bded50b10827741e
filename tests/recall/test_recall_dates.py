"""Dates in every common form: each form a question names a day in is read as the right span of
the user's local calendar (numeric ones in the order of MEMSAFE_DATE_ORDER or the locale, else as
both days); a memory whose text mentions a day in one form answers a question naming it in
another, whenever it was stored; and a date that matches nothing still returns results."""

from __future__ import annotations

import json
import time as system_time
from datetime import date, datetime, time, timezone
from zoneinfo import ZoneInfo

import pytest

from memsafe import api, when
from memsafe.errors import InvalidInput
from memsafe.recall import dates

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: `store` tests run on both

UTC = timezone.utc
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)  # a Thursday; 3 December in every zone used here
STORED = "2026-06-01T10:00:00+00:00"  # when the memories below were written: far from the days they tell of


@pytest.fixture(autouse=True)
def no_locale(monkeypatch):
    """No locale names dates unless a test sets one (the machine's LANG must not decide)."""
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("MEMSAFE_DATE_ORDER", raising=False)
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


def _midnight(day: date, tz: str) -> datetime:
    """Local midnight of `day` in `tz`, aware UTC (zoneinfo: an independent reading of the zone)."""
    return datetime.combine(day, time(0), ZoneInfo(tz)).astimezone(UTC)


# (question, environment, [(first local day, the day after the last)]), asked at NOW
FORMS = [
    ("what happened on 3 December?", {}, [(date(2026, 12, 3), date(2026, 12, 4))]),
    ("what happened on Dec 3rd?", {}, [(date(2026, 12, 3), date(2026, 12, 4))]),
    ("what happened on the 3rd of December 2024?", {}, [(date(2024, 12, 3), date(2024, 12, 4))]),
    ("what happened on 03.12.2024?", {}, [(date(2024, 12, 3), date(2024, 12, 4))]),  # dots: day first
    ("what happened on 2024-12-03?", {}, [(date(2024, 12, 3), date(2024, 12, 4))]),
    ("what happened last Tuesday?", {}, [(date(2026, 12, 1), date(2026, 12, 2))]),
    ("what did we ship in spring?", {}, [(date(2026, 3, 1), date(2026, 6, 1))]),
    ("what did we ship in spring?", {"LC_TIME": "en_AU.UTF-8"}, [(date(2026, 9, 1), date(2026, 12, 1))]),
    # no locale: both readings, the month-first one first
    ("what happened on 12/03?", {}, [(date(2026, 12, 3), date(2026, 12, 4)), (date(2026, 3, 12), date(2026, 3, 13))]),
    ("what happened on 12/03?", {"LC_TIME": "en_US.UTF-8"}, [(date(2026, 12, 3), date(2026, 12, 4))]),
    ("what happened on 12/03?", {"LC_TIME": "en_GB.UTF-8"}, [(date(2026, 3, 12), date(2026, 3, 13))]),
    # the setting outranks the locale
    ("what happened on 12/03?", {"LC_TIME": "en_US.UTF-8", "MEMSAFE_DATE_ORDER": "dmy"},
     [(date(2026, 3, 12), date(2026, 3, 13))]),
    ("what happened on 12/03/2024?", {"MEMSAFE_DATE_ORDER": "MDY"}, [(date(2024, 12, 3), date(2024, 12, 4))]),
]


@pytest.mark.backends("sqlite")  # no store: the reading alone
@pytest.mark.parametrize("tz", ["UTC", "Pacific/Auckland", "America/Los_Angeles"])
@pytest.mark.parametrize("question, env, days", FORMS)
def test_every_form_of_a_date_is_the_right_span_of_the_users_calendar(zone, monkeypatch, tz, question, env, days):
    zone(tz)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    windows, _ = when.find(question, NOW)
    assert [(w.start, w.end) for w in windows] == [(_midnight(a, tz), _midnight(b, tz)) for a, b in days]


@pytest.mark.backends("sqlite")
def test_a_date_order_that_is_no_order_is_refused_with_its_name(monkeypatch):
    monkeypatch.setenv("MEMSAFE_DATE_ORDER", "day first")
    with pytest.raises(InvalidInput, match="MEMSAFE_DATE_ORDER='day first' is not one of DMY, MDY, YMD"):
        when.find("what happened on 12/03?", NOW)


# A memory's text mentioning 3 December 2024 in one form, and questions naming it in others.
MENTIONS = ["deploy on 2024-12-03", "deploy on 03.12.2024", "deploy on 3 December 2024", "deploy on Dec 3rd, 2024",
            "deploy on the 3rd of December", "deploy on 12/03/2024", "deploy on 2024/12/03"]
QUESTIONS = ["what happened on Dec 3rd?", "what happened on 2024-12-03?", "what happened on 3 December 2024?",
             "what happened on 03.12.2024?", "what happened on 12/03?", "what happened in December 2024?"]


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("text", MENTIONS)
@pytest.mark.parametrize("question", QUESTIONS)
def test_a_date_mentioned_in_one_form_matches_a_question_naming_it_in_another(monkeypatch, text, question):
    monkeypatch.setenv("LC_TIME", "en_US.UTF-8")
    at = datetime(2024, 12, 20, 9, tzinfo=UTC)  # "the 3rd of December" without a year: 2024's, before then
    named, _ = when.find(question, NOW)
    assert dates.matches(named, dates.mentions(text, at)), (text, question)


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("text", ["deploy on 2024-12-04", "deploy at 12:03 on Friday", "bumped to v12.03",
                                  "deploy on 3 November 2024", "a ratio of 12/03", "deploy on 2023-03-12"])
def test_a_text_naming_another_day_or_no_day_does_not_match(monkeypatch, text):
    monkeypatch.setenv("LC_TIME", "en_US.UTF-8")
    named, _ = when.find("what happened on 2024-12-03?", NOW)
    assert not dates.matches(named, dates.mentions(text, datetime(2024, 12, 20, tzinfo=UTC))), text


@pytest.mark.backends("sqlite")
def test_a_memorys_relative_words_count_from_its_own_event_time():
    named, _ = when.find("what happened on 2024-12-03?", NOW)
    said = datetime(2024, 12, 4, 15, tzinfo=UTC)
    assert dates.matches(named, dates.mentions("we deployed yesterday", said))
    assert not dates.matches(named, dates.mentions("we deployed yesterday", datetime(2024, 12, 9, 15, tzinfo=UTC)))


def _ids(result):
    return [h.memory.id for h in result.hits]


@pytest.fixture
def deploys(remember_at, monkeypatch):
    """Three deploy notes written on one day (STORED), each telling of another day, and a note
    holding numbers that only look like that day. Returns {name: id}; the clock is NOW."""
    ids = {
        "billing": remember_at(STORED, "Deploy of the billing service on 2024-12-03 went out without downtime.").id,
        "search": remember_at(STORED, "Deploy of the search service on 2024-11-20 needed a rollback.").id,
        "auth": remember_at(STORED, "Deploy of the auth service on 2025-02-14 rotated every session key.").id,
        "noise": remember_at(STORED, "Deploy window opens at 12:03 and the build is v12.03 of the service.").id,
    }
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    return ids


@pytest.mark.parametrize("question", ["what did we deploy on Dec 3rd?", "which deploy was on 03.12.2024?",
                                      "deploy on 3 December 2024", "service deploy 12/03/2024",
                                      "what happened on the 3rd of December?"])
@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_dated_question_finds_the_memory_of_that_day_first_in_any_form(store, deploys, question, mode):
    assert _ids(api.recall(store, question, mode=mode))[0] == deploys["billing"], question
    # the past reading of the store (as of now) reads the same
    assert _ids(api.recall_as_of(store, question, as_of=NOW, mode=mode))[0] == deploys["billing"], question


def test_a_day_written_without_its_zeros_is_found_for_a_question_naming_its_year(store, remember_at, monkeypatch):
    monkeypatch.setenv("LC_TIME", "en_US.UTF-8")
    target = remember_at(STORED, "Cut over the ledger database on 12/3/2024 after the freeze.").id
    remember_at(STORED, "Ledger database cut over plan drafted for Python 3.12 upgrade.")
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    for question in ("ledger cut over 2024-12-03", "ledger cut over on 3 December 2024"):
        assert _ids(api.recall(store, question, mode="lexical"))[0] == target, question


def test_a_question_naming_its_day_in_the_other_order_follows_the_locale(store, deploys, monkeypatch):
    monkeypatch.setenv("LC_TIME", "en_GB.UTF-8")  # 03/12/2024 is 3 December
    assert _ids(api.recall(store, "service deploy 03/12/2024"))[0] == deploys["billing"]
    monkeypatch.setenv("LC_TIME", "en_US.UTF-8")  # 02/14/2025 is 14 February
    assert _ids(api.recall(store, "service deploy 02/14/2025"))[0] == deploys["auth"]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_date_no_memory_tells_of_still_returns_the_memories_the_words_match(store, deploys, mode):
    for question in ("what did we deploy on 5 January 2020?", "service deploy on 07.07.2021", "deploy last Tuesday"):
        found = _ids(api.recall(store, question, mode=mode))
        assert len(found) >= 3 and set(found) >= {deploys["billing"], deploys["search"], deploys["auth"]}, question


def test_the_cli_recall_reads_a_date_in_another_form_than_the_memory(cli, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", STORED)
    assert cli("remember", "Froze the payments schema on 2024-12-03 for the audit.").exit_code == 0
    assert cli("remember", "Payments freeze rules: ask the payments team before any freeze.").exit_code == 0
    monkeypatch.setenv("MEMSAFE_NOW", NOW.isoformat())
    done = cli("recall", "when did we freeze payments, Dec 3rd?", "--mode", "lexical", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["results"][0]["content"] == "Froze the payments schema on 2024-12-03 for the audit."


@pytest.mark.backends("sqlite")
def test_a_flag_reads_a_numeric_date_in_the_order_set_and_names_the_setting_when_none_is(zone, monkeypatch):
    zone("UTC")
    with pytest.raises(InvalidInput, match="ambiguous .*MEMSAFE_DATE_ORDER"):
        when.parse_when("12/03/2026", NOW)
    monkeypatch.setenv("MEMSAFE_DATE_ORDER", "DMY")
    assert when.parse_when("12/03/2026", NOW) == datetime(2026, 3, 12, tzinfo=UTC)
    monkeypatch.setenv("MEMSAFE_DATE_ORDER", "MDY")
    assert when.parse_when("12/03/2026", NOW) == datetime(2026, 12, 3, tzinfo=UTC)
