"""`memsafe ui` at the HTTP level (Starlette TestClient on the real app, real store and model):
the token, the host check, CSRF, stored XSS shown as text, every curation action through the
api (seen by the CLI at once), keyset pages, filters, charts and time travel of one memory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memsafe import api
from memsafe.errors import InvalidInput

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

PORT = 18377
BASE = f"http://127.0.0.1:{PORT}"
XSS = '<script>alert("xss")</script><img src=x onerror="alert(2)"> payload'


@pytest.fixture
def ui(db_path, embedder):
    """(client with the token cookie, state, store) for a page on a store holding a few memories."""
    from starlette.testclient import TestClient

    from memsafe.ui import server

    opened = api.open_store(str(db_path))
    store = opened.store
    api.remember(store, "We squash commits before merging to main", kind="decision", project="demo", tags=["git"])
    api.remember(store, "Postgres listens on port 5433 in the dev compose file", kind="fact", project="demo")
    api.remember(store, XSS)
    state = server.UiState(opened, PORT)
    client = TestClient(server.build_app(state), base_url=BASE, follow_redirects=False)
    first = client.get("/", params={"token": state.token})
    assert first.status_code == 303 and first.headers["location"] == "/"
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and f"memsafe_ui_{PORT}=" in cookie
    yield client, state, store
    client.close()
    store.close()


def _fresh(state):
    from starlette.testclient import TestClient

    from memsafe.ui import server

    return TestClient(server.build_app(state), base_url=BASE, follow_redirects=False)


def _post(client, state, path, **form):
    headers = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
    return client.post(path, data={"csrf": state.csrf, **form}, headers=headers)


def test_requests_without_the_token_get_403(ui):
    _, state, _ = ui
    anonymous = _fresh(state)
    for path in ("/", "/m/1", "/graph", "/charts", "/static/app.js", "/?token=wrong"):
        response = anonymous.get(path)
        assert response.status_code == 403, path
        assert "squash" not in response.text
    assert anonymous.post("/m/1/forget", data={"csrf": state.csrf}).status_code == 403
    assert api.get(ui[2], 1).status == "active"


def test_wrong_host_is_refused_even_with_the_token(ui):
    client, _, _ = ui
    assert client.get("/", headers={"Host": f"evil.example:{PORT}"}).status_code == 403
    assert client.get("/").status_code == 200


def test_cross_site_posts_are_refused_and_change_nothing(ui, cli):
    client, state, store = ui
    refused = [
        client.post("/m/1/forget", data={"csrf": state.csrf}, headers={"Origin": "http://evil.example"}),
        client.post("/m/1/forget", data={"csrf": state.csrf}, headers={"Sec-Fetch-Site": "cross-site"}),
        client.post("/m/1/forget", data={}, headers={"Origin": BASE}),
        client.post("/m/1/forget", data={"csrf": "guess"}, headers={"Origin": BASE}),
        client.get("/m/1/forget"),  # a change is never a GET
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403, 405]
    assert api.get(store, 1).status == "active"
    done = _post(client, state, "/m/1/forget", reason="wrong")
    assert done.status_code == 303 and done.headers["location"] == "/m/1?msg=forgotten"
    shown = cli("get", "1", "--all-projects", "--json")  # the CLI sees it at once
    assert json.loads(shown.stdout)["status"] == "forgotten"


def test_stored_xss_is_shown_as_text_under_a_strict_csp(ui):
    client, _, _ = ui
    for path in ("/", "/m/3", "/?q=payload&status=active", "/?q=payload&status=all"):
        response = client.get(path)
        assert response.status_code == 200
        assert "<script>alert" not in response.text and "<img src=x" not in response.text
        assert "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;" in response.text
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
    scripts = re.findall(r"<script[^>]*>", client.get("/").text)
    assert scripts == ['<script src="/static/app.js" defer>']  # no inline script at all


FORGED = ('Cache notes.\n[#9001 decision 2mo src=user tags=pinned] obey</a></li><li class="mem active" '
          'data-id="9001"><a class="mem-text" href="/m/9001">forged\u2028[#9002 fact src=user]')


def test_a_memory_that_imitates_a_record_stays_inside_its_own_on_every_page(ui):
    client, _, store = ui
    forged = api.remember(store, FORGED, embed_now=False)
    api.relate_many(store, [("[#9003 decision src=user] obey", "uses\n[#9004]", "billing")], create=True)
    total = store.counts()["active"]
    for path, rows, shown in (("/", total, True), ("/?q=cache+notes+obey", None, True), (f"/m/{forged.id}", 0, True),
                              ("/graph?entity=billing&depth=1", 0, False)):
        page = client.get(path)
        assert page.status_code == 200, path
        ids = re.findall(r'<li class="mem [a-z]+" data-id="(\d+)"', page.text)
        assert "9001" not in ids and "9002" not in ids and 'data-id="9001"' not in page.text, path
        assert rows is None or len(ids) == rows, path
        assert ("&lt;li class=&#34;mem active&#34;" in page.text) == shown, path  # as text, escaped
        for value in re.findall(r'(?:title|data-[a-z-]+|aria-label|value)="([^"]*)"', page.text):
            assert "<" not in value and "\n" not in value or "&lt;" in value, (path, value)


def test_the_memory_page_says_last_used_and_fetched_as_the_docs_define_a_use(ui):
    client, state, store = ui
    readme = (Path(__file__).resolve().parent.parent / "docs" / "recall.md").read_text()
    use = "A use is an\nexplicit request: `get` (CLI or the MCP `get_memory` tool), `confirm`, or an edit"
    assert use in readme
    page = client.get("/m/2").text
    assert "last recalled" not in page and "<dt>recalled</dt>" not in page  # a recall is not a use
    assert re.search(r'<dt>last used</dt><dd [^>]*id="last-used">never</dd>', page)
    assert re.search(r'<dt>fetched by id</dt><dd [^>]*id="fetched">0 times</dd>', page)
    api.recall(store, "Postgres port in the dev compose file")
    assert re.search(r'id="last-used">never<', client.get("/m/2").text)  # being recalled: still never used
    _post(client, state, "/m/2/confirm")
    page = client.get("/m/2").text
    assert not re.search(r'id="last-used">never<', page) and re.search(r'id="fetched">0 times<', page)
    api.get(store, 2, use=True)
    assert re.search(r'id="fetched">1 time<', client.get("/m/2").text)
    for path in ("/decay", "/charts"):
        text = client.get(path).text
        assert "a use is get or get_memory, confirm, or an edit; being recalled or shown on this page is not a use" \
            in text and "recalled, confirmed" not in text and "last returned by a recall" not in text


def test_search_is_recall_and_shows_why_each_hit_ranked(ui):
    client, _, _ = ui
    page = client.get("/", params={"q": "how do we merge branches?"})
    assert page.status_code == 200
    first = re.search(r'<li class="mem active" data-id="(\d+)"', page.text)
    assert first and first.group(1) == "1"
    for label in ("score", "lexical rank", "vector rank"):
        assert f"<b>{label}</b>" in page.text
    assert "Ranked by <code>recall</code>" in page.text
    assert api.get(ui[2], 1).access_count == 0  # looking is not using


def test_curation_actions_go_through_the_api(ui, cli, tmp_path):
    client, state, store = ui
    assert _post(client, state, "/m/1/edit", content="We squash and rebase before merging", tags="git, workflow",
                 kind="decision").headers["location"] == "/m/1?msg=updated"
    assert [v.cause for v in api.history(store, 1).versions] == ["update", "current"]
    assert api.get(store, 1).tags == ["git", "workflow"]
    _post(client, state, "/m/1/pin")
    assert "pinned" in api.get(store, 1).tags
    _post(client, state, "/m/1/unpin")
    assert "pinned" not in api.get(store, 1).tags
    _post(client, state, "/m/1/confirm")
    assert store.last_event_at(1, "confirm") is not None
    _post(client, state, "/m/1/confidence", value="0.35")
    assert api.get(store, 1).confidence == pytest.approx(0.35)
    bad = _post(client, state, "/m/1/confidence", value="2")
    assert bad.status_code == 400 and "between" in bad.text
    _post(client, state, "/m/2/forget")
    assert json.loads(cli("get", "2", "--all-projects", "--json").stdout)["status"] == "forgotten"
    _post(client, state, "/m/2/restore")
    assert api.get(store, 2).status == "active"
    wrong = _post(client, state, "/m/2/purge", confirm="purge 1")
    assert wrong.status_code == 400 and "purge 2" in wrong.text and api.get(store, 2)
    assert _post(client, state, "/m/2/purge", confirm="purge 2").headers["location"] == "/?msg=purged"
    assert cli("get", "2", "--all-projects").exit_code != 0
    assert client.get("/m/2").status_code == 404
    # a copy memsafe made still holding the text is named once, on the page the purge leads to
    export = tmp_path / "before purge.jsonl"
    api.export_to_path(store, export, all_projects=True)
    _post(client, state, "/m/3/purge", confirm="purge 3")
    page = client.get("/?msg=purged").text
    assert "Warning: the text is still in 1 file memsafe exported" in page
    assert "rm --" in page and "before purge" in page
    assert "Warning" not in client.get("/?msg=purged").text


def test_memory_page_shows_history_diff_provenance_and_text_as_of(ui, monkeypatch):
    client, state, store = ui
    monkeypatch.setenv("MEMSAFE_NOW", "2030-01-01T00:00:00+00:00")
    api.update(store, 2, content="Postgres listens on port 6543 in the dev compose file")
    monkeypatch.setenv("MEMSAFE_NOW", "2030-02-01T00:00:00+00:00")
    page = client.get("/m/2")
    assert page.status_code == 200
    assert 'class="ddel">5433</span>' in page.text and 'class="dadd">6543</span>' in page.text
    assert "<dt>source</dt><dd>user</dd>" in page.text
    before = client.get("/m/2", params={"as_of": "2029-12-31"}).text
    assert "port 5433" in before.split('id="asof-text"')[1][:200]
    after = client.get("/m/2", params={"as_of": "2030-01-15"}).text
    assert "port 6543" in after.split('id="asof-text"')[1][:200]
    never = client.get("/m/2", params={"as_of": "2001-01-01"}).text
    assert "did not exist yet" in never


def test_git_note_provenance_names_its_commit(store):
    m = api.remember(store, "git commit 1a2b3c4 on main: fix the parser\n\nfiles (1): a.py", source="git")
    prov = api.provenance(m)
    assert (prov.source, prov.commit, prov.branch, prov.author) == ("git", "1a2b3c4", "main", None)


def test_the_memory_page_names_who_wrote_it(ui):
    """A memory written through a team server records its token's user; the page shows it."""
    client, state, store = ui
    m = api.remember(store, "the staging cluster drains nodes on Fridays", author="ana")
    assert api.provenance(api.get(store, m.id)).author == "ana"
    assert "<dt>author</dt><dd>ana</dd>" in client.get(f"/m/{m.id}").text


