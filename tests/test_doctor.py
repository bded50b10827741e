"""`memsafe doctor`: a healthy store passes; a broken hook fails with what to do."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import run_memsafe

from memsafe import hooks


def test_doctor_healthy_store(cli, tmp_path):
    assert cli("remember", "deferred one", "--no-embed", "--global").exit_code == 0
    result = cli("doctor", "--json", "--repo", str(tmp_path))
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["schema_version"] >= 1
    levels = {c["name"]: c["level"] for c in report["checks"]}
    assert levels["integrity"] == levels["indexes"] == levels["model"] == levels["sqlite-vec"] == "ok"
    assert levels["embeddings"] == "warning" and report["pending_embeddings"] == 1
    assert report["counts"]["active"] == 1 and report["hook"] is None
    assert report["versions"]["memsafe"] and report["paths"]["database"].endswith("memory.db")
    # "All good." never follows a WARN line
    for step in ("pending vector", "embedded"):
        text = cli("doctor", "--repo", str(tmp_path)).stdout
        warned = sum(c["level"] == "warning" for c in json.loads(cli("doctor", "--json", "--repo", str(tmp_path))
                                                                   .stdout)["checks"])
        assert text.count("[WARN]") == warned, step
        if warned:  # (an apsw module that cannot encrypt adds one more)
            assert "All good." not in text
            assert text.rstrip().endswith(f"No failures; {warned} warning{'s' if warned > 1 else ''} (see WARN lines).")
        else:
            assert text.rstrip().endswith("All good."), step
        if step == "pending vector":
            assert "fix: memsafe embed" in text and warned >= 1
            assert cli("embed").exit_code == 0


def test_doctor_with_the_model_switched_off_says_to_unset_the_switch(tmp_path, memsafe_proc):
    """Under MEMSAFE_NO_MODEL, doctor says to unset the switch; it does not advise a reinstall."""
    r = memsafe_proc("--db", str(tmp_path / "m.db"), "doctor", "--json", "--repo", str(tmp_path),
                     env={"MEMSAFE_NO_MODEL": "1"})
    model = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["model"]
    assert model["detail"] == "disabled by MEMSAFE_NO_MODEL"
    assert model["fix"].startswith("unset MEMSAFE_NO_MODEL") and "install" not in model["fix"]


def test_doctor_fails_on_a_hook_whose_python_is_gone(cli, tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text(hooks.hook_script("/nonexistent/python3", None, tmp_path / "log", tmp_path))
    hook.chmod(0o755)
    result = cli("doctor", "--repo", str(repo), "--no-model")
    assert result.exit_code == 1
    assert "[FAIL] hook" in result.stdout and f"fix: memsafe hook install --repo '{repo}'" in result.stdout


def test_status_and_doctor_with_vectors_switched_off_say_to_unset_the_switch(tmp_path, embedder):
    # MEMSAFE_NO_VEC=1 status advised `pip install --force-reinstall sqlite-vec` and printed
    # "model not loaded: not loaded: vector search unavailable"
    db = tmp_path / "m.db"
    env = {"MEMSAFE_NO_VEC": "1"}
    r = run_memsafe("--db", str(db), "status", env=env)
    assert r.returncode == 1
    assert "unset MEMSAFE_NO_VEC" in r.stdout and "pip install" not in r.stdout
    assert "not loaded: not loaded" not in r.stdout
    r = run_memsafe("--db", str(db), "doctor", "--no-model", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["sqlite-vec"]["fix"].startswith("unset MEMSAFE_NO_VEC")



@pytest.mark.backends("sqlite", "postgres")
def test_doctor_checks_the_word_index_not_only_the_file(db_path, embedder):
    """`PRAGMA integrity_check` passes a word index that no longer matches the rows (an entry left
    without its memory, or one written by a memsafe from before a migration), so doctor does not
    stop at "No failures" there: it checks the indexes against the rows, on both backends."""
    from memsafe import api
    from memsafe.api import checkup

    opened = api.open_store(str(db_path))
    try:
        memory = api.remember(opened.store, "数据库连接池的大小设置为二十。", embed_now=False)
        assert {c.name: c.level for c in checkup.doctor(opened, load_model=False).checks}["integrity"] == "ok"
        with opened.store.write():
            if isinstance(opened.path, str) and opened.path.startswith("postgresql"):  # an old writer's entry
                opened.store.conn.execute("UPDATE memory_fts SET tsv = ?::tsvector WHERE memory_id = ?",
                                          ("'数据库连接池的大小设置为二十':1", memory.id))
            else:  # an entry without its memory
                opened.store.conn.execute("INSERT INTO memories_fts(rowid, content) VALUES (999, '幽灵文本')")
        report = checkup.doctor(opened, load_model=False)
        checks = {c.name: c for c in report.checks}
        assert checks["integrity"].level == "ok", checks["integrity"]  # the memories themselves are sound
        indexes = checks["indexes"]
        assert indexes.level == "error" and not report.ok, indexes
        assert ("full-text" in indexes.detail or "word index" in indexes.detail) and "doctor --repair" in indexes.fix
    finally:
        opened.store.close()


@pytest.mark.backends("sqlite", "postgres")
def test_status_and_doctor_name_each_backends_own_parts(db_path, embedder, backend):
    """Each backend's status and doctor name its own parts: on PostgreSQL, `status` names pgvector
    (not "vectors sqlite-vec 0.8.2" with pgvector's version), does not offer `memsafe encrypt`
    (which refuses a PostgreSQL store) and shows no WAL; doctor names PostgreSQL's version (not
    "sqlite PostgreSQL 18.3") and checks no WAL it does not have."""
    db = str(db_path)
    assert run_memsafe("--db", db, "remember", "we deploy on Tuesdays", "--global").returncode == 0
    status = run_memsafe("--db", db, "status")
    assert status.returncode == 0, status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines()}
    report = json.loads(run_memsafe("--db", db, "status", "--json").stdout)
    doctor = json.loads(run_memsafe("--db", db, "doctor", "--no-model", "--json").stdout)
    checks = {c["name"]: c for c in doctor["checks"]}
    text = run_memsafe("--db", db, "doctor", "--no-model").stdout
    if backend == "postgres":
        assert report["backend"] == doctor["backend"] == "postgresql"
        assert lines["vectors"].split()[1] == "pgvector" and "sqlite-vec" not in lines["vectors"]
        assert "not memsafe's on PostgreSQL" in lines["encryption"] and "memsafe encrypt" not in status.stdout
        assert "WAL" not in lines["size"] and "WAL" not in text
        assert checks["pgvector"]["level"] == "ok" and "sqlite-vec" not in checks and "wal" not in checks
        assert doctor["versions"]["postgresql"].split(".")[0].isdigit() and "sqlite" not in doctor["versions"]
    else:
        assert report["backend"] == doctor["backend"] == "sqlite"
        assert lines["vectors"].split()[1] == "sqlite-vec" and lines["size"].endswith(" WAL)")
        assert "memsafe encrypt" in lines["encryption"]
        assert checks["sqlite-vec"]["level"] == "ok" and "wal" in checks and "pgvector" not in checks
        assert doctor["versions"]["sqlite"] and "postgresql" not in doctor["versions"]


def test_doctor_says_the_dependencies_telemetry_is_off_and_names_a_folder_left_before(tmp_path, monkeypatch):
    """The "network" check: ok while every off-switch memsafe sets holds, naming onnxruntime's
    telemetry folder when one was written before; an error, with what to do, when a program that
    imported memsafe turned one back on."""
    from memsafe import api
    from memsafe.api import checkup

    monkeypatch.setenv("HOME", str(tmp_path))
    opened = api.open_store(str(tmp_path / "m.db"))
    try:
        network = {c.name: c for c in checkup.doctor(opened, load_model=False).checks}["network"]
        assert network.level == "ok" and "ORT_DISABLE_TELEMETRY" in network.detail and "written" not in network.detail
        (tmp_path / checkup.ORT_TELEMETRY_FOLDER).mkdir(parents=True)
        network = {c.name: c for c in checkup.doctor(opened, load_model=False).checks}["network"]
        assert network.level == "ok" and str(tmp_path / checkup.ORT_TELEMETRY_FOLDER) in network.detail
        monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
        report = checkup.doctor(opened, load_model=False)
        network = {c.name: c for c in report.checks}["network"]
        assert network.level == "error" and not report.ok and "ORT_DISABLE_TELEMETRY" in network.detail
    finally:
        opened.store.close()
