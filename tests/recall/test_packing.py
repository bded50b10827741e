"""A relevant memory larger than the budget never disappears silently: the repro (a
one-line note on Kafka retention and a ~2,700-token design note on the same subject) through the
handler (both backends, recall and recall --as-of), the real CLI process (text and --json), the
MCP server over stdio and the local page. The budget promise holds: the best hit always shows,
cut when it alone does not fit, and the result names what did not fit and how large it is."""

from __future__ import annotations

import json
import os
import sys

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memsafe import api, tokens
from memsafe.recall import packing

pytestmark = pytest.mark.backends("sqlite", "postgres")

SHORT = "Kafka retention is 7 days on the orders topic."
TOPICS = ["orders", "payments", "audit", "clickstream", "inventory", "shipping", "refunds", "search"]


def design_note() -> str:
    """About 2,700 tokens (cl100k_base) of design prose on Kafka retention, one section per topic."""
    parts = ["Kafka retention design note."]
    n = 0
    while tokens.count(" ".join(parts)) < 2700:
        topic = TOPICS[n % len(TOPICS)]
        parts.append(f"Section {n}: the {topic} topic keeps its segments for {n % 9 + 1} days; compaction runs "
                     f"nightly, and the cleanup policy of {topic} is reviewed by the platform team every quarter.")
        n += 1
    return " ".join(parts)


@pytest.fixture
def kafka(store):
    short = api.remember(store, SHORT)
    design = api.remember(store, design_note())
    assert 2700 <= tokens.count(api.get(store, design.id).content) < 2800
    return store, short, design


def test_the_design_note_shows_as_an_excerpt_in_the_default_budget(kafka):
    store, short, design = kafka
    result = api.recall(store, "kafka retention")  # the default budget: 2,000 x 0.85 = 1,700 tokens
    shown = {h.memory.id: h for h in result.hits}
    assert short.id in shown and not shown[short.id].truncated
    assert design.id in shown and shown[design.id].truncated  # was: 11 of 1,700 tokens used, silence
    assert result.tokens_used <= result.effective_budget and result.tokens_used > result.effective_budget // 2
    assert any(n.startswith(f"memory {design.id} cut to ") for n in result.notes), result.notes


def test_a_match_too_large_for_what_is_left_is_named_with_its_size(kafka):
    store, short, design = kafka
    result = api.recall(store, "kafka retention", budget=40)  # 34 tokens: the one-liner, then too little for an excerpt
    assert [h.memory.id for h in result.hits] == [short.id]
    size = tokens.count(api.get(store, design.id).content)
    assert f"lower-ranked matches did not fit the budget: {design.id} ({size:,} tokens)" in " ".join(result.notes)


def test_recall_as_of_names_what_it_cut_or_left_out(kafka):
    store, short, design = kafka
    result = api.recall_as_of(store, "kafka retention", as_of=api.get(store, design.id).created_at, budget=40)
    assert [h.memory.id for h in result.hits] == [short.id]
    assert any("did not fit the budget" in n and str(design.id) in n for n in result.notes), result.notes
    result = api.recall_as_of(store, "kafka retention", as_of=api.get(store, design.id).created_at)
    assert any(n.startswith(f"memory {design.id} cut to ") for n in result.notes), result.notes


def test_the_best_hit_alone_too_large_is_returned_cut(store):
    design = api.remember(store, design_note())
    result = api.recall(store, "kafka retention", budget=100)
    assert [h.memory.id for h in result.hits] == [design.id] and result.hits[0].truncated
    assert result.tokens_used <= result.effective_budget


@pytest.mark.backends("sqlite")  # the handler above, here through the real CLI process and MCP server
def test_every_path_shows_the_excerpt_or_names_what_was_left_out(kafka, db_path, memsafe_proc, tmp_path):
    store, short, design = kafka
    r = memsafe_proc("--db", str(db_path), "recall", "kafka retention", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [(h["id"], h["truncated"]) for h in data["results"]] == [(short.id, False), (design.id, True)]
    assert any(n.startswith(f"memory {design.id} cut to ") for n in data["notes"])

    r = memsafe_proc("--db", str(db_path), "recall", "kafka retention", "--budget", "40")  # text, piped
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[0] for line in r.stdout.splitlines()[2:]] == [str(short.id)]
    assert f"Note: lower-ranked matches did not fit the budget: {design.id} (" in r.stderr

    async def mcp_recall():
        params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db_path), "serve"],
                                       env=dict(os.environ), cwd=str(tmp_path))
        with open(tmp_path / "server.err", "a", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return [await session.call_tool("recall", {"query": "kafka retention", "budget": budget})
                        for budget in (2000, 40)]

    default, small = anyio.run(mcp_recall)
    text = "\n".join(c.text for c in default.content)
    assert f"#{design.id} " in text and f"memory {design.id} cut to " in text.splitlines()[0]
    text = "\n".join(c.text for c in small.content)
    assert f"#{design.id} " not in text and f"did not fit the budget: {design.id} (" in text.splitlines()[0]


@pytest.mark.backends("sqlite")
def test_the_page_shows_the_design_note(kafka, db_path):
    from starlette.testclient import TestClient

    from memsafe.ui import server

    opened = api.open_store(str(db_path))
    state = server.UiState(opened, 18378)
    base = "http://127.0.0.1:18378"
    with TestClient(server.build_app(state), base_url=base, follow_redirects=False) as client:
        client.get("/", params={"token": state.token})
        page = client.get("/", params={"q": "kafka retention"}).text
    opened.store.close()
    store, short, design = kafka
    assert f'href="/m/{short.id}"' in page and f'href="/m/{design.id}"' in page


def test_unfitted_splits_better_and_lower_matches():
    count = lambda t: len(t.split())  # noqa: E731
    cut = lambda t, n: " ".join(t.split()[:n])  # noqa: E731
    big = " ".join(["word"] * 100)
    packed = packing.pack(["one liner", big], 10, count, cut)  # 8 left: too few for an excerpt
    assert [p.index for p in packed] == [0] and packing.unfitted(packed, 2, 10) == ([], [1])
    assert packing.unfitted(packed, 2, 1) == ([], [])  # the limit, not the budget, left it out
    packed = packing.pack(["a b", big, "c d"], 30, count, cut)
    assert [(p.index, p.truncated) for p in packed] == [(0, False), (1, True), (2, False)]
    assert packing.unfitted(packed, 3, 10) == ([], [])
    packed = packing.pack(["a b", big, "c d"], 10, count, cut)
    assert [p.index for p in packed] == [0, 2] and packing.unfitted(packed, 3, 10) == ([1], [])
