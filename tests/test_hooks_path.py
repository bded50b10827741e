"""Where `hook install` puts the hooks when core.hooksPath is set: in the repository's own config
(husky's `.husky/_`, another folder), in the global or system config (a folder every repository
on the machine runs hooks from), in a submodule. Real repositories in temporary folders, real
commits, and a second, unrelated repository whose commit proves what is (or is not) recorded.
HOME, GIT_CONFIG_GLOBAL and GIT_CONFIG_SYSTEM point into the test's folder: the user's own git
config is never read or written.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from test_hooks import commit, git, wait_for_memories

from memsafe import api, hooks, settings

HUSKY_H = """#!/usr/bin/env sh
n=$(basename "$0")
s=$(dirname "$(dirname "$0")")/$n
[ ! -f "$s" ] && exit 0
sh -e "$s" "$@"
"""
HUSKY_HOOK = '#!/usr/bin/env sh\n. "${0%/*}/h"\n'  # what husky 9 writes in .husky/_ for every hook


@pytest.fixture(autouse=True)
def own_git_config(tmp_path, monkeypatch):
    """A home and a global git config of the test's own; no system config unless a test sets one."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_SYSTEM", raising=False)
    for key, value in (("user.name", "Test User"), ("user.email", "test@example.com"), ("commit.gpgsign", "false"),
                       ("init.defaultBranch", "main"), ("protocol.file.allow", "always")):
        git(home, "config", "--global", key, value)
    return home


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    return path


def marker_hook(folder: Path, name: str, log: Path) -> Path:
    """An executable hook `name` in `folder` that appends its name to `log`."""
    folder.mkdir(parents=True, exist_ok=True)
    hook = folder / name
    hook.write_text(f"#!/bin/sh\necho {name} >> '{log}'\n")
    hook.chmod(0o755)
    return hook


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def memories(db: Path) -> list:
    if not db.exists():
        return []
    opened = api.open_store(str(db))
    try:
        return [opened.store.get_memory(r["id"]) for r in opened.store.export_memory_rows(0, 100, ["active"], None)]
    finally:
        opened.store.close()


def memsafe_ran(repo: Path) -> bool:
    """Whether a memsafe hook ran for a commit in `repo` (it writes the queue in the git folder)."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.decode().strip())
    return (common / hooks.QUEUE_DIR).exists()


def project(repo: Path) -> str:
    return settings.project_key(str(repo.resolve()))


@pytest.fixture
def shared(tmp_path, own_git_config) -> Path:
    """A global core.hooksPath (`~/.gitconfig` as GIT_CONFIG_GLOBAL names it) holding a
    pre-commit and a post-commit hook of the user's, which log to `tmp_path / "shared.log"`."""
    folder = tmp_path / "global-hooks"
    for name in ("pre-commit", "post-commit"):
        marker_hook(folder, name, tmp_path / "shared.log")
    git(own_git_config, "config", "--global", "core.hooksPath", str(folder))
    return folder


def test_a_global_hooks_path_is_refused_in_one_line_and_arms_nothing(shared, tmp_path, cli, db_path):
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    before = snapshot(shared)
    status = json.loads(cli("hook", "status", "--repo", str(a), "--json").stdout)
    assert (status["hooks_dir"], status["hooks_path_scope"], status["shared"]) == (str(shared), "global", True)
    assert status["hooks_path_origin"] == str(tmp_path / "home" / ".gitconfig")
    shown = cli("hook", "status", "--repo", str(a)).stdout
    assert "global git config" in shown and "serves every repository" in shown
    refused = cli("hook", "install", "--repo", str(a))
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.exit_code == 1 and len(lines) == 1, refused.stderr
    assert "every repository on this machine" in lines[0] and "--local" in lines[0] and "--shared" in lines[0]
    assert str(tmp_path / "home" / ".gitconfig") in lines[0]
    assert snapshot(shared) == before
    commit(a, b"in a")
    commit(b, b"in b")
    assert (tmp_path / "shared.log").read_text().split() == ["pre-commit", "post-commit"] * 2
    assert not memsafe_ran(a) and not memsafe_ran(b) and memories(db_path) == []
    [step] = api.init_plan(repo=str(a), steps=["hook"]).changes  # `memsafe init` does not install there either
    assert step.state == "refused" and "--local" in step.summary and not step.action
    both = cli("hook", "install", "--local", "--shared", "--repo", str(a))
    assert both.exit_code == 2 and "not both" in both.stderr


