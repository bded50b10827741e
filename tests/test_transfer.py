"""Export/import: lossless round trip, idempotent re-import, all-or-nothing, the MCP
memory-server format with its odd cases, and deferred embedding."""

from __future__ import annotations

import base64
import io
import json
import math
import signal
import struct
import subprocess
import sys
from datetime import timedelta

import pytest
from conftest import run_memsafe
from test_safety import AWS, GITHUB
from typer.testing import CliRunner

from memsafe import api, clock, transfer
from memsafe.cli import app
from memsafe.errors import InvalidInput
from memsafe.plural import count_of

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

# -- fixtures ----------------------------------------------------------------------------------


def _at(monkeypatch, instant: str) -> None:
    monkeypatch.setenv("MEMSAFE_NOW", instant)


@pytest.fixture
def rich_store(store, monkeypatch):
    """Several projects, a pinned and an emoji memory, forgotten ones, history versions,
    entities with aliases and relations; timestamps given with mixed UTC offsets."""
    offsets = ["+02:00", "-07:00", "Z", "+05:30", "+00:00"]
    ids = []
    for i in range(30):
        _at(monkeypatch, f"2026-0{1 + i % 9}-1{i % 10}T0{i % 10}:15:00{offsets[i % 5]}")
        m = api.remember(
            store, f"memory number {i} about {['deploys', 'merging', 'tests'][i % 3]}",
            project=[None, "web", "api", "/home/a/src/cli"][i % 4], tags=["pinned"] if i in (3, 7) else [f"t{i % 4}"],
            kind=["fact", "decision", "general"][i % 3], importance=round(0.1 + i / 40, 3), embed_now=False,
        )
        ids.append(m.id)
    _at(monkeypatch, "2026-10-01T12:00:00-04:00")
    api.remember(store, "ship it 🚀 — café naïve ✓", project="web", embed_now=False)
    for i in (5, 9, 13):
        api.forget(store, ids[i], reason="obsolete")
    _at(monkeypatch, "2026-10-02T08:00:00+09:00")
    with store.write():
        for i in (1, 2, 4, 6):
            snap = store.raw_row(ids[i])
            store.add_version(snap, ["old-tag"], clock.now_iso(), "update")
            store.update_memory(ids[i], {"content": snap["content"] + " (revised)", "updated_at": clock.now_iso()})
        eids = [store.insert_entity(f"Ent {n}", f"ent {n}", "thing", clock.now_iso()) for n in range(20)]
        store.add_entity_aliases(eids[0], ["E-zero", "zero"])
        for n, eid in enumerate(eids):
            store.link_memory_entity(ids[n], eid)
            store.link_memory_entity(ids[(n + 7) % len(ids)], eid)
        for n in range(30):
            store.add_relation(eids[n % 20], ["depends_on", "owns"][n // 20], eids[(n * 3 + 1) % 20], 0.5 + n,
                               clock.now_iso(), clock.now_iso())
        store.config_set("token_budget", "1234")
    monkeypatch.delenv("MEMSAFE_NOW")
    return store


def _export(store, **options) -> list[dict]:
    buf = io.StringIO()
    api.export(store, buf, include_forgotten=True, **{"all_projects": True, **options})
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def _write(path, records) -> None:
    path.write_text("".join(transfer.dump_line(r) for r in records), encoding="utf-8")


def _fresh(tmp_path, name="other.db"):
    return api.open_store(str(tmp_path / name)).store


# -- memsafe format ----------------------------------------------------------------------------


def test_round_trip_is_identical(rich_store, tmp_path, db_path, backend):
    """A round trip loses nothing: memsafe export a; memsafe --db new import a; memsafe --db new
    export b; a == b but exported_at."""
    rich_store.close()
    db, new = db_path, tmp_path / "new.db"
    runner = CliRunner()
    for args in (["--db", str(db), "export", "--all-projects", "--include-forgotten", "-o", str(tmp_path / "a.jsonl")],
                 ["--db", str(new), "import", str(tmp_path / "a.jsonl"), "--no-embed"],
                 ["--db", str(new), "export", "--all-projects", "--include-forgotten", "-o",
                  str(tmp_path / "b.jsonl")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
    a = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    b = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines()]
    a[0].pop("exported_at"), b[0].pop("exported_at")
    if backend != "sqlite":  # each backend numbers its own schema versions
        a[0].pop("schema_version"), b[0].pop("schema_version")
    assert a == b
    other = api.open_store(str(new)).store
    memories = [r for r in b if r.get("type") == "memory"]
    assert [m["id"] for m in memories] == sorted(m["id"] for m in memories)
    assert sum(m["status"] == "forgotten" for m in memories) == 3
    assert sum("pinned" in m["tags"] for m in memories) == 2
    assert sum(len(m["versions"]) for m in memories) == 4
    assert any("🚀" in m["content"] for m in memories)
    assert all(m["created_at"].endswith("+00:00") for m in memories)
    assert len([r for r in b if r.get("type") == "relation"]) == 30
    assert len([r for r in b if r.get("type") == "entity"]) == 20
    assert sum(len(m["entities"]) for m in memories) == 40
    assert api.config_get(other, "token_budget") == 1234
    assert other.pending_count() == 28  # vectors are recomputed, never imported (forgotten ones excluded)
    other.close()


def test_import_twice_changes_nothing(rich_store, tmp_path):
    path = tmp_path / "a.jsonl"
    api.export_to_path(rich_store, path, include_forgotten=True, all_projects=True)
    other = _fresh(tmp_path)
    api.import_file(other, path)
    before = (other.counts(), _export(other)[1:], other.conn.execute("SELECT count(*) FROM events").fetchone())
    again = api.import_file(other, path)
    assert (again.memories_added, again.memories_updated, again.entities_added, again.relations_added) == (0, 0, 0, 0)
    assert again.memories_unchanged == 31
    after = (other.counts(), _export(other)[1:], other.conn.execute("SELECT count(*) FROM events").fetchone())
    assert before == after
    # importing into the source store itself is also a no-op
    assert api.import_file(rich_store, path).memories_added == 0
    other.close()


def test_newer_record_replaces_older_by_uid(rich_store, tmp_path):
    records = _export(rich_store)
    path = tmp_path / "a.jsonl"
    _write(path, records)
    other = _fresh(tmp_path)
    api.import_file(other, path)
    mem = next(r for r in records if r.get("type") == "memory")
    mem["content"] = "replaced text"
    mem["updated_at"] = "2026-11-01T00:00:00+00:00"  # later than the store's, not in the future
    _write(path, records)
    report = api.import_file(other, path)
    assert report.memories_updated == 1 and report.memories_added == 0
    assert other.get_memory(mem["id"]).content == "replaced text"
    other.close()


def _bulk_records(n: int) -> list[dict]:
    head = transfer.header(exported_at="2026-01-01T00:00:00+00:00", memsafe_version="0", schema_version=1,
                           project=None, include_forgotten=False)
    body = [
        {"type": "memory", "uid": f"bulk{i:05d}", "content": f"bulk memory {i}", "kind": "fact", "project": "bulk",
         "source": "import", "importance": 0.5, "confidence": 0.8, "created_at": "2026-01-02T03:04:05+01:00",
         "updated_at": "2026-01-02T03:04:05+01:00", "status": "active", "tags": ["bulk"]}
        for i in range(1, n + 1)
    ]
    return [head, *body, {"type": "end", "counts": {"memory": n}}]


def test_a_batched_import_checks_each_record_as_if_the_ones_before_were_stored(store, tmp_path):
    """Import inserts new memories many rows per statement (~0.5 ms per statement per
    word index); a record is still checked against every earlier one: a text repeated 290 records
    later is a duplicate of the first, an exported id is kept when free and never taken by a
    memory given a new id (those come after), and tags, history, entity links and the word index
    hold every memory."""
    for text in ("held one", "held two", "held three"):
        api.remember(store, text, embed_now=False)  # ids 1-3 taken
    records = _bulk_records(450)
    body = records[1:-1]
    body[299]["content"] = body[9]["content"]  # bulk00300 repeats bulk00010
    for i, rec in enumerate(body):
        rec["id"] = (2 if i % 3 == 0 else 1000 + i)  # id 2 is taken: those get new ids
        rec["entities"] = ["bulkdb"]
    body[5]["versions"] = [{"content": "bulk memory 6, first draft", "kind": "fact", "project": "bulk", "tags": [],
                            "importance": 0.5, "confidence": 0.8, "valid_from": "2026-01-01T00:00:00+00:00",
                            "valid_to": "2026-01-02T02:04:05+00:00", "cause": "update"}]
    entity = {"type": "entity", "name": "BulkDB", "key": "bulkdb", "entity_type": "database", "aliases": [],
              "created_at": "2026-01-01T00:00:00+00:00"}
    path = tmp_path / "batched.jsonl"
    _write(path, [records[0], entity, *body, {"type": "end", "counts": {"memory": 450, "entity": 1}}])
    report = api.import_file(store, path)
    assert report.memories_added == 449 and report.duplicates == 1 and report.links_added == 449
    assert any("uid bulk00300 duplicates uid bulk00010, earlier in this file" in s for s in report.skipped)
    ids = {rec["uid"]: store.memory_by_uid(rec["uid"]) for rec in body if rec["uid"] != "bulk00300"}
    exported = {rec["uid"]: rec["id"] for rec in body if rec["uid"] in ids}
    assert all(ids[uid]["id"] == i for uid, i in exported.items() if i != 2)  # every free exported id is kept
    assert min(ids[uid]["id"] for uid, i in exported.items() if i == 2) > max(exported.values())  # new ids after
    assert len({row["id"] for row in ids.values()}) == 449
    assert store.tags_of([ids["bulk00450"]["id"]])[ids["bulk00450"]["id"]] == ["bulk"]
    assert [v["content"] for v in store.versions(ids["bulk00006"]["id"])] == ["bulk memory 6, first draft"]
    hits = api.recall(store, "bulk memory 449", mode="lexical", project="bulk").hits
    assert hits and hits[0].memory.content == "bulk memory 449"
    assert {e.name: e.memories for e in api.graph_entities(store, project="bulk")}["BulkDB"] == 449
    assert store.consistency_problems() == []


def test_corrupt_record_500_of_1000_imports_nothing(store, tmp_path, cli):
    api.remember(store, "already here", embed_now=False)
    before = store.counts()
    records = _bulk_records(1000)
    records[500]["created_at"] = "not-a-date"  # records[0] is the header: this is record 500
    path = tmp_path / "bad.jsonl"
    _write(path, records)
    with pytest.raises(InvalidInput) as info:
        api.import_file(store, path)
    message = str(info.value)
    assert "record 500" in message and "line 501" in message
    assert 'created_at "not-a-date" is not an ISO-8601 time' in message
    assert "nothing imported" in message
    assert store.counts() == before
    result = cli("import", str(path), "--no-embed")
    assert result.exit_code == 1 and "record 500" in result.stderr
    assert store.counts() == before
    partial = cli("import", str(path), "--no-embed", "--skip-invalid")
    assert partial.exit_code == 3, partial.stderr
    assert "record 500" in partial.stderr and "999 memories added" in partial.stderr
    assert store.counts()["active"] == before["active"] + 999


def test_truncated_or_future_files_are_refused(store, tmp_path):
    records = _bulk_records(3)
    path = tmp_path / "cut.jsonl"
    _write(path, records[:-1])  # cut at a line boundary: no end record
    with pytest.raises(InvalidInput, match="truncated"):
        api.import_file(store, path)
    _write(path, records[:2] + ['{"type":"memory","uid":"x","con'])  # cut mid-line
    path.write_text(path.read_text().rstrip("\n").replace("\\", ""))
    with pytest.raises(InvalidInput, match="record 2, line 3"):
        api.import_file(store, path)
    records[0]["version"] = transfer.FORMAT_VERSION + 1
    _write(path, records)
    with pytest.raises(InvalidInput, match="upgrade memsafe"):
        api.import_file(store, path)
    assert store.counts()["total"] == 0


def test_dry_run_writes_nothing(store, tmp_path):
    path = tmp_path / "b.jsonl"
    _write(path, _bulk_records(20))
    report = api.import_file(store, path, dry_run=True)
    assert report.memories_added == 20 and report.dry_run
    assert store.counts()["total"] == 0


def test_export_project_filter_and_stdout(rich_store, cli, tmp_path):
    result = cli("export", "--project", "web")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert lines[0]["format"] == "memsafe" and lines[0]["filter"]["project"] == "web"
    assert lines[-1]["type"] == "end"
    memories = [r for r in lines if r.get("type") == "memory"]
    assert {m["project"] for m in memories} == {"web", None}  # the project plus global memories, as recall
    assert all(m["status"] != "forgotten" for m in memories)


def test_export_fields_cover_every_column(store):
    """A migration that adds a column must extend the export format (MEMORY_FIELDS / LINK_FIELDS /
    VERSION_FIELDS)."""
    assert set(store.memory_columns()) == (set(transfer.MEMORY_FIELDS) | set(transfer.DERIVED_MEMORY_COLUMNS)
                                           | set(transfer.LINK_FIELDS))
    assert set(store.version_columns()) == set(transfer.VERSION_FIELDS) | {"id", "memory_id"}


# -- server-memory format --------------------------------------------------------------------

SERVER_MEMORY_JSONL = (
    '{"type":"entity","name":"Project_X","entityType":"Project","observations":["Started 2023","Focus on NLP"]}\n'
    '{"type":"entity","name":"Ops_Team","observations":[null,"owns deploys"]}\n'
    '{"type":"relation","from":"Ops_Team","to":"Project_X","relationType":"maintains"}\n'
    "\n"
    '{"type":"entity","entityName":"Legacy_Name","entityType":"Thing","observations":[]}\n'
    '{"type":"relation","from":"Project_X","to":"Nowhere","relationType":"blocks"}\n'
    '{"type":"unknown","foo":1}\n'
    '{"type":"entity","name":"Trunc'
)


def test_f16_refused_without_skip_invalid(cli, tmp_path, store):
    path = tmp_path / "memory.json"
    path.write_text(SERVER_MEMORY_JSONL, encoding="utf-8")
    result = cli("import", str(path), "--format", "auto", "--no-embed")
    assert result.exit_code == 1
    assert "nothing imported" in result.stderr
    assert "line 2: observations[0] null" in result.stderr and "line 8" in result.stderr
    assert store.counts()["total"] == 0 and store.counts()["entities"] == 0


def test_f16_skip_invalid_imports_the_rest_and_reports_each_line(cli, tmp_path, store):
    path = tmp_path / "memory.json"
    path.write_text(SERVER_MEMORY_JSONL, encoding="utf-8")
    result = cli("import", str(path), "--format", "auto", "--skip-invalid", "--no-embed")
    assert result.exit_code == 3, result.stderr
    err = result.stderr
    for expected in ("line 2: observations[0] null", 'line 2: entity "Ops_Team" has no entityType',
                     'line 5: uses the legacy key entityName', 'line 6: relation Project_X -blocks-> Nowhere',
                     'line 7: unknown type "unknown"', "line 8: is truncated"):
        assert expected in err, expected
    counts = store.counts()
    assert (counts["entities"], counts["active"], counts["relations"]) == (3, 3, 1)
    names = {r[0]: r[1] for r in store.conn.execute("SELECT name, type FROM entities")}
    assert names == {"Project_X": "Project", "Ops_Team": "entity", "Legacy_Name": "Thing"}
    contents = sorted(r[0] for r in store.conn.execute("SELECT content FROM memories"))
    assert contents == ["Ops_Team: owns deploys", "Project_X: Focus on NLP", "Project_X: Started 2023"]
    assert {r[0] for r in store.conn.execute("SELECT source FROM memories")} == {"import"}
    # second run: nothing new
    again = cli("import", str(path), "--skip-invalid", "--no-embed", "--json")
    assert again.exit_code == 3
    report = json.loads(again.stdout)
    assert (report["memories_added"], report["entities_added"], report["relations_added"]) == (0, 0, 0)
    assert store.counts() == counts


def test_server_memory_json_array_duplicates_and_surrogates(store, tmp_path):
    objs = [
        {"type": "entity", "name": "Web  App", "entityType": "Service", "observations": ["runs on \udc81 port 80"]},
        {"type": "entity", "name": "web app", "entityType": "Service", "observations": ["runs on \udc81 port 80",
                                                                                         "uses nginx"]},
        {"type": "relation", "from": "Web App", "to": "web app", "relationType": "self"},
    ]
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(objs), encoding="utf-8")  # a real JSON array; \udc81 stays escaped
    report = api.import_file(store, path)
    assert report.format == "server-memory" and not report.skipped
    assert (report.entities_added, report.memories_added, report.relations_added) == (1, 2, 1)
    contents = sorted(r[0] for r in store.conn.execute("SELECT content FROM memories"))
    assert contents == ["Web  App: runs on \ufffd port 80", "Web  App: uses nginx"]  # first spelling kept
    dup = tmp_path / "dup.jsonl"
    line = json.dumps(objs[1])
    dup.write_text(f"{line}\n{line}\n{line}", encoding="utf-8")  # duplicate lines, no trailing newline
    assert api.import_file(store, dup, fmt="server-memory").memories_added == 0


# -- deferred embedding ------------------------------------------------------------------------


def test_deferred_memory_found_lexically_then_by_meaning_after_embed(cli, store):
    store.close()
    assert cli("remember", "The staging database password rotates every Tuesday", "--no-embed", "--global")\
        .exit_code == 0
    status = json.loads(cli("status", "--json").stdout)
    assert status["pending_embeddings"] == 1
    lexical = json.loads(cli("recall", "staging password", "--mode", "lexical", "--json").stdout)
    assert [r["content"] for r in lexical["results"]] == ["The staging database password rotates every Tuesday"]
    assert json.loads(cli("status", "--json").stdout)["pending_embeddings"] == 1  # lexical recall did not embed
    done = cli("embed", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == {"embedded": 1, "pending": 0, "error": None}
    after = json.loads(cli("recall", "when do credentials change", "--mode", "vector", "--json").stdout)
    assert after["results"][0]["content"].startswith("The staging database password")


def test_export_to_an_unwritable_place_is_one_line_error(cli, tmp_path):
    result = cli("export", "-o", str(tmp_path / "missing" / "a.jsonl"))
    assert result.exit_code == 1 and "cannot write" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "missing").exists()


def test_field_hygiene_errors_name_the_record(store, tmp_path):
    records = _bulk_records(3)
    records[2]["content"] = "\x00"
    records[3]["tags"] = ["ok", 5]
    path = tmp_path / "h.jsonl"
    _write(path, records)
    with pytest.raises(InvalidInput) as info:
        api.import_file(store, path)
    assert "record 2, line 3: content is empty" in str(info.value)
    assert "record 3, line 4: tags" in str(info.value)
    report = api.import_file(store, path, skip_invalid=True)
    assert report.memories_added == 1 and len(report.skipped) == 2


# -- vectors in an export (`export --vectors`) ----------------------------------------------------


def _embedded_store(store, n=12):
    for i in range(n):
        api.remember(store, f"note {i}: the {['billing', 'search', 'login'][i % 3]} service retries {i} times",
                     project=["web", None][i % 2])
    assert store.pending_count() == 0
    return store


def test_vectors_round_trip_byte_identical_without_the_model(store, tmp_path, cli):
    """A restore with the same model stores the file's vectors as they are: no pending embedding,
    identical bytes, and vector recall works in the new store at once."""
    _embedded_store(store)
    path = tmp_path / "move.jsonl"
    result = cli("export", "--all-projects", "--vectors", "-o", str(path))
    assert result.exit_code == 0, result.stderr
    assert "with 12 vectors" in result.stderr
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert records[0]["embedding"]["dim"] == 384
    assert all(len(r["vector"]) == 2048 for r in records if r.get("type") == "memory")
    other = _fresh(tmp_path)
    report = api.import_file(other, path)
    assert report.vectors_imported == 12 and other.pending_count() == 0
    ids = [r["id"] for r in records if r.get("type") == "memory"]
    assert other.get_vectors(ids) == store.get_vectors(ids)
    hit = api.recall(other, "how often does authentication try again?", all_projects=True, mode="vector")
    assert "login" in hit.hits[0].memory.content
    assert other.consistency_problems() == []


def test_vectors_from_another_model_are_ignored_with_a_note(store, tmp_path):
    _embedded_store(store, 3)
    path = tmp_path / "a.jsonl"
    api.export_to_path(store, path, vectors=True, all_projects=True)
    lines = path.read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["embedding"]["model"] = "some/other-model.onnx:1:abc"
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n", encoding="utf-8")
    other = _fresh(tmp_path)
    report = api.import_file(other, path)
    assert report.vectors_imported == 0 and report.memories_added == 3
    assert any("embedded again" in n for n in report.notes)
    assert other.pending_count() == 3


@pytest.mark.parametrize("bad, reason", [
    ("not base64!", "not valid base64"),
    ("AAAAAA==", "only zeros"),
    ("AAAA", "not a whole number of float32"),
    ("AACAfw==", "not finite"),  # +inf as float32 LE
    ("AAB", "not valid base64"),
    ("AACAPwAAgD8=", "holds 2 values"),  # two floats where the model has 384
    (12, "float32-le-base64"),
])
def test_a_bad_vector_refuses_the_import_and_names_the_field(store, tmp_path, bad, reason):
    _embedded_store(store, 2)
    path = tmp_path / "a.jsonl"
    api.export_to_path(store, path, vectors=True, all_projects=True)
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    memory = next(r for r in records if r.get("type") == "memory")
    memory["vector"] = bad
    _write(path, records)
    other = _fresh(tmp_path)
    with pytest.raises(InvalidInput) as info:
        api.import_file(other, path)
    assert "vector" in str(info.value) and reason in str(info.value)
    assert other.counts()["active"] == 0 and other.vector_count() == 0


def test_a_redacted_memory_gets_a_fresh_vector_not_the_files(store, tmp_path):
    _embedded_store(store, 1)
    path = tmp_path / "a.jsonl"
    api.export_to_path(store, path, vectors=True, all_projects=True)
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    memory = next(r for r in records if r.get("type") == "memory")
    memory["content"] = f"deploy key {AWS} for the billing bucket"
    _write(path, records)
    other = _fresh(tmp_path)
    report = api.import_file(other, path, redact=True)
    assert report.vectors_imported == 0 and other.pending_count() == 1


def test_export_vectors_from_a_store_without_any_is_a_clear_error(tmp_path, cli, store):
    api.remember(store, "not embedded yet", embed_now=False)
    store.close()
    result = cli("export", "--vectors", "-o", str(tmp_path / "x.jsonl"))
    assert result.exit_code == 1
    assert "no vectors to export" in result.stderr and "Traceback" not in result.stderr


def test_a_uid_twice_in_one_file_is_reported_and_the_first_kept(store, tmp_path):
    api.remember(store, "the first text", embed_now=False)
    path = tmp_path / "a.jsonl"
    api.export_to_path(store, path)
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    again = dict(next(r for r in records if r.get("type") == "memory"), content="a second text, same uid",
                 updated_at=clock.to_iso(clock.now() + timedelta(hours=1)))  # later, within the clock slack
    records.insert(-1, again)
    records[-1]["counts"]["memory"] += 1
    _write(path, records)
    other = _fresh(tmp_path)
    report = api.import_file(other, path)
    assert report.memories_added == 1 and report.memories_updated == 0
    assert any("appeared already on line 2" in s for s in report.skipped) and report.partial
    assert [m.content for m in api.list_memories(other)] == ["the first text"]


# -- purge is a promise ---------------------------------------------------------


def test_an_import_never_brings_back_a_purged_memory(cli, tmp_path, store):
    """remember X; export; purge; import: X stays purged ("skipped: purged on DATE"), on the
    memsafe and server-memory formats and over MCP; --allow-purged is the explicit way back."""
    x = api.remember(store, "the staging bucket is s3 bucket blue-otter", embed_now=False)
    backup = tmp_path / "b.jsonl"
    assert cli("export", "-o", str(backup)).exit_code == 0
    assert cli("purge", str(x.id), "--yes").exit_code == 0
    stub = store.conn.execute("SELECT detail FROM events WHERE action = 'purge'").fetchone()[0]
    assert stub == f"uid={x.uid}"  # content-free: the uid, never the text
    result = cli("import", str(backup), "--no-embed")
    assert result.exit_code == 3, result.stderr
    assert f"uid {x.uid}: purged on {clock.now_iso()[:10]}" in result.stderr
    assert "0 memories added" in result.stderr and "1 skipped (1 purged here before" in result.stderr
    assert store.counts()["total"] == 0
    from test_server import call, inproc, text_of

    srv = inproc(store.path, cwd=str(tmp_path))  # no warm thread left running after the test

    reply = text_of(call(srv, "transfer", {"path": str(backup), "direction": "import"}))
    assert "0 added" in reply and "purged on" in reply and store.counts()["total"] == 0
    back = cli("import", str(backup), "--no-embed", "--allow-purged")
    assert back.exit_code == 0 and "1 memory added" in back.stderr
    assert api.get(store, x.id).content == x.content
    # the server-memory format: observations have stable uids, purged ones stay purged too
    sm = tmp_path / "memory.jsonl"
    sm.write_text('{"type":"entity","name":"Ops_Team","entityType":"team","observations":["owns deploys"]}\n',
                  encoding="utf-8")
    assert api.import_file(store, sm).memories_added == 1
    observation = next(m for m in api.list_memories(store) if m.content == "Ops_Team: owns deploys")
    api.purge(store, [observation.id])
    again = api.import_file(store, sm)
    assert again.memories_added == 0 and again.purged == 1 and "purged on" in again.skipped[0]
    assert api.import_file(store, sm, allow_purged=True).memories_added == 1


# -- what an import checks ----------------------------------------------------


def test_entity_keys_in_a_file_are_recomputed_from_names(tmp_path, store, cli):
    """{"name":"Bar","key":"foo"} must not make a second Bar: the key comes from the name, and
    the file's key still links its memory and relation records."""
    head = transfer.header(exported_at="2026-01-01T00:00:00+00:00", memsafe_version="0", schema_version=1,
                           project=None, include_forgotten=False)
    at = "2026-01-02T00:00:00+00:00"
    records = [
        head,
        {"type": "entity", "name": "Bar", "key": "foo", "entity_type": "service", "created_at": at},
        {"type": "entity", "name": "Baz", "key": "baz", "created_at": at},
        {"type": "memory", "uid": "u1", "content": "the bar service is slow", "created_at": at, "updated_at": at,
         "entities": ["foo"]},
        {"type": "relation", "source": "foo", "relation": "calls", "target": "baz", "created_at": at,
         "updated_at": at},
        {"type": "end", "counts": {"entity": 2, "memory": 1, "relation": 1}},
    ]
    path = tmp_path / "keys.jsonl"
    _write(path, records)
    assert api.import_file(store, path).entities_added == 2
    again = cli("graph", "add-entity", "Bar", "--json")
    assert json.loads(again.stdout)["created"] is False
    listing = api.graph_list(store, all_projects=True)
    assert [e.name for e in listing.entities] == ["Bar", "Baz"]
    assert [(r.source, r.relation, r.target) for r in listing.relations] == [("Bar", "calls", "Baz")]
    assert listing.entities[0].memories == 1
    # one file key given to two entities: which one its records mean is unknown, so it is refused
    records[2]["key"] = "foo"
    _write(path, records)
    with pytest.raises(InvalidInput, match='record 2, line 3: key "foo" already names another entity in this file '
                                           r'\(line 2\)'):
        api.import_file(store, path)
    assert [e.name for e in api.graph_list(store, all_projects=True).entities] == ["Bar", "Baz"]


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop(2), "line 4: end counts say 3 memory records but the file holds 2: lines were lost"),
    (lambda r: r[1].update(created_at="2099-01-01T00:00:00Z"),
     'line 2: created_at "2099-01-01T00:00:00Z" is in the future'),
    (lambda r: r[2].update(created_at="2026-03-01T00:00:00Z", updated_at="2026-02-01T00:00:00Z"),
     "line 3: created_at 2026-03-01T00:00:00.000000+00:00 is later than updated_at"),
    (lambda r: r[3].update(versions=[{
        "content": "old text", "kind": "fact", "tags": [], "importance": 0.5, "confidence": 0.8,
        "valid_from": "2026-01-05T00:00:00Z", "valid_to": "2026-01-01T00:00:00Z", "cause": "update"}]),
     "line 4: versions[0].valid_from 2026-01-05T00:00:00.000000+00:00 is later than valid_to"),
])
def test_an_inconsistent_file_is_refused_naming_the_line(store, tmp_path, change, message):
    """A file that lost lines in the middle, a time in the future, created after updated, a
    version that ends before it starts: refused, naming the line, nothing written."""
    records = _bulk_records(3)
    change(records)
    path = tmp_path / "bad.jsonl"
    _write(path, records)
    with pytest.raises(InvalidInput) as info:
        api.import_file(store, path)
    assert message in str(info.value) and "nothing imported" in str(info.value)
    assert store.counts()["total"] == 0


