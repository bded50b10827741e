"""Update, history and time travel (recall --as-of), near-duplicates and consolidate."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memsafe import api, clock, when
from memsafe.errors import Duplicate, InvalidInput

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _at(monkeypatch, when) -> None:
    monkeypatch.setenv("MEMSAFE_NOW", when if isinstance(when, str) else clock.to_iso(when))


def _ids(result) -> list[int]:
    return [h.memory.id for h in result.hits]


def _texts(result) -> dict[int, str]:
    return {h.memory.id: h.text for h in result.hits}


@pytest.fixture
def local_tz(monkeypatch):
    """Run with the machine's local zone set to New York (UTC−5 in winter)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# ---------------------------------------------------------------------------------------------
# update re-embeds; vec0 upsert is DELETE + INSERT


def test_f11_update_reembeds_and_fts_follows(store, monkeypatch, embedder):
    _at(monkeypatch, T0)
    a = api.remember(store, "This repo uses Node 18")
    api.remember(store, "Python services run under uv and Python 3.12")
    api.remember(store, "The frontend is built with Vite")
    _at(monkeypatch, T0 + timedelta(days=10))
    updated = api.update(store, a.id, content="This repo uses Bun 1.3")
    assert updated.content == "This repo uses Bun 1.3" and updated.embedded
    result = api.recall(store, "Bun runtime")
    assert _ids(result)[0] == a.id
    vec = np.frombuffer(store.get_vector(a.id), dtype=np.float32)
    assert float(vec @ embedder.embed_one("This repo uses Bun 1.3")) > 0.9999
    assert store.vector_count() == 3
    # FTS holds the new text only
    lexical = api.recall(store, "Node", mode="lexical")
    assert a.id not in _ids(lexical)
    # a second update of the same memory (vec0 row exists): no UNIQUE error
    api.update(store, a.id, content="This repo uses Bun 1.4")
    assert store.vector_count() == 3
    row = store.raw_row(a.id)
    assert row["content_updated_at"] == clock.to_iso(T0 + timedelta(days=10))


def test_f11_backfill_rerun_gives_one_vector_per_memory(store):
    ids = [api.remember(store, f"Pending memory number {i} about caching", embed_now=False).id for i in range(30)]
    assert api.backfill(store, limit=7, batch_size=4) == 7  # an interrupted backfill
    api.update(store, ids[0], content="Pending memory zero, rewritten")  # re-embeds an existing vector
    api.backfill(store, limit=None, batch_size=8)
    api.backfill(store, limit=None, batch_size=8)  # nothing left; no error
    assert store.vector_count() == 30 and store.pending_count() == 0
    assert len(store.get_vectors(ids)) == 30  # 30 rows in all, each memory has one: one vector per memory


def test_update_metadata_keeps_content_version_time_and_records_history(store, monkeypatch):
    _at(monkeypatch, T0)
    m = api.remember(store, "Use feature flags for risky changes", tags=["process"])
    _at(monkeypatch, T0 + timedelta(days=1))
    api.update(store, m.id, tags=["process", "release"], importance=0.9, kind="decision")
    row = store.raw_row(m.id)
    assert row["content_updated_at"] == clock.to_iso(T0)
    assert row["updated_at"] == clock.to_iso(T0 + timedelta(days=1))
    report = api.history(store, m.id)
    assert [(v.cause, v.kind, v.tags) for v in report.versions] == [
        ("update", "general", ["process"]),
        ("current", "decision", ["process", "release"]),
    ]
    with pytest.raises(InvalidInput):
        api.update(store, m.id)
    other = api.remember(store, "Deploys happen on Tuesdays")
    with pytest.raises(Duplicate):
        api.update(store, other.id, content="Use feature flags for risky changes")
    api.forget(store, other.id)
    with pytest.raises(InvalidInput):
        api.update(store, other.id, content="changed")


