"""Recall filtered by where a memory came from: `--source` / `--exclude-source` (CLI), `sources` /
`exclude_sources` (api), in every mode and with --as-of."""

from __future__ import annotations

import json

import pytest

from memsafe import api, clock
from memsafe.errors import InvalidInput


@pytest.fixture
def mixed(store):
    """A decision a user wrote, and two commit notes that share its words."""
    ids = {
        "note": api.remember(store, "We decided to cache the tile renderer in Redis for an hour", kind="decision",
                             project="p", source="user", embed_now=True).id,
        "commit": api.remember(store, "git commit 1a2b3c4 on main: cache the tile renderer in Redis", project="p",
                               source="git", tags=["commit"], embed_now=True).id,
        "merge": api.remember(store, "git commit 5d6e7f8 on main: Merge branch 'redis-cache' (tile renderer)",
                              project="p", source="git", tags=["commit"], embed_now=True).id,
    }
    return store, ids


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_recall_keeps_only_or_leaves_out_the_sources_it_is_given(mixed, mode):
    store, ids = mixed
    query = "what did we decide about caching the tile renderer in Redis?"
    every = {h.memory.id for h in api.recall(store, query, project="p", mode=mode).hits}
    assert every == set(ids.values())
    no_git = [h.memory.id for h in api.recall(store, query, project="p", mode=mode, exclude_sources=["git"]).hits]
    assert no_git == [ids["note"]]
    only_git = {h.memory.id for h in api.recall(store, query, project="p", mode=mode, sources=["git"]).hits}
    assert only_git == {ids["commit"], ids["merge"]}
    past = api.recall_as_of(store, query, as_of=clock.now(), project="p", mode=mode, exclude_sources=["git"])
    assert [h.memory.id for h in past.hits] == [ids["note"]]


def test_an_unknown_source_is_one_clear_error(mixed):
    store, _ = mixed
    with pytest.raises(InvalidInput, match="unknown source 'github'"):
        api.recall(store, "tile renderer", project="p", sources=["github"])


def test_recall_cli_source_options(mixed, cli):
    store, ids = mixed
    out = cli("recall", "tile renderer Redis cache", "--project", "p", "--exclude-source", "git", "--json")
    assert out.exit_code == 0, out.stderr
    assert [h["id"] for h in json.loads(out.stdout)["results"]] == [ids["note"]]
    both = cli("recall", "tile renderer Redis cache", "--project", "p", "--source", "git", "--source", "user", "--json")
    assert {h["id"] for h in json.loads(both.stdout)["results"]} == set(ids.values())
    bad = cli("recall", "tile renderer", "--project", "p", "--exclude-source", "github")
    assert bad.exit_code == 2 and "github" in bad.stderr and "Traceback" not in bad.stderr


def test_a_first_person_question_finds_the_users_decision_before_commits_that_share_its_words(store):
    """Backfilled commits repeat a decision's words; "what did we decide" asks for the decision."""
    for n in range(6):
        api.remember(store, f"git commit {n}a2b3c{n} on main: Merge branch 'session-cache-{n}' (session cache TTL)",
                     project="p", source="git", tags=["commit"], embed_now=True)
    decision = api.remember(store, "Session cache entries live for 15 minutes; we chose a short TTL over eviction.",
                            kind="decision", project="p", source="user", embed_now=True).id
    for mode in ("hybrid", "lexical"):
        hits = api.recall(store, "what did we decide about the session cache TTL?", project="p", mode=mode).hits
        assert hits[0].memory.id == decision, (mode, [h.memory.content[:40] for h in hits[:3]])
    off = api.recall(store, "session cache TTL", project="p", mode="lexical").hits  # not first person: words decide
    assert len(off) == 7