# -- Ctrl-C during an import --------------------------------------------------


def _interrupt_when(proc, ready, timeout=60.0, signal_number: int = signal.SIGINT) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the import ended before it could be interrupted"
    proc.send_signal(signal_number)


def _memsafe(db, *args, env=None):
    import os

    return subprocess.Popen([sys.executable, "-m", "memsafe", "--db", str(db), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def _import_writing(db) -> bool:
    """Whether an import into `db` (a SQLite file or a PostgreSQL URL) is writing: its transaction
    holds the write lock on the memories and nothing is committed yet. (A SQLite WAL's size does
    not tell: a 64 MiB page cache holds the transaction's pages until commit.)"""
    if str(db).startswith("postgresql"):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as conn:
            locked = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'memories' AND l.mode = 'RowExclusiveLock' AND l.pid <> pg_backend_pid()"
            ).fetchone()[0]
            return bool(locked) and conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    import apsw

    try:
        conn = apsw.Connection(str(db))
    except apsw.Error:
        return False
    try:
        conn.set_busy_timeout(0)
        if not conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'memories'").fetchone()[0]:
            return False
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except apsw.BusyError:
            return conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    except apsw.Error:
        return False
    finally:
        conn.close()


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_an_import_writes_rolls_it_back_and_says_so(db_path, tmp_path, signal_number):
    """Ctrl-C, or SIGTERM (`kill`, `timeout`, a service manager), while the records are written:
    exit 130 or 143, "nothing imported (rolled back)", an empty store, no traceback, on either
    backend. Before, SIGTERM killed the process at once (it said nothing), and the PostgreSQL
    import was never interrupted in a test."""
    big = tmp_path / "big.jsonl"
    _write(big, _bulk_records(40_000))
    proc = _memsafe(db_path, "import", str(big), "--no-embed", env={"MEMSAFE_NO_MODEL": "1"})
    _interrupt_when(proc, lambda: _import_writing(db_path), signal_number=signal_number)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal_number, err
    assert "interrupted: nothing imported (rolled back)" in err and "Traceback" not in err
    assert api.open_store(str(db_path)).store.counts()["total"] == 0


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_embed_says_what_it_kept_and_the_next_goes_on(tmp_path, embedder, signal_number):
    """`memsafe embed` stopped by Ctrl-C or SIGTERM once some batches are written: exit 130 or 143
    and one line saying how many were embedded and how many are pending (before: Ctrl-C exited
    130 saying nothing, SIGTERM killed it silently); the batches written stay, and the next
    `memsafe embed` fills the rest (an interrupted fill resumes)."""
    db = tmp_path / "db" / "memory.db"
    source = tmp_path / "bulk.jsonl"
    _write(source, _bulk_records(3_000))
    assert run_memsafe("--db", str(db), "import", str(source), "--no-embed").returncode == 0

    def some_embedded() -> bool:
        store = api.open_store(str(db)).store
        try:
            return 0 < store.pending_count() < 3_000
        finally:
            store.close()

    proc = _memsafe(db, "embed")
    _interrupt_when(proc, some_embedded, timeout=120, signal_number=signal_number)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal_number, err
    pending = api.open_store(str(db)).store.pending_count()
    assert 0 < pending < 3_000
    assert f"interrupted: {count_of(3_000 - pending, 'memory')} embedded, {pending} pending; " in err, err
    assert "Traceback" not in err

    done = run_memsafe("--db", str(db), "embed")
    assert done.returncode == 0, done.stderr
    assert api.open_store(str(db)).store.pending_count() == 0


def test_ctrl_c_while_an_import_embeds_says_what_was_kept(tmp_path, embedder):
    """SIGINT while vectors are computed (the import committed): exit 130, what was imported and
    what is pending. (While the records are written: the test above.)"""
    import apsw

    db = tmp_path / "db" / "memory.db"
    small = tmp_path / "small.jsonl"
    _write(small, _bulk_records(3_000))

    def committed() -> bool:
        try:
            conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                return conn.execute("SELECT count(*) FROM memories").fetchone()[0] > 0
            finally:
                conn.close()
        except apsw.Error:
            return False

    proc = _memsafe(db, "import", str(small))
    _interrupt_when(proc, committed, timeout=120)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    pending = api.open_store(str(db)).store.pending_count()
    assert 0 < pending <= 3000
    vectors = count_of(pending, "vector")
    assert f"interrupted: 3,000 memories added, 0 updated; {vectors} pending: run `memsafe embed`" in err


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]