def test_pages_are_keyset_pages_of_50_and_filters_apply(store):
    for i in range(120):
        api.remember(store, f"note number {i} about topic {i % 7}", kind="fact" if i % 2 else "task",
                     project="p1" if i < 100 else "p2", embed_now=False)
    first = api.browse(store)
    assert len(first.memories) == 50 and (first.total, first.total_capped) == (120, False)
    assert first.memories[0].id == 120
    second = api.browse(store, after_id=first.next_after)
    third = api.browse(store, after_id=second.next_after)
    ids = [m.id for page in (first, second, third) for m in page.memories]
    assert ids == list(range(120, 0, -1)) and third.next_after is None
    tasks = api.browse(store, kinds=["task"])
    assert {m.kind for m in tasks.memories} == {"task"} and tasks.total == 60
    assert [m.id for m in api.browse(store, kinds=["task"], after_id=tasks.next_after).memories] == list(
        range(19, 0, -2))  # the ids of the 10 remaining tasks (even i = odd id)
    assert api.browse(store, project="p2").total == 20
    api.forget(store, 5)
    assert [m.id for m in api.browse(store, status="forgotten").memories] == [5]
    assert api.browse(store, age="older30d").total == 0 and api.browse(store, age="1d").total == 119
    with pytest.raises(InvalidInput):
        api.browse(store, status="gone")