def test_install_local_records_this_repository_only_and_the_shared_hooks_still_run(shared, tmp_path, cli, db_path):
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    before = snapshot(shared)
    result = cli("hook", "install", "--local", "--repo", str(a), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(result.stdout)
    own = a / ".git" / hooks.LOCAL_DIR
    assert (status["hooks_dir"], status["hooks_path_scope"], status["shared"], status["local_override"]) == (
        str(own), "local", False, True)
    assert status["installed"] and status["rewrite_installed"]
    assert git(a, "config", "--local", "core.hooksPath").stdout.decode().strip() == str(own)
    assert snapshot(shared) == before  # the shared folder is not touched
    assert "records        this repository" in cli("hook", "status", "--repo", str(a)).stdout

    commit(a, b"recorded: a's commit")
    worktree = tmp_path / "a-feature"
    git(a, "worktree", "add", "-q", "-b", "feature", str(worktree))
    commit(worktree, b"recorded: from a's worktree")
    commit(b, b"not recorded: b's commit")
    found = wait_for_memories(db_path, 2)
    assert sorted(m.content.split(": ", 1)[1].split("\n")[0] for m in found) == [
        "recorded: a's commit", "recorded: from a's worktree"]
    assert {m.project for m in found} == {project(a)}
    # the user's shared hooks ran for all three commits; memsafe never ran for b
    assert (tmp_path / "shared.log").read_text().split() == ["pre-commit", "post-commit"] * 3
    assert not memsafe_ran(b)
    time.sleep(1)
    assert len(memories(db_path)) == 2

    removed = cli("hook", "uninstall", "--repo", str(a), "--json")
    assert removed.exit_code == 0, removed.stderr
    after = json.loads(removed.stdout)
    assert (after["hooks_dir"], after["shared"], after["installed"]) == (str(shared), True, False)
    assert subprocess.run(["git", "-C", str(a), "config", "--local", "--get", "core.hooksPath"]).returncode == 1
    assert not own.exists() and snapshot(shared) == before


def test_install_shared_records_every_repository_and_only_uninstall_shared_removes_it(shared, tmp_path, cli, db_path):
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    before = snapshot(shared)
    result = cli("hook", "install", "--shared", "--repo", str(a), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["hooks_dir"] == str(shared)
    in_b = json.loads(cli("hook", "status", "--repo", str(b), "--json").stdout)
    assert in_b["installed"] and in_b["shared"]
    assert "every repository on this machine" in cli("hook", "status", "--repo", str(b)).stdout
    commit(b, b"b is recorded too")
    [memory] = wait_for_memories(db_path, 1)
    assert memory.project == project(b)
    assert (tmp_path / "shared.log").read_text().split() == ["pre-commit", "post-commit"]  # chained, still runs

    refused = cli("hook", "uninstall", "--repo", str(b))
    assert refused.exit_code == 1 and "--shared" in refused.stderr and "every repository" in refused.stderr
    assert cli("hook", "uninstall", "--shared", "--repo", str(b)).exit_code == 0
    assert snapshot(shared) == before


def test_a_system_hooks_path_and_one_from_the_environment_are_shared_too(tmp_path, monkeypatch, cli):
    repo = new_repo(tmp_path / "repo")
    system = tmp_path / "gitconfig-system"
    system.write_text(f"[core]\n\thooksPath = {tmp_path / 'system-hooks'}\n")
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM")
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(system))
    status = json.loads(cli("hook", "status", "--repo", str(repo), "--json").stdout)
    assert (status["hooks_path_scope"], status["hooks_path_origin"], status["shared"]) == ("system", str(system), True)
    refused = cli("hook", "install", "--repo", str(repo))
    assert refused.exit_code == 1 and "system git config" in refused.stderr
    assert not (tmp_path / "system-hooks").exists()
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(tmp_path / "env-hooks"))
    refused = cli("hook", "install", "--repo", str(repo))
    assert refused.exit_code == 1 and "environment" in refused.stderr
    assert not (tmp_path / "env-hooks").exists()


