"""Break-it round, session 2 (worktree a): export --vectors / import, secret screening, update
'unchanged', fusion weights. Real model, real SQLite files, real git repositories."""

from __future__ import annotations

import base64
import json
import math
import struct
import subprocess

import pytest
from conftest import run_memsafe

from memsafe import api, hooks, safety
from memsafe.errors import InvalidInput, SecretDetected


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


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


def test_a_degenerate_stored_vector_does_not_break_recall(store):
    """A zero or non-finite vector already in a store (written by an earlier import) ranks nowhere,
    and recall still answers instead of failing with a traceback."""
    good = api.remember(store, "Postgres listens on port 5433 in the dev containers")
    bad = api.remember(store, "The build uses Bazel with remote caching")
    with store.write():
        store.put_vector(bad.id, struct.pack("<384f", *([0.0] * 384)))
    hits = api.recall(store, "postgres port").hits
    assert hits[0].memory.id == good.id
    with store.write():
        store.put_vector(bad.id, struct.pack("<384f", *([math.inf] * 384)))
    assert api.recall(store, "bazel build").hits[0].memory.id == bad.id  # found lexically still


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
        assert api.config_value(other, "weight_lexical") == 1.0
        assert report.memories_added == 2
        assert api.recall(other, "bazel").hits
    finally:
        other.close()


def test_update_with_the_same_tags_in_another_order_or_case_changes_nothing(cli):
    assert cli("remember", "Deploys go through staging first", "--tag", "ops", "--tag", "deploy").exit_code == 0
    for tags in (["deploy", "ops"], ["OPS", "Deploy"], ["ops", "deploy", "ops"]):
        args = [a for t in tags for a in ("--tag", t)]
        result = cli("update", "1", *args)
        assert result.exit_code == 0, result.output
        assert "unchanged" in result.stdout
    history = json.loads(cli("history", "1", "--json").stdout)
    assert len(history["versions"]) == 1  # the current state only: no version was written


def test_hook_never_stores_part_of_a_credential_cut_by_the_body_limit(store, tmp_path):
    token = "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"
    assert safety.scan(token)
    repo = tmp_path / "repo"
    repo.mkdir()
    env_git = ["git", "-C", str(repo)]
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "T"], ["config", "user.email", "t@e.x"],
                 ["config", "commit.gpgsign", "false"]):
        subprocess.run([*env_git, *args], check=True, capture_output=True)
    for cut in range(5, len(token), 7):  # the limit falls inside the token at several places
        body = "x" * (hooks.MAX_BODY_CHARS - cut - 1) + " " + token + " and more text after it"
        message = f"rotate CI credentials {cut}\n\n{body}\n".encode()
        subprocess.run([*env_git, "commit", "-q", "--allow-empty", "-F", "-"], input=message, check=True,
                       capture_output=True)
        memory = api.remember_commit(store, repo)
        assert memory is not None
        assert token[:5] not in memory.content, cut
        assert len(memory.content) < hooks.MAX_BODY_CHARS + 200


def test_weights_cannot_both_be_zero_from_the_real_cli(db_path):
    assert run_memsafe("--db", str(db_path), "config", "set", "weight_vector", "0").returncode == 0
    proc = run_memsafe("--db", str(db_path), "config", "set", "--", "weight_lexical", "-0.0")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot both be 0" in proc.stderr


AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "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"


@pytest.mark.parametrize("args", [
    ["--tag", GITHUB], ["--tag", AWS], ["--entity", AWS], ["--project", "password=hunter2Secret9x"],
])
def test_a_credential_in_a_tag_project_or_entity_is_refused_like_in_content(cli, args):
    result = cli("remember", "CI token rotation happens monthly", *args)
    assert result.exit_code != 0 and "credential" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert GITHUB.lower() not in cli("list", "--json").stdout.lower()
    assert cli("remember", "CI token rotation happens monthly", "--tag", "ops").exit_code == 0
    result = cli("update", "1", *(["--tag", AWS] if args[0] != "--tag" else args))
    assert result.exit_code != 0 and "credential" in result.stderr


def test_graph_names_with_a_credential_are_refused(store):
    with pytest.raises(SecretDetected, match="credential"):
        api.relate(store, "deploy bot", f"uses {GITHUB}", "GitHub", create=True)
    with pytest.raises(SecretDetected, match="credential"):
        api.add_entity(store, AWS)


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
