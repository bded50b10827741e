"""Responsibility: the git-hook handlers: install/uninstall/status of the hooks, draining the queue
the hooks fill (remembering commits, following rebases and amends), and `hook backfill`.

A commit's memory has a uid derived from its project and full hash (`commit_uid`), so a commit is
remembered once whichever way it arrives (hook, backfill, a second run); when a rebase or an amend
rewrites the commit, its memory is updated in place (the old note stays in its history) and takes
the new commit's uid. Vectors are deferred: `hook backfill` computes them once the commits are
stored (unless --no-embed), a hook's commit is embedded by the next `embed`, `serve` or recall.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memsafe import hooks
from memsafe.api.core import _event_time, clean_author, current_project, forget, remember
from memsafe.errors import Duplicate, MemsafeError
from memsafe.hooks import CommitInfo, HookStatus
from memsafe.models import Kind, Memory, Source, Status
from memsafe.store import Store

__all__ = [
    "HookStatus", "hook_install", "hook_uninstall", "hook_status", "remember_commit", "COMMIT_TAG",
    "commit_uid", "drain_queue", "QueueReport", "backfill_commits", "BackfillReport",
]

COMMIT_TAG = "commit"
_UID_NAMESPACE = uuid.UUID("0c0a4f57-9a3e-4b8e-8f43-6d656d736166")  # fixed: a commit's uid never changes
BACKFILL_BATCH = 200  # commits remembered per transaction by backfill


def hook_install(repo: str | Path | None = None, *, db: str | None = None, local: bool = False,
                 shared: bool = False) -> HookStatus:
    """Install the post-commit and post-rewrite hooks in the repository containing `repo` (default
    cwd); a hooks folder shared by every repository needs `local` or `shared`. See `hooks.install`."""
    return hooks.install(repo, db=db, local=local, shared=shared)


def hook_uninstall(repo: str | Path | None = None, *, shared: bool = False) -> HookStatus:
    """Remove what `hook_install` added; from a shared hooks folder only with `shared`. See
    `hooks.uninstall`."""
    return hooks.uninstall(repo, shared=shared)


def hook_status(repo: str | Path | None = None) -> HookStatus:
    """The hook state of the repository containing `repo`. Raises Refused outside a repository."""
    return hooks.status(repo)


def commit_uid(project: str | None, sha: str) -> str:
    """The uid of the memory of commit `sha` (full hash) in `project`: uuid5 of both, hex."""
    return uuid.uuid5(_UID_NAMESPACE, f"git-commit\0{project or ''}\0{sha}").hex


def _commit_author(info: CommitInfo) -> str | None:
    """The commit's author name as memsafe stores an author, None when it is unusable (empty,
    too long, or it looks like a credential)."""
    try:
        return clean_author(info.author)
    except MemsafeError:
        return None


def _store_commit(store: Store, info: CommitInfo, project: str | None, *, redate: bool = False) -> Memory | None:
    """Remember one commit's note at its author date, with its author (None if its uid, or the
    same note, is already stored). `redate`: a commit stored before without its author date
    (its event time is the time it was stored) gets it now, and its author when it has none.
    A commit that says nothing of its own (`hooks.contentless`) is not stored."""
    if hooks.contentless(info):
        return None
    existing = store.memory_by_uid(commit_uid(project, info.hash))
    if existing is not None:
        if redate and info.date and existing.get("happened_at") in (None, existing["created_at"]):
            event_at = _event_time(None, info.date)
            if event_at and event_at != existing["created_at"]:
                changes: dict = {"happened_at": event_at}
                if existing.get("author") is None:
                    changes["author"] = _commit_author(info)
                store.update_memory(existing["id"], changes)
        return None
    try:
        return remember(
            store, hooks.commit_note(info), kind=Kind.GENERAL.value, project=project, tags=[COMMIT_TAG],
            source=Source.GIT.value, embed_now=False, redact=True,  # a hook cannot ask: credentials are redacted
            uid=commit_uid(project, info.hash), happened_at=info.date, author=_commit_author(info),
        )
    except Duplicate:
        return None


def remember_commit(store: Store, repo: str | Path, *, commit: str = "HEAD",
                    branch: str | None | hooks._Current = hooks._CURRENT) -> Memory | None:
    """Remember one commit: subject, body, short hash, branch and changed files, with source=git,
    tag `commit`, project = the repository (its main worktree's root), vector deferred. A credential
    in the message is stored redacted (`[REDACTED:<type>]`): a hook cannot ask what to do.

    Args:
        branch: the branch the commit was made on (None: detached); default: the current one.

    Returns the memory, or None when this commit was already remembered.

    Raises:
        Refused: not a repository or unreadable commit.
    """
    root = hooks.repo_root(repo)
    info = hooks.read_commit(root, commit, branch)
    return _store_commit(store, info, current_project(store, root))


@dataclass
class QueueReport:
    """What one drain of the hook queue did. `busy`: another process holds the queue (it drains
    what was added); `failed`: [(entry file name, reason)], entries moved aside as `.failed-*`."""

    remembered: int = 0
    updated: int = 0
    forgotten: int = 0
    skipped: int = 0
    busy: bool = False
    failed: list[tuple[str, str]] = field(default_factory=list)


def drain_queue(store: Store, repo: str | Path, folder: str | Path | None = None) -> QueueReport:
    """Apply every entry of the hook queue, oldest first, under the queue's lock (what `hook run`
    does in the background): a commit entry is remembered (with the branch the hook read when the
    commit was made); a rewrite entry (rebase, amend) updates each rewritten commit's memory in
    place, keeping its history, and remembers the commits a rebase made that git lists in no pair.
    Returns at once with `busy` when another process drains.

    Raises:
        Refused: not a repository.
    """
    root = hooks.repo_root(repo)
    queue = Path(folder) if folder else hooks.queue_dir(root)
    project = current_project(store, root)
    report = QueueReport()
    while True:
        with hooks.queue_lock(queue) as mine:
            if not mine:
                report.busy = True
                return report
            for entry in hooks.read_queue(queue):
                try:
                    _apply_entry(store, root, project, entry, report)
                except MemsafeError as exc:
                    report.failed.append((entry.path.name, str(exc)))
                    entry.path.replace(entry.path.with_name(".failed-" + entry.path.name))
                    continue
                entry.path.unlink(missing_ok=True)
        # Let go of the pid file, then read again: a hook that saw this run alive (or a run that
        # found the lock taken) left its entry to us, and one that comes later starts its own run.
        hooks.release_pid(queue)
        if not hooks.read_queue(queue):
            return report


def _apply_entry(store: Store, root: Path, project: str | None, entry: hooks.QueueEntry, report: QueueReport):
    if entry.kind == "bad":
        raise MemsafeError("not a memsafe queue entry")
    if entry.kind == "commit":
        memory = _store_commit(store, hooks.read_commit(root, entry.commits[0], entry.branch), project)
        if memory is None:
            report.skipped += 1
        else:
            report.remembered += 1
        return
    for old, new in entry.pairs:
        _follow_rewrite(store, root, project, old, new, entry.branch, report)
    if entry.since:  # commits the rebase made (an `edit` stop split a commit): in no pair
        rewritten = {new for _, new in entry.pairs}
        for sha in hooks.made_during(root, entry.since):
            if sha not in rewritten:
                memory = _store_commit(store, hooks.read_commit(root, sha, entry.branch), project)
                report.remembered += memory is not None


def _follow_rewrite(store: Store, root: Path, project: str | None, old: str, new: str, branch: str | None,
                    report: QueueReport) -> None:
    """Commit `old` became `new`: its memory takes the new note and uid (history kept). With no
    memory of `old`, `new` is remembered as a commit; when both have one (squashed commits, or a
    store without reflog), the memory of `old` is forgotten, never duplicated."""
    from memsafe.api.lifecycle import update  # late: lifecycle imports the core handlers

    before = store.memory_by_uid(commit_uid(project, old))
    after = store.memory_by_uid(commit_uid(project, new))
    if before is None or before["status"] != Status.ACTIVE.value:
        if after is None and before is None:
            memory = _store_commit(store, hooks.read_commit(root, new, branch), project)
            report.remembered += memory is not None
        else:
            report.skipped += 1
        return
    if after is not None:
        forget(store, before["id"], reason=f"commit rewritten as {new[:12]}, remembered as memory {after['id']}")
        report.forgotten += 1
        return
    note = hooks.commit_note(hooks.read_commit(root, new, branch))
    try:
        update(store, before["id"], content=note, redact=True, embed_now=False)
    except Duplicate:  # the same note is already another memory (an identical commit): nothing to add
        forget(store, before["id"], reason=f"commit rewritten as {new[:12]}")
        report.forgotten += 1
        return
    with store.write():
        store.update_memory(before["id"], {"uid": commit_uid(project, new)})
    report.updated += 1


@dataclass
class BackfillReport:
    """What `hook backfill` did: `seen` commits read from git, `remembered` new memories, `skipped`
    commits already remembered, in `seconds`; then `embedded` vectors computed in `embed_seconds`
    (`embed_pending`, which the CLI runs unless --no-embed), `embed_error` why none could be; `pending`
    vectors left for `memsafe embed` (until then those memories are found by keywords only)."""

    repo: str
    project: str | None
    seen: int = 0
    remembered: int = 0
    skipped: int = 0
    pending: int = 0
    seconds: float = 0.0
    embedded: int = 0
    embed_seconds: float = 0.0
    embed_error: str | None = None


def backfill_commits(
    store: Store, repo: str | Path | None = None, *, since: str | None = None, max_count: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BackfillReport:
    """Remember the existing history of the repository containing `repo` (commits reachable from
    HEAD, oldest first), as the hook would have: one memory per commit, same note, same uid, with
    embedding deferred, each at its own author date (`Memory.happened_at`) with its author's name.
    Idempotent: a commit already remembered (by the hook or an earlier backfill) is skipped, but
    for its event time: one stored without it (its time is when it was stored) gets its author
    date. `progress(done, total)` after each batch.

    Raises:
        Refused: not a repository. InvalidInput: a `since` that is no date (ISO-8601, a date or a
            relative time like `3 months ago`, read as `--as-of` is) or in the future, max_count < 1.
    """
    import time

    from memsafe.errors import InvalidInput

    if max_count is not None and max_count < 1:
        raise InvalidInput(f"--max must be at least 1, got {max_count}")
    if since is not None:  # git reads any text as some date ("nonsense" meant now): read it here
        from memsafe.api.lifecycle import parse_when

        since = parse_when(since, what="--since")
    start = time.monotonic()
    root = hooks.repo_root(repo)
    project = current_project(store, root)
    commits = list(hooks.history(root, since=since, max_count=max_count, branch=hooks.current_branch(root)))
    report = BackfillReport(str(root), project, seen=len(commits))
    for first in range(0, len(commits), BACKFILL_BATCH):
        with store.write():  # one transaction per batch: remember's own writes join it
            for info in commits[first : first + BACKFILL_BATCH]:
                if _store_commit(store, info, project, redate=True) is None:
                    report.skipped += 1
                else:
                    report.remembered += 1
        if progress:
            progress(min(first + BACKFILL_BATCH, len(commits)), len(commits))
    report.pending = store.pending_count()
    report.seconds = round(time.monotonic() - start, 3)
    return report
