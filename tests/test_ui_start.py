"""How `memsafe ui` starts (usable within 1 s): `memsafe [--db P] ui [--port N] [--no-open]`
is served by `memsafe.ui.start` without loading the CLI, with every check of the page kept (the
token, the host, CSRF), on both backends; any other command line (help, a bad option) still goes
through the CLI; errors stay one line; compiled templates are cached. Nothing here is timed: the
start is measured by scripts/bench_ui.py."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import run_memsafe

from memsafe import api
from memsafe.ui import start

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

NEVER_ON_THE_START_PATH = ("typer", "rich", "pydantic", "mcp", "detect_secrets")


@pytest.mark.parametrize(("argv", "expected"), [
    (["ui"], (None, None, False)),
    (["ui", "--no-open", "--port", "0"], (None, 0, True)),
    (["--db", "a.db", "ui", "--port=8400"], ("a.db", 8400, False)),
    (["--db=x", "--db", "y", "ui", "--port", "1", "--port", "65535"], ("y", 65535, False)),  # the last one wins
    (["--db", "ui", "ui"], ("ui", None, False)),
    (["ui", "--help"], None), (["ui", "--port", "abc"], None), (["ui", "--port", "65536"], None),
    (["ui", "--port", "+5"], None), (["ui", "--port"], None), (["ui", "--no-open=1"], None), (["ui", "x"], None),
    (["--db", "a.db"], None), (["list", "ui"], None), (["ui", "--db", "a.db"], None), (["--port", "1", "ui"], None),
])
def test_only_plain_ui_command_lines_skip_the_cli(argv, expected):
    assert start.parse_argv(argv) == expected


def _spawn(db, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memsafe", "--db", str(db), "ui", "--no-open", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, headers: dict | None = None, data: bytes | None = None) -> tuple[int, dict, str]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers or {}), timeout=60) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_the_early_start_keeps_every_check_and_loads_no_cli(db_path, store):
    api.remember(store, "We squash commits before merging to main", kind="decision")
    api.remember(store, "Postgres listens on port 5433 in the dev compose file")
    store.close()
    proc = _spawn(db_path, "--port", "0", env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{43}", url), proc.stderr.read()[-2000:]
        base, port = url.split("/?")[0], url.split(":")[2].split("/")[0]
        for path in ("/", "/?token=wrong", "/m/1", "/static/app.js"):
            status, _, body = _get(base + path)
            assert status == 403 and "squash" not in body, path
        status, _, _ = _get(url, headers={"Host": f"evil.example:{port}"})
        assert status == 403  # DNS rebinding
        status, headers, _ = _get(url)
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"].split(";")[0]
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=strict" in headers["set-cookie"]
        status, headers, page = _get(base + "/", headers={"Cookie": cookie})
        assert status == 200 and "We squash commits before merging to main" in page
        assert "script-src 'self'" in headers["content-security-policy"]
        status, _, _ = _get(base + "/m/1/forget", headers={"Cookie": cookie, "Origin": "http://evil.example"},
                            data=b"csrf=x")
        assert status == 403
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(30) == 0
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "memsafe ui: stopped" in stderr and "Traceback" not in stderr
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", stderr, re.M)}
    assert {"starlette", "uvicorn", "jinja2"} <= imported  # the page was served by this process
    assert not imported & set(NEVER_ON_THE_START_PATH), sorted(imported & set(NEVER_ON_THE_START_PATH))
    reopened = api.open_store(str(db_path))
    assert api.get(reopened.store, 1).status == "active"  # the refused POST changed nothing
    reopened.store.close()


@pytest.mark.backends("sqlite")  # a port and a file: no store backend involved
def test_a_taken_port_or_a_bad_file_is_one_line_and_no_url(tmp_path, db_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run_memsafe("--db", str(db_path), "ui", "--no-open", "--port", str(port))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"Error: cannot listen on 127.0.0.1:{port} (Address already in use); "
                           "choose another --port, or --port 0 for any free one\n")
    garbage = tmp_path / "not-a-db.db"
    garbage.write_bytes(b"this is not a database\n" * 100)
    done = run_memsafe("--db", str(garbage), "ui", "--no-open", "--port", "0")
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.backends("sqlite")  # argument parsing only
def test_other_ui_command_lines_still_go_through_the_cli(db_path):
    helped = run_memsafe("ui", "--help", env={"MEMSAFE_CLI_CACHE": "0"})
    assert helped.returncode == 0 and "--no-open" in helped.stdout
    bad = run_memsafe("--db", str(db_path), "ui", "--port", "abc")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "Error:" in bad.stderr and "--port" in bad.stderr and "memsafe ui --help" in bad.stderr


@pytest.mark.backends("sqlite")  # templates only
def test_compiled_templates_are_cached_and_a_missing_cache_is_no_cache(tmp_path, monkeypatch):
    from memsafe.ui import server

    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    page = server._environment().get_template("index.html")
    # index.html (its base and macros load as it renders)
    assert len(list((tmp_path / "cache" / "ui-templates").iterdir())) == 1

    def compile_again(*args, **kwargs):
        raise AssertionError("a cached template was compiled again")

    again = server._environment()
    again.compile = compile_again
    assert again.get_template("index.html").root_render_func.__code__.co_code == page.root_render_func.__code__.co_code

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "ui-templates").write_text("a file where the cache folder would be")
    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(blocked))
    assert server._environment().bytecode_cache is None
    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "removed"))
    env = server._environment()
    shutil.rmtree(tmp_path / "removed")  # the cache is cleared while the page runs: it is only not written
    assert env.get_template("index.html").name == "index.html"


def test_without_a_browser_the_start_says_to_open_the_url_itself(db_path, store, tmp_path):
    """Over ssh (no display, no $BROWSER that works) `memsafe ui` printed the URL and
    nothing else, while the README says it opens the page; the user waited for a browser. It now
    says no browser could be started, and how to reach the page from another machine."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(PYTHONUNBUFFERED="1", BROWSER=str(tmp_path / "no-such-browser"), PATH=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "memsafe", "--db", str(db_path), "ui", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        url = proc.stdout.readline().strip()
        port = urllib.parse.urlsplit(url).port
        seen: list[str] = []
        while not any(line.startswith("Note: no web browser") for line in seen):
            try:
                seen.append(lines.get(timeout=30))
            except queue.Empty:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    note = [line for line in seen if line.startswith("Note: no web browser could be started here; open the URL above")]
    assert note, seen
    assert f"ssh -L {port}:127.0.0.1:{port}" in note[0]
