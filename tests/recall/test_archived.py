"""An archived memory stays findable: recall says when one matches better than what it returned,
and `--include-archived` (MCP: `include_archived`) returns archived memories with their original
text (decay compressed it before archiving)."""

from __future__ import annotations

import json

import pytest
from test_server import call, inproc, is_error, text_of

from memsafe import api

pytestmark = pytest.mark.backends("sqlite", "postgres")

TASK = ("Migrate the invoice exporter to the v2 billing API. The exporter still calls the v1 endpoint for "
        "refunds. Ask Priya for the sandbox credentials before starting. Remove the v1 client afterwards.")


def _archive(store, monkeypatch) -> int:
    monkeypatch.setenv("MEMSAFE_NOW", "2025-01-06T09:00:00+00:00")
    memory = api.remember(store, TASK, kind="task", project="web")
    for year in range(2026, 2032):  # nightly decay, years of idleness
        monkeypatch.setenv("MEMSAFE_NOW", f"{year}-01-06T09:00:00+00:00")
        api.decay(store)
        if api.get(store, memory.id).status == "archived":
            break
    archived = api.get(store, memory.id)
    assert archived.status == "archived" and archived.content != TASK
    api.remember(store, "The billing dashboard shows refunds per day.", project="web")
    return memory.id


def test_recall_names_a_better_archived_match_and_returns_it_with_its_original_text(store, monkeypatch, cli):
    task = _archive(store, monkeypatch)
    result = api.recall(store, "migrate the invoice exporter to the v2 billing API", project="web")
    assert task not in [h.memory.id for h in result.hits]
    assert any(f"archived memory #{task} matches better" in n and "--include-archived" in n for n in result.notes)
    found = api.recall(store, "migrate the invoice exporter to the v2 billing API", project="web",
                       include_archived=True)
    assert found.hits[0].memory.id == task and found.hits[0].memory.status == "archived"
    assert found.hits[0].text == TASK  # the original text, not the compressed one
    assert not any("matches better" in n for n in found.notes)
    shown = cli("recall", "invoice exporter v2 billing", "--project", "web", "--include-archived", "--json")
    assert shown.exit_code == 0, shown.stderr
    first = json.loads(shown.stdout)["results"][0]
    assert (first["id"], first["status"], first["content"]) == (task, "archived", TASK)
    refused = cli("recall", "invoice exporter", "--project", "web", "--include-archived", "--as-of", "yesterday")
    assert refused.exit_code == 2 and "--include-archived cannot be combined with --as-of" in refused.stderr


def test_an_archived_match_weaker_than_what_was_returned_is_not_mentioned(store, monkeypatch):
    _archive(store, monkeypatch)
    result = api.recall(store, "billing dashboard refunds per day", project="web")
    assert not any("matches better" in n for n in result.notes), result.notes


def test_mcp_recall_with_status_archived_includes_archived_memories(db_path, store, monkeypatch, tmp_path):
    task = _archive(store, monkeypatch)
    srv = inproc(db_path, project="web", cwd=str(tmp_path))
    plain = text_of(call(srv, "recall", {"query": "migrate the invoice exporter to the v2 billing API"}))
    assert f"archived memory #{task} matches better" in plain and "status=archived" in plain
    found = call(srv, "recall", {"query": "migrate the invoice exporter to the v2 billing API",
                                 "status": "archived"})
    assert not is_error(found)
    assert f"#{task}" in text_of(found) and "status=archived" in text_of(found)
    assert "Ask Priya for the sandbox credentials" in text_of(found)
    both = call(srv, "recall", {"query": "invoice", "status": "archived", "as_of": "yesterday"})
    assert is_error(both) and "status archived" in text_of(both)
    odd = call(srv, "recall", {"query": "invoice", "status": "forgotten"})
    assert is_error(odd) and "status active, archived or all" in text_of(odd)


def test_many_archived_matches_never_crowd_an_active_memory_out_of_recall(store):
    """Archived memories are looked at in a pool of their own: more archived matches than the
    recall's candidate depth still leave the active answer first."""
    api.config_set(store, "candidate_depth", "20")
    with store.write():
        for n in range(40):
            old = api.remember(store, f"The billing queue retries a failed job {n} times before it gives up.",
                               project="web", embed_now=False)
            store.update_memory(old.id, {"status": "archived"})
    active = api.remember(store, "The billing queue now retries every failed job five times.", project="web",
                          embed_now=False)
    for mode in ("lexical", "hybrid"):
        result = api.recall(store, "how often does the billing queue retry a failed job?", project="web", mode=mode)
        assert result.hits and result.hits[0].memory.id == active.id, (mode, result.notes)
        assert all(h.memory.status == "active" for h in result.hits)
