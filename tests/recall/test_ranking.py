"""Ranking and recall: score fusion, graph context inside the budget, filters that never starve
the vector search, and queries that are only FTS syntax or stop-words."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memsafe import api, tokens
from memsafe.recall import candidates, packing, scoring, terms, weights
from memsafe.store.common.fulltext import holds_exact


def _returned(result) -> str:
    parts = [h.text for h in result.hits]
    if result.graph_context:
        parts.append(result.graph_context)
    return "\n".join(parts)


# -- fusion (pure) --------------------------------------------------------------------------------


Q = terms.Query("q", "q")


def test_fusion_is_absolute_a_weak_vector_only_hit_never_beats_a_full_keyword_match():
    # The old fusion gave the nearest neighbour 1.0 whatever its similarity.
    f = weights.Fusion()
    full = candidates.Candidate(1, bm25=1.0, coverage=1.0, similarity=0.3, words=10)
    weak_vector_only = candidates.Candidate(2, similarity=0.45, words=10)
    strong_vector_only = candidates.Candidate(3, similarity=0.98, words=10)
    below_floor = candidates.Candidate(4, similarity=f.min_similarity - 0.01, words=10)
    fused = scoring.fuse([full, weak_vector_only, strong_vector_only, below_floor], Q, f)
    assert fused[1] > fused[2] and 4 not in fused
    alone = scoring.fuse([weak_vector_only], Q, f)
    assert alone[2] == pytest.approx(fused[2])  # no score relative to the best hit


def test_fusion_chit_chat_naming_the_person_weighs_less_than_content():
    # "Jon: See ya Gina!" sits near any question naming Jon and Gina, and
    # says nothing the question does not: its words beyond the question's count.
    f = weights.Fusion()
    q = terms.parse_query("What is Jon opening with Gina downtown?", datetime(2023, 5, 1, tzinfo=timezone.utc))
    assert q.words == {"jon", "opening", "gina", "downtown"}
    greeting = candidates.Candidate(1, similarity=0.62, words=terms.content_words("Jon: See ya Gina!", 4, q.words))
    answer = candidates.Candidate(2, similarity=0.55, words=terms.content_words(
        "Jon: I lost my job at the bank, so I am opening a dance studio downtown next month.", 4, q.words))
    assert (greeting.words, answer.words) == (1, 4)  # "see"; lost, job, bank, dance, ...
    fused = scoring.fuse([greeting, answer], q, f)
    assert fused[2] > 2 * fused[1]


@pytest.mark.parametrize("text", [
    "Jon: See ya Gina!",
    "We squash commits before merging to main",
    "释放内存以后指针变成悬空状态，必须立即置为空值。",
    "jon jon JON gina opening " * 400 + "studio bank loan",  # the words the query holds come first
    "deploy " * 2000 + "x" * 5000,  # past the per-process cache's length
])
def test_content_words_beyond_the_query_are_the_words_the_query_does_not_hold(text):
    known = terms.query_words("Is Jon opening a studio with Gina?")
    assert known == {"jon", "opening", "studio", "gina"}
    beyond = terms.content_words(text + " " + " ".join(sorted(known)), 10_000) - len(known)
    for limit in (1, 4, 6, 64):
        assert terms.content_words(text, limit, known) == min(limit, beyond)


def test_date_words_are_not_query_terms_and_select_a_window():
    # A date in the query matched nothing and counted as missing terms.
    now = datetime(2023, 10, 20, 12, tzinfo=timezone.utc)
    q = terms.parse_query("What did Gina paint in May 2023?", now)
    assert "may" not in q.lexical_text.lower() and "2023" not in q.lexical_text
    [w] = q.windows
    assert (w.start, w.end) == (datetime(2023, 5, 1, tzinfo=timezone.utc), datetime(2023, 6, 1, tzinfo=timezone.utc))
    [w] = terms.parse_query("what did we decide last December", now).windows
    assert w.start == datetime(2022, 12, 1, tzinfo=timezone.utc)
    assert terms.parse_query("May I ask how deploys work?", now).windows == []
    in_may = candidates.Candidate(1, bm25=0.5, coverage=0.5, created_at=datetime(2023, 5, 9, tzinfo=timezone.utc))
    in_june = candidates.Candidate(2, bm25=0.5, coverage=0.5, created_at=datetime(2023, 8, 9, tzinfo=timezone.utc))
    fused = scoring.fuse([in_june, in_may], q, weights.Fusion())
    assert fused[1] > fused[2]



@pytest.mark.parametrize(("query", "start"), [
    ("what did we ship in the last 30 days?", datetime(2023, 9, 20, 12)),
    ("deploys over the past two weeks", datetime(2023, 10, 6, 12)),
    ("the last few days", datetime(2023, 10, 17, 12)),
    ("past month", datetime(2023, 9, 20, 12)),
    ("incidents of the previous 3 months", datetime(2023, 7, 20, 12)),
    ("last 2 years of releases", datetime(2021, 10, 20, 12)),
    ("what changed in the last 24 hours", datetime(2023, 10, 19, 12)),  # hours and minutes are units
    ("notes from the past hour", datetime(2023, 10, 20, 11)),
    ("errors in the last hour", datetime(2023, 10, 20, 11)),
    ("the last 30 minutes", datetime(2023, 10, 20, 11, 30)),
])
def test_a_time_counted_back_from_now_is_the_window_until_now(query, start):
    # "the last 30 days" and "the past two weeks" named no window (dateparser reads
    # neither) and stayed query terms; a calendar "last week" stays the week before this one.
    now = datetime(2023, 10, 20, 12, tzinfo=timezone.utc)
    q = terms.parse_query(query, now)
    [w] = q.windows
    assert w.start == start.replace(tzinfo=timezone.utc) and w.start < now < w.end <= now + timedelta(seconds=1)
    assert w.span.lower() in query.lower() and (w.span.lower() == query.lower() or w.span not in q.lexical_text)
    [week] = terms.parse_query("what broke last week", now).windows
    assert (week.start, week.end) == (datetime(2023, 10, 9, tzinfo=timezone.utc),
                                      datetime(2023, 10, 16, tzinfo=timezone.utc))
    assert terms.parse_query("on the last day of the trip", now).windows == []
    for idiom in ("a last minute change", "office hours", "the hour hand", "24 hours a day"):
        assert terms.parse_query(idiom, now).windows == [], idiom

@pytest.mark.parametrize(("text", "share"), [
    ("Jon: What dance were you doing at the recital?", 1.0),
    ("That is great! Where was it?", 13 / 27),  # by characters: 14 state, 13 ask
    ("Is it v1.2?", 1.0),  # a period inside a word ends no sentence
    ("We pinned v1.2. It works.", 0.0),
    ("你好。你呢？", 0.5),  # CJK sentences end with no space after them
    ("", 0.0),
    ("Should we move to Postgres?\n\nThe team decided: yes, in May.", 27 / 57),
])
def test_the_share_of_a_memory_that_asks_a_question(text, share):
    assert terms.question_share(text) == pytest.approx(share)


def test_a_memory_that_asks_ranks_below_the_answer_it_lends_relevance_to():
    # On LoCoMo a fifth of the turns ask something, and the turn that asked the
    # question ("What kind of pieces do you want to make?") was the most frequent wrong first hit:
    # it shares the query's words, not its answer. It keeps (1 − weight · asks) of its relevance,
    # after the context step has lent the turn after it its full relevance.
    asks, answer = candidates.Candidate(1, after=2, asks=1.0), candidates.Candidate(2, before=1)
    relevance = scoring.in_context([asks, answer], {1: 10.0, 2: 1.0}, 0.5)
    assert relevance == {1: 10.0 + 0.5 * 1.0, 2: 1.0 + 0.5 * 10.0}
    damped = scoring.answers_first(relevance, [asks, answer], 0.85)
    assert damped[2] == relevance[2] and damped[1] == pytest.approx(10.5 * 0.15) and damped[2] > damped[1]
    assert scoring.answers_first(relevance, [asks, answer], 0.0) is relevance
    half = candidates.Candidate(3, asks=0.5)
    assert scoring.answers_first({3: 4.0}, [half], 1.0) == {3: 2.0}


def test_common_words_are_those_half_the_store_holds_and_leave_the_vector_text():
    # A speaker's name in most memories steered the vector half (BM25 already gave it idf ≈ 0).
    df = {'"ben"': 60, '"flea"': 2, '"market"': 3, '"buy"': 9}
    assert terms.common_words(df, 100) == {"ben"}
    assert terms.common_words({'"ben"': 3}, 4) == set()  # a small store's counts do not decide
    assert terms.vector_text("What did Ben buy at Ben’s flea market?", {"ben"}) == "What did buy at flea market?"
    assert terms.vector_text("Ben and Ana?", {"ben", "ana"}) == "Ben and Ana?"  # nothing else left: kept whole
    assert terms.vector_text("flea market", set()) == "flea market"


def test_a_memory_one_relation_away_can_answer_first():
    # "is the person leading web-frontend available?": the answer names Priya, who leads
    # web-frontend; a memory sharing a word or two with the question came first because a hop
    # was capped below the best direct hit (own corpus graph R@1 0.647 -> 0.588).
    f = weights.Fusion()
    weak_direct = candidates.Candidate(1, bm25=0.18, coverage=0.19, similarity=0.35, words=9)  # the bench's figures
    answer = candidates.Candidate(2, similarity=0.26, words=9, hop=1.0)
    fused = scoring.fuse([weak_direct, answer], Q, f)
    assert fused[2] > fused[1]
    strong_direct = candidates.Candidate(3, bm25=1.0, coverage=1.0, similarity=0.6, words=10)
    fused = scoring.fuse([strong_direct, answer], Q, f)
    assert fused[3] > fused[2]  # a hop supports a full match, it does not displace it


def test_pack_returns_the_best_cut_and_an_excerpt_of_a_large_relevant_memory():
    # Nothing better is skipped silently.
    count = lambda t: len(t.split())  # noqa: E731
    cut = lambda t, n: " ".join(t.split()[:n])  # noqa: E731
    big = " ".join(["word"] * 100)
    packed = packing.pack([big, "small note"], 30, count, cut)
    assert [(p.index, p.truncated, p.tokens) for p in packed] == [(0, True, 28), (1, False, 2)]
    assert [p.index for p in packing.pack([big, "tiny note " * 10], 30, count, cut)] == [0]  # room made
    packed = packing.pack(["one liner", big, "other"], 60, count, cut)
    assert [(p.index, p.truncated) for p in packed] == [(0, False), (1, True), (2, False)]
    assert packing.unfitted(packed, 3) == ([], [])


def test_fts_terms_keep_identifiers_together():
    assert terms.fts_terms("what is v2.4.0 of checkout-api?") == ['"v2.4.0"', '"checkout-api"']
    assert terms.fts_terms("the and of") == ['"the"', '"and"', '"of"']
    assert terms.fts_terms('"*^') == []


def test_exact_terms_are_identifiers_versions_codes_and_single_cjk_characters():
    assert terms.exact_terms("what changed in v1.9") == ["v1.9"]
    assert terms.exact_terms("How does get_user_by_id fail?") == ["get_user_by_id"]
    assert terms.exact_terms("2.4.7 and deploy.yml, e2e, 2026, checkout-api") == ["2.4.7", "deploy.yml", "e2e"]
    assert terms.exact_terms("recall 引用") == []  # a word-index term now (bigram)
    assert terms.exact_terms("猫 v2.4 の 犬") == ["v2.4", "猫", "の", "犬"]  # below a bigram
    assert terms.exact_terms("the plain words only") == []


def test_cjk_runs_are_bigram_terms_of_the_word_index():
    """The query is cut as the word index cuts the text
    (`memsafe.store.common.tokenizer`): each CJK run of 2+ characters into overlapping bigrams."""
    assert terms.fts_terms("recall 引用") == ['"recall"', '"引用"']
    assert terms.fts_terms("悬空指针") == ['"悬空"', '"空指"', '"指针"']
    assert terms.fts_terms("使用redis缓存") == ['"使用"', '"redis"', '"缓存"']
    assert terms.fts_terms("翻訳する予定") == ['"翻訳"', '"訳す"', '"する"', '"る予"', '"予定"']
    assert terms.fts_terms("猫 the") == ['"the"']  # one character: `exact_terms`
    assert terms.fts_terms("引用 引用计数") == ['"引用"', '"用计"', '"计数"']  # no duplicates


def test_cjk_text_counts_its_words_for_the_vector_half():
    """A CJK run has no spaces: it counts one word per two characters, so a Chinese memory
    is not taken for a greeting by `vector_relevance`'s substance factor."""
    assert terms.content_words("释放内存以后指针变成悬空状态，必须立即置为空值。") == 11  # 7 + 4
    assert terms.content_words("好") == 1
    assert terms.content_words("Reference counting manages memory") == 4  # English unchanged
    assert terms.content_words("使用redis缓存") == 3