def _vector_text(values) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


@pytest.fixture
def exported(store, tmp_path):
    """An export with vectors of a small store: (records, path)."""
    api.remember(store, "The build uses Bazel with remote caching")
    api.remember(store, "Postgres listens on port 5433 in the dev containers")
    path = tmp_path / "export.jsonl"
    report = api.export_to_path(store, path, vectors=True)
    assert report.vectors == 2
    return _records(path), path


@pytest.mark.parametrize("values", [
    [3e38] * 384,  # squares overflow float32: the norm was inf, the stored vector all zeros
    [1e-45] * 384,  # squares underflow float32: the norm was 0, the stored vector inf/NaN
    [3e38] + [0.0] * 383,
    [-1e-40] * 10 + [0.0] * 374,
])
def test_imported_vectors_of_extreme_magnitude_are_stored_unit_and_recall_works(exported, tmp_path, values):
    records, _ = exported
    target = next(r for r in records if r.get("type") == "memory" and "Bazel" in r["content"])
    target["vector"] = _vector_text(values)
    path = tmp_path / "extreme.jsonl"
    _write(path, records)
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        report = api.import_file(other, path)
        assert report.vectors_imported == 2
        for raw in other.get_vectors([target["id"]]).values():
            stored = struct.unpack(f"<{len(raw) // 4}f", raw)
            assert all(math.isfinite(v) for v in stored)
            assert abs(math.sqrt(sum(v * v for v in stored)) - 1.0) < 1e-3
        for _ in range(2):  # the second search goes through the process's in-memory copy when large enough
            hits = api.recall(other, "which port does postgres listen on").hits
            assert hits and "5433" in hits[0].memory.content
    finally:
        other.close()