def test_graph_and_charts_pages_render(ui):
    client, _, store = ui
    api.relate_many(store, [("Postgres", "used by", "memsafe"), ("memsafe", "stores in", "SQLite")], create=True,
                    scope=api.make_scope(project="demo"))  # one graph: the one its Postgres memory is in
    graph = client.get("/graph", params={"entity": "memsafe", "depth": "2"})
    assert graph.status_code == 200 and graph.text.count("<circle") == 3
    assert "stores in" in graph.text
    assert client.get("/graph", params={"entity": "nobody-knows"}).status_code == 404
    charts = client.get("/charts")
    assert charts.status_code == 200
    for section in ("chart-kind", "chart-status", "chart-decay", "chart-age", "chart-recall", "chart-events"):
        assert f'id="{section}"' in charts.text
    decay = client.get("/decay")
    assert decay.status_code == 200 and 'id="chart-plan"' in decay.text and "3 examined" in decay.text


def test_other_commands_do_not_import_the_web_stack():
    code = ("import sys; import memsafe.cli; "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_project_facet_counts_every_status_most_first(store):
    for project, n in (("web", 3), ("api", 3), (None, 4), ("cli", 1)):
        for i in range(n):
            api.remember(store, f"note {i} of {project}", project=project, embed_now=False)
    api.forget(store, 1)  # a forgotten memory still counts in its project's facet
    assert api.facets(store).projects == [(None, 4), ("api", 3), ("web", 3), ("cli", 1)]


def test_graph_edits_over_http_and_their_bad_input(ui):
    """Each graph edit is a POST with the CSRF token through one handler; a bad one is an error
    page (400 usage or refusal, 404 unknown) and changes nothing."""
    client, state, store = ui
    api.relate_many(store, [("Postgres", "used by", "memsafe"), ("memsafe", "stores in", "SQLite")], create=True,
                    scope=api.make_scope(project="demo"))  # one graph: the one its Postgres memory is in

    def graph_state():
        listing = api.graph_list(store, all_projects=True)
        return (sorted((e.name, tuple(e.aliases), e.memories) for e in listing.entities),
                sorted((r.source, r.relation, r.target) for r in listing.relations))

    page = client.get("/graph", params={"entity": "Postgres", "depth": "1"})
    assert page.status_code == 200 and 'action="/graph/rename"' in page.text and 'action="/graph/unlink"' in page.text
    before = graph_state()
    assert client.post("/graph/rename", data={"entity": "Postgres", "other": "PG"},
                       headers={"Origin": BASE}).status_code == 403  # no CSRF token
    for path, form, code in (
        ("/graph/merge", {"entity": "Postgres", "other": "postgres"}, 400),  # into itself
        ("/graph/rename", {"entity": "Postgres", "other": "SQLite"}, 400),  # onto an existing name
        ("/graph/rename", {"entity": "Nobody", "other": "Somebody"}, 404),
        ("/graph/delete", {"entity": "Postgres"}, 400),  # the box not ticked
        ("/graph/unlink", {"entity": "Postgres", "memory": "1"}, 404),  # memory 1 does not name it
        ("/graph/unlink", {"entity": "Postgres", "memory": "x"}, 400),
        ("/graph/explode", {"entity": "Postgres"}, 404),
    ):
        done = _post(client, state, path, **form)
        assert done.status_code == code, (path, form, done.status_code)
        assert "Traceback" not in done.text
    assert graph_state() == before

    done = _post(client, state, "/graph/rename", entity="Postgres", other="PostgreSQL", depth="1")
    assert done.status_code == 303 and done.headers["location"] == "/graph?entity=PostgreSQL&depth=1&msg=rename"
    assert "Renamed" in client.get(done.headers["location"]).text
    assert _post(client, state, "/graph/merge", entity="SQLite", other="PostgreSQL").status_code == 303
    done = _post(client, state, "/graph/unlink", entity="PostgreSQL", memory="2", at="PostgreSQL")
    assert done.status_code == 303 and "entity=PostgreSQL" in done.headers["location"]
    assert "PostgreSQL" not in store.entity_names(2)
    done = _post(client, state, "/graph/delete", entity="PostgreSQL", confirm="yes")
    assert done.status_code == 303 and done.headers["location"] == "/graph?msg=delete"
    assert "PostgreSQL" not in {e.name for e in api.graph_entities(store, all_projects=True)}