def test_a_tag_only_update_shows_what_changed_and_when_in_history(store, monkeypatch, cli):
    """After a tag-only update, `history` showed two identical rows (same start,
    status and text; the tags were not shown and the current state kept the first one's start)."""
    from memsafe import framing, render

    _at(monkeypatch, T0)
    m = api.remember(store, "Nightly builds publish to the staging bucket")
    _at(monkeypatch, T0 + timedelta(days=1))
    api.update(store, m.id, tags=["ci"])
    _at(monkeypatch, T0 + timedelta(days=2))
    api.update(store, m.id, tags=["ci", "release"], kind="decision")
    versions = api.history(store, m.id).versions
    assert [v.valid_from for v in versions] == [clock.to_iso(T0 + timedelta(days=d)) for d in (0, 1, 2)]
    assert [v.valid_to for v in versions[:-1]] == [v.valid_from for v in versions[1:]]
    assert render.version_changes(versions) == ["", "tags ci", "kind decision; tags ci, release"]
    heads = [r.head for r in framing.parse(render.compact_history(api.history(store, m.id))).records]
    assert 'changed="tags ci"' in heads[1] and len(set(heads)) == 3
    rows = cli("history", "1").stdout
    assert "tags ci" in rows and "kind decision" in rows


# ---------------------------------------------------------------------------------------------
# Time travel


@pytest.fixture
def timeline(store, monkeypatch):
    """Memory A: Node 18 (Jan 1) → Bun 1.3 (Feb 1). Memory B: created Jan 10, forgotten Mar 1,
    restored Apr 1. Memory C: created Mar 15."""
    _at(monkeypatch, T0)
    a = api.remember(store, "This repo uses Node 18 as its JavaScript runtime")
    _at(monkeypatch, T0 + timedelta(days=9))
    b = api.remember(store, "The JavaScript test runner is Jest")
    _at(monkeypatch, "2026-01-20T00:00:00Z")
    api.set_confidence(store, a.id, value=0.95, reason="confirmed by lead")  # metadata between edits
    _at(monkeypatch, "2026-02-01T00:00:00Z")
    api.update(store, a.id, content="This repo uses Bun 1.3 as its JavaScript runtime")
    _at(monkeypatch, "2026-03-01T00:00:00Z")
    api.forget(store, b.id, reason="moved to vitest")
    _at(monkeypatch, "2026-03-15T00:00:00Z")
    c = api.remember(store, "Bun's built-in test runner replaced Jest")
    _at(monkeypatch, "2026-04-01T00:00:00Z")
    api.restore(store, b.id)
    _at(monkeypatch, "2026-05-01T00:00:00Z")
    return a.id, b.id, c.id


def test_as_of_before_creation_is_empty(store, timeline):
    assert api.recall_as_of(store, "JavaScript runtime", as_of="2025-12-31T23:59:59Z").hits == []


def test_as_of_between_edits_sees_old_text_despite_confidence_change(store, timeline):
    a, b, c = timeline
    before_conf = _texts(api.recall_as_of(store, "JavaScript runtime", as_of="2026-01-15T00:00:00Z"))
    after_conf = _texts(api.recall_as_of(store, "JavaScript runtime", as_of="2026-01-25T00:00:00Z"))
    assert before_conf[a] == after_conf[a] == "This repo uses Node 18 as its JavaScript runtime"
    assert set(after_conf) == {a, b}
    now = _texts(api.recall_as_of(store, "JavaScript runtime", as_of="2026-02-15T00:00:00Z"))
    assert now[a] == "This repo uses Bun 1.3 as its JavaScript runtime"
    # the past is ranked on its own text: Node 18 found by "Node" back then, not today
    assert api.recall_as_of(store, "Node 18", as_of="2026-01-15", mode="lexical").hits[0].memory.id == a
    assert a not in _ids(api.recall(store, "Node 18", mode="lexical"))


def test_as_of_after_forget_and_after_restore(store, timeline):
    a, b, c = timeline
    assert b not in _ids(api.recall_as_of(store, "test runner Jest", as_of="2026-03-10T00:00:00Z"))
    assert b in _ids(api.recall_as_of(store, "test runner Jest", as_of="2026-02-20T00:00:00Z"))
    assert b in _ids(api.recall_as_of(store, "test runner Jest", as_of="2026-04-02T00:00:00Z"))
    assert c in _ids(api.recall_as_of(store, "test runner Jest", as_of="2026-03-16T00:00:00Z"))
    assert c not in _ids(api.recall_as_of(store, "test runner Jest", as_of="2026-03-14T00:00:00Z"))