def test_an_invalid_first_copy_of_a_uid_does_not_hide_a_valid_second(exported, tmp_path):
    records, _ = exported
    memory = next(r for r in records if r.get("type") == "memory")
    broken = dict(memory, vector=_vector_text([0.5] * 100))  # wrong length for the header's model
    records.insert(records.index(memory), broken)
    path = tmp_path / "dup.jsonl"
    _write(path, records)
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        with pytest.raises(InvalidInput):
            api.import_file(other, path)
        report = api.import_file(other, path, skip_invalid=True)
        assert report.memories_added == 2
        assert other.memory_by_uid(memory["uid"]) is not None
        assert any("holds 100 values" in s for s in report.skipped)
        assert not any("appeared already" in s for s in report.skipped)
    finally:
        other.close()


def test_import_cannot_set_both_fusion_weights_to_zero(exported, tmp_path):
    records, _ = exported
    records[1:1] = [{"type": "config", "key": "weight_lexical", "value": 0},
                    {"type": "config", "key": "weight_vector", "value": "0"}]
    path = tmp_path / "weights.jsonl"
    _write(path, records)
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        with pytest.raises(InvalidInput, match="cannot both be 0"):
            api.import_file(other, path)
        assert other.counts()["total"] == 0 and other.config_get("weight_lexical") is None
        api.config_set(other, "weight_vector", "0")  # the target's own setting, then a file with the other
        with pytest.raises(InvalidInput, match="cannot both be 0"):
            api.import_file(other, path)
        report = api.import_file(other, path, skip_invalid=True)
        assert api.config_value(other, "weight_lexical") == api.config.default_config()["weight_lexical"]
        assert report.memories_added == 2
        assert api.recall(other, "bazel").hits
    finally:
        other.close()


