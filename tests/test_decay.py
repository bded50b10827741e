"""Decay: the policy table (pure), banking, levels, protection, restore, idempotence, dry run."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsafe import api, clock, decay
from memsafe.errors import InvalidInput

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ORIGINAL = (
    "The deploy pipeline runs on GitHub Actions with a self-hosted runner.  "
    "Staging deploys happen on every merge to main.\n"
    "Production deploys need a manual approval from the on-call engineer. "
    "Rollbacks use the deploy-rollback.sh script in ops/scripts. "
    "Secrets come from Vault 1.15 and are never written to the runner disk. "
    "Café naïve ✓ — unicode survives."
)


def _row(kind="general", *, idle_days=0.0, importance=0.5, confidence=0.8, access=0, level=0, bank=0.0,
         checked=None, tags=(), stability=None, degree=0):
    created = clock.to_iso(T0)
    return {
        "id": 1, "content": "x", "kind": kind, "importance": importance, "confidence": confidence,
        "access_count": access, "created_at": created, "updated_at": created, "content_updated_at": created,
        "last_accessed_at": None, "decay_level": level, "decay_bank": bank, "decay_checked_at": checked,
        "stability": stability, "status": "active", "tags": list(tags), "degree": degree,
    }


def _plan(row, days):
    return decay.plan_memory(row, decay.DEFAULT_POLICY, T0 + timedelta(days=days), clock.parse_iso)


@pytest.mark.parametrize("kind", list(decay.DEFAULT_POLICY))
def test_each_policy_row_strength_halves_after_one_half_life(kind):
    row = decay.DEFAULT_POLICY[kind]
    s0 = decay.initial_strength(0.5, 0.8)
    assert _plan(_row(kind), 0).strength == pytest.approx(s0)
    assert _plan(_row(kind), row.half_life_days).strength == pytest.approx(s0 / 2)
    assert _plan(_row(kind), 2 * row.half_life_days).strength == pytest.approx(max(row.floor, s0 / 4))


def test_the_default_policy_has_the_documented_half_lives():
    days = {k: r.half_life_days for k, r in decay.DEFAULT_POLICY.items()}
    assert days == {"ephemeral": 10, "task": 30, "conversation": 45, "general": 60, "preference": 90,
                    "decision": 105, "fact": 120}
    assert days["preference"] < days["decision"] < days["fact"]


@pytest.mark.parametrize("kind", list(decay.DEFAULT_POLICY))
def test_floors_hold_after_ten_idle_years(kind):
    row = decay.DEFAULT_POLICY[kind]
    plan = _plan(_row(kind), 3650)
    assert plan.strength == pytest.approx(max(row.floor, 0.0), abs=1e-3)
    assert plan.strength >= row.floor
    assert plan.to_level == (decay.level_for(row.floor) if row.floor > 0 else 3)


def test_signals_slow_decay():
    base = _plan(_row(), 90).strength
    assert _plan(_row(access=10), 90).strength > base
    assert _plan(_row(degree=3), 90).strength > base
    assert _plan(_row(stability=20.0), 90).strength > base
    assert _plan(_row(importance=0.9), 90).strength > base
    assert _plan(_row(confidence=0.2), 90).strength < base


def test_bank_is_additive_across_runs():
    """Three runs (day 20, 45, 60) bank exactly what one run at day 60 computes."""
    row = _row()
    for day in (20, 45, 60):
        plan = _plan(row, day)
        row = {**row, "decay_bank": plan.bank, "decay_checked_at": clock.to_iso(T0 + timedelta(days=day))}
    assert plan.bank == pytest.approx(_plan(_row(), 60).bank)
    assert plan.bank == pytest.approx(1.0)


def test_protected_tags_plan_nothing():
    for tag in ("pinned", "core", "identity"):
        plan = _plan(_row("ephemeral", tags=[tag]), 400)
        assert plan.protected and not plan.changes_level and not plan.write_bank


def test_summary_and_brief_are_documented_shapes():
    summary = decay.summarize(ORIGINAL)
    parts = decay.sentences(ORIGINAL)
    kept = decay.sentences(summary)
    assert kept[0] == parts[0]  # first sentence always kept
    assert len(kept) == math.ceil(len(parts) * 0.4)
    assert [parts.index(s) for s in kept] == sorted(parts.index(s) for s in kept)  # original order
    brief = decay.brief(ORIGINAL)
    assert brief.startswith(parts[0])
    assert "Vault" in brief and "ops/scripts" in brief
    assert decay.brief(ORIGINAL, ["Vault", "GitHub"]).endswith("[entities: Vault]")


def test_policy_overrides_are_validated(store):
    api.config_set(store, "decay_policy", "fact.half_life=150, task.floor=0.1")
    view = api.decay_policy(store)
    rows = {r.kind: r for r in view.rows}
    assert rows["fact"].half_life_days == 150 and rows["task"].floor == 0.1
    for bad in ("fact.halflife=3", "bogus.floor=0.1", "fact.floor=2", "fact.half_life=x"):
        with pytest.raises(InvalidInput):
            api.config_set(store, "decay_policy", bad)


# ---------------------------------------------------------------------------------------------
# Against a real store


def _at(monkeypatch, when: datetime) -> None:
    monkeypatch.setenv("MEMSAFE_NOW", clock.to_iso(when))


def _remember(store, monkeypatch, text, when=T0, **kw):
    _at(monkeypatch, when)
    return api.remember(store, text, **kw)


def test_pinned_core_identity_untouched_after_13_idle_months(store, monkeypatch):
    protected = [
        _remember(store, monkeypatch, f"Never force-push to main ({tag}).", kind="ephemeral", tags=[tag])
        for tag in ("pinned", "core", "identity")
    ]
    plain = _remember(store, monkeypatch, "A throwaway note about lunch.", kind="ephemeral")
    report = api.decay(store, now=T0 + timedelta(days=395))
    assert [c.id for c in report.changes] == [plain.id]
    assert report.protected == 3
    for m in protected:
        after = api.get(store, m.id)
        assert (after.content, after.decay_level, after.status) == (m.content, 0, "active")
        assert len(api.history(store, m.id).versions) == 1
    assert api.get(store, plain.id).status == "archived"


def test_levels_in_order_and_restore_after_level_2_gives_exact_bytes(store, monkeypatch, embedder):
    m = _remember(store, monkeypatch, ORIGINAL)
    seen = []
    for day in (30, 65, 115, 400):
        report = api.decay(store, now=T0 + timedelta(days=day))
        seen.append(api.get(store, m.id).decay_level)
        if day == 65:
            assert api.get(store, m.id).content == decay.summarize(ORIGINAL)
            assert report.changes[0].action == "summary"
        if day == 115:
            assert api.get(store, m.id).content == decay.brief(ORIGINAL, store.entity_names(m.id))
            break
    assert seen == [0, 1, 2]
    causes = [(v.decay_level, v.cause) for v in api.history(store, m.id).versions]
    assert causes == [(0, "decay"), (1, "decay"), (2, "current")]
    # the compressed text is what FTS and the vector index now hold (a rewrite is DELETE + INSERT)
    vec = np.frombuffer(store.get_vector(m.id), dtype=np.float32)
    assert float(vec @ embedder.embed_one(decay.brief(ORIGINAL, store.entity_names(m.id)))) > 0.9999
    assert store.vector_count() == 1
    lexical = api.recall(store, "Production approval on-call", mode="lexical")
    assert lexical.hits == []  # those words were only in the dropped sentences

    _at(monkeypatch, T0 + timedelta(days=116))
    restored = api.restore(store, m.id)
    assert restored.content == ORIGINAL  # exact bytes, inner double space and newline included
    assert restored.decay_level == 0 and restored.status == "active"
    vec = np.frombuffer(store.get_vector(m.id), dtype=np.float32)
    assert float(vec @ embedder.embed_one(ORIGINAL)) > 0.9999
    assert api.history(store, m.id).versions[-2].cause == "restore"
    with pytest.raises(InvalidInput):
        api.restore(store, m.id)  # active and uncompressed now


def test_one_long_jump_passes_every_level_in_order_and_archive_restores_fully(store, monkeypatch):
    m = _remember(store, monkeypatch, ORIGINAL, kind="task")
    report = api.decay(store, now=T0 + timedelta(days=365))
    assert [(c.from_level, c.to_level, c.action) for c in report.changes] == [(0, 3, "archived")]
    versions = api.history(store, m.id).versions
    assert [v.decay_level for v in versions] == [0, 1, 2, 3]
    assert versions[1].content == decay.summarize(ORIGINAL)
    assert versions[-1].status == "archived"
    assert [x.id for x in api.list_memories(store, status="archived")] == [m.id]
    assert api.recall(store, "deploy pipeline rollback").hits == []  # excluded from recall
    _at(monkeypatch, T0 + timedelta(days=365))
    restored = api.restore(store, m.id)
    assert restored.content == ORIGINAL and restored.status == "active"
    # restored memories start afresh: the same instant's decay run changes nothing
    assert api.decay(store, now=T0 + timedelta(days=365)).changes == []


def _state(store) -> list:
    conn = store.conn
    return [
        list(conn.execute("SELECT * FROM memories ORDER BY id")),
        list(conn.execute("SELECT * FROM memory_versions ORDER BY id")),
        list(conn.execute("SELECT * FROM events ORDER BY id")),
    ]


def test_decay_twice_equals_once(store, monkeypatch):
    for i, kind in enumerate(["ephemeral", "task", "general", "fact", "preference"]):
        _remember(store, monkeypatch, f"Memory number {i}. It has two sentences about topic {i}.", kind=kind)
    when = T0 + timedelta(days=100)
    first = api.decay(store, now=when)
    assert first.changes
    state = _state(store)
    second = api.decay(store, now=when)
    assert second.changes == [] and second.banked == 0 and second.skipped == 0
    assert _state(store) == state


def test_dry_run_changes_no_byte_and_matches_apply(db_path, embedder, monkeypatch):
    opened = api.open_store(str(db_path))
    for i in range(6):
        _remember(opened.store, monkeypatch, f"Note {i}: the build cache lives in /tmp/cache-{i}.", kind="task")
    opened.store.close()  # last connection: WAL checkpointed into the file
    digest = hashlib.sha256(db_path.read_bytes()).hexdigest()
    opened = api.open_store(str(db_path))
    dry = api.decay(opened.store, dry_run=True, now=T0 + timedelta(days=90))
    opened.store.close()
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == digest
    assert len(dry.changes) == 6 and all(c.to_level == 3 for c in dry.changes)
    opened = api.open_store(str(db_path))
    applied = api.decay(opened.store, now=T0 + timedelta(days=90))
    opened.store.close()
    assert [(c.id, c.to_level) for c in applied.changes] == [(c.id, c.to_level) for c in dry.changes]


def test_remainder_is_banked_and_not_forgiven_by_unrelated_reads(store, monkeypatch):
    m = _remember(store, monkeypatch, "The staging database is called stg-pg-01.")
    other = _remember(store, monkeypatch, "Lunch is at noon on Fridays.")
    api.decay(store, now=T0 + timedelta(days=40))  # banks 40/60 of a half-life, no level yet
    assert api.get(store, m.id).decay_level == 0
    _at(monkeypatch, T0 + timedelta(days=50))
    api.get(store, m.id)
    api.history(store, m.id)
    api.list_memories(store)
    api.set_confidence(store, m.id, value=0.8)  # metadata edit, same value
    hits = api.recall(store, "lunch fridays noon", limit=1)  # returns the other memory only
    assert [h.memory.id for h in hits.hits] == [other.id]
    api.get(store, other.id, use=True)  # explicit use (being recalled is not one)
    api.recall_as_of(store, "staging database", as_of="2026-01-20")
    report = api.decay(store, now=T0 + timedelta(days=61))
    assert m.id in [c.id for c in report.changes]  # 61 idle days: nothing was forgiven
    assert other.id not in [c.id for c in report.changes]  # its explicit use was a real access


def test_memory_used_every_week_keeps_high_strength(store, monkeypatch):
    # Only explicit use (here `get`, as `memsafe get` and MCP get_memory do) counts;
    # being recalled alone neither ranks a memory up nor protects it from decay.
    daily = _remember(store, monkeypatch, "Run make lint before every push.")
    idle = _remember(store, monkeypatch, "Run the nightly fuzzers before releases.")
    for day in range(1, 396, 7):
        _at(monkeypatch, T0 + timedelta(days=day))
        hits = api.recall(store, "make lint before push", limit=1)
        assert hits.hits[0].memory.id == daily.id
        api.get(store, daily.id, use=True)
    report = api.decay(store, now=T0 + timedelta(days=396))
    changed = {c.id for c in report.changes}
    assert daily.id not in changed and idle.id in changed
    rows = {r["id"]: r for r in store.decay_rows()}
    plan = decay.plan_memory(rows[daily.id], decay.DEFAULT_POLICY, T0 + timedelta(days=396), clock.parse_iso)
    assert plan.strength > 0.6


def test_confirm_strengthens_stability_and_slows_decay(store, monkeypatch):
    a = _remember(store, monkeypatch, "We squash commits before merging.", kind="decision")
    b = _remember(store, monkeypatch, "We rebase feature branches daily.", kind="decision")
    stabilities = []
    for day in (1, 5, 20):
        _at(monkeypatch, T0 + timedelta(days=day))
        result = api.confirm(store, a.id, reason="checked in review")
        stabilities.append(result.stability_after)
    assert stabilities == sorted(stabilities) and stabilities[-1] > stabilities[0]
    assert result.half_life_days > decay.DEFAULT_POLICY["decision"].half_life_days
    events = list(store.conn.execute("SELECT detail FROM events WHERE action = 'confirm'"))
    assert len(events) == 3 and "checked in review" in events[0][0]
    report = api.decay(store, now=T0 + timedelta(days=200))
    assert b.id in {c.id for c in report.changes} and a.id not in {c.id for c in report.changes}


def test_confidence_set_boost_weaken_bounds_and_audit(store, monkeypatch):
    m = _remember(store, monkeypatch, "The API rate limit is 100 requests per minute.")
    assert api.set_confidence(store, m.id, value=0.5, reason="unsure").after == 0.5
    assert api.set_confidence(store, m.id, boost=True).after == pytest.approx(2 / 3, abs=1e-4)
    assert api.set_confidence(store, m.id, weaken=True).after == pytest.approx(0.5, abs=1e-4)
    for _ in range(20):
        last = api.set_confidence(store, m.id, boost=True)
    assert last.after == 0.99
    for bad in (0.0, 1.0, 0.995, float("nan")):
        with pytest.raises(InvalidInput):
            api.set_confidence(store, m.id, value=bad)
    with pytest.raises(InvalidInput):
        api.set_confidence(store, m.id, value=0.5, boost=True)
    details = [r[0] for r in store.conn.execute("SELECT detail FROM events WHERE action = 'confidence'")]
    assert len(details) == 23 and "reason: unsure" in details[0]
    # lower confidence decays sooner
    api.set_confidence(store, m.id, value=0.01)
    weak = decay.plan_memory(store.decay_rows()[0], decay.DEFAULT_POLICY, T0 + timedelta(days=60), clock.parse_iso)
    assert weak.strength < decay.initial_strength(0.5, 0.8) / 2


def test_dry_run_never_checkpoints_other_writers_wal_into_the_file(db_path, embedder, monkeypatch):
    writer = api.open_store(str(db_path)).store
    _remember(writer, monkeypatch, "Old note about the VPN.", kind="ephemeral")
    writer.checkpoint()
    writer.conn.execute("PRAGMA wal_autocheckpoint = 0")
    writer.no_checkpoint_on_close()
    _remember(writer, monkeypatch, "A newer note, still only in the WAL.", kind="ephemeral")
    writer.close()
    digest = hashlib.sha256(db_path.read_bytes()).hexdigest()
    reader = api.open_store(str(db_path)).store
    report = api.decay(reader, dry_run=True, now=T0 + timedelta(days=60))
    reader.close()  # the last connection: would normally copy the WAL into the file
    assert len(report.changes) == 2
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == digest


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.floats(min_value=0.0, max_value=400.0), max_size=6), end=st.floats(0.0, 400.0),
       kind=st.sampled_from(list(decay.DEFAULT_POLICY)), access=st.integers(0, 50))
def test_bank_does_not_depend_on_how_often_decay_runs(cuts, end, kind, access):
    """Running decay at any set of earlier instants banks exactly what one run at `end` computes."""
    row = _row(kind, access=access)
    for day in sorted(c for c in cuts if c <= end):
        plan = _plan(row, day)
        row = {**row, "decay_bank": plan.bank, "decay_checked_at": clock.to_iso(T0 + timedelta(days=day))}
    assert _plan(row, end).bank == pytest.approx(_plan(_row(kind, access=access), end).bank, rel=1e-9, abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(alphabet="abcdefgh XYZ019/.", min_size=1, max_size=40), min_size=1, max_size=8))
def test_summary_keeps_whole_sentences_in_order(words):
    text = ". ".join(w.strip() or "x" for w in words) + "."
    parts = decay.sentences(text)
    summary = decay.summarize(text)
    if len(parts) > 1:
        kept = decay.sentences(summary)
        rest = iter(parts)
        assert all(any(k == p for p in rest) for k in kept)  # a subsequence: whole sentences, in order
        assert kept[0] == parts[0] and len(kept) < len(parts)
    assert decay.brief(text).startswith(decay.sentences(text)[0].split()[0])