@pytest.mark.parametrize(
    "content, term, held",
    [
        ("Use get_user_by_id here.", "get_user_by_id", True),
        ("get_users_by_ids batches", "get_user_by_id", False),
        ("see get_user_by_ids", "get_user_by_id", False),
        ("deploy-v2.4.7-hotfix", "2.4.7", True),
        ("released 12.4.7", "2.4.7", False),
        ("v1.9.", "v1.9", True),
        ("v1.90 is out", "v1.9", False),
        ("V1.9 IS OUT", "v1.9", True),
        ("我们使用引用计数", "引用", True),
        ("我们使用计数", "引用", False),
    ],
)
def test_holds_exact_respects_identifier_edges(content, term, held):
    assert holds_exact(content, term) is held


def test_exact_first_lifts_holders_above_any_other_signal():
    fused = {1: 1.0, 2: 0.2, 3: 0.9, 4: 0.1}
    out = scoring.exact_first(fused, {2: 1, 4: 2})
    assert sorted(out, key=out.get, reverse=True) == [4, 2, 1, 3]
    assert min(out[2], out[4]) - max(out[1], out[3]) >= 0.2 - 1e-9  # > what recency etc. can add
    assert scoring.exact_first(fused, {}) is fused
    # on fusion's absolute scale too: a strong fused score without the identifier stays below
    # (the tier offset was 3/(3H+1), so a relevance above ~3 jumped it)
    out = scoring.exact_first({1: 0.5, 2: 4.0, 3: 19.0}, {1: 1})
    assert out[1] - max(out[2], out[3]) >= 1.0


