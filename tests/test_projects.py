"""One project across machines: a repository is keyed by its normalised `origin`
remote, so every clone of it (any path, ssh or https) shares one project; without an origin, by
its path. Stores keyed by path before move to the new key with nothing lost."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memsafe import api, settings


def _repo(path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if origin:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


def _hits(cli, query: str, *args: str) -> list[dict]:
    result = cli("recall", query, "--mode", "lexical", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"]


@pytest.mark.parametrize("url", [
    "git@github.com:Acme/Web.git", "https://github.com/Acme/Web", "https://user:tok@GitHub.com/Acme/Web.git/",
    "ssh://git@github.com:22/Acme/Web.git", "git://github.com/Acme/Web", "github.com:Acme/Web.git",
    "git+ssh://git@github.com/Acme//Web",
])
def test_every_url_of_one_repository_is_one_key(url):
    assert settings.remote_key(url) == "origin:github.com/Acme/Web"


@pytest.mark.parametrize("url", ["/srv/git/web.git", "file:///srv/git/web.git", "../web", "C:/repos/web",
                                 "https://github.com/", "not a url"])
def test_a_remote_on_this_machine_names_no_shared_repository(url):
    assert settings.remote_key(url) is None


def test_two_clones_of_one_origin_share_a_project_and_others_do_not(cli, tmp_path, monkeypatch):
    laptop = _repo(tmp_path / "laptop" / "web", "git@github.com:acme/web.git")
    ci = _repo(tmp_path / "ci" / "checkout", "https://github.com/acme/web")
    other = _repo(tmp_path / "laptop" / "api", "git@github.com:acme/api.git")
    monkeypatch.chdir(laptop)
    assert cli("remember", "the web deploy waits for the canary to pass").exit_code == 0
    monkeypatch.chdir(ci)
    [hit] = _hits(cli, "deploy canary")
    assert hit["project"] == "origin:github.com/acme/web"
    monkeypatch.chdir(other)
    assert _hits(cli, "deploy canary") == []
    for spelling in ("git@github.com:acme/web.git", "origin:github.com/acme/web", str(ci)):
        assert [h["id"] for h in _hits(cli, "deploy canary", "--project", spelling)] == [hit["id"]]


def test_memories_keyed_by_path_move_to_the_origin_key_with_nothing_lost(cli, db_path, tmp_path, monkeypatch):
    """A store written before origin keys (or before the remote was added) keeps memories under
    the path; the next command in the repository moves them, history included, and a recall scoped
    to the path or to the remote finds the same memories."""
    repo = _repo(tmp_path / "web")
    path_key = settings.project_key(str(repo.resolve()))
    monkeypatch.chdir(repo)
    for text in ("the billing queue retries three times", "billing alerts page the on-call engineer",
                 "billing runs nightly at two"):
        assert cli("remember", text).exit_code == 0
    first = _hits(cli, "billing")
    assert {h["project"] for h in first} == {path_key}
    assert cli("update", str(first[0]["id"]), "--content", "the billing queue retries five times").exit_code == 0
    assert cli("forget", str(first[1]["id"])).exit_code == 0

    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "https://gitlab.example.com/acme/web.git"],
                   check=True)
    moved = _hits(cli, "billing")
    key = "origin:gitlab.example.com/acme/web"
    assert {h["project"] for h in moved} == {key}
    assert sorted(h["id"] for h in moved) == sorted(h["id"] for h in first if
                                                              h["id"] != first[1]["id"])
    for spelling in (str(repo), "git@gitlab.example.com:acme/web.git", key):
        assert sorted(h["id"] for h in _hits(cli, "billing", "--project", spelling)) == \
            sorted(h["id"] for h in moved)
    opened = api.open_store(str(db_path))
    try:
        rows = opened.store.export_memory_rows(0, 100, ["active", "archived", "forgotten"], None)
        assert len(rows) == 3 and {r["project"] for r in rows} == {key}  # the forgotten one moved too
        history = api.history(opened.store, first[0]["id"])
        assert len(history.versions) >= 2
    finally:
        opened.store.close()


@pytest.mark.parametrize("spelling", [
    "git@[2001:db8::1]:acme/web.git", "ssh://git@[2001:db8::1]:22/acme/web", "https://[2001:db8::1]/acme/web/",
])
def test_an_ipv6_host_is_one_key_in_every_url_form(spelling):
    """The scp form with a bracketed IPv6 host (`git@[::1]:org/repo`) was keyed `origin:[2001/db8::1]:...`."""
    assert settings.remote_key(spelling) == "origin:2001:db8::1/acme/web"


@pytest.mark.parametrize("spelling", [
    "ssh://deploy:Xk9mP2qLwZ7vB4@git.acme.io/acme/web", "deploy:Xk9mP2qLwZ7vB4@git.acme.io:acme/web.git",
    "https://x-access-token:ghs_16C7e42F292c6912E7710c838347Ae178B4a@git.acme.io/acme/web.git",
])
def test_a_remote_url_with_credentials_is_keyed_without_them(spelling):
    """`--project URL` keys the repository, never the password or token in the URL: a URL with a
    password was refused as a credential, and the scp form with one was kept whole as a path."""
    assert api.clean_project(spelling) == "origin:git.acme.io/acme/web"


def test_a_project_name_with_a_colon_stays_a_name():
    assert api.clean_project("team:notes") == "team:notes"


def test_a_submodule_and_an_overlong_origin_are_keyed(tmp_path, monkeypatch):
    """A submodule (its `.git` a file pointing into the superproject) is keyed by its own origin,
    like any clone; a repository whose origin key would pass MAX_PROJECT_CHARS is keyed by its
    path (every command in it failed: 'project name or path is 5,017 characters')."""
    sub = _repo(tmp_path / "super" / ".git" / "modules" / "lib", "git@github.com:acme/lib.git")
    work = tmp_path / "super" / "lib"
    work.mkdir()
    (work / ".git").write_text("gitdir: ../.git/modules/lib\n")
    (tmp_path / "super" / ".git" / "modules" / "lib" / ".git").rename(tmp_path / "lib.git")
    for entry in (tmp_path / "lib.git").iterdir():
        entry.rename(sub / entry.name)
    assert settings.detect_project_keys(work)[0] == "origin:github.com/acme/lib"
    long = _repo(tmp_path / "long", "https://git.acme.io/" + "a" * 5000)
    assert settings.detect_project_keys(long)[0] == settings.project_key(str(long.resolve()))


def test_a_project_path_given_from_outside_moves_its_path_keyed_memories(cli, tmp_path, monkeypatch):
    """`--project PATH` / `--project-path` (and `serve --project PATH`, an MCP client's usual
    setting) name the repository from outside it: its memories kept under the path key are moved
    to the origin key too. Before, only a command run inside the repository moved them, and a
    server started with --project never saw them."""
    repo = _repo(tmp_path / "web")
    (repo / "docs").mkdir()
    monkeypatch.chdir(repo)
    assert cli("remember", "the billing queue retries three times").exit_code == 0
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "https://gitlab.example.com/acme/web.git"],
                   check=True)
    monkeypatch.chdir(tmp_path)
    for args in (("--project", str(repo)), ("--project-path", str(repo / "docs"))):
        [hit] = _hits(cli, "billing queue", *args)
        assert hit["project"] == "origin:gitlab.example.com/acme/web"


@pytest.mark.parametrize("command", [
    ["recall", "deploy"], ["list"], ["recall", "deploy", "--json"], ["get", "1"], ["export", "-o", "out.jsonl"],
])
def test_a_project_and_every_project_at_once_is_refused_by_every_command(cli, command, tmp_path, monkeypatch):
    # recall and list took `--project web --all-projects` and silently searched every project;
    # every other command already refused it.
    monkeypatch.chdir(tmp_path)
    assert cli("remember", "We deploy on Fridays", "--project", "web").exit_code == 0
    r = cli(*command, "--project", "web", "--all-projects")
    said = json.loads(r.stdout)["error"]["message"] if "--json" in command else r.stderr
    assert r.exit_code == 2 and "not both" in said and "Traceback" not in r.output
    assert "--json" in command or not r.stdout.strip()  # nothing but the error


@pytest.mark.parametrize("since", ["", "  "])
def test_an_empty_since_is_refused_not_ignored(cli, since):
    assert cli("remember", "We deploy on Fridays").exit_code == 0
    r = cli("recall", "deploy", "--since", since)
    assert r.exit_code == 2 and "'--since': empty text" in r.stderr and "Traceback" not in r.stderr
