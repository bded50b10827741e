"""Attribution: who wrote each memory and each earlier version is stored, shown by
get and history, carried by export and import; None (unknown) is the local default."""

from __future__ import annotations

import io
import json

import pytest
from test_safety import GITHUB

from memsafe import api, render
from memsafe.errors import InvalidInput, SecretDetected

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend


def test_author_is_stored_shown_and_kept_per_version(store, cli):
    alice = api.remember(store, "the staging database is reset every Monday", author="  alice  ", embed_now=False)
    assert alice.author == "alice"
    assert api.get(store, alice.id).author == "alice"
    local = api.remember(store, "nobody signed this one", embed_now=False)
    assert local.author is None

    api.update(store, alice.id, content="the staging database is reset every Sunday", author="bob")
    api.update(store, alice.id, tags=["ops"])  # a local edit: its author is unknown
    versions = api.history(store, alice.id).versions
    assert [(v.cause, v.author) for v in versions] == [("update", "alice"), ("update", "bob"), ("current", None)]
    assert "by=alice" in render.compact_history(api.history(store, alice.id))

    out = cli("get", str(alice.id), "--json")
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["author"] is None  # the last writer was local
    api.update(store, alice.id, content="reset on Sundays at 02:00", author="carol")
    out = cli("history", str(alice.id), "--json")
    assert out.exit_code == 0, out.stderr
    assert [v["author"] for v in json.loads(out.stdout)["versions"]] == ["alice", "bob", None, "carol"]
    assert "by=carol" in render.compact_memory(api.get(store, alice.id))


@pytest.mark.parametrize("bad, error", [("", InvalidInput), ("x" * 201, InvalidInput), (GITHUB, SecretDetected)])
def test_bad_author_is_refused_and_nothing_is_stored(store, bad, error):
    with pytest.raises(error):
        api.remember(store, "a fact with a bad author", author=bad, embed_now=False)
    assert store.counts()["total"] == 0


def test_export_import_round_trips_authors(store, tmp_path):
    m = api.remember(store, "we squash before merging", author="alice", embed_now=False)
    api.update(store, m.id, content="we rebase, then squash before merging", author="bob")
    api.remember(store, "an unsigned memory", embed_now=False)
    path = tmp_path / "a.jsonl"
    api.export_to_path(store, path, all_projects=True)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    memories = {r["content"]: r for r in records if r.get("type") == "memory"}
    assert memories["we rebase, then squash before merging"]["author"] == "bob"
    assert memories["we rebase, then squash before merging"]["versions"][0]["author"] == "alice"

    other = api.open_store(str(tmp_path / "other.db")).store
    # the importer's name fills in only where the file names no author
    api.import_file(other, path, author="importer")
    copy = {m.content: m for m in other.get_memories(range(1, 10)).values()}
    assert copy["we rebase, then squash before merging"].author == "bob"
    assert copy["an unsigned memory"].author == "importer"
    history = api.history(other, copy["we rebase, then squash before merging"].id).versions
    assert [v.author for v in history] == ["alice", "bob"]
    buf = io.StringIO()
    api.export(other, buf, all_projects=True)
    again = {r["content"]: r for r in map(json.loads, buf.getvalue().splitlines()) if r.get("type") == "memory"}
    assert again["we rebase, then squash before merging"] == memories["we rebase, then squash before merging"]
    other.close()