# -- queries of syntax or stop-words only ------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ['"', "*", "^", "NEAR(", "AND OR NOT", "the of and", '" OR "a', "-", "()", "col:val", "…", "🙂"]
)
def test_syntax_or_stop_word_queries_do_not_error(store, query):
    api.remember(store, "AND OR NOT are FTS5 operators; the of and are stop-words", embed_now=False)
    for mode in ("lexical", "hybrid"):
        result = api.recall(store, query, mode=mode)
        assert result.tokens_used <= result.effective_budget


# -- budget -------------------------------------------------------------------------------------------


@pytest.fixture
def dense_graph(store):
    """Memories naming entities that carry many relations, so graph context wants more than its share."""
    names = [f"Service{i:02d}" for i in range(12)]
    for i, name in enumerate(names):
        api.remember(store, f"{name} handles part {i} of the order flow and calls {names[(i + 1) % 12]}",
                     embed_now=False)
    api.relate_many(
        store,
        [(a, f"calls_with_a_rather_long_relation_name_{k}", b) for k, a in enumerate(names) for b in names if a != b],
        create=True,
    )
    api.backfill(store, limit=None)
    return store


@pytest.mark.parametrize("budget", [1, 5, 20, 40, 80, 200, 2000])
def test_graph_context_never_pushes_recall_over_budget(dense_graph, budget):
    result = api.recall(dense_graph, "which service handles the order flow", budget=budget)
    assert result.tokens_used <= result.effective_budget <= budget
    assert result.tokens_used == sum(h.tokens for h in result.hits) + result.graph_tokens
    assert tokens.count(result.graph_context) == result.graph_tokens
    assert tokens.count(_returned(result)) <= budget
    assert result.hits  # always at least one memory
    if budget >= 200:
        assert result.graph_context  # there is room for graph context
        assert result.graph_tokens <= int(result.effective_budget * 0.15)


