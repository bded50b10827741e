"""Recall on odd input, through the real handlers on both backends, a real
CLI process and a real MCP stdio client: dates at the ends of the calendar and on Feb 29 (they
crashed every recall path), a query that is only a date (its leftover stop-words were searched),
and recall --as-of's limits (it took what recall refuses).

Times counted back from now ("the last 30 days"): a span cut out of the
middle of a word, counts of 4 digits or more, letters that only match ASCII ones ignoring case,
"the last 10 days of May 2023" read as the 10 days before now,
a clock at the last instant of the calendar (and --since, import, charts there), --since and
--as-of refusing what a query reads; and the memories of a window in every scope (held)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_server import is_error, text_of, with_session

from memsafe import api, when
from memsafe.errors import InvalidInput

pytestmark = pytest.mark.backends("sqlite", "postgres")

END = datetime.max  # a window reaching past 9999-12-31 ends at the last instant datetime holds


@pytest.mark.parametrize("text, now, start, end", [
    ("9999-12-31", "2026-12-02", datetime(9999, 12, 31), END),
    ("today", "9999-12-31T23:00:00", datetime(9999, 12, 31), END),
    ("this month", "9999-12-15", datetime(9999, 12, 1), END),
    ("this year", "9999-06-01", datetime(9999, 1, 1), END),
    ("in December", "9999-12-15", datetime(9999, 12, 1), END),
    ("December 9999", "2026-12-02", datetime(9999, 12, 1), END),  # was December of this year
    ("in May 1850", "2026-12-02", datetime(1850, 5, 1), datetime(1850, 6, 1)),  # was May of this year
    ("last February", "2024-02-29T12:00:00", datetime(2023, 2, 1), datetime(2023, 3, 1)),  # was ValueError
    ("last february", "2028-02-29", datetime(2027, 2, 1), datetime(2027, 3, 1)),
    ("last January", "0001-01-15", None, None),  # no January before year 1: no window
    ("the 2026-13-01 release", "2026-12-02", None, None),  # not January 13
    ("2026-02-29", "2026-12-02", None, None),
    ("2024-02-29", "2026-12-02", datetime(2024, 2, 29), datetime(2024, 3, 1)),
])
def test_a_date_at_the_ends_of_the_calendar_is_a_window_not_a_crash(text, now, start, end):
    # "9999-12-31" in any query raised OverflowError, and "last February" asked on
    # Feb 29 raised ValueError, in every recall path (CLI traceback, MCP tool error).
    at = datetime.fromisoformat(now).replace(tzinfo=timezone.utc)
    windows, _ = when.find(text, at)
    if start is None:
        assert windows == []
    else:
        assert [(w.start, w.end) for w in windows] == [(start.replace(tzinfo=timezone.utc),
                                                        end.replace(tzinfo=timezone.utc))]


def test_a_query_full_of_dates_reads_each_span_once_and_at_most_max_spans(monkeypatch):
    # A query repeating "in May 2023" 8,000 times (100,000 characters) read each span
    # with dateparser, 1-2 ms each: one recall took 13 s. Counted, not timed.
    reads: list[str] = []
    real = when._read
    monkeypatch.setattr(when, "_read", lambda span, now: reads.append(span) or real(span, now))
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    windows, rest = when.find(" ".join(["in May 2023"] * 8000) + " In  MAY 2023 deploys", now)
    assert len(reads) == 1 and len(windows) == 1 and rest == " ".join(["in"] * 8000) + " In deploys"
    reads.clear()
    many = " ".join(f"{n} days ago" for n in range(1, 41))
    windows, rest = when.find(many, now)
    assert len(reads) == len(windows) == when.MAX_SPANS
    assert rest == " ".join(f"{n} days ago" for n in range(when.MAX_SPANS + 1, 41))


def _rotations(store, monkeypatch) -> tuple[int, int]:
    """Two notes on the same subject, one in February 2023 and one in January 2024; now is
    2024-02-29. Returns their ids (February's first)."""
    monkeypatch.setenv("MEMSAFE_NOW", "2023-02-14T10:00:00+00:00")
    feb = api.remember(store, "Rotated the payment gateway keys after the audit.")
    monkeypatch.setenv("MEMSAFE_NOW", "2024-01-20T10:00:00+00:00")
    jan = api.remember(store, "Rotated the payment gateway keys again for the new vendor.")
    monkeypatch.setenv("MEMSAFE_NOW", "2024-02-29T12:00:00+00:00")
    return feb.id, jan.id


def test_recall_on_feb_29_finds_last_february_and_a_far_date_answers(store, monkeypatch):
    feb, jan = _rotations(store, monkeypatch)
    question = "which keys did we rotate last February?"
    for result in (api.recall(store, question),
                   api.recall_as_of(store, question, as_of="2024-02-29T11:00:00+00:00")):
        assert [h.memory.id for h in result.hits] == [feb, jan]
    for query in ("payment gateway keys 9999-12-31", "payment keys in December 9999"):
        assert {h.memory.id for h in api.recall(store, query).hits} == {feb, jan}


def test_a_query_that_is_only_a_date_does_not_search_its_stop_words(store, monkeypatch):
    # "in May 2023" searched its leftover "in" (a query of stop-words only searches
    # them), so every memory holding "in" was a full keyword match (relevance 16) and the time
    # the query named weighed nothing beside it.
    monkeypatch.setenv("MEMSAFE_NOW", "2024-01-10T10:00:00+00:00")
    for text in ("Logged in to the staging box in the morning.", "Tabs in the editor are set in settings."):
        api.remember(store, text)
    release = api.remember(store, "The May 2023 release shipped the billing dashboard.")
    monkeypatch.setenv("MEMSAFE_NOW", "2024-02-01T00:00:00+00:00")
    for query in ("in May 2023", "what did we do in May 2023?"):
        assert [h.memory.id for h in api.recall(store, query, mode="lexical").hits] == [release.id], query


@pytest.mark.parametrize("options, message", [
    ({"limit": 5000}, "limit must be a whole number from 1 to 1000, got 5000"),
    ({"limit": True}, "limit must be a whole number from 1 to 1000, got True"),
    ({"budget": 10**12}, "budget must be a whole number from 1 to 1e+06, got 1000000000000"),
    ({"budget": 2.5}, "budget must be a whole number from 1 to 1e+06, got 2.5"),
])
def test_recall_as_of_takes_the_limits_recall_takes(store, options, message):
    # recall --as-of (CLI, MCP recall with as_of) took a limit of 5000 or True and a
    # budget of 10**12, which recall refuses.
    api.remember(store, "The warehouse syncs stock every night.")
    now = datetime.now(timezone.utc)
    for call in (lambda: api.recall(store, "warehouse", **options),
                 lambda: api.recall_as_of(store, "warehouse", as_of=now, **options)):
        with pytest.raises(InvalidInput, match=message.replace("+", r"\+")):
            call()


@pytest.mark.backends("sqlite")  # the CLI process and the MCP server: the handlers are tested on both above
def test_cli_and_mcp_answer_dates_that_crashed_them(tmp_path, memsafe_proc, embedder):
    db = tmp_path / "db" / "memory.db"
    env = {"MEMSAFE_NOW": "2024-02-29T12:00:00+00:00", "MEMSAFE_DB": str(db)}
    assert memsafe_proc("remember", "Rotated the payment gateway keys.", env=env).returncode == 0
    for query in ("which keys did we rotate last February?", "keys 9999-12-31"):
        done = memsafe_proc("recall", query, "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert [r["content"] for r in json.loads(done.stdout)["results"]] == ["Rotated the payment gateway keys."]
    done = memsafe_proc("recall", "keys", "--as-of", "2024-02-29T12:00:00Z", "--limit", "5000", env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == "Error: limit must be a whole number from 1 to 1000, got 5000"

    async def body(session):
        queries = ("keys rotated last February", "keys 9999-12-31")
        found = [await session.call_tool("recall", {"query": q}) for q in queries]
        refused = await session.call_tool("recall", {"query": "keys", "as_of": "2024-02-29T12:00:00Z", "limit": 5000})
        return found, refused

    work = tmp_path / "srv"
    work.mkdir()
    found, refused = anyio.run(with_session, db, work, tmp_path / "home", tmp_path / "server.err", body,
                               {"MEMSAFE_NOW": env["MEMSAFE_NOW"]})
    for result in found:
        assert not is_error(result) and "Rotated the payment gateway keys." in text_of(result)
    assert is_error(refused) and "limit must be a whole number from 1 to 1000" in text_of(refused)


def test_a_fusion_weight_of_0_still_ranks_a_recall_of_that_half_alone(store):
    # weight_lexical 0 is allowed beside a non-zero weight_vector, but then
    # `--mode lexical` returned nothing (and weight_vector 0 emptied `--mode vector`).
    note = api.remember(store, "The warehouse syncs stock levels to the ERP every night.")
    api.remember(store, "Lunch order: two pizzas, one without cheese.")
    now = datetime.now(timezone.utc)
    for key, mode in (("weight_lexical", "lexical"), ("weight_vector", "vector")):
        api.config_set(store, key, "0")
        for result in (api.recall(store, "warehouse stock sync", mode=mode),
                       api.recall_as_of(store, "warehouse stock sync", as_of=now, mode=mode)):
            assert [h.memory.id for h in result.hits][:1] == [note.id], (key, result.notes)
            assert any(n.startswith(f"{key} is 0, which ranks nothing in a {mode}-only recall") for n in result.notes)
        api.config_reset(store, key)


def test_without_the_model_every_mode_falls_back_to_keywords(store, remember_at, db_path, monkeypatch, memsafe_proc):
    # Without the model, `recall --as-of … --mode vector` said "lexical results only"
    # and returned nothing (its BM25 list was never made), and with weight_lexical 0 every recall
    # without the model returned nothing.
    note = remember_at("2026-12-01T10:00:00+00:00", "The warehouse syncs stock levels to the ERP every night.")
    env = {"MEMSAFE_NO_MODEL": "1", "MEMSAFE_NOW": "2026-12-01T12:00:00+00:00"}
    for weight in ("16", "0"):
        api.config_set(store, "weight_lexical", weight)
        for mode in ("hybrid", "vector", "lexical"):
            for as_of in ((), ("--as-of", "2026-12-01T11:00:00Z")):
                done = memsafe_proc("--db", str(db_path), "recall", "warehouse stock", "--mode", mode, *as_of, "--json",
                                    env=env)
                assert done.returncode == 0, done.stderr
                result = json.loads(done.stdout)
                assert result["mode"] == "lexical" and [r["id"] for r in result["results"]] == [note.id], \
                    (weight, mode, as_of, result["notes"])


@pytest.mark.parametrize("query", ["σίσυφος_v2", "ΣΊΣΥΦΟΣ_V2", "Σίσυφος_v2"])
def test_a_greek_identifier_is_found_exactly_on_both_backends(store, query):
    # Python lower-cases a word-final Σ to ς, PostgreSQL's ILIKE to σ, so on PostgreSQL
    # the exact term `σίσυφος_v2` matched no memory, and the word-index hit then counted for
    # nothing (an exact term counts by its exact matches): recall returned nothing, SQLite the memory.
    upper = api.remember(store, "ΣΊΣΥΦΟΣ_v2 deploy moved to the new cluster.")
    lower = api.remember(store, "Σίσυφος_v2 rollback notes.")
    api.remember(store, "Plain filler about the office plant.")
    for mode in ("lexical", "hybrid"):
        assert {h.memory.id for h in api.recall(store, query, mode=mode).hits[:2]} == {upper.id, lower.id}, mode


# -- times counted back from now ---------------------------------------------------------

NOW13 = datetime(2024, 2, 29, 12, tzinfo=timezone.utc)


@pytest.mark.parametrize("query", [
    "when did the last junit run fail?",  # was June 2023, searching "when did the it run fail?"
    "notes of the last decade",  # was December 2023 and "notes of the ade"
    "agenda of the last monthly sync",  # was last month and "agenda of the ly sync"
    "in the past years we used Jenkins",  # was the past year and "in the s we used Jenkins"
    "the past weekday rota",
    "moved to the previous octal format",
    "it shipped 3 days agora",
    "build 2023-05-017",
])
def test_a_date_span_never_ends_inside_a_word(query):
    # "last" + a month's or a unit's first letters took the start of a word as a date and
    # left the rest of it as a query term.
    assert when.find(query, NOW13) == ([], query)


@pytest.mark.parametrize("query, span", [
    ("standup notes this monday's", "this monday"),
    ("what shipped last dec.", "last dec"),
    ("the past year-end close", "the past year"),
    ("yesterday, the deploy", "yesterday"),
    ("build 2023-05-01T10:00", "2023-05-01"),
])
def test_a_date_span_before_punctuation_is_still_read(query, span):
    assert [w.span for w in when.find(query, NOW13)[0]] == [span]


@pytest.mark.parametrize("query, start", [
    ("what changed in the last 1000 days?", datetime(2021, 6, 4, 12)),  # was no window: 1-3 digits only
    ("past 1000 months", datetime(1940, 10, 29, 12)),
    ("the last 99999 days", datetime(1750, 5, 17, 12)),
    ("the last \uff10\uff10\uff13\uff10 days", datetime(2024, 1, 30, 12)),  # fullwidth digits "0030"
    ("the last " + "9" * 5000 + " days", datetime.min),  # int() refuses more than 4,300 digits
    ("the last " + "0" * 5000 + "3 days", datetime(2024, 2, 26, 12)),
])
def test_a_count_back_of_any_length_is_the_window_until_now(query, start):
    [w] = when.find(query, NOW13)[0]
    assert (w.start, w.end) == (start.replace(tzinfo=timezone.utc), NOW13 + timedelta(microseconds=1))
    [ago] = when.find("1000 days ago", NOW13)[0]
    day = datetime(2021, 6, 4, tzinfo=timezone.utc)  # "1000 days ago" too (was no window)
    assert (ago.start, ago.end) == (day, day + timedelta(days=1))


@pytest.mark.parametrize("query, plain", [
    ("the la\u017ft 3 day\u017f", "the last 3 days"),  # long s: was no window, the span kept as query terms
    ("pa\u017ft wee\u212a", "past week"),  # Kelvin sign
    ("prev\u0131ous 3 months", "previous 3 months"),  # dotless i
    ("prev\u0130ous 3 months", "previous 3 months"),  # dotted capital I
    ("\uff12\uff10\uff12\uff13-\uff10\uff15-\uff10\uff11", "2023-05-01"),  # fullwidth: no date since 82eca3d
    ("\u0662\u0660\u0662\u0663-\u0660\u0665-\u0660\u0661", "2023-05-01"),  # Arabic-Indic digits
    ("\uff13 days ago", "3 days ago"),
])
def test_letters_and_digits_the_span_matches_read_as_their_ascii(query, plain):
    # These four letters match ASCII ones under re.IGNORECASE, and \d matches any decimal digit,
    # so the span was found; but lower() kept them and the span was not read (or, for an ISO date
    # in other digits, strptime refused it).
    [w] = when.find(query, NOW13)[0]
    [ascii_window] = when.find(plain, NOW13)[0]
    assert (w.start, w.end, w.span) == (ascii_window.start, ascii_window.end, query)


@pytest.mark.parametrize("query, start, end", [
    ("what shipped in the last week of March?", datetime(2023, 3, 25), datetime(2023, 4, 1)),  # was last week + March
    ("the last 10 days of May 2023", datetime(2023, 5, 22), datetime(2023, 6, 1)),  # was the 10 days before now + May
    ("incidents in the last 3 months of 2023", datetime(2023, 10, 1), datetime(2024, 1, 1)),
    ("the last 2 weeks of last year", datetime(2023, 12, 18), datetime(2024, 1, 1)),
    ("last month of 2023", datetime(2023, 12, 1), datetime(2024, 1, 1)),
    ("the last week of the last month", datetime(2024, 1, 25), datetime(2024, 2, 1)),
    ("the last 100 days in May 2023", datetime(2023, 5, 1), datetime(2023, 6, 1)),  # all of May: it is shorter
])
def test_the_last_units_of_a_date_are_the_end_of_that_date_not_a_time_before_now(query, start, end):
    windows, rest = when.find(query, NOW13)
    utc = timezone.utc
    assert [(w.start, w.end) for w in windows] == [(start.replace(tzinfo=utc), end.replace(tzinfo=utc))]
    assert not {"last", "days", "weeks", "months", "month", "week"} & set(rest.lower().split())


def test_the_last_days_of_a_month_rank_its_end_first(store, remember_at, monkeypatch):
    # "the last 10 days of May 2023" also named the 10 days before now, so last week's
    # deploy notes ranked with the ones of late May 2023.
    early = remember_at("2023-05-03T10:00:00+00:00", "Deploy notes: the billing service moved to the new cluster.")
    late = remember_at("2023-05-25T10:00:00+00:00", "Deploy notes: the billing service rolled back after the outage.")
    recent = remember_at("2024-02-25T10:00:00+00:00", "Deploy notes: the billing service scaled to four replicas.")
    monkeypatch.setenv("MEMSAFE_NOW", "2024-02-29T12:00:00+00:00")
    hits = api.recall(store, "billing deploy notes from the last 10 days of May 2023").hits
    assert [h.memory.id for h in hits][:2] == [late.id, early.id] and recent.id in [h.memory.id for h in hits]


def test_a_clock_at_the_ends_of_the_calendar_counts_back_without_overflow(store, remember_at, monkeypatch):
    # With the clock at 9999-12-31T23:59:59.999999 every time counted back from now
    # raised OverflowError (its window ended a microsecond after now), and so did `--since "3 days
    # ago"` and an import (a day of clock skew past now); at year 1 the store's charts did.
    last = datetime.max.replace(tzinfo=timezone.utc)
    [w] = when.find("the last few days", last)[0]
    assert (w.start, w.end) == (last - timedelta(days=3), last)
    assert when.parse_when("3 days ago", last) == last - timedelta(days=3)
    assert when.parse_when("the last 30 days", last) == last - timedelta(days=30)
    keys = remember_at("9999-12-30T00:00:00+00:00", "Rotated the payment gateway keys.")
    monkeypatch.setenv("MEMSAFE_NOW", "9999-12-31T23:59:59.999999+00:00")
    since = api.parse_when("3 days ago")
    for result in (api.recall(store, "payment keys in the last few days"),
                   api.recall(store, "payment keys", since=since),
                   api.recall_as_of(store, "payment keys rotated the past week", as_of=last)):
        assert [h.memory.id for h in result.hits] == [keys.id]
    monkeypatch.setenv("MEMSAFE_NOW", "0001-01-01T00:00:00+00:00")
    charts = api.store_charts(store)
    assert charts.recall_days == [("0001-01-01", 0)]


@pytest.mark.backends("sqlite")  # real processes: the handlers are tested on both backends above
def test_cli_and_mcp_at_the_last_instant_and_since_as_of_read_times_counted_back(tmp_path, memsafe_proc, embedder):
    db = tmp_path / "db" / "memory.db"
    env = {"MEMSAFE_NOW": "9999-12-30T00:00:00+00:00", "MEMSAFE_DB": str(db)}
    assert memsafe_proc("remember", "Rotated the payment gateway keys.", env=env).returncode == 0
    exported = tmp_path / "keys.jsonl"
    assert memsafe_proc("export", "-o", str(exported), env=env).returncode == 0
    env["MEMSAFE_NOW"] = "9999-12-31T23:59:59.999999+00:00"
    for args, tz in [(("payment keys in the last few days",), "UTC"),
                     (("payment keys", "--since", "3 days ago"), "UTC"),
                     (("payment keys", "--since", "3 days ago"), "Asia/Tokyo"),  # local time is past 9999
                     (("payment keys", "--since", "the last 30 days"), "UTC")]:  # was "cannot read --since time"
        done = memsafe_proc("recall", *args, "--json", env={**env, "TZ": tz})
        assert done.returncode == 0, (args, tz, done.stderr)
        assert [r["content"] for r in json.loads(done.stdout)["results"]] == ["Rotated the payment gateway keys."]
    done = memsafe_proc("recall", "payment keys", "--as-of", "the past two weeks", "--json", env=env)
    assert done.returncode == 0, done.stderr  # as of two weeks before: the memory was not made yet
    assert json.loads(done.stdout)["results"] == []
    done = memsafe_proc("--db", str(tmp_path / "other.db"), "import", str(exported), "--no-embed",
                        env={"MEMSAFE_NOW": "9999-12-31T12:00:00+00:00"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr

    async def body(session):
        calls = [{"query": "payment keys in the last few days"}, {"query": "payment keys", "as_of": "the past day"}]
        return [await session.call_tool("recall", call) for call in calls]

    work = tmp_path / "srv"
    work.mkdir()
    results = anyio.run(with_session, db, work, tmp_path / "home", tmp_path / "server.err", body,
                        {"MEMSAFE_NOW": env["MEMSAFE_NOW"]})
    for result in results:
        assert not is_error(result) and "Rotated the payment gateway keys." in text_of(result)


def test_since_and_as_of_read_a_time_counted_back_as_a_query_does(store, remember_at, monkeypatch):
    # A query read "the last 30 days", but `--since "the last 30 days"`, `--as-of "past
    # month"` and MCP's as_of refused them ("cannot read --since time").
    old = remember_at("2024-01-10T10:00:00+00:00", "Rotated the payment gateway keys after the audit.")
    new = remember_at("2024-02-20T10:00:00+00:00", "Rotated the payment gateway keys for the new vendor.")
    monkeypatch.setenv("MEMSAFE_NOW", "2024-02-29T12:00:00+00:00")
    assert api.parse_when("the last 30 days") == "2024-01-30T12:00:00.000000+00:00"
    assert api.parse_when("PAST  MONTH") == "2024-01-29T12:00:00.000000+00:00"
    since = api.parse_when("the last 30 days")
    assert [h.memory.id for h in api.recall(store, "payment keys", since=since).hits] == [new.id]
    assert [h.memory.id for h in api.recall_as_of(store, "payment keys", as_of="the past two weeks").hits] == [old.id]
    with pytest.raises(InvalidInput, match="cannot read as-of time 'the last days'"):
        api.recall_as_of(store, "payment keys", as_of="the last days")
    # Dates in other decimal digits (82eca3d refused them as "not a date"; dateparser had read them)
    fullwidth = "\uff12\uff10\uff12\uff14-\uff10\uff12-\uff10\uff11T10:00Z"  # 2024-02-01T10:00Z
    assert api.parse_when(fullwidth) == "2024-02-01T10:00:00.000000+00:00"
    assert api.parse_when("the last \u0663\u0660 days") == "2024-01-30T12:00:00.000000+00:00"


def test_the_memories_of_a_window_in_every_scope(store, monkeypatch):
    # Recall reads the memories created in a window through `Store.created_between` (an index
    # on SQLite and PostgreSQL): each scope a recall takes, on both backends.
    quoted, cjk = "o'brien \"q\"; DROP", "日本の計画"
    ids = []
    for at, project, kind, tags in [("2024-02-01T09", quoted, "fact", ["ci"]),  # 0: before the window
                                    ("2024-02-26T13", cjk, "fact", []),  # 1
                                    ("2024-02-27T09", None, "fact", ["ci"]),  # 2: global
                                    ("2024-02-28T09", quoted, "fact", []),  # 3: forgotten below
                                    ("2024-02-28T10", cjk, "task", ["ci"])]:  # 4
        monkeypatch.setenv("MEMSAFE_NOW", f"{at}:00:00+00:00")
        ids.append(api.remember(store, f"note of {at}", project=project, kind=kind, tags=tags, embed_now=False).id)
    api.forget(store, ids[3], scope=api.make_scope(project=quoted))
    monkeypatch.setenv("MEMSAFE_NOW", "2024-02-29T12:00:00+00:00")
    [w] = when.find("the last few days", NOW13)[0]  # from 2024-02-26T12:00

    def between(statuses=("active",), **scope):
        scope = dataclasses.replace(api.make_scope(**scope), statuses=list(statuses))
        return store.created_between(scope, w.start.isoformat(timespec="microseconds"),
                                     w.end.isoformat(timespec="microseconds"), 10)

    assert between(project=None, all_projects=True) == [ids[4], ids[2], ids[1]]  # latest first
    assert between(project=quoted) == [ids[2]]  # its own forgotten one out, the global one in
    assert between(project=quoted, statuses=("active", "forgotten")) == [ids[3], ids[2]]
    assert between(project=cjk, tags=["ci"]) == [ids[4], ids[2]]
    assert between(project=cjk, kinds=["fact"]) == [ids[2], ids[1]]
    assert between(project=None, all_projects=True, since="2024-02-27T10:00:00.000000+00:00") == [ids[4]]
    hits = api.recall(store, "what happened in the last few days?", project=quoted, include_forgotten=True,
                      mode="lexical").hits  # the query says nothing but its time: those memories alone
    assert {h.memory.id for h in hits} == {ids[3], ids[2]}


_RELATIVE_SPANS = ["today", "tonight", "yesterday", *(f"{rel} {unit}" for rel in ("this", "last", "next")
                                                      for unit in ("week", "month", "year")),
                   *(f"{n} {unit}{'s' if n > 1 else ''} ago" for n in (1, 2, 3, 12, 30, 400)
                     for unit in ("day", "week", "month", "year")),
                   *(f"{month}{tail}" for month in ("january", "feb", "may", "june", "sept", "sep", "december", "dec")
                     for tail in ("", " 2023", ", 1850", ". 9999")), "2023", "1850", "9999"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_RELATIVE_SPANS), st.datetimes(datetime(2, 1, 1), datetime(9998, 12, 31)))
@example("last month", datetime(2024, 3, 31, 12))
@example("1 year ago", datetime(2024, 2, 29, 23, 59))
@example("next week", datetime(9998, 12, 31))
@example("may", datetime(2026, 3, 31, 10))
@example("december", datetime(2026, 12, 2))
def test_the_commonest_spans_read_without_dateparser_give_dateparsers_windows(span, base):
    # Reading a first date with dateparser cost a CLI recall 0.3-0.45 s (its import,
    # then the timezone and locale expressions it compiles on first use). `_relative` computes
    # these spans itself; dateparser stays the reference.
    ours, theirs = when._relative(span, base), when._parse(span, base)
    assert ours is not None or theirs is None
    if ours is not None:
        assert theirs is not None and when._period(*ours) == when._period(*theirs), (ours, theirs)


def test_a_query_naming_the_commonest_times_never_imports_dateparser():
    # The CLI's cost of a date word (see above), counted in modules rather than timed.
    import subprocess
    import sys

    code = ("import sys; from datetime import datetime, timezone; from memsafe import when; "
            "now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc); "
            "ws = [when.find(q, now)[0] for q in ('what did we do yesterday?', 'deploys 3 days ago', 'last week', "
            "'this month', 'the last 30 days', '2026-11-30', 'in May 2023', 'in June', 'last December', "
            "'early 2024')]; "
            "assert all(len(w) == 1 for w in ws), ws; "
            "[when.parse_when(t, now) for t in ('2026-03-01', "
            "'2026-03-01T10:00:00+02:00', 'the last 30 days')]; "  # --since / --as-of
            "print(any(m.startswith('dateparser') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("text", ["the last hour-long meeting", "notes of the past week-long sprint",
                                  "the last 2 day-long outages", "this year-long project",
                                  "the past month-long freeze"])
def test_a_unit_joined_to_a_word_by_a_hyphen_names_no_time(text):
    # "the last hour-long meeting" (the latest meeting of an hour) named the
    # last hour, "the past week-long sprint" the past week: a unit in a compound adjective is no time.
    now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc)
    assert when.find(text, now) == ([], text)
    spans = [w.span for w in when.find("errors in the last hour - and last hour's logs", now)[0]]
    assert spans == ["the last hour", "last hour"]
    assert [w.span for w in when.find("the last week-end on call", now)[0]] == ["last week"]  # "-end": its end


def test_since_reads_no_plural_without_a_count_as_a_query_reads_none():
    # `--since "past hours"` or `"last hours"` was the last hour (and "past
    # days" the last day) while a query read no time in them; "the last days" was already refused.
    now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc)
    for text in ("past hours", "last hours", "past minutes", "the past days", "PAST  WEEKS"):
        assert when.find(text, now)[0] == [] and when.counted_back(text, now) is None, text
        with pytest.raises(InvalidInput, match="cannot read time"):
            when.parse_when(text, now)
    for text, back in [("past hour", timedelta(hours=1)), ("the last hour", timedelta(hours=1)),
                       ("the past 3 hours", timedelta(hours=3)), ("past minute", timedelta(minutes=1))]:
        assert when.parse_when(text, now) == now - back
        assert [w.start for w in when.find(text, now)[0]] == [now - back]
