"""Shared fixtures: every test gets its own MEMSAFE_HOME, database and working directory; the
real embedding model is loaded once per test session and shared (memsafe.embed keeps one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memsafe import api, embed


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """One cache of the optimised model graph for the whole session (subprocesses inherit it)."""
    os.environ["MEMSAFE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No test may touch the real user directory, a real project, or a fixed clock left by another."""
    home = tmp_path / "home"
    monkeypatch.setenv("MEMSAFE_HOME", str(home))
    # CLI remembers leave vectors pending instead of starting a detached embedder per test
    # (tests/test_speed.py turns it on where that process is what is tested).
    monkeypatch.setenv("MEMSAFE_BACKGROUND_EMBED", "0")
    for var in ("MEMSAFE_DB", "MEMSAFE_NOW", "MEMSAFE_NO_VEC", "MEMSAFE_NO_MODEL", "MEMSAFE_MODEL_DIR",
                "MEMSAFE_KEY", "MEMSAFE_KEY_FILE", "MEMSAFE_NEW_KEY"):
        monkeypatch.delenv(var, raising=False)
    # The OS keyring is a real `keyring` with the keyrings.alt file backend, in this test's folder.
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield


@pytest.fixture(scope="session")
def embedder():
    """The real ONNX model, loaded once for the whole session."""
    model = embed.get_embedder()
    assert model is not None, embed.load_error()
    return model


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "db" / "memory.db"


@pytest.fixture
def store(db_path, embedder):
    opened = api.open_store(str(db_path))
    yield opened.store
    opened.store.close()


class Cli:
    """Run the Typer app in process (fast) with a given --db; stdout and stderr kept apart."""

    def __init__(self, db: Path):
        self.db = db
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None):
        from memsafe.cli import app

        return self.runner.invoke(app, ["--db", str(self.db), *args], input=input)


@pytest.fixture
def cli(db_path, embedder) -> Cli:
    return Cli(db_path)


def run_memsafe(*args: str, env: dict | None = None, input: str | None = None, cwd=None, timeout=120):
    """Run `python -m memsafe ARGS` as a real process; returns CompletedProcess (text, UTF-8)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "memsafe", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        env=full_env,
        input=input,
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def memsafe_proc():
    return run_memsafe
