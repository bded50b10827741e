"""The current fact first among captured prompts (`scoring.current_first`), and a hyphenated
query word that no memory holds searched by its parts (`candidates.word_terms`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memsafe import api
from memsafe.recall import candidates, corrections, scoring, terms

T0 = datetime(2025, 2, 3, 9, 0, tzinfo=timezone.utc)


def _cand(i: int, day: int, *, source: str = "hook", key: str = "postgres", held=("postgres", "shop"),
          coverage: float = 0.5, changes: bool = False) -> candidates.Candidate:
    return candidates.Candidate(i, bm25=0.5, coverage=coverage, created_at=T0 + timedelta(days=day), source=source,
                                key=key, held=frozenset(held), changes=changes)


def _ids(ranked) -> list[int]:
    return [c.id for _, c in ranked]


QUERY = terms.Query("which Postgres version does the shop run on?", "which Postgres version does the shop run on?")


def test_a_later_prompt_that_says_the_value_changed_ranks_above_the_stale_one():
    stale, later = _cand(1, 0), _cand(2, 21, held=("postgres",), coverage=0.2, changes=True)
    ranked = [(1.0, stale), (0.9, _cand(3, -5, key="shop", held=("shop",))), (0.5, later)]
    out = scoring.current_first(ranked, QUERY, 10)
    assert _ids(out) == [2, 1, 3]
    assert [s for s, _ in out] == sorted((s for s, _ in out), reverse=True)  # scores stay in order


def test_a_later_prompt_that_says_nothing_changed_needs_a_near_score_and_as_many_query_words():
    stale = _cand(1, 0)
    weak = _cand(2, 21, held=("postgres",), coverage=0.2)  # no word of change, far less of the query
    assert _ids(scoring.current_first([(1.0, stale), (0.9, weak)], QUERY, 10)) == [1, 2]
    near = _cand(2, 21, coverage=0.5)
    assert _ids(scoring.current_first([(1.0, stale), (0.9, near)], QUERY, 10)) == [2, 1]


@pytest.mark.parametrize("why", ["note", "other key", "past question", "off", "time named"])
def test_the_order_stays_when_the_memories_are_not_captured_prompts_or_the_query_asks_for_the_past(why):
    stale, later = _cand(1, 0), _cand(2, 21, changes=True)
    query, depth = QUERY, 10
    if why == "note":  # a note's correction is `remember`'s link, not its time
        stale, later = _cand(1, 0, source="user"), _cand(2, 21, source="user", changes=True)
    elif why == "other key":  # the later one's rarest query word is not in the earlier one
        later = _cand(2, 21, key="version", held=("version",), changes=True)
    elif why == "past question":
        past = "which Postgres version did the shop first run on?"
        query = terms.Query(past, past)
    elif why == "off":
        depth = 0
    else:
        query = terms.parse_query("which Postgres version did the shop run on in February 2025?",
                                  T0 + timedelta(days=60))
        assert query.windows
    assert _ids(scoring.current_first([(1.0, stale), (0.9, later)], query, depth)) == [1, 2]


@pytest.mark.parametrize(("text", "says"), [
    ("We moved the database from Postgres 14 to 16 over the weekend", True),
    ("Joris: deploys are now Thursdays only", True),
    ("Testers want the reminders earlier: 3 days before instead of 2", True),
    ("We're switching from Postmark to Amazon SES", True),
    ("Free shipping above €40 order value, otherwise a flat €4.95", False),
    ("read buffer is 64 KiB right here, worth going bigger?", False),
])
def test_announces_change_reads_words_of_change(text, says):
    assert corrections.announces_change(text) is says


def test_recall_puts_the_current_prompt_above_the_stale_one_in_hybrid_and_lexical(remember_at, store):
    stale = remember_at("2025-02-03T09:12:00+00:00",
                        "I'm starting a new project: an online shop for a small roastery. Django 4.2 on Python 3.11, "
                        "Postgres 14, server-rendered templates. Can you propose a project layout for the shop?",
                        kind="conversation", source="hook", project="shop")
    remember_at("2025-02-10T10:00:00+00:00", "How should I cache the product pages of the shop, Redis or memcached?",
                kind="conversation", source="hook", project="shop")
    current = remember_at("2025-02-24T08:30:00+00:00",
                          "We moved the database from Postgres 14 to 16 over the weekend (pg_upgrade). Is there "
                          "anything I should re-check, like collations?", kind="conversation", source="hook",
                          project="shop")
    question = "which Postgres version does the shop run on?"
    for mode in ("hybrid", "lexical"):
        ids = [h.memory.id for h in api.recall(store, question, project="shop", mode=mode).hits]
        assert ids.index(current.id) < ids.index(stale.id), mode
    api.config_set(store, "current_depth", "0")  # the step off: the stale prompt, holding more of the query, leads
    ids = [h.memory.id for h in api.recall(store, question, project="shop", mode="lexical").hits]
    assert ids.index(stale.id) < ids.index(current.id)


def test_a_hyphenated_word_no_memory_holds_is_searched_by_its_parts(store):
    screen = api.remember(store, "rich Console.screen: Context manager to enable and disable 'alternative screen'.")
    api.remember(store, "rich Panel.fit: An alternative constructor that sets expand=False.")
    api.remember(store, "checkout-api reviews happen on Tuesdays")
    assert '"screen"' in candidates.word_terms(store, "switch to the alternate full-screen buffer")
    assert candidates.word_terms(store, "who reviews checkout-api") == ['"reviews"', '"checkout-api"']
    question = "switch the terminal to the alternate full-screen buffer"
    assert api.recall(store, question, mode="lexical").hits[0].memory.id == screen.id
    from memsafe import clock

    past = api.recall_as_of(store, question, as_of=clock.now_iso(), mode="lexical")
    assert past.hits[0].memory.id == screen.id  # the texts as they were: the same words searched