def test_as_of_same_instant_with_different_offsets_and_local_naive_time(store, timeline, local_tz):
    a = timeline[0]  # edited at 2026-02-01T00:00Z = 2026-01-31 19:00 in New York
    forms = ["2026-01-31T23:59:00Z", "2026-02-01T00:59:00+01:00", "2026-01-31T18:59:00-05:00",
             "2026-01-31 18:59"]  # the last one is naive: local time, New York in this test
    answers = [_texts(api.recall_as_of(store, "JavaScript runtime", as_of=f)) for f in forms]
    assert all(ans == answers[0] for ans in answers)
    assert "Node 18" in answers[0][a]
    # two minutes later, local time: already Bun (were naive read as UTC, it would still be Node)
    assert "Bun 1.3" in _texts(api.recall_as_of(store, "JavaScript runtime", as_of="2026-01-31 19:01"))[a]
    assert api.parse_when("2026-01-31 18:59") == "2026-01-31T23:59:00.000000+00:00"


def test_as_of_relative_and_errors(store, timeline):
    a = timeline[0]
    # now = May 1; 100 days ago = Jan 21: Node 18 era
    assert "Node 18" in _texts(api.recall_as_of(store, "JavaScript runtime", as_of="100 days ago"))[a]
    for bad in ("not a date at all", "", "2026-13-45"):
        with pytest.raises(InvalidInput):
            api.recall_as_of(store, "runtime", as_of=bad)
    with pytest.raises(InvalidInput, match="future"):
        api.recall_as_of(store, "runtime", as_of="2026-06-01")
    with pytest.raises(InvalidInput, match="future"):
        api.recall_as_of(store, "runtime", as_of="in 3 days")


def test_as_of_writes_nothing(store, timeline):
    before = list(store.conn.execute("SELECT id, access_count, last_accessed_at FROM memories"))
    api.recall_as_of(store, "JavaScript runtime", as_of="2026-02-15")
    assert list(store.conn.execute("SELECT id, access_count, last_accessed_at FROM memories")) == before


def test_since_filters_by_creation_time(store, timeline):
    a, b, c = timeline
    since = api.parse_when("2026-03-01")
    assert _ids(api.recall(store, "test runner Jest", since=since)) == [c]


def test_as_of_reaches_compressed_originals(store, monkeypatch):
    text = ("Never deploy on Fridays. The on-call rotation is thin at weekends. "
            "Incidents after Friday deploys cost us three weekends in 2025.")
    _at(monkeypatch, T0)
    m = api.remember(store, text, kind="task")
    api.decay(store, now=T0 + timedelta(days=80))
    assert api.get(store, m.id).decay_level >= 2
    _at(monkeypatch, T0 + timedelta(days=81))
    old = api.recall_as_of(store, "Friday deploys incidents", as_of="2026-01-15")
    assert _texts(old)[m.id] == text


# ---------------------------------------------------------------------------------------------
# Near-duplicates


def test_near_duplicate_reported_not_refused(store):
    a = api.remember(store, "The staging server runs Ubuntu 22.04", project="web")
    b = api.remember(store, "The staging server is running Ubuntu 22.04", project="web")
    assert b.near_duplicate and b.near_duplicate["id"] == a.id and b.near_duplicate["similarity"] >= 0.92
    elsewhere = api.remember(store, "The staging server is running Ubuntu 22.04", project="api")
    assert elsewhere.near_duplicate is None  # other project
    unrelated = api.remember(store, "Lunch is at noon", project="web")
    assert unrelated.near_duplicate is None
    api.config_set(store, "near_duplicate_threshold", "0.999")
    c = api.remember(store, "Staging server: Ubuntu 22.04", project="web")
    assert c.near_duplicate is None