def test_a_relative_global_hooks_path_is_each_repositorys_own(tmp_path, own_git_config, cli, db_path):
    """`core.hooksPath = .githooks` in ~/.gitconfig names a folder inside each repository: not shared."""
    git(own_git_config, "config", "--global", "core.hooksPath", ".githooks")
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    result = cli("hook", "install", "--repo", str(a), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(result.stdout)
    assert (status["hooks_dir"], status["shared"]) == (str(a / ".githooks"), False)
    commit(b, b"b has no hook")
    commit(a, b"a is recorded")
    [memory] = wait_for_memories(db_path, 1)
    assert memory.project == project(a) and not memsafe_ran(b)


def test_husky_keeps_running_its_hook_and_the_hook_lands_in_husky_folder(tmp_path, cli, db_path):
    """A repository with husky 9 (core.hooksPath = .husky/_ in its config): memsafe's hook lands in
    .husky/_, where git runs it, and the husky hook it replaced still runs .husky/post-commit."""
    repo = new_repo(tmp_path / "web")
    other = new_repo(tmp_path / "other")
    (repo / ".husky" / "_").mkdir(parents=True)
    (repo / ".husky" / "_" / "h").write_text(HUSKY_H)
    for name in ("post-commit", "pre-commit"):
        (repo / ".husky" / "_" / name).write_text(HUSKY_HOOK)
        (repo / ".husky" / "_" / name).chmod(0o755)
    log = tmp_path / "husky.log"
    (repo / ".husky" / "post-commit").write_text(f"echo user-post-commit >> '{log}'\n")
    git(repo, "config", "core.hooksPath", ".husky/_")
    result = cli("hook", "install", "--repo", str(repo), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(result.stdout)
    assert (status["hooks_dir"], status["hooks_path_scope"], status["shared"]) == (
        str(repo / ".husky" / "_"), "local", False)
    assert status["chained"] == str(repo / ".husky" / "_" / "post-commit.pre-memsafe")
    commit(repo, b"Add the login form")
    commit(other, b"an unrelated repository")
    [memory] = wait_for_memories(db_path, 1)
    assert memory.project == project(repo) and "Add the login form" in memory.content
    assert log.read_text().split() == ["user-post-commit"]
    assert not memsafe_ran(other)
    assert cli("hook", "uninstall", "--repo", str(repo)).exit_code == 0
    assert (repo / ".husky" / "_" / "post-commit").read_text() == HUSKY_HOOK
    assert sorted(p.name for p in (repo / ".husky" / "_").iterdir()) == ["h", "post-commit", "pre-commit"]


def test_a_submodule_gets_its_own_hook_and_the_superproject_none(tmp_path, cli, db_path):
    library = new_repo(tmp_path / "library-origin")
    commit(library, b"library start")
    top = new_repo(tmp_path / "app")
    git(top, "submodule", "add", "-q", str(library), "lib")
    git(top, "commit", "-qm", "add the library")
    sub = top / "lib"
    result = cli("hook", "install", "--repo", str(sub), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(result.stdout)
    assert Path(status["hooks_dir"]) == (top / ".git" / "modules" / "lib" / "hooks").resolve()
    assert not (top / ".git" / "hooks" / "post-commit").exists()
    commit(top, b"a commit of the superproject")
    commit(sub, b"a commit of the library")
    [memory] = wait_for_memories(db_path, 1)
    assert "a commit of the library" in memory.content and memory.project == project(sub)
    assert not (top / ".git" / hooks.QUEUE_DIR).exists()
