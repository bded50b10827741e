"""Responsibility: the git-hook handlers: install/uninstall/status of the post-commit hook and
remembering one commit (what the hook runs)."""

from __future__ import annotations

from pathlib import Path

from memsafe import hooks, settings
from memsafe.api.core import remember
from memsafe.errors import Duplicate
from memsafe.hooks import HookStatus
from memsafe.models import Kind, Memory, Source
from memsafe.store import Store

__all__ = ["HookStatus", "hook_install", "hook_uninstall", "hook_status", "remember_commit", "COMMIT_TAG"]

COMMIT_TAG = "commit"


def hook_install(repo: str | Path | None = None, *, db: str | None = None) -> HookStatus:
    """Install the post-commit hook in the repository containing `repo` (default cwd). See `hooks.install`."""
    return hooks.install(repo, db=db)


def hook_uninstall(repo: str | Path | None = None) -> HookStatus:
    """Remove memsafe's hook and restore the one it replaced. See `hooks.uninstall`."""
    return hooks.uninstall(repo)


def hook_status(repo: str | Path | None = None) -> HookStatus:
    """The hook state of the repository containing `repo`. Raises InvalidInput outside a repository."""
    return hooks.status(repo)


def remember_commit(store: Store, repo: str | Path, *, commit: str = "HEAD") -> Memory | None:
    """Remember one commit: subject, body, short hash, branch and changed files, with source=git,
    tag `commit`, project = the repository (its main worktree's root), vector deferred. A credential
    in the message is stored redacted (`[REDACTED:<type>]`): a hook cannot ask what to do.

    Returns the memory, or None when this commit was already remembered.

    Raises:
        InvalidInput: not a repository or unreadable commit.
    """
    root = hooks.repo_root(repo)
    info = hooks.read_commit(root, commit)
    project = settings.detect_project(root, mode="git-root")
    try:
        return remember(
            store, hooks.commit_note(info), kind=Kind.GENERAL.value, project=project, tags=[COMMIT_TAG],
            source=Source.GIT.value, embed_now=False, redact=True,  # a hook cannot ask: credentials are redacted
        )
    except Duplicate:
        return None