def test_consolidate_merges_and_keeps_both_histories(store, monkeypatch):
    _at(monkeypatch, T0)
    a = api.remember(store, "Deploys go through the staging cluster first", project="web", tags=["ops"])
    api.recall(store, "staging cluster deploys", project="web")  # a is used: it survives
    _at(monkeypatch, T0 + timedelta(days=1))
    b = api.remember(store, "Deploys go through the staging cluster first!", project="web", tags=["deploy"])
    _at(monkeypatch, T0 + timedelta(days=2))
    api.update(store, b.id, content="Deploys always go through the staging cluster first")
    api.remember(store, "Unrelated: the office closes at six", project="web")
    _at(monkeypatch, T0 + timedelta(days=3))
    dry = api.consolidate(store, dry_run=True)
    assert [(p.survivor_id, p.merged_id) for p in dry.pairs] == [(a.id, b.id)]
    assert api.get(store, b.id).status == "active"
    report = api.consolidate(store)
    assert [(p.survivor_id, p.merged_id) for p in report.pairs] == [(a.id, b.id)]
    merged = api.get(store, b.id)
    assert merged.status == "forgotten" and merged.status_reason == f"merged into {a.id}"
    survivor = api.get(store, a.id)
    assert survivor.status == "active" and set(survivor.tags) == {"ops", "deploy"}
    versions = api.history(store, a.id).versions
    from_b = [v.content for v in versions if v.origin_id == b.id]
    assert from_b == ["Deploys go through the staging cluster first!",
                      "Deploys always go through the staging cluster first"]
    assert all(v.cause == "merge" for v in versions if v.origin_id)
    assert len(api.history(store, b.id).versions) == 2  # the merged one keeps its own history too
    # time travel before the merge still sees both as they were
    old = _texts(api.recall_as_of(store, "staging cluster deploys", as_of="2026-01-02T12:00:00Z", project="web"))
    assert old[a.id] == "Deploys go through the staging cluster first"
    assert old[b.id] == "Deploys go through the staging cluster first!"
    assert api.consolidate(store).pairs == []  # nothing left to merge


def test_consolidate_merges_a_whole_cluster_in_one_run(store):
    """Three near-copies (cosines 0.985-0.996, threshold 0.92) merge in one run, into the oldest,
    with every history kept; a second run finds nothing."""
    texts = ["The deploy script retries three times before failing.",
             "The deploy script retries 3 times before failing.",
             "The deploy script retries three times before it fails."]
    ids = [api.remember(store, t, project="web").id for t in texts]
    other = api.remember(store, "The office closes at six", project="web")
    api.update(store, ids[2], content="The deploy script retries three times before it fails!")
    dry = api.consolidate(store, dry_run=True)
    assert [(p.survivor_id, p.merged_id) for p in dry.pairs] == [(ids[0], ids[1]), (ids[0], ids[2])]
    assert all(p.similarity > 0.95 for p in dry.pairs)
    report = api.consolidate(store)
    assert [(p.survivor_id, p.merged_id) for p in report.pairs] == [(ids[0], ids[1]), (ids[0], ids[2])]
    assert [api.get(store, i).status for i in ids] == ["active", "forgotten", "forgotten"]
    assert api.get(store, other.id).status == "active"
    copied = [(v.origin_id, v.content) for v in api.history(store, ids[0]).versions if v.origin_id]
    assert len(copied) == 3 and set(copied) == {(ids[1], texts[1]), (ids[2], texts[2]),
                                                 (ids[2], "The deploy script retries three times before it fails!")}
    assert api.consolidate(store).pairs == []  # the fixpoint in one run


def test_consolidate_compares_memories_still_waiting_for_their_vector(store):
    """Near-copies remembered with --no-embed (or imported, or from the git hook) have no vector
    yet: consolidate skipped them silently, so a run after `memsafe embed` found more (
    item 7). A dry run embeds them in memory and stores nothing; a run stores their vectors and
    merges the whole cluster."""
    texts = ["The deploy script retries three times before failing.",
             "The deploy script retries 3 times before failing.",
             "The deploy script retries three times before it fails."]
    ids = [api.remember(store, t, project="web", embed_now=False).id for t in texts]
    assert store.pending_count() == 3
    dry = api.consolidate(store, dry_run=True)
    assert [(p.survivor_id, p.merged_id) for p in dry.pairs] == [(ids[0], ids[1]), (ids[0], ids[2])]
    assert dry.embedded == 3 and store.pending_count() == 3
    report = api.consolidate(store)
    assert [(p.survivor_id, p.merged_id) for p in report.pairs] == [(ids[0], ids[1]), (ids[0], ids[2])]
    assert report.embedded == 0 and store.pending_count() == 0
    assert api.consolidate(store).pairs == []


def test_purging_a_merged_memory_removes_its_copies_from_the_survivor(store):
    a = api.remember(store, "The cache TTL is 300 seconds")
    b = api.remember(store, "The cache TTL is 300 seconds.")
    api.consolidate(store, threshold=0.9)
    assert any(v.origin_id == b.id for v in api.history(store, a.id).versions)
    report = api.purge(store, [b.id])
    assert report.versions_removed >= 1
    assert not any(v.origin_id == b.id for v in api.history(store, a.id).versions)
    assert api.get(store, a.id).status == "active"


