"""Recall that generalises, and a large relevant memory kept under a small budget, through the
real handlers, the real model
and real SQLite files: the absolute similarity floor, no self-feeding, the time a query names, the
best memory kept when the budget is small, and `bench --dataset locomo` on a small fixture written
here (in the LoCoMo format; no LoCoMo text)."""

from __future__ import annotations

import json

import pytest

from memsafe import api, tokens
from memsafe.api import lifecycle

NOTES = [
    "The warehouse service keeps stock levels in Postgres and syncs them to the ERP every night at two.",
    "Retro: the team wants shorter stand-ups on Mondays.",
    "Buy oat milk and coffee beans on the way home.",
    "The holiday rota for December is pinned in the team channel.",
    "Grafana dashboards live in the ops repository under dashboards/.",
    "Our office plant needs water every Thursday.",
    "The new intern starts on the fourth floor next week.",
    "Lunch order: two pizzas, one without cheese.",
    "The printer on the third floor jams with thick paper.",
    "Parking permits are renewed in January.",
]


def test_min_similarity_is_an_absolute_floor_when_no_keyword_matches(store):
    # With min_similarity 0.5 and no keyword in common, unrelated notes at ~0.2
    # came back (the floor applied only beside a lexical list).
    for note in NOTES:
        api.remember(store, note)
    api.config_set(store, "min_similarity", "0.5")
    result = api.recall(store, "quantum chromodynamics lattice simulation")
    assert result.hits == []


# A chat between two people, one memory per turn, each turn starting with its speaker's name: the
# names are in most memories (written here for the test, in the manner of LoCoMo's conversations).
CHAT = [
    "Ben: Hey Ana! Long time no talk, how have you been?",
    "Ana: Busy week! I went to the flea market on Sunday and found an old brass compass for my desk.",
    "Ben: Nice, I love weekends like that.",
    "Ben: I went shopping downtown but did not get anything.",
    "Ben: Anything else new with you?",
    "Ana: Work is hectic, we ship the new release on Friday.",
    "Ben: Good luck with the release!",
    "Ben: I have been cooking a lot lately, mostly pasta.",
    "Ana: Pasta sounds great, send me a recipe.",
    "Ben: Sure thing, I will send it tonight.",
    "Ben: What are you up to this weekend?",
    "Ana: Hiking with my sister near the lake.",
    "Ben: That sounds lovely, take pictures!",
    "Ben: I bought new running shoes yesterday, they are so comfy.",
    "Ben: I am trying to run three times a week now.",
    "Ana: Good for you, I could never run that much.",
    "Ben: It gets easier, trust me.",
    "Ben: Talk soon, Ana!",
    "Ben: See ya!",
    "Ana: Bye Ben!",
    "Ben: Hey, I finally got a bargain at the mall today.",
    "Ben: My weekend plans fell through, so I stayed home.",
]


def test_a_name_most_memories_hold_does_not_steer_the_vector_half(store):
    # Adversarial questions: the question names the wrong person. MiniLM put every short
    # turn of the person named near it ("Ben: Hey, I finally got a bargain at the mall today."),
    # above the turn that answers; BM25 gives the name an idf of about 0 and found it. The vector
    # half now embeds the question without the words half the store holds.
    ids = [api.remember(store, turn).id for turn in CHAT]
    answer = ids[1]
    question = "What did Ben buy at the flea market?"
    assert api.recall(store, question).hits[0].memory.id == answer
    assert answer in [h.memory.id for h in api.recall(store, question, mode="vector").hits[:2]]