def test_unused_graph_share_flows_back_to_memories(store):
    for i in range(30):
        api.remember(store, f"deploy note {i}: the pipeline step {i} takes {i} minutes to run", embed_now=False)
    result = api.recall(store, "deploy pipeline step", budget=300, limit=30, mode="lexical")
    assert result.graph_context == ""
    # No relations at all: memories may use more than (1 - graph_share) of the effective budget.
    assert result.tokens_used > int(result.effective_budget * 0.85)


def test_graph_share_not_taken_from_a_memory_that_would_fit_whole(store):
    text = "The release checklist: " + ", ".join(f"step {i} done" for i in range(40))
    m = api.remember(store, text, embed_now=False)
    need = tokens.count(m.content)
    budget = int(need / 0.85) + 2  # effective budget just holds it, 15% less would not
    result = api.recall(store, "release checklist", budget=budget, mode="lexical")
    assert result.graph_context == ""
    assert [(h.memory.id, h.truncated) for h in result.hits] == [(m.id, False)]
    assert result.tokens_used <= result.effective_budget


# -- filters never starve the vector search ------------------------------------------------------------


@pytest.fixture(scope="module")
def big_small(tmp_path_factory, embedder):
    path = tmp_path_factory.mktemp("filters") / "memory.db"
    opened = api.open_store(str(path))
    s = opened.store
    for i in range(300):
        api.remember(s, f"deploy pipeline variant {i}: stage {i % 7} runs after build {i}", project="big",
                     tags=["rare"] if i in (17, 211) else [], embed_now=False)
    for i in range(5):
        api.remember(s, f"small project deploy pipeline note {i}", project="small", embed_now=False)
    api.backfill(s, limit=None)
    yield s
    s.close()


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_f12_project_filter_returns_limit(big_small, mode):
    result = api.recall(big_small, "deploy pipeline", project="small", limit=5, mode=mode)
    assert len(result.hits) == 5
    assert all(h.memory.project == "small" for h in result.hits)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_f12_tag_filter_returns_both(big_small, mode):
    result = api.recall(big_small, "deploy", all_projects=True, tags=["rare"], limit=10, mode=mode)
    assert sorted(h.memory.id for h in result.hits) == [18, 212]


