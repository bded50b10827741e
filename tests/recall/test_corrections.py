"""A newer memory that corrects an earlier one (same subject, a changed command, version, number,
time, name or negation) is said to replace it when remembered, is linked to it both ways, and
ranks above it in recall; `--supersedes` and `--keep-both` let the user decide; a correction of a
memory of another project, or of a purged one, is refused with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_server import call, inproc, is_error, text_of

from memsafe import api
from memsafe.recall import corrections

PAIRS = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "correction_pairs.json").read_text())
OLD_AT, NEW_AT, NOW = "2026-08-20T10:00:00+00:00", "2026-11-17T10:00:00+00:00", "2026-11-20T10:00:00+00:00"


@pytest.mark.parametrize("pair", PAIRS["pairs"], ids=lambda p: p["new"][:40])
def test_each_correction_pair_is_read_as_a_correction(pair):
    verdict = corrections.replaces(pair["new"], pair["old"])
    assert verdict is not None, pair
    assert corrections.replaces(pair["old"], pair["old"]) is None  # the same text corrects nothing


@pytest.mark.parametrize("pair", PAIRS["apart"], ids=lambda p: p["new"][:40])
def test_two_facts_about_one_thing_are_not_a_correction(pair):
    assert corrections.replaces(pair["new"], pair["old"]) is None, pair


def test_the_table_holds_enough_pairs():
    assert len(PAIRS["pairs"]) >= 20 and len(PAIRS["apart"]) >= 10


def _rank(result, memory_id: int) -> int | None:
    ids = [h.memory.id for h in result.hits]
    return ids.index(memory_id) + 1 if memory_id in ids else None


@pytest.mark.backends("sqlite", "postgres")
def test_the_stale_fact_no_longer_outranks_its_correction(store, remember_at, monkeypatch):
    """Three months old "deploy with `make ship`", three days old its correction: remember names
    the memory replaced, both are linked, recall ranks the correction first and says so."""
    old = remember_at(OLD_AT, "Deploy with `make ship`; the deploy command runs from the repo root.", project="web")
    new = remember_at(NEW_AT, "Deploy with `make release` now.", project="web")
    assert new.replaces is not None and new.replaces["id"] == old.id and new.replaces["marked"]
    assert "`make ship` → `make release`" in new.replaces["why"]
    assert new.supersedes == old.id and api.get(store, old.id).superseded_by == new.id
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    for mode in ("hybrid", "lexical", "vector"):
        result = api.recall(store, "what is the deploy command?", project="web", mode=mode)
        assert _rank(result, new.id) == 1, (mode, [(h.memory.id, h.score) for h in result.hits])
        assert f"memory #{new.id} replaces #{old.id}" in " ".join(result.notes), mode
    # with only the stale fact inside the filters, its correction is still named
    result = api.recall(store, "deploy command repo root", project="web", mode="lexical", until="2026-09-01")
    assert [h.memory.id for h in result.hits] == [old.id]
    assert f"memory #{old.id} was replaced by #{new.id}" in result.notes


def test_before_and_after_rank_of_the_current_fact_on_every_pair(store, remember_at, monkeypatch, capsys):
    """Each pair in its own project, once kept both (as before corrections existed) and once as
    remember marks it: the rank of the newer fact for its question. After, it is first on every
    pair; the figures are printed (pytest -s)."""
    before, after = [], []
    for n, pair in enumerate(PAIRS["pairs"]):
        ids = {}
        for way in ("before", "after"):
            project = f"{way}-{n}"
            remember_at(OLD_AT, pair["old"], project=project)
            ids[way] = remember_at(NEW_AT, pair["new"], project=project, keep_both=way == "before").id
        monkeypatch.setenv("MEMSAFE_NOW", NOW)
        before.append(_rank(api.recall(store, pair["query"], project=f"before-{n}"), ids["before"]))
        after.append(_rank(api.recall(store, pair["query"], project=f"after-{n}"), ids["after"]))
    with capsys.disabled():
        print(f"\ncorrection pairs: {len(before)}; current fact first before: {before.count(1)}, "
              f"after: {after.count(1)}; mean rank before {sum(r or 99 for r in before) / len(before):.2f}, "
              f"after {sum(r or 99 for r in after) / len(after):.2f}; ranks before {before}")
    assert after == [1] * len(after)


def test_cli_remember_says_what_it_replaces_and_keep_both_and_supersedes_decide(cli, db_path):
    first = cli("remember", "The API server listens on port 8080.", "--project", "web")
    assert first.exit_code == 0, first.stderr
    second = cli("remember", "The API server listens on port 9090 now.", "--project", "web")
    assert second.exit_code == 0, second.stderr
    assert "this looks like it replaces #1: The API server listens on port 8080." in second.stderr
    assert "marked it replaced" in second.stderr
    third = cli("remember", "The API server listens on port 7070 now.", "--project", "web", "--keep-both")
    assert third.exit_code == 0 and "this looks like it replaces #2" in third.stderr
    assert "not marked" in third.stderr and "--supersedes 2" in third.stderr
    # an explicit correction of a memory with nothing in common, from another source
    fourth = cli("remember", "Ports are assigned by the platform team.", "--project", "web", "--source", "agent",
                 "--supersedes", "3", "--json")
    assert fourth.exit_code == 0, fourth.stderr
    assert json.loads(fourth.stdout)["supersedes"] == 3
    shown = json.loads(cli("get", "3", "--project", "web", "--json").stdout)
    assert shown["superseded_by"] == 4
    assert json.loads(cli("get", "1", "--project", "web", "--json").stdout)["superseded_by"] == 2


def test_a_correction_of_another_source_is_named_but_not_marked(store):
    old = api.remember(store, "The default request timeout is 30s.", project="web", source="user")
    new = api.remember(store, "The default request timeout is 5s.", project="web", source="agent")
    assert new.replaces == {"id": old.id, "preview": old.content, "why": "`30s` → `5s`", "marked": False}
    assert api.get(store, old.id).superseded_by is None and new.supersedes is None


def test_commits_and_other_projects_are_never_read_as_corrections(store):
    api.remember(store, "git commit abc1234 on main: pin Node 18 in the CI image", project="web", source="git")
    commit = api.remember(store, "git commit def5678 on main: pin Node 20 in the CI image", project="web",
                          source="git")
    assert commit.replaces is None
    api.remember(store, "We pin Node 18 in the CI image.", project="api")
    other = api.remember(store, "We pin Node 20 in the CI image.", project="web")
    assert other.replaces is None  # the 18 is another project's


def test_forgetting_a_correction_makes_the_old_fact_current_again(store):
    old = api.remember(store, "Code review needs one approval before merging.", project="web")
    new = api.remember(store, "Code review needs two approvals before merging.", project="web")
    assert api.get(store, old.id).superseded_by == new.id
    api.forget(store, new.id)
    assert api.get(store, old.id).superseded_by is None
    again = api.remember(store, "Code review needs three approvals before merging.", project="web")
    assert again.replaces is not None and again.replaces["id"] == old.id


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.parametrize("case", ["other project", "purged", "forgotten", "replaced already", "with keep-both",
                                  "not a number"])
def test_a_bad_correction_is_one_line_and_stores_nothing(cli, store, case):
    mine = api.remember(store, "Backups of the main database run at 02:00 UTC.", project="web")
    theirs = api.remember(store, "The search index is rebuilt every 6 hours.", project="api")
    target, code, said = {
        "other project": (theirs.id, 1, f"no memory with id {theirs.id} in project web"),
        "purged": (mine.id, 1, "was purged"),
        "forgotten": (mine.id, 1, "is forgotten"),
        "replaced already": (mine.id, 1, "already replaced by memory"),
        "with keep-both": (mine.id, 2, "contradict"),
        "not a number": ("twelve", 2, "--supersedes"),
    }[case]
    if case == "purged":
        api.purge(store, [mine.id])
    elif case == "forgotten":
        api.forget(store, mine.id)
    elif case == "replaced already":
        api.remember(store, "Backups of the main database run at 04:30 UTC.", project="web")
    before = store.counts()["total"]
    args = ["remember", "Backups run at 05:00 UTC.", "--project", "web", "--supersedes", str(target)]
    result = cli(*args, *(["--keep-both"] if case == "with keep-both" else []))
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert said in result.stderr and "Traceback" not in result.stderr
    if code == 1:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert store.counts()["total"] == before
    if case == "other project":
        assert api.get(store, theirs.id).superseded_by is None


def test_mcp_remember_takes_supersedes_and_keeps_both(db_path, tmp_path, embedder):
    srv = inproc(db_path, project="web", cwd=str(tmp_path))
    first = text_of(call(srv, "remember", {"content": "Python 3.10 is the minimum supported version."}))
    assert first.startswith("Remembered #1")
    kept = text_of(call(srv, "remember", {"content": "Python 3.11 is the minimum supported version.",
                                          "supersedes": -1}))
    assert "looks like it replaces #1" in kept and "supersedes=1 marks it" in kept
    marked = text_of(call(srv, "remember", {"content": "Python 3.12 is the minimum supported version."}))
    assert "looks like it replaces #1" in marked and "marked it replaced" in marked
    explicit = text_of(call(srv, "remember", {"content": "Support follows the platform's oldest Python.",
                                              "supersedes": 2}))
    assert "replaces #2" in explicit
    opened = api.open_store(str(db_path))
    try:
        assert api.get(opened.store, 1).superseded_by == 3 and api.get(opened.store, 2).superseded_by == 4
        api.remember(opened.store, "The retry budget for webhooks is 5 attempts.", project="api")
    finally:
        opened.store.close()
    refused = call(srv, "remember", {"content": "The retry budget is 8.", "supersedes": 5})
    assert is_error(refused) and "no memory with id 5" in text_of(refused)  # another project's: not reachable
    recalled = text_of(call(srv, "recall", {"query": "minimum supported Python version"}))
    assert "replaces #1" in recalled


def test_an_export_carries_event_times_and_corrections_to_another_store(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", NOW)
    old = api.remember(store, "The nightly build takes about 40 minutes.", project="web", at="2026-01-05")
    new = api.remember(store, "The nightly build takes about 12 minutes.", project="web")
    assert new.supersedes == old.id
    path = tmp_path / "out.jsonl"
    api.export_to_path(store, path, all_projects=True)
    other = api.open_store(str(tmp_path / "other" / "memory.db")).store
    try:
        api.remember(other, "A memory that takes the first ids here.", project="web")
        api.import_file(other, path)
        by_uid = {m.uid: m for m in other.get_memories(other.list_ids(api.make_scope(project="web"), None)).values()}
        old_here, new_here = by_uid[old.uid], by_uid[new.uid]
        assert old_here.happened_at == api.get(store, old.id).happened_at
        assert old_here.happened_at.startswith("2026-01-0")
        assert (old_here.superseded_by, new_here.supersedes) == (new_here.id, old_here.id)
    finally:
        other.close()


@pytest.mark.parametrize("source", ["import", "document", "web", "git"])
def test_records_stored_in_bulk_are_never_read_as_corrections(store, source):
    """Imports, documents, pages and commits are records of their own time: two of them that
    differ in a number link nothing (an import carries its own correction links)."""
    api.remember(store, "The checkout service keeps 3 replicas in production.", source=source, project="web")
    second = api.remember(store, "The checkout service keeps 5 replicas in production.", source=source, project="web")
    assert second.replaces is None
    said = api.remember(store, "The checkout service keeps 7 replicas in production.", source="user", project="web")
    if source == "git":  # a commit is never what a statement corrects either
        assert said.replaces is None
    else:  # a person's statement names the record it may correct, and marks nothing: another source
        assert said.replaces is not None and not said.replaces["marked"]


def test_a_cjk_clause_of_its_own_is_not_a_changed_value():
    """CJK text has no spaces: each run is read as character pairs, so two notes that share a
    clause but each say something else are two facts, not a correction of a number."""
    old = "调试认证服务时发现磁盘已满来自过期的连接，重启持续集成流水线以后恢复正常。（编号 228）"
    new = "调试通知服务时发现悬空指针来自过期的连接，重启持续集成流水线以后恢复正常。（编号 267）"
    assert corrections.replaces(new, old) is None
    assert corrections.replaces("部署命令是 `make ship`。", "部署命令是 `make release`。") is not None
