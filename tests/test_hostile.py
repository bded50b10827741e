"""Hostile inputs and misuse: each test covers the whole kind of fault, not only one input that
shows it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading

import apsw
import pytest
from conftest import run_memsafe

from memsafe import api, embed
from memsafe.errors import InvalidInput, StoreUnavailable
from memsafe.store import SQLiteStore


def one_error_line(proc) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- what reaches the terminal ----------------------------------------------------------------------


def test_markup_and_control_characters_are_shown_literally(db_path):
    hostile = "[/] markup [bold red]hidden[/] [link=http://evil]x[/link] \x1b]0;pwned\x07\x1b[2J end"
    r = run_memsafe("--db", str(db_path), "remember", hostile, "--tag", "[/x]", "--project", "[/p]")
    assert r.returncode == 0, r.stderr
    for args in (["get", "1", "--all-projects"], ["recall", "markup hidden", "--all-projects"],
                 ["list", "--all-projects"]):
        r = run_memsafe("--db", str(db_path), *args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
        assert "[bold red]hidden[/]" in r.stdout.replace("\n", "") or args[0] == "list"
    r = run_memsafe("--db", str(db_path), "config", "get", "[/x]")
    assert "'[/x]'" in one_error_line(r)


@pytest.mark.parametrize(
    "args", [["get", "abc"], ["recall", "x", "--budget", "0"], ["remember", "x", "--kind", "nonsense"], ["nosuch"]]
)
def test_usage_errors_are_one_line_from_the_real_entry_point(db_path, args):
    r = run_memsafe("--db", str(db_path), *args)
    assert r.returncode == 2
    assert one_error_line(r).startswith("Error:")


# -- input plumbing ----------------------------------------------------------------------------------


def test_stdin_with_invalid_utf8_and_closed_stdin(db_path):
    cmd = [sys.executable, "-m", "memsafe", "--db", str(db_path), "remember", "-", "--global"]
    r = subprocess.run(cmd, input=b"caf\xe9 latin1 text", capture_output=True, env={**os.environ,
                       "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0, r.stderr
    with SQLiteStore(db_path) as store:
        assert api.get(store, 1).content == "caf\ufffd latin1 text"
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert r.returncode == 2  # empty stdin: "content is empty", a usage error
    closed = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=lambda: os.close(0))
    assert "no standard input" in one_error_line(closed)


def test_a_deleted_working_directory_is_a_one_line_error(tmp_path, db_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
        "sys.argv = ['memsafe', '--db', sys.argv[2], 'remember', 'hi']; "
        "from memsafe.__main__ import main; main()"
    )
    r = subprocess.run([sys.executable, "-c", code, str(gone), str(db_path)], capture_output=True, text=True)
    assert "current directory no longer exists" in one_error_line(r)


@pytest.mark.parametrize("content", ["[1, 2]", '{"db": 5}', "{not json"])
def test_a_broken_settings_file_is_reported_not_used(tmp_path, content):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "settings.json").write_text(content)
    for args in (["status"], ["config", "get", "db"]):
        line = one_error_line(run_memsafe(*args, env={"MEMSAFE_HOME": str(home)}))
        assert "settings.json" in line
    assert not list(tmp_path.rglob("5"))


def test_empty_db_flag_is_refused_not_the_default_store(tmp_path):
    r = run_memsafe("--db", "", "remember", "x", env={"MEMSAFE_HOME": str(tmp_path / "home")})
    assert "empty database path" in one_error_line(r)
    assert not (tmp_path / "home" / "memory.db").exists()


@pytest.mark.parametrize("now", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "garbage"])
def test_out_of_range_memsafe_now_is_one_line(db_path, now):
    r = run_memsafe("--db", str(db_path), "remember", "x", env={"MEMSAFE_NOW": now})
    assert "MEMSAFE_NOW" in one_error_line(r)


def test_config_db_can_be_reset_and_rejects_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSAFE_HOME", str(tmp_path / "home"))
    with pytest.raises(InvalidInput):
        api.set_db_path(str(tmp_path))
    api.set_db_path(str(tmp_path / "elsewhere.db"))
    assert api.reset_db_path() == tmp_path / "home" / "memory.db"


# -- foreign and damaged files -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 3, -5])
def test_a_foreign_sqlite_file_is_refused_and_left_byte_identical(tmp_path, version):
    path = tmp_path / "other.db"
    conn = apsw.Connection(str(path))
    conn.execute(f"CREATE TABLE t(x); PRAGMA user_version = {version}")
    conn.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreUnavailable, match="not a memsafe database"):
        SQLiteStore(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert not path.with_name("other.db-wal").exists()


def test_too_long_file_name_is_a_clear_error(tmp_path):
    with pytest.raises(StoreUnavailable):
        SQLiteStore(tmp_path / ("a" * 300 + ".db"))


# -- recall under pressure ---------------------------------------------------------------------------


def test_recall_answers_while_another_process_holds_the_write_lock(store, db_path):
    m = api.remember(store, "The lock test memory about flamingos")
    other = apsw.Connection(str(db_path))
    other.execute("BEGIN IMMEDIATE")
    try:
        result = api.recall(store, "flamingos")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [h.memory.id for h in result.hits] == [m.id]  # recall writes nothing (no self-feeding)


def test_too_many_tags_is_an_error_not_a_crash(store):
    api.remember(store, "tagged", tags=["a"])
    with pytest.raises(InvalidInput, match="at most"):
        api.recall(store, "tagged", tags=[f"t{i}" for i in range(5000)])


def test_a_budget_too_small_for_one_character_returns_nothing_rather_than_an_empty_hit(store):
    api.remember(store, "😀" * 1000)
    result = api.recall(store, "😀", budget=1)
    assert all(h.text.strip() for h in result.hits)
    assert result.hits or any("too small" in n for n in result.notes)


@pytest.mark.parametrize("invisible", ["\u200b", "\ufeff", "\u200e\u200f", "\u0301", " \u2060 "])
def test_invisible_content_is_empty(store, invisible):
    with pytest.raises(InvalidInput, match="empty"):
        api.remember(store, invisible)


@pytest.mark.parametrize("name", [".", "..", "~"])
def test_path_like_project_names_are_paths(name):
    assert api.clean_project(name).startswith("/")


# -- the model ---------------------------------------------------------------------------------------


def test_another_model_rebuilds_the_vectors_instead_of_hiding_them(store, tmp_path, monkeypatch, embedder):
    a = api.remember(store, "The cat sat on the mat")
    api.remember(store, "Quarterly revenue grew in Europe")
    other = tmp_path / "other-model"
    other.mkdir()
    model, tok = embed.model_files()
    shutil.copy(model, other / "model.onnx")
    shutil.copy(tok, other / "tokenizer.json")
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(other))
    embed.reset()
    try:
        result = api.recall(store, "a feline resting", mode="vector")
        assert result.hits and result.hits[0].memory.id == a.id
        assert store.config_get("_embedding_model").startswith("other-model/")
    finally:
        embed.reset()


def test_a_model_that_fails_at_inference_falls_back_to_lexical(store, tmp_path, monkeypatch, embedder):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    model, tok = embed.model_files()
    shutil.copy(model, broken / "model.onnx")
    spec = json.loads(tok.read_text())
    spec["model"]["vocab"] = {**spec["model"]["vocab"], "zebra": 9_999_999}  # an id the model has no row for
    (broken / "tokenizer.json").write_text(json.dumps(spec))
    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(broken))
    embed.reset()
    try:
        m = api.remember(store, "zebra crossing near the office")
        assert not api.get(store, m.id).embedded
        result = api.recall(store, "zebra crossing")
        assert [h.memory.id for h in result.hits] == [m.id] and result.mode == "lexical"
    finally:
        embed.reset()


def test_concurrent_recalls_and_writes_in_threads_share_nothing_stale(db_path, embedder):
    """Each thread opens its own store (as server tools do); a forget is seen by every later recall."""
    with SQLiteStore(db_path) as s:
        target = api.remember(s, "The quarterly report is due on Fridays")
    errors: list[BaseException] = []

    def worker():
        try:
            with SQLiteStore(db_path) as s:
                for _ in range(5):
                    api.recall(s, "quarterly report")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    with SQLiteStore(db_path) as s:
        api.forget(s, target.id)
    for t in threads:
        t.join()
    assert not errors
    with SQLiteStore(db_path) as s:
        assert target.id not in [h.memory.id for h in api.recall(s, "quarterly report").hits]


# -- second round: MCP, import/export, hook, time travel ---------------------------------------------

AWS = "AKIA2DN2YBY6AWTY2O7O with secret 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"


def test_export_never_overwrites_the_database_or_a_non_file(store, db_path, tmp_path):
    api.remember(store, "keep me safe")
    for target in (db_path, db_path.with_name(db_path.name + "-wal"), tmp_path):
        with pytest.raises(InvalidInput):
            api.export_to_path(store, target)
    existing = tmp_path / "old.jsonl"
    existing.write_text("precious")
    with pytest.raises(InvalidInput, match="already exists"):
        api.export_to_path(store, existing, overwrite=False)
    assert existing.read_text() == "precious" and api.get(store, 1).content == "keep me safe"


def test_update_screens_credentials_like_remember(store):
    from memsafe.errors import SecretDetected

    m = api.remember(store, "The deploy key lives in the vault")
    with pytest.raises(SecretDetected):
        api.update(store, m.id, content=f"deploy key {AWS}")
    assert api.get(store, m.id).content == "The deploy key lives in the vault"
    redacted = api.update(store, m.id, content=f"deploy key {AWS}", redact=True)
    assert "AKIA2DN2YBY6AWTY2O7O" not in redacted.content


def test_hook_commit_argument_cannot_become_a_git_option(tmp_path):
    from memsafe import hooks

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    with pytest.raises(InvalidInput):
        hooks.read_commit(repo, f"--output={victim}")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("when", ["0001-01-01", "0001-01-01T00:00:00+05:00"])
def test_as_of_out_of_range_is_an_error(store, when):
    api.remember(store, "something")
    with pytest.raises(InvalidInput):
        api.recall_as_of(store, "something", as_of=when)


def test_iso_week_dates_are_read_as_iso(monkeypatch):
    from datetime import datetime, timezone

    from memsafe import when

    parsed = when.parse_when("2026-W10-1", datetime(2026, 11, 30, tzinfo=timezone.utc))
    assert (parsed.year, parsed.month) == (2026, 3)


def test_odd_import_records_are_one_line_errors(store, tmp_path):
    header = json.dumps({"format": "memsafe", "version": 1, "type": "header"})
    cases = {
        "deep.jsonl": header + "\n" + "[" * 50_000 + "]" * 50_000 + "\n",
        "huge.jsonl": None,
    }
    export = tmp_path / "good.jsonl"
    api.remember(store, "one memory")
    api.export_to_path(store, export)
    lines = export.read_text().splitlines()
    memory_line = next(i for i, ln in enumerate(lines) if '"type": "memory"' in ln or '"type":"memory"' in ln)
    record = json.loads(lines[memory_line])
    record["access_count"] = 2**80
    lines[memory_line] = json.dumps(record)
    cases["huge.jsonl"] = "\n".join(lines) + "\n"
    other = api.open_store(str(tmp_path / "other.db")).store
    try:
        for name, text in cases.items():
            path = tmp_path / name
            path.write_text(text)
            with pytest.raises(InvalidInput):
                api.import_file(other, path, fmt="memsafe")
            assert other.counts()["total"] == 0
        sm = tmp_path / "sm.jsonl"
        sm.write_text('{"type":"entity","name":"S\\udc81","entityType":"x","observations":["ok"]}\n')
        api.import_file(other, sm, fmt="server-memory")
        assert other.conn.execute("SELECT name FROM entities").fetchone()[0] == "S\ufffd"
    finally:
        other.close()


def test_import_keeps_local_edits_in_history(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSAFE_NOW", "2026-01-01T00:00:00Z")
    m = api.remember(store, "The API runs on port 8080")
    first = tmp_path / "a.jsonl"
    api.export_to_path(store, first)
    b = api.open_store(str(tmp_path / "b.db")).store
    try:
        api.import_file(b, first)
        monkeypatch.setenv("MEMSAFE_NOW", "2026-02-01T00:00:00Z")
        api.update(b, m.id, content="B's local edit: the API runs on port 9090")
        monkeypatch.setenv("MEMSAFE_NOW", "2026-03-01T00:00:00Z")
        api.update(store, m.id, content="The API runs on port 8443")
        second = tmp_path / "a2.jsonl"
        api.export_to_path(store, second)
        api.import_file(b, second)
        assert api.get(b, m.id).content == "The API runs on port 8443"
        texts = [v.content for v in api.history(b, m.id).versions]
        assert "B's local edit: the API runs on port 9090" in texts
    finally:
        b.close()


def test_star_is_not_a_relation_type_and_purge_errors_stay_short(store):
    with pytest.raises(InvalidInput):
        api.relate(store, "a", "*", "b", create=True)
    with pytest.raises(Exception) as info:
        api.purge(store, list(range(1, 5000)))
    assert len(str(info.value)) < 200