@pytest.mark.parametrize("field", ["tags", "entity_name", "alias", "relation", "status_reason", "version_tags"])
def test_import_refuses_a_credential_in_any_stored_field(exported, tmp_path, field):
    records, _ = exported
    memory = next(r for r in records if r.get("type") == "memory")
    entity = next(r for r in records if r.get("type") == "entity")
    if field == "tags":
        memory["tags"] = ["ops", GITHUB]
    elif field == "entity_name":
        records.insert(1, {"type": "entity", "name": AWS, "key": AWS.lower(), "entity_type": "name", "aliases": [],
                           "created_at": entity["created_at"]})
    elif field == "alias":
        entity["aliases"] = [*entity["aliases"], GITHUB]
    elif field == "relation":
        records.insert(-1, {"type": "relation", "source": entity["key"], "relation": f"token {GITHUB}",
                            "target": entity["key"], "weight": 1.0, "created_at": entity["created_at"],
                            "updated_at": entity["created_at"]})
    elif field == "status_reason":
        memory["status_reason"] = f"rotated {AWS}"
    else:
        memory["versions"] = [{"content": "old text", "kind": "general", "project": None, "tags": [AWS],
                               "importance": 0.5, "confidence": 0.8, "status": "active",
                               "valid_from": memory["created_at"], "valid_to": memory["updated_at"],
                               "cause": "update"}]
    path = tmp_path / "secret.jsonl"
    _write(path, records)
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        with pytest.raises(InvalidInput, match="credential"):
            api.import_file(other, path)
        assert other.counts()["total"] == 0
    finally:
        other.close()
    dump = b"".join(p.read_bytes() for p in tmp_path.glob("other.db*"))
    assert GITHUB.encode() not in dump and AWS.encode() not in dump


