"""Ranking and recall: score fusion, graph context inside the budget, filters that never starve
the vector search (F12), and queries that are only FTS syntax or stop-words."""

from __future__ import annotations

import pytest

from memsafe import api, retrieve, tokens


def _returned(result) -> str:
    parts = [h.text for h in result.hits]
    if result.graph_context:
        parts.append(result.graph_context)
    return "\n".join(parts)


# -- fusion (pure) --------------------------------------------------------------------------------


def test_fuse_convex_best_is_one_and_weak_vector_only_hits_dropped():
    lexical = [(1, -5.0), (2, -1.0)]
    vector = [(3, 0.9), (1, 0.5), (4, 0.1)]
    fused = retrieve.fuse(lexical, vector, weight_lexical=1.0, weight_vector=1.0, min_similarity=0.2)
    assert max(fused.values()) == pytest.approx(1.0)
    assert 4 not in fused  # vector-only and below min_similarity
    assert set(fused) == {1, 2, 3}


def test_fuse_vector_alone_keeps_its_order():
    fused = retrieve.fuse([], [(3, 0.15), (1, 0.12), (2, 0.05)], min_similarity=0.2)
    assert sorted(fused, key=lambda i: -fused[i]) == [3, 1, 2]


def test_fuse_coverage_makes_one_common_word_weak():
    # Memory 1 holds every query term, memory 2 one of four: the coverage power keeps 2 far below.
    fused = retrieve.fuse([(2, -3.0), (1, -2.5)], [], coverage={1: 1.0, 2: 0.25}, coverage_power=3.0)
    assert fused[1] == pytest.approx(1.0) and fused[2] < 0.05


def test_fuse_rrf_still_available():
    fused = retrieve.fuse([(1, -2.0), (2, -1.0)], [(2, 0.9), (1, 0.8)], method="rrf")
    assert set(fused) == {1, 2}


def test_fts_terms_keep_identifiers_together():
    assert retrieve.fts_terms("what is v2.4.0 of checkout-api?") == ['"v2.4.0"', '"checkout-api"']
    assert retrieve.fts_terms("the and of") == ['"the"', '"and"', '"of"']
    assert retrieve.fts_terms('"*^') == []


# -- queries of syntax or stop-words only ------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ['"', "*", "^", "NEAR(", "AND OR NOT", "the of and", '" OR "a', "-", "()", "col:val", "…", "🙂"]
)
def test_syntax_or_stop_word_queries_do_not_error(store, query):
    api.remember(store, "AND OR NOT are FTS5 operators; the of and are stop-words", embed_now=False)
    for mode in ("lexical", "hybrid"):
        result = api.recall(store, query, mode=mode, touch=False)
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
    result = api.recall(dense_graph, "which service handles the order flow", budget=budget, touch=False)
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
    result = api.recall(store, "deploy pipeline step", budget=300, limit=30, mode="lexical", touch=False)
    assert result.graph_context == ""
    # No relations at all: memories may use more than (1 - graph_share) of the effective budget.
    assert result.tokens_used > int(result.effective_budget * 0.85)


def test_graph_share_not_taken_from_a_memory_that_would_fit_whole(store):
    text = "The release checklist: " + ", ".join(f"step {i} done" for i in range(40))
    m = api.remember(store, text, embed_now=False)
    need = tokens.count(m.content)
    budget = int(need / 0.85) + 2  # effective budget just holds it, 15% less would not
    result = api.recall(store, "release checklist", budget=budget, mode="lexical", touch=False)
    assert result.graph_context == ""
    assert [(h.memory.id, h.truncated) for h in result.hits] == [(m.id, False)]
    assert result.tokens_used <= result.effective_budget


# -- F12: filters never starve the vector search --------------------------------------------------------


@pytest.fixture(scope="module")
def big_small(tmp_path_factory, embedder):
    path = tmp_path_factory.mktemp("f12") / "memory.db"
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
    result = api.recall(big_small, "deploy pipeline", project="small", limit=5, mode=mode, touch=False)
    assert len(result.hits) == 5
    assert all(h.memory.project == "small" for h in result.hits)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_f12_tag_filter_returns_both(big_small, mode):
    result = api.recall(big_small, "deploy", all_projects=True, tags=["rare"], limit=10, mode=mode, touch=False)
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
    result = api.recall(store, "AlphaService", touch=False)
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
    result = api.recall(store, "deploy pipeline", since="2026-06-01T00:00:00Z", limit=10, mode=mode, touch=False)
    assert sorted(h.memory.id for h in result.hits) == recent