def test_a_short_decision_found_by_meaning_outranks_longer_notes_it_beats(store):
    """The README's `recall "how do we combine branches?"` put "We
    squash commits before merging to main", the vector search's first, below longer commit notes
    the search put after it: the chit-chat guard (`substance_words`) cut the short decision's
    vector weight to 4/6. A memory's words now count when the query does not hold them (a greeting
    naming the people asked about still says nothing), and four such words are enough."""
    for note in ("tests: consolidate merges a three-copy cluster in one run (cf24736)",
                 "docs: one scope rule on every read path, purge stubs and backups, import checks, consolidate "
                 "in one run; regenerated man pages",
                 "git hooks: version 3 (post-rewrite names where a rebase started); hook status and doctor tell "
                 "a v2 install to update",
                 "docs/mcp.md: the scope rule names the merged tools",
                 "scope: graph, get, history, export follow recall's scope (project + global)"):
        api.remember(store, note)
    decision = api.remember(store, "We squash commits before merging to main", kind="decision").id
    [first, *_] = api.recall(store, "how do we combine branches?").hits
    assert first.memory.id == decision and first.vector_rank == 1


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_an_exact_identifier_comes_first_in_every_mode(store, mode):
    # As the README words it ("in every mode"): a memory sharing four words with the
    # question outranked the one holding `v1.9` once fusion moved to absolute scales, and vector
    # mode never looked the identifier up.
    holder = api.remember(store, "Release v1.9 fixed the crash on start-up.")
    api.remember(store, "The checkout retry policy waits two seconds between the three retries of the payment call.")
    for note in NOTES[:4]:
        api.remember(store, note)
    for as_of in (None, "now"):
        question = "what did v1.9 change in the checkout retry policy for payment calls?"
        result = api.recall(store, question, mode=mode) if as_of is None else \
            api.recall_as_of(store, question, as_of=as_of, mode=mode)
        assert result.hits[0].memory.id == holder.id, as_of


def test_time_travel_ranks_by_the_same_steps_as_recall(store, remember_at, monkeypatch):
    # recall_as_of fused by reciprocal rank: every vector neighbour came back whatever its
    # similarity (min_similarity had no effect) and the month a query names counted for nothing.
    monkeypatch.setenv("MEMSAFE_NOW", "2023-05-01T10:00:00+00:00")
    for note in NOTES:
        api.remember(store, note)
    api.config_set(store, "min_similarity", "0.5")
    assert api.recall_as_of(store, "quantum chromodynamics lattice simulation", as_of="now").hits == []
    api.config_reset(store, "min_similarity")
    may = remember_at("2023-05-12T10:00:00+00:00", "Gina: The pottery class was great, I made a small vase.")
    september = remember_at("2023-09-20T10:00:00+00:00",
                            "Gina: May I bring a friend to the pottery class? Best class of 2023!")
    monkeypatch.setenv("MEMSAFE_NOW", "2023-10-01T10:00:00+00:00")
    question = "What did Gina make at the pottery class in May 2023?"
    expected = [h.memory.id for h in api.recall(store, question).hits]
    assert expected[0] == may.id and september.id in expected
    assert [h.memory.id for h in api.recall_as_of(store, question, as_of="now").hits] == expected


def test_recall_does_not_feed_itself_but_explicit_use_counts(store):
    # Each recall raised the access count of what it returned.
    m = api.remember(store, NOTES[0])
    for _ in range(3):
        assert api.recall(store, "warehouse stock levels").hits[0].memory.id == m.id
    after = api.get(store, m.id)
    assert after.access_count == 0 and after.last_accessed_at is None
    api.get(store, m.id, use=True)  # `memsafe get` and MCP get_memory
    assert api.get(store, m.id).access_count == 1


def test_a_memory_dated_in_the_month_the_query_names_comes_first(store, remember_at, monkeypatch):
    # "in May 2023" matched nothing and counted as missing terms, and the
    # memory's date was never compared with it (recency put the later one first).
    may = remember_at("2023-05-12T10:00:00+00:00", "Gina: The pottery class was great, I made a small vase.")
    september = remember_at("2023-09-20T10:00:00+00:00",
                            "Gina: May I bring a friend to the pottery class? Best class of 2023!")
    monkeypatch.setenv("MEMSAFE_NOW", "2023-10-01T10:00:00+00:00")
    result = api.recall(store, "What did Gina make at the pottery class in May 2023?")
    assert [h.memory.id for h in result.hits][:2] == [may.id, september.id]


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.parametrize("query", ["what happened last week?", "last week", "what did we change last week",
                                   "what changed in the past 9 days?"])