def test_server_memory_entity_without_observations_and_relation_types_are_screened(store, tmp_path):
    path = tmp_path / "sm.jsonl"
    path.write_text(json.dumps({"type": "entity", "name": AWS, "entityType": "key", "observations": []}) + "\n"
                    + json.dumps({"type": "entity", "name": "ci", "entityType": "bot", "observations": []}) + "\n"
                    + json.dumps({"type": "relation", "from": "ci", "to": "ci", "relationType": GITHUB}) + "\n")
    with pytest.raises(InvalidInput, match="credential"):
        api.import_file(store, path)
    assert store.counts()["total"] == 0 and store.entity_id_by_key("ci") is None


def test_a_header_with_our_model_but_another_dim_says_so_and_reembeds(exported, tmp_path):
    records, _ = exported
    records[0]["embedding"]["dim"] = 512
    path = tmp_path / "dim.jsonl"
    _write(path, records)
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        report = api.import_file(other, path)
        assert report.vectors_imported == 0 and report.memories_added == 2
        assert any("(512 dims)" in n and "(384 dims)" in n for n in report.notes)
        api.embed_pending(other)
        assert api.recall(other, "postgres port").hits[0].memory.content.startswith("Postgres")
    finally:
        other.close()


def test_import_dry_run_does_not_create_the_database(tmp_path, embedder):
    # `import FILE --dry-run` against a new --db created the store file ("Warning: created a new
    # empty store") although --dry-run promises to write nothing
    source = tmp_path / "memory.json"
    source.write_text(
        '{"type":"entity","name":"Zoë Müller","entityType":"person","observations":["Owns the 支付 service ☕"]}\n'
        '{"type":"entity","name":"支付","entityType":"service","observations":[]}\n'
        '{"type":"relation","from":"Zoë Müller","to":"支付","relationType":"owns"}\n',
        encoding="utf-8",
    )
    db = tmp_path / "new" / "memory.db"
    r = run_memsafe("--db", str(db), "import", str(source), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["dry_run"] and report["memories_added"] == 1 and report["relations_added"] == 1
    assert not db.exists() and not db.parent.exists()
    assert "Warning" not in r.stderr
    r = run_memsafe("--db", str(db), "import", str(source))
    assert r.returncode == 0, r.stderr and db.exists()


def test_import_never_takes_an_id_purged_here(store, tmp_path):
    """Import keeps a file's memory ids when they are free, but an id purged here is not free
   : the imported memory gets a new id, and nothing answers to the purged one."""
    a = api.remember(store, "local alpha about caching").id
    b = api.remember(store, "local beta about queues").id
    api.purge(store, [b])
    other = _fresh(tmp_path)
    api.remember(other, "remote one about logs")
    remote = api.remember(other, "remote two about metrics")
    assert remote.id == b
    path = tmp_path / "remote.jsonl"
    api.export_to_path(other, path)
    assert api.import_file(store, path).memories_added == 2
    ids = {m.content: m.id for m in store.get_memories(range(1, 10)).values()}
    assert ids["local alpha about caching"] == a
    assert b not in ids.values()
    assert ids["remote two about metrics"] > b and ids["remote one about logs"] > b
    other.close()


def test_ctrl_c_just_after_the_import_committed_says_it_was_kept(tmp_path, monkeypatch, capsys):
    """A Ctrl-C that lands after the import's transaction committed but before the report exists:
    the message says what was kept instead of "nothing imported (rolled back)"."""
    from memsafe.api import transfer as transfer_api
    from memsafe.cli import fast

    source = tmp_path / "some.jsonl"
    _write(source, _bulk_records(20))
    real = transfer_api.import_file

    def committed_then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr("memsafe.api.import_file", committed_then_interrupted)
    monkeypatch.setenv("MEMSAFE_NO_MODEL", "1")
    db = tmp_path / "memory.db"
    with pytest.raises(fast.Failed) as failed:
        fast.import_(str(db), source, format_="auto", dry_run=False, skip_invalid=False, project=None, no_embed=True,
                     redact=False, allow_purged=False, json_=False)
    assert failed.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted after the import was committed: 20 memories added" in err and "rolled back" not in err
    assert api.open_store(str(db)).store.counts()["total"] == 20


def _import_interrupted(tmp_path, monkeypatch, json_: bool = False):
    """`memsafe import` (the CLI's own function) of 20 records with --no-embed and no model, where
    the test made a Ctrl-C land: asserts it exits 130 and returns the store's path."""
    from memsafe.cli import fast

    monkeypatch.setenv("MEMSAFE_NO_MODEL", "1")
    source = tmp_path / "some.jsonl"
    _write(source, _bulk_records(20))
    db = tmp_path / "memory.db"
    with pytest.raises(fast.Failed) as failed:
        fast.import_(str(db), source, format_="auto", dry_run=False, skip_invalid=False, project=None, no_embed=True,
                     redact=False, allow_purged=False, json_=json_)
    assert failed.value.code == 130
    return db


def test_ctrl_c_during_the_compaction_after_an_import_reports_the_import(tmp_path, monkeypatch, capsys):
    """The import committed and then compacts the word index (it wrote most of the store): a Ctrl-C
    there stops the compaction only, and the message is the import's own report (in CI:
    the interrupt landed there and the report was lost)."""
    from memsafe.store.sqlite import SQLiteStore

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(SQLiteStore, "compact_word_index", interrupted)
    db = _import_interrupted(tmp_path, monkeypatch)
    err = capsys.readouterr().err
    assert "interrupted: 20 memories added, 0 updated; 20 vectors pending: run `memsafe embed`" in err
    assert api.open_store(str(db)).store.counts()["total"] == 20


@pytest.mark.parametrize("json_", [False, True])
def test_ctrl_c_as_the_import_commits_reports_the_import(tmp_path, monkeypatch, capsys, json_):
    """A Ctrl-C during the COMMIT of a large import (SQLite checkpoints it as it commits; the
    interrupt lands when the COMMIT returns) gave the fallback message without the import's report,
    and with --json no document on stdout. Now: the report, as the JSON error with
    --json, exit 130, and the store holds what it says."""
    from contextlib import contextmanager

    from memsafe.store.sqlite import SQLiteStore

    real = SQLiteStore.write
    fired = []

    @contextmanager
    def write(self, *args, **kwargs):
        with real(self, *args, **kwargs):
            yield
        if not fired and self.counts()["total"] == 20:  # the import's COMMIT returned
            fired.append(True)
            raise KeyboardInterrupt

    monkeypatch.setattr(SQLiteStore, "write", write)
    db = _import_interrupted(tmp_path, monkeypatch, json_)
    assert fired
    captured = capsys.readouterr()
    message = "interrupted: 20 memories added, 0 updated; 20 vectors pending: run `memsafe embed`"
    if json_:
        assert json.loads(captured.out) == {"error": {"type": "Interrupted", "message": message}}
    else:
        assert message in captured.err and not captured.out
    assert api.open_store(str(db)).store.counts()["total"] == 20


def test_ctrl_c_while_the_model_loads_prints_no_traceback(tmp_path):
    """A Ctrl-C while onnxruntime's native module imported numpy: it printed the interrupt's
    traceback before swallowing it. The import says what was kept, exit 130."""
    source = tmp_path / "some.jsonl"
    _write(source, _bulk_records(20))
    db = tmp_path / "memory.db"
    script = (
        "import os, signal, sys\n"
        "class CtrlC:  # a Ctrl-C as numpy's core is imported\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy._core.multiarray':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, CtrlC())\n"
        "from memsafe.__main__ import main\n"
        f"sys.argv = ['memsafe', '--db', {str(db)!r}, 'import', {str(source)!r}]\n"
        "main()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "interrupted: 20 memories added, 0 updated; 20 vectors pending" in run.stderr
    assert api.open_store(str(db)).store.counts()["total"] == 20