def test_as_of_with_many_changed_texts_embeds_only_likely_candidates(store, monkeypatch):
    from memsafe.recall import vectors

    _at(monkeypatch, T0)
    ids = [api.remember(store, f"Service {n} listens on port {8000 + n}").id for n in range(6)]
    target = api.remember(store, "The billing service stores invoices in PostgreSQL").id
    _at(monkeypatch, T0 + timedelta(days=5))
    for i in [*ids, target]:
        api.update(store, i, content=f"{api.get(store, i).content} (moved in February)")
    monkeypatch.setattr(vectors, "AS_OF_EMBED_MAX", 2)
    result = api.recall_as_of(store, "where are invoices kept?", as_of="2026-01-03", mode="vector")
    assert result.hits[0].memory.id == target
    assert result.hits[0].text == "The billing service stores invoices in PostgreSQL"
    assert any("likeliest" in n for n in result.notes)


def test_update_without_vectors_leaves_memory_pending_then_backfill_fixes_it(db_path, embedder, monkeypatch):
    opened = api.open_store(str(db_path))
    m = api.remember(opened.store, "This repo uses Node 18")
    opened.store.close()
    monkeypatch.setenv("MEMSAFE_NO_VEC", "1")
    opened = api.open_store(str(db_path))
    assert api.update(opened.store, m.id, content="This repo uses Bun 1.3").embedded is False
    opened.store.close()
    monkeypatch.delenv("MEMSAFE_NO_VEC")
    opened = api.open_store(str(db_path))
    assert api.recall(opened.store, "Bun runtime").hits[0].memory.id == m.id  # backfills first
    vec = np.frombuffer(opened.store.get_vector(m.id), dtype=np.float32)
    assert float(vec @ embedder.embed_one("This repo uses Bun 1.3")) > 0.9999
    opened.store.close()


def test_as_of_finds_exact_identifiers_and_cjk_words_first(store, monkeypatch):
    """Time travel ranks past texts without the trigram index; the exact-first rule still holds."""
    _at(monkeypatch, T0)
    twin = api.remember(store, "get_users_by_ids looks up many users: pass a list of ids").id
    exact = api.remember(store, "get_user_by_id raises NotFound for an unknown id").id
    cjk = api.remember(store, "我们在项目里使用引用计数来管理内存。").id
    _at(monkeypatch, "2026-02-01T00:00:00Z")
    for query, want in (("how does get_user_by_id look up users", exact), ("引用", cjk)):
        for mode in ("hybrid", "lexical"):
            hits = api.recall_as_of(store, query, as_of="2026-01-15T00:00:00Z", mode=mode).hits
            assert hits and hits[0].memory.id == want, (query, mode)
    assert twin != exact


def test_a_relative_time_counts_elapsed_time_across_a_dst_change(store, db_path, monkeypatch, local_tz, memsafe_proc):
    # dateparser counts in local wall-clock time, so on the day New York left
    # DST (2026-11-01 06:00Z) `--since 24h` reached 25 hours back, while "the last 24 hours" (and a
    # recall query) reached 24. A relative time is elapsed time; one naming a clock time is local.
    now = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
    for text in ("24h", "24 hours ago", "1 day ago", "the last 24 hours", "vor 24 Stunden"):
        assert when.parse_when(text, now) == now - timedelta(hours=24), text
    # a calendar name is its day in local time: yesterday began at midnight EDT
    assert when.parse_when("yesterday", now) == datetime(2026, 10, 31, 4, 0, tzinfo=timezone.utc)
    assert when.parse_when("1h 30m", now) == now - timedelta(minutes=90)
    assert when.parse_when("yesterday at 10:00", now) == datetime(2026, 10, 31, 14, 0, tzinfo=timezone.utc)  # EDT
    assert when.parse_when("2026-10-31 08:00", now) == datetime(2026, 10, 31, 12, 0, tzinfo=timezone.utc)
    _at(monkeypatch, "2026-10-31T11:30:00+00:00")  # 24.5 hours before now
    api.remember(store, "Rotated the staging database password.")
    _at(monkeypatch, now)
    assert _ids(api.recall(store, "staging password", since=api.parse_when("24h"), mode="lexical")) == []
    done = memsafe_proc("--db", str(db_path), "recall", "staging password", "--since", "24h", "--mode", "lexical",
                        "--json", env={"TZ": "America/New_York", "MEMSAFE_NOW": now.isoformat()})
    assert done.returncode == 0 and json.loads(done.stdout)["results"] == [], done.stderr