def test_a_query_that_names_only_a_time_finds_the_memories_of_that_time(store, monkeypatch, query):
    # Nothing in "what happened last week?" is a word or a meaning a memory holds, so
    # it found nothing. The memories created in the window it names are candidates (in scope
    # only), below any memory matching what the query says.
    times = {"2026-11-10T09:00:00+00:00": "Switched the payments queue from RabbitMQ to SQS.",
             "2026-11-24T09:00:00+00:00": "Alice joined the platform team and owns the deploy scripts.",
             "2026-11-27T09:00:00+00:00": "Bumped the Go toolchain to 1.23 in CI.",
             "2026-11-28T09:00:00+00:00": "Carol's onboarding notes for the billing project."}
    ids = {}
    for at, text in times.items():
        monkeypatch.setenv("MEMSAFE_NOW", at)
        ids[text] = api.remember(store, text, project="billing" if "Carol" in text else "web").id
    monkeypatch.setenv("MEMSAFE_NOW", "2026-12-02T10:00:00+00:00")  # a Wednesday: last week is Nov 23-29
    found = [h.memory.id for h in api.recall(store, query, project="web").hits]
    # the past 9 days (counted back from now; not read before) are Nov 23 10:00 to now:
    # the same memories of the web project as the calendar's last week
    last_week = {ids[times["2026-11-24T09:00:00+00:00"]], ids[times["2026-11-27T09:00:00+00:00"]]}
    assert last_week <= set(found) and ids[times["2026-11-28T09:00:00+00:00"]] not in found
    if query == "last week":  # nothing but the time: those of the time come first
        assert set(found[:2]) == last_week
    both = [h.memory.id for h in api.recall(store, "Go toolchain last week", project="web").hits]
    assert both[0] == ids[times["2026-11-27T09:00:00+00:00"]]  # what the query says comes first


@pytest.mark.backends("sqlite", "postgres")
def test_a_query_counting_hours_back_finds_the_memories_of_those_hours(store, remember_at, monkeypatch):
    # "the last 24 hours" and "past hour" named no window (hours were no unit): the
    # query found nothing, or whatever shared its words, however old.
    old = remember_at("2026-11-30T08:00:00+00:00", "Moved the nightly export to 02:00 UTC.")
    day = remember_at("2026-12-01T20:00:00+00:00", "Rotated the staging database password.")
    hour = remember_at("2026-12-02T09:40:00+00:00", "Fixed the flaky login test by waiting for the redirect.")
    monkeypatch.setenv("MEMSAFE_NOW", "2026-12-02T10:00:00+00:00")
    # nothing but the time: the memories of that time come first (others may follow by meaning)
    found = [h.memory.id for h in api.recall(store, "what did we do in the last 24 hours?").hits]
    assert set(found[:2]) == {day.id, hour.id}
    assert [h.memory.id for h in api.recall(store, "past hour").hits][:1] == [hour.id]
    assert [h.memory.id for h in api.recall(store, "the last 30 minutes").hits][:1] == [hour.id]
    since = lifecycle.parse_when("the last 16 hours")  # --since reads it the same way
    assert since.startswith("2026-12-01T18:00:00")
    hits = api.recall(store, "nightly export, staging password, login test", since=since).hits
    assert {h.memory.id for h in hits} == {day.id, hour.id}
    assert old.id in {h.memory.id for h in api.recall(store, "nightly export, staging password, login test").hits}


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_a_query_naming_only_a_time_puts_that_times_memories_before_old_ones_holding_its_words(
        store, remember_at, monkeypatch, mode):
    # An old memory holding the query's time words ("the last 24 hours",
    # "past hour") matched them lexically and by meaning, and came before every memory of that time.
    old = remember_at("2026-10-01T08:00:00+00:00", "Summary of the last 24 hours: what we did in the past hour.")
    turn = remember_at("2026-10-01T08:01:00+00:00", "We did a lot in the last 24 hours.", kind="conversation")
    day = remember_at("2026-12-01T20:00:00+00:00", "Rotated the staging database password.")
    hour = remember_at("2026-12-02T09:40:00+00:00", "Fixed the flaky login test by waiting for the redirect.")
    monkeypatch.setenv("MEMSAFE_NOW", "2026-12-02T10:00:00+00:00")
    for query, now_ids in [("what did we do in the last 24 hours?", {day.id, hour.id}), ("past hour", {hour.id}),
                           ("the LAST ２４ HOURS", {day.id, hour.id})]:
        for result in (api.recall(store, query, mode=mode),
                       api.recall_as_of(store, query, as_of="2026-12-02T10:00:00+00:00", mode=mode)):
            found = [h.memory.id for h in result.hits]
            assert set(found[:len(now_ids)]) == now_ids, (query, found, old.id, turn.id)
    # what the query says beyond the time still ranks by what it says
    found = [h.memory.id for h in api.recall(store, "summary of the last 24 hours", mode=mode).hits]
    assert found[0] == old.id


