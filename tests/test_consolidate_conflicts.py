"""Consolidation never joins memories that say different things: a table of pairs that read
alike (tests/fixtures/merge_pairs.json: must-not-merge pairs differing in a negation, a number, a
version, a date or time, an identifier, a commit and its revert, two commits, a changed value;
and restatements that should merge), checked by the pure rule and by real `consolidate` runs
with the real model, on both backends, and through the CLI (plain and --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsafe import api
from memsafe.conflicts import differences

PAIRS = json.loads((Path(__file__).parent / "fixtures" / "merge_pairs.json").read_text(encoding="utf-8"))["pairs"]
APART = [p for p in PAIRS if not p["merge"]]
SAME = [p for p in PAIRS if p["merge"]]


def test_the_table_holds_the_whole_kind():
    assert len(APART) >= 40 and len(SAME) >= 20
    kinds = {p["kind"] for p in APART}
    assert kinds >= {"negation", "number", "version", "time", "identifier", "revert", "commits", "value"}


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{'same' if p['merge'] else p['kind']}:{p['a'][:40]}" for p in PAIRS])
def test_each_pair_is_told_apart_or_together_by_the_rule(pair):
    found = differences(pair["a"], pair["b"])
    if pair["merge"]:
        assert found == [], found
    else:
        assert pair["kind"] in [d.kind for d in found], found
    assert [d.kind for d in differences(pair["b"], pair["a"])] == [d.kind for d in found]  # symmetric


def _store_table(store) -> list[tuple[dict, int, int]]:
    """Each pair in its own project, so pairs never cluster with one another."""
    out = []
    for n, pair in enumerate(PAIRS):
        project = f"pair-{n:02d}"
        a = api.remember(store, pair["a"], project=project, embed_now=False)
        b = api.remember(store, pair["b"], project=project, embed_now=False)
        out.append((pair, a.id, b.id))
    return out


@pytest.mark.backends("sqlite", "postgres")
def test_consolidate_merges_every_restatement_and_no_opposite(store):
    """With a threshold low enough that every pair is a candidate (0.6), a real run merges each
    restatement and refuses each must-not pair, reporting it as a possible conflict that names
    how the two differ. The memories of refused pairs stay active, unchanged."""
    stored = _store_table(store)
    report = api.consolidate(store, threshold=0.6)
    merged = {(p.survivor_id, p.merged_id) for p in report.pairs}
    refused = {(c.first_id, c.second_id): c for c in report.conflicts}
    for pair, a, b in stored:
        if pair["merge"]:
            assert (a, b) in merged, pair
        else:
            assert (a, b) not in merged and (a, b) in refused, pair
            assert any(r.startswith(pair["kind"]) for r in refused[(a, b)].reasons), refused[(a, b)]
            assert api.get(store, a).status == api.get(store, b).status == "active"
            assert (api.get(store, a).content, api.get(store, b).content) == (pair["a"], pair["b"])
    assert len(report.pairs) == len(SAME) and len(report.conflicts) == len(APART)
    again = api.consolidate(store, threshold=0.6)
    assert again.pairs == [] and len(again.conflicts) == len(APART)  # still reported, still apart


def test_at_the_default_threshold_no_opposite_merges(store):
    """The configured threshold (0.92): pairs below it are left alone (neither merged nor
    reported), none of the must-not pairs merges, and none of the restatements is refused."""
    stored = _store_table(store)
    report = api.consolidate(store, dry_run=True)
    merged = {(p.survivor_id, p.merged_id) for p in report.pairs}
    refused = {(c.first_id, c.second_id) for c in report.conflicts}
    apart = {(a, b) for pair, a, b in stored if not pair["merge"]}
    same = {(a, b) for pair, a, b in stored if pair["merge"]}
    assert not merged & apart and not refused & same
    assert refused <= apart and merged <= same
    assert len(refused) >= 20  # many opposites read alike to the model: the rule, not the cosine, keeps them


def test_a_chain_of_near_copies_never_joins_two_that_differ(store):
    """a ~ b ~ c where a and c differ (v1.8 / v1.9) but each restates b loosely: the group takes
    the closest pair only, and a and c stay apart."""
    a = api.remember(store, "Pin the requests library to v1.8 in the lock file", project="web")
    b = api.remember(store, "Pin the requests library in the lock file", project="web")
    c = api.remember(store, "Pin the requests library to v1.9 in the lock file", project="web")
    report = api.consolidate(store, threshold=0.6)
    survivors = {api.get(store, i).status for i in (a.id, c.id)}
    assert survivors == {"active"}
    assert (a.id, c.id) in {(x.first_id, x.second_id) for x in report.conflicts}
    assert len(report.pairs) <= 1 and all(b.id in (p.survivor_id, p.merged_id) for p in report.pairs)


def test_a_revert_and_two_commits_with_one_subject_from_the_git_source_stay_apart(store):
    """Commit memories (source git) are never merged with each other, even without the hook's
    header line; a commit and its revert are reported as such."""
    a = api.remember(store, "lint: line length", project="web", source="git")
    b = api.remember(store, "lint: line length.", project="web", source="git")
    c = api.remember(store, 'Revert "lint: line length"', project="web", source="git")
    report = api.consolidate(store, threshold=0.6)
    assert report.pairs == []
    reasons = {(x.first_id, x.second_id): x.reasons for x in report.conflicts}
    assert any(r.startswith("commits") for r in reasons[(a.id, b.id)])
    assert any(r.startswith("revert") for r in reasons[(a.id, c.id)])


def test_cli_reports_possible_conflicts_plain_and_json(cli):
    for text in ("The backup job runs at 02:00 UTC", "The backup job runs at 14:00 UTC",
                 "We squash commits before merging to main", "We squash commits before merging to main."):
        assert cli("remember", text, "--no-embed").exit_code == 0
    dry = cli("consolidate", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    data = json.loads(dry.stdout)
    assert [(p["survivor_id"], p["merged_id"]) for p in data["pairs"]] == [(3, 4)]
    assert [(c["first_id"], c["second_id"]) for c in data["conflicts"]] == [(1, 2)]
    assert data["conflicts"][0]["reasons"] == ["time (02:00 / 14:00)"]
    plain = cli("consolidate")
    assert plain.exit_code == 0, plain.stderr
    assert "1 near-duplicates merged" in plain.stdout or "1 near-duplicate" in plain.stdout
    assert "1 possible conflict not merged" in plain.stdout
    assert "1 ≠ 2  (cosine" in plain.stdout and "time (02:00 / 14:00)" in plain.stdout
    listed = json.loads(cli("list", "--json").stdout)
    assert sorted(m["id"] for m in listed) == [1, 2, 3]