def test_f12_vector_search_in_store_returns_k(big_small, embedder):
    qvec = embedder.embed_one("deploy pipeline").astype("float32").tobytes()
    scope = api.make_scope(project="small")
    assert len(big_small.vector_search(qvec, scope, 5)) == 5


# -- compatibility --------------------------------------------------------------------------------------


def test_recall_result_fields_and_render(store):
    from memsafe import render

    api.remember(store, "AlphaService depends on BetaService for tokens", embed_now=False)
    api.relate(store, "AlphaService", "depends_on", "BetaService")
    result = api.recall(store, "AlphaService")
    data = render.recall_dict(result)
    assert {"query", "budget", "effective_budget", "tokens_used", "mode", "scope", "notes", "results",
            "graph_context", "graph_tokens"} <= set(data)
    assert "AlphaService depends_on BetaService" in render.compact_recall(result)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_f12_time_filter_returns_the_recent_ones(store, monkeypatch, mode):
    monkeypatch.setenv("MEMSAFE_NOW", "2026-01-01T00:00:00Z")
    for i in range(60):
        api.remember(store, f"deploy pipeline note {i} from last year", embed_now=False)
    monkeypatch.setenv("MEMSAFE_NOW", "2026-06-01T12:00:00Z")
    recent = [api.remember(store, f"deploy pipeline change {i} this week", embed_now=False).id for i in range(3)]
    api.backfill(store, limit=None)
    result = api.recall(store, "deploy pipeline", since="2026-06-01T00:00:00Z", limit=10, mode=mode)
    assert sorted(h.memory.id for h in result.hits) == recent


def test_context_lifts_the_turns_next_to_a_relevant_turn_one_step_only():
    # scoring.in_context: turn 2 answers turn 1 (relevance 10) and gains 0.4 × 10; turn 3, two
    # steps away, gains only through turn 2's own relevance (none): never chained.
    cands = [candidates.Candidate(1, after=2), candidates.Candidate(2, before=1, after=3),
             candidates.Candidate(3, before=2), candidates.Candidate(4)]
    relevance = {1: 10.0, 4: 3.0}
    lifted = scoring.in_context(cands, relevance, 0.4)
    assert lifted == {1: 10.0, 2: 4.0, 4: 3.0}
    assert scoring.in_context(cands, relevance, 0.0) is relevance
    both = scoring.in_context(cands, {1: 10.0, 3: 5.0}, 0.5)
    assert both[2] == 5.0  # the larger neighbour counts, not their sum


def test_a_time_only_query_tiers_the_memories_inside_its_window_above_every_other():
    # `time_first` after fusion and context, so no lexical, vector or
    # neighbour's lift puts a memory outside the window before one inside it.
    now = datetime(2026, 12, 2, 10, tzinfo=timezone.utc)
    old = candidates.Candidate(1, bm25=0.9, coverage=1.0, created_at=datetime(2026, 10, 1, tzinfo=timezone.utc))
    new = candidates.Candidate(2, created_at=datetime(2026, 12, 2, 9, 30, tzinfo=timezone.utc))
    only = terms.parse_query("what did we do in the last 24 hours?", now)
    assert only.only_time and not terms.parse_query("login test in the last 24 hours", now).only_time
    tiered = scoring.time_first({1: 20.0, 2: 0.0}, [old, new], only, 3.0)
    assert tiered[2] >= tiered[1] + 1
    more = terms.parse_query("login test in the last 24 hours", now)
    assert scoring.time_first({1: 20.0, 2: 0.0}, [old, new], more, 3.0) == {1: 20.0, 2: 0.0}
    assert scoring.time_first({1: 20.0, 2: 0.0}, [old, new], only, 0.0) == {1: 20.0, 2: 0.0}  # time turned off