def test_the_best_memory_is_returned_cut_with_a_note_when_the_budget_is_small(store):
    # `recall "warehouse" --budget 30` returned a low-scoring memory instead.
    text = "The warehouse service " + " ".join(f"stores bin {i} stock in aisle {i}." for i in range(40))
    best = api.remember(store, text)
    api.remember(store, "Warehouse: door code changed.")
    result = api.recall(store, "warehouse service stock bins", budget=30)
    assert result.hits[0].memory.id == best.id and result.hits[0].truncated
    assert any(f"memory {best.id} cut" in n for n in result.notes)
    assert result.tokens_used <= result.effective_budget


def test_a_large_relevant_memory_appears_as_an_excerpt_not_silently_dropped(store):
    # A one-liner and a long design note on the same subject.
    short = api.remember(store, "Kafka retention is 7 days on the orders topic.")
    design = api.remember(store, "Kafka retention design note. " + " ".join(
        f"Section {i}: the retention of topic {i} is tuned by segment size and cleanup policy." for i in range(250)))
    assert tokens.count(api.get(store, design.id).content) > 2000
    result = api.recall(store, "kafka retention", budget=2000)
    shown = {h.memory.id: h for h in result.hits}
    assert short.id in shown and design.id in shown and shown[design.id].truncated
    assert result.tokens_used <= result.effective_budget


def _fixture() -> list[dict]:
    """Two short conversations in the LoCoMo format, written for this test."""
    def turns(session, lines):
        return [{"speaker": s, "dia_id": f"D{session}:{n}", "text": t} for n, (s, t) in enumerate(lines, 1)]

    conv = {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "10:00 am on 3 March, 2023",
        "session_1": turns(1, [("Ana", "Hi Ben!"), ("Ben", "Hey Ana, I adopted a grey cat named Pixel."),
                               ("Ana", "See ya Ben!")]),
        "session_2_date_time": "4:30 pm on 20 May, 2023",
        "session_2": turns(2, [("Ana", "I ran my first half marathon in Lisbon last weekend."),
                               ("Ben", "Well done Ana!")]),
    }
    qa = [
        {"question": "What is the name of Ben's cat?", "answer": "Pixel", "evidence": ["D1:2"], "category": 4},
        {"question": "Where did Ana run in May 2023?", "answer": "Lisbon", "evidence": ["D2:1; D9:9"], "category": 2},
        {"question": "What did Ana adopt?", "answer": "x", "evidence": ["D:1:2"], "category": 5},
        {"question": "No evidence here", "answer": "x", "evidence": ["D7:7"], "category": 1},
    ]
    return [{"sample_id": "t-1", "conversation": conv, "qa": qa}]


