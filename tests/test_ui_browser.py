"""`memsafe ui` end to end in a real browser: the system's headless Chromium (Debian package,
installed by .ci/run; never a browser download) driven by Playwright, against a real
`memsafe ui` process. Screenshots of every page are saved under the test's tmp folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_memsafe

from memsafe import api

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
XSS = '<script>alert("xss")</script><img src=x onerror="alert(2)"> hostile note'


def _need_browser():
    missing = [what for what, ok in (("chromium", Path(CHROMIUM).exists()),
                                     ("playwright", _has_playwright())) if not ok]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing: .ci/run installs chromium and `make` installs playwright")
        pytest.skip(f"{', '.join(missing)} not installed")


def _has_playwright() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def served(tmp_path, db_path, embedder):
    """A store with a few memories, and `memsafe ui --no-open --port 0` serving it: yields
    (process, url with token, base url)."""
    _need_browser()
    opened = api.open_store(str(db_path))
    store = opened.store
    api.remember(store, "We squash commits before merging to main", kind="decision", project="demo", tags=["git"])
    api.remember(store, "Postgres listens on port 5433 in the dev compose file", kind="fact", project="demo")
    api.remember(store, "The release checklist lives in docs/release.md", kind="fact", project="demo")
    api.remember(store, XSS)
    api.update(store, 2, content="Postgres listens on port 6543 in the dev compose file")
    api.relate_many(store, [("Postgres", "used by", "memsafe"), ("memsafe", "stores in", "SQLite")], create=True,
                    scope=api.make_scope(project="demo"))  # one graph: the one its Postgres memory is in
    store.close()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "memsafe", "--db", str(db_path), "ui", "--no-open", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "?token=" in url, proc.stderr.read()
        yield proc, url, url.split("/?")[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture
def page(tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        tab.dialogs = []
        tab.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))
        yield tab
        context.close()


def test_search_forget_history_graph_and_charts_in_a_real_browser(served, page, tmp_path, db_path):
    proc, url, base = served
    shots = tmp_path / "screenshots"
    shots.mkdir()

    page.goto(url)
    assert page.url == base + "/"  # the token moved into a cookie and left the address bar
    assert page.locator("#results li.mem").count() == 4
    page.screenshot(path=shots / "index.png", full_page=True)

    page.fill("input[name=q]", "how do we merge branches?")
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**/?q=*")
    first = page.locator("#results li.mem").first
    assert first.get_attribute("data-id") == "1"
    assert "lexical rank" in first.inner_text() and "vector rank" in first.inner_text()
    page.screenshot(path=shots / "search.png", full_page=True)

    first.locator("a.mem-id").click()
    page.wait_for_url("**/m/1")
    page.click("#forget")
    page.wait_for_url("**/m/1?msg=forgotten")
    assert page.inner_text("#status") == "forgotten"
    page.screenshot(path=shots / "forgotten.png", full_page=True)
    done = run_memsafe("--db", str(db_path), "recall", "how do we merge branches?", "-p", "demo", "--json")
    assert done.returncode == 0, done.stderr
    assert 1 not in [h["id"] for h in json.loads(done.stdout)["results"]]
    shown = run_memsafe("--db", str(db_path), "recall", "squash commits merging", "-p", "demo", "--include-forgotten",
                        "--json")
    assert 1 in [h["id"] for h in json.loads(shown.stdout)["results"]]  # the query does reach it when asked
    hidden = run_memsafe("--db", str(db_path), "recall", "squash commits merging", "-p", "demo", "--json")
    assert 1 not in [h["id"] for h in json.loads(hidden.stdout)["results"]]

    page.goto(base + "/m/2")
    assert page.locator("table.versions tbody tr").count() == 2
    assert page.inner_text("#diff .ddel") == "5433" and page.inner_text("#diff .dadd") == "6543"
    page.screenshot(path=shots / "history.png", full_page=True)

    page.goto(base + "/graph")
    page.fill("input[name=entity]", "memsafe")
    page.select_option("select[name=depth]", "2")  # auto-submits (static/app.js)
    page.wait_for_url("**/graph?entity=memsafe&depth=2")
    assert page.locator("#graph circle").count() == 3
    page.screenshot(path=shots / "graph.png", full_page=True)

    page.click("nav >> text=Charts")
    page.wait_for_url("**/charts")
    assert page.locator("svg.chart").count() >= 6
    page.screenshot(path=shots / "charts.png", full_page=True)

    page.click("nav >> text=Decay")
    page.wait_for_url("**/decay")
    assert "examined" in page.inner_text("#chart-plan")
    page.screenshot(path=shots / "decay.png", full_page=True)

    for shot in ("index", "search", "forgotten", "history", "graph", "charts", "decay"):
        assert (shots / f"{shot}.png").stat().st_size > 10_000

    proc.send_signal(signal.SIGINT)  # Ctrl-C stops it cleanly
    assert proc.wait(15) == 0
    assert "stopped" in proc.stderr.read()


def test_stored_xss_is_text_in_the_browser(served, page, tmp_path):
    _, url, base = served
    page.goto(url)
    for path in ("/", "/m/4", "/?q=hostile+note"):
        page.goto(base + path)
        page.wait_for_load_state("load")
        time.sleep(0.2)
        assert page.dialogs == []
        assert page.evaluate("document.querySelectorAll('img[src=x], img[onerror]').length") == 0
        assert page.evaluate("[...document.scripts].every(s => s.src.endsWith('/static/app.js'))")
        assert '<script>alert("xss")</script>' in page.inner_text("main")
    page.screenshot(path=tmp_path / "xss.png", full_page=True)


def test_purge_needs_the_typed_confirmation(served, page, db_path):
    _, url, base = served
    page.goto(url)
    page.goto(base + "/m/3")
    page.click("details.danger summary")
    assert page.is_disabled("#purge")
    page.fill("#purge-form input[name=confirm]", "purge 3")
    assert page.is_enabled("#purge")
    page.click("#purge")
    page.wait_for_url("**/?msg=purged")
    assert run_memsafe("--db", str(db_path), "get", "3", "--all-projects").returncode != 0


def test_graph_edits_in_a_real_browser(served, page, tmp_path, db_path):
    """Rename, alias, remove an alias, merge, unlink and delete from the graph page; each goes
    through the handlers, so the CLI sees it at once. Screenshots of the edit panel are kept."""
    _, url, base = served
    shots = tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)

    def entities() -> dict:
        done = run_memsafe("--db", str(db_path), "graph", "entities", "--all-projects", "--json")
        assert done.returncode == 0, done.stderr
        return {e["name"]: e for e in json.loads(done.stdout)}

    page.goto(url)
    page.goto(base + "/graph?entity=Postgres&depth=1")
    assert page.inner_text("#edit-entity h2") == "Edit “Postgres”"
    page.screenshot(path=shots / "graph-edit.png", full_page=True)

    page.fill("#edit-entity input[aria-label='new name']", "PostgreSQL")
    page.click("#rename")
    page.wait_for_url("**/graph?entity=PostgreSQL*msg=rename")
    assert "Renamed" in page.inner_text("p.flash") and "Postgres" in page.inner_text("#aliases")
    assert "Postgres" in entities()["PostgreSQL"]["aliases"]

    page.fill("#edit-entity input[aria-label='alias']", "Pgsql")
    page.click("#alias")
    page.wait_for_url("**msg=alias-add")
    assert "Pgsql" in page.inner_text("#aliases")
    page.click("#aliases button[title='Remove the alias Pgsql']")
    page.wait_for_url("**msg=alias-remove")
    assert "Pgsql" not in page.inner_text("#aliases")

    page.goto(base + "/graph?entity=SQLite&depth=1")
    page.fill("#edit-entity input[aria-label='merge into']", "PostgreSQL")
    page.click("#merge")
    page.wait_for_url("**/graph?entity=PostgreSQL*msg=merge")
    after = entities()
    assert "SQLite" not in after and "SQLite" in after["PostgreSQL"]["aliases"]
    page.screenshot(path=shots / "graph-merged.png", full_page=True)

    # the memory about the compose file names PostgreSQL; unlink it from the sidebar
    memories_before = after["PostgreSQL"]["memories"]
    page.click(".gnode form.unlink button[data-entity='PostgreSQL'][data-memory='2']")
    page.wait_for_url("**msg=unlink")
    assert entities()["PostgreSQL"]["memories"] == memories_before - 1

    page.click("#edit-entity details.danger summary")
    page.check("#delete-entity-form input[name=confirm]")
    page.click("#delete-entity")
    page.wait_for_url("**/graph?msg=delete")
    assert "Entity deleted" in page.inner_text("p.flash")
    assert "PostgreSQL" not in entities()
    shown = run_memsafe("--db", str(db_path), "get", "2", "--all-projects", "--json")
    assert "Postgres listens on port 6543" in json.loads(shown.stdout)["content"]  # the memory stays
    for shot in ("graph-edit", "graph-merged"):
        assert (shots / f"{shot}.png").stat().st_size > 10_000