def test_bench_dataset_locomo_on_a_small_fixture(cli, tmp_path):
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(_fixture()), encoding="utf-8")
    r = cli("bench", "--dataset", "locomo", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["dataset"]["questions"] == {"overall": 2, "adversarial": 1}  # the one without evidence skipped
    assert data["dataset"]["turns"] == 5
    for mode in ("lexical", "vector", "hybrid"):
        row = data["modes"][mode]["overall"]
        assert set(row) == {"r@1", "r@3", "r@5", "r@10", "hit@5", "mrr@10"}
        assert data["modes"][mode]["latency_ms_p50"] > 0
    assert data["modes"]["hybrid"]["overall"]["r@5"] == 100.0


@pytest.mark.parametrize("args, message", [
    (["--dataset", "locomo"], "needs the dataset FILE"),
    (["--dataset", "squad", "x.json"], "--dataset takes locomo"),
])
def test_bench_dataset_bad_input_is_one_line(cli, args, message):
    r = cli("bench", *args)
    assert r.exit_code != 0 and message in r.stderr and "Traceback" not in r.stderr


def test_bench_dataset_not_locomo_is_one_line(cli, tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}', encoding="utf-8")
    r = cli("bench", "--dataset", "locomo", str(path))
    assert r.exit_code != 0 and "LoCoMo format" in r.stderr and "Traceback" not in r.stderr


# A conversation stored turn by turn (kind conversation, as `bench --dataset locomo` and a chat
# import store it): the answer to a question asked in the conversation shares no word with a
# query that repeats the question; the question's turn does.
TALK = [
    "Lea: I finally got a membership at the pottery studio on Elm Street this week.",
    "Max: That is great! What kind of pieces do you want to make at the studio?",
    "Lea: Mostly big serving bowls with a blue glaze, like my grandmother had.",
    "Max: Sounds lovely. My week was all meetings.",
    "Lea: The studio has a kiln that fits twenty pieces at once.",
    "Max: Do you want to make something for the office too?",
    "Lea: Maybe later, first I want to learn the wheel properly.",
    "Max: The studio on Elm Street also runs a class for kids, my niece loves it.",
    "Lea: What kind of music do you want at the party?",
    "Max: Something calm, the neighbours complain.",
]


def _talk(store, kind="conversation", **kw):
    return [api.remember(store, turn, kind=kind, **kw).id for turn in TALK]


def test_a_conversation_turn_is_found_through_the_question_it_answers(store):
    # Content over chit-chat, found on LoCoMo: the top hits were the turns that asked
    # the question ("What dance were you doing?"), and the turn after them, which answers it, was
    # far down. Each conversation turn now gains a share of the relevance of the turns around it.
    # The question's turn itself, which holds no answer, no longer comes first
    # (`scoring.answers_first`); it still lends the answer its relevance.
    ids = _talk(store)
    question, answer = ids[1], ids[2]
    query = "What kind of pieces does Lea want to make at the studio?"
    result = api.recall(store, query)
    hits = [h.memory.id for h in result.hits]
    assert answer in hits[:2] and question in hits and hits.index(answer) < hits.index(question)
    assert result.hits[hits.index(answer)].context_of == question  # why it ranked, for --json and the page
    assert [h.memory.id for h in api.recall_as_of(store, query, as_of="now").hits] == hits  # the same steps
    api.config_set(store, "weight_question", "0")  # a question ranked as an answer: it came first
    assert [h.memory.id for h in api.recall(store, query).hits][0] == question
    api.config_set(store, "weight_context", "0")  # the context, switched off: the answer falls back
    assert answer not in [h.memory.id for h in api.recall(store, query).hits[:3]]


def test_context_stays_inside_one_conversation_and_the_scope(store):
    # Only turns of kind conversation, in the same project, written close together, and visible in
    # the scope lend each other relevance: notes of other kinds, another project's turns, turns
    # outside a tag filter and forgotten turns never enter through a neighbour.
    query = "What kind of pieces does Lea want to make at the studio?"
    notes = _talk(store, kind="fact")
    assert notes[2] not in [h.memory.id for h in api.recall(store, query).hits[:3]]
    turns = _talk(store, project="pottery", tags=["chat"])
    answer = turns[2]
    api.forget(store, answer)
    found = [h.memory.id for h in api.recall(store, query, all_projects=True).hits]
    assert answer not in found
    api.restore(store, answer)
    api.update(store, answer, tags=[])
    tagged = api.recall(store, query, project="pottery", tags=["chat"])
    assert answer not in [h.memory.id for h in tagged.hits]
    assert answer in [h.memory.id for h in api.recall(store, query, project="pottery").hits[:3]]


def test_prompts_the_hooks_captured_lend_each_other_no_context(store):
    # One user's prompts to an assistant, captured by the agent-loop hooks (source hook, the
    # replies not stored), are one voice: a prompt does not answer the one before it, so it gains
    # none of that prompt's relevance. The same turns stored as a conversation among people do.
    query = "What kind of pieces does Lea want to make at the studio?"
    turns = _talk(store, project="people")
    hits = api.recall(store, query, project="people").hits
    assert turns[2] in [h.memory.id for h in hits[:2]] and any(h.context_of is not None for h in hits)
    prompts = _talk(store, project="prompts", source="hook")
    hits = api.recall(store, query, project="prompts").hits
    assert all(h.context_of is None for h in hits)
    assert prompts[2] not in [h.memory.id for h in hits[:3]]

