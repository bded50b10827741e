"""Responsibility: the git hooks: installing, chaining, removing them; the queue of commits they
hand to memsafe; reading commits (one, or a whole history) into notes. Talks to git (subprocess),
the hooks folder and the queue folder; never to the database.

Two small POSIX sh scripts marked `# memsafe-hook`:

- `post-commit` reads, in the foreground (one `git rev-parse`, milliseconds), the new commit and
  the branch it was made on, writes them as one entry in the queue, and starts
  `<python> -m memsafe hook run` in the background. During a rebase, and for `commit --amend`, it
  does nothing: those rewrite commits, and `post-rewrite` reports them once.
- `post-rewrite` (git runs it once per rebase or amend, with the `old new` list on stdin) writes
  that whole list as one queue entry and starts the same background run. For a rebase the entry
  also names where it started (`onto`, the branch's former tip, HEAD now), so the commits made
  during it (splitting a commit at an `edit` stop, an `exec git commit`), which are in no list,
  are remembered too.

The queue is a folder in the repository's git folder (`<git-common-dir>/memsafe-queue`), one file
per entry, written whole then renamed into place. `hook run` drains it under an exclusive lock,
oldest entry first, so commits made in a burst are remembered in the order they were made, with
the branch they were made on, by one process at a time; a run that finds the lock taken exits at
once (the holder reads the queue again before it lets go). Each script runs any hook it replaced
(kept beside it as `<name>.pre-memsafe`) first, sends all memsafe output to a log file, and exits
with the chained hook's status, so it never blocks or fails a commit. The hooks folder comes from
`git rev-parse --git-path hooks`, which honours `core.hooksPath`, linked worktrees and submodules.
A `core.hooksPath` that every repository shares (absolute, in the global or system config or the
environment) is written only when asked: `install(shared=True)` there, or `install(local=True)`,
which gives the repository a hooks folder of its own in front of it (see `_install_local`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from memsafe import settings
from memsafe.errors import InvalidInput, MemsafeError, Refused

HOOK_NAME = "post-commit"
REWRITE_HOOK = "post-rewrite"
HOOK_NAMES = (HOOK_NAME, REWRITE_HOOK)
MARKER = "# memsafe-hook"
# Written after MARKER (`v3`). 1: post-commit only, a process per rebased commit and duplicates;
# 2: post-rewrite too; 3: a rebase's entry names where it started (the commits it made are kept);
# 4: a replaced sh hook runs under this hook's path (husky's hooks find their helper and name by it).
HOOK_VERSION = 4
STORM_VERSION = 1  # hooks up to this version start a process per rebased commit
QUEUE_DIR = "memsafe-queue"  # inside the repository's common git folder
CHAINED_SUFFIX = ".pre-memsafe"
LOCAL_DIR = "memsafe-hooks"  # `hook install --local`: this repository's own hooks folder, in its git folder
FORWARD_MARKER = "# memsafe-forward"  # a hook of that folder that runs the shared folder's hook of its name
SHARED_SCOPES = ("global", "system", "command")  # config read by every repository (in this environment)
MAX_FILES = 20  # changed file names listed in a commit note
MAX_BODY_CHARS = 4000  # commit body kept in a note
GIT_TIMEOUT_S = 10


@dataclass
class HookStatus:
    """Where the hook lives and what state it is in.

    Attributes:
        installed: memsafe's hook is the post-commit hook.
        rewrite_installed: memsafe's post-rewrite hook (rebase and amend) is in place too.
        version: the version of memsafe's post-commit hook (`HOOK_VERSION` now; 0: not memsafe's).
        outdated: memsafe's hooks are installed but not as `hook install` writes them now: one is
            missing or from an older memsafe (v1 started a process for every commit a rebase
            rewrote, and each rebase or amend added a duplicate memory). `hook install` upgrades.
        chained: path of the hook memsafe's hook runs first (the one it replaced), if any.
        foreign: a post-commit hook that is not memsafe's is in place.
        hooks_path: the `core.hooksPath` setting in force for this repository, if any.
        hooks_path_scope: the git config that sets it: "local", "worktree", "global", "system" or
            "command" (`git -c`, GIT_CONFIG_COUNT); None without one.
        hooks_path_origin: the file that sets it (`~/.gitconfig`, `$GIT_CONFIG_GLOBAL`, ...), or
            "command line".
        shared: the hooks folder is git's for every repository on this machine that sets no
            core.hooksPath of its own (an absolute core.hooksPath in the global or system config,
            or the environment's): a hook there records every such repository's commits.
        local_override: this repository's core.hooksPath was set by `hook install --local`, to
            memsafe's own folder in its git folder (`LOCAL_DIR`), away from a shared one.
        python: the interpreter the installed hook calls; `python_ok` says whether it still exists.
        db: the database path written into the installed hook (`--db` or MEMSAFE_DB at install
            time); None: the default store, resolved each time the hook runs.
    """

    repo: str
    hooks_dir: str
    hook_file: str
    installed: bool
    foreign: bool
    chained: str | None
    hooks_path: str | None
    log_file: str
    hooks_path_scope: str | None = None
    hooks_path_origin: str | None = None
    shared: bool = False
    local_override: bool = False
    python: str | None = None
    python_ok: bool = True
    db: str | None = None
    rewrite_installed: bool = False
    version: int = 0
    outdated: bool = False
    actions: list[str] = field(default_factory=list)


@dataclass
class CommitInfo:
    """One commit as the hook reads it. `files` holds every changed path (not truncated);
    `date`: its author date (ISO-8601 with the author's offset, as git gives it), `author`: its
    author's name; None when unknown."""

    hash: str
    short: str
    subject: str
    body: str
    branch: str | None
    files: list[str]
    date: str | None = None
    author: str | None = None


def _git(repo: Path, *args: str, check: bool = True, timeout: float | None = GIT_TIMEOUT_S) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise Refused("git is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise Refused(f"git {args[0]} took more than {GIT_TIMEOUT_S}s in {repo}") from None
    if check and done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Refused(f"git {args[0]} failed in {repo}: {message[-1] if message else done.returncode}")
    return done.stdout


def _text(raw: bytes) -> str:
    """Git output as text: UTF-8, else Latin-1 (commit messages without an encoding header)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def repo_root(path: str | Path | None = None) -> Path:
    """The working-tree root of the repository containing `path` (default: cwd).
    Raises Refused outside a repository, InvalidInput for a variable in `path` that cannot be
    expanded (`settings.expand_path`)."""
    start = settings.expand_path(path, what="repository path") if path else Path(os.getcwd())
    if not start.exists():
        raise Refused(f"no such folder: {start}")
    out = _git(start, "rev-parse", "--show-toplevel", check=False).strip()
    if not out:
        raise Refused(f"{start} is not inside a git repository (with a working tree)")
    return Path(_text(out))


def hooks_dir(root: Path) -> Path:
    """The folder git reads hooks from (honours core.hooksPath and worktrees)."""
    return Path(_text(_git(root, "rev-parse", "--path-format=absolute", "--git-path", "hooks").strip()))


def hooks_path_setting(root: Path) -> tuple[str | None, str | None, str | None]:
    """(value, scope, origin) of the core.hooksPath git uses in `root`: the last one it reads, as
    `git config --show-scope --show-origin --get` reports it; (None, None, None) without one."""
    raw = _text(_git(root, "config", "--show-scope", "--show-origin", "--get", "core.hooksPath", check=False))
    parts = raw.rstrip("\n").split("\t", 2)
    if len(parts) < 3 or not parts[2].strip():
        return None, None, None
    scope, origin, value = parts
    return value, scope, origin.removeprefix("file:").rstrip(":") or None


def _shared(value: str | None, scope: str | None) -> bool:
    """A core.hooksPath every repository resolves to one folder: set outside the repository's own
    config, as an absolute path (a relative one names a folder inside each repository)."""
    if not value:
        return False
    return scope in SHARED_SCOPES and os.path.isabs(os.path.expanduser(value))


def scope_words(current: HookStatus) -> str:
    """Where core.hooksPath comes from, for a message: `the global git config (/home/u/.gitconfig)`."""
    origin = f" ({current.hooks_path_origin})" if current.hooks_path_origin not in (None, "command line") else ""
    what = {"command": "the environment's git config (git -c or GIT_CONFIG_COUNT)"}.get(
        current.hooks_path_scope or "", f"the {current.hooks_path_scope} git config")
    return what + origin


def log_file() -> Path:
    """Where the hook's background runs append errors."""
    return settings.data_dir() / "hook.log"


_HEAD_SH = """{{ read -r gitdir; read -r common; read -r commit; read -r ref; }} <<MEMSAFE_EOF
$(git rev-parse --path-format=absolute --git-dir --git-common-dir HEAD --symbolic-full-name HEAD 2>/dev/null)
MEMSAFE_EOF
branch=${{ref#refs/heads/}}; [ "$branch" = "$ref" ] && branch=
rebasing=; {{ [ -d "$gitdir/rebase-merge" ] || [ -d "$gitdir/rebase-apply" ]; }} && rebasing=1
q="$common/{queue}"; name="$(date +%s)-$$-{hook}"
"""


def hook_script(python: str, db: str | None, log: Path, workdir: Path, name: str = HOOK_NAME) -> str:
    """The `post-commit` or `post-rewrite` script (POSIX sh; see the module docstring). Paths are
    quoted for the shell. Raises ValueError for another hook name."""
    q = shlex.quote
    db_args = f" --db {q(db)}" if db else ""
    # One background run at a time: a run alive (its pid in .pid) drains this entry too (see drain_queue).
    # The pid must still be that run's: a run can end before its pid is written, and on a busy machine
    # the number came back as another process's within minutes, which left a rebase's entry undrained.
    run = ("pid=; [ -f \"$q/.pid\" ] && read -r pid <\"$q/.pid\"\n"
           "[ -n \"$pid\" ] && kill -0 \"$pid\" 2>/dev/null && case \"$(ps -p \"$pid\" -o args= 2>/dev/null)\" in\n"
           "  *\" hook run \"*\"--queue $q\"*) exit $status;; esac\n"
           f"cd {q(str(workdir))} 2>/dev/null || cd /\n"
           f"{q(python)} -m memsafe{db_args} hook run --repo \"$repo\" --queue \"$q\" "
           f"</dev/null >>{q(str(log))} 2>&1 &\n"
           f"echo $! >\"$q/.pid\" 2>/dev/null")
    head = f"""#!/bin/sh
{MARKER} v{HOOK_VERSION}: remembers each commit, and follows rebases and amends. Installed by `memsafe hook install`;
# undo with `memsafe hook uninstall`. Never blocks or fails git: memsafe runs in the background, its errors
# go to {log}.
status=0
chained="${{0%/*}}/{name}{CHAINED_SUFFIX}"
repo=$PWD
# The replaced hook, run first. A sh script runs under this hook's own path: a hook manager's
# script finds its helpers and its name from $0 (husky's `. "${{0%/*}}/h"` runs .husky/<name>).
run_chained() {{
  case "$(sed -n 1p "$chained" 2>/dev/null)" in
    "#!/bin/sh"|"#!/bin/sh "*|"#!/usr/bin/env sh"|"#!/usr/bin/env sh "*)
      MEMSAFE_CHAINED=$chained sh -c '. "$MEMSAFE_CHAINED"' "$0" "$@";;
    *) "$chained" "$@";;
  esac
}}
"""
    if name == HOOK_NAME:
        # A rebase reports its commits once, in post-rewrite; so does an amend (its reflog line).
        # The first tests start no process (a linked worktree's .git is a file naming its git
        # folder), so a rebase of many commits pays almost nothing here.
        return head + """if [ -x "$chained" ]; then run_chained "$@"; status=$?; fi
case "${GIT_REFLOG_ACTION-}" in rebase*) exit $status;; esac
d=${GIT_DIR:-.git}; [ -f "$d" ] && read -r _ d <"$d"
{ [ -d "$d/rebase-merge" ] || [ -d "$d/rebase-apply" ]; } && exit $status
""" + _HEAD_SH.format(queue=QUEUE_DIR, hook=name) + f"""[ -n "$commit" ] && [ -z "$rebasing" ] || exit $status
case "$(tail -n 1 "$gitdir/logs/HEAD" 2>/dev/null)" in *"\tcommit (amend): "*) exit $status;; esac
mkdir -p "$q" 2>/dev/null && printf 'commit %s\\n%s\\n' "$branch" "$commit" >"$q/.$name" \\
 && mv -f "$q/.$name" "$q/$name" || exit $status
{run}
exit $status
"""
    if name != REWRITE_HOOK:
        raise ValueError(f"memsafe has no {name} hook")
    # the branch of a rebase: HEAD may still be detached when git runs post-rewrite
    return head + _HEAD_SH.format(queue=QUEUE_DIR, hook=name) + f"""if [ -z "$branch" ]; then
  for d in rebase-merge rebase-apply; do [ -f "$gitdir/$d/head-name" ] && ref=$(cat "$gitdir/$d/head-name"); done
  case "$ref" in refs/heads/*) branch=${{ref#refs/heads/}};; esac
fi
since=; skip=2  # a rebase: where it started, for the commits it made that git lists nowhere
for d in rebase-merge rebase-apply; do
  if [ "$1" = rebase ] && [ -f "$gitdir/$d/onto" ] && [ -f "$gitdir/$d/orig-head" ]; then
    read -r onto <"$gitdir/$d/onto"; read -r orig <"$gitdir/$d/orig-head"
    [ -n "$onto" ] && [ -n "$orig" ] && [ -n "$commit" ] && since="since $onto $orig $commit" && skip=3
  fi
done
if mkdir -p "$q" 2>/dev/null \\
 && {{ printf 'rewrite %s %s\\n' "$1" "$branch"; [ -z "$since" ] || echo "$since"; cat; }} >"$q/.$name"; then
  if [ -x "$chained" ]; then tail -n +$skip "$q/.$name" | run_chained "$@"; status=$?; fi
  # an amend inside a rebase is reported again, whole, by the rebase's own post-rewrite
  if [ "$1" = amend ] && [ -n "$rebasing" ]; then rm -f "$q/.$name"; exit $status; fi
  mv -f "$q/.$name" "$q/$name" || exit $status
{run}
elif [ -x "$chained" ]; then run_chained "$@"; status=$?
fi
exit $status
"""


def _baked_call(text: str) -> tuple[str | None, str | None]:
    """(python, db) of the `python -m memsafe [--db PATH] hook run` line of an installed hook;
    None for what it does not name or cannot be read."""
    for line in text.splitlines():
        if " -m memsafe" in line:
            head, tail = line.split(" -m memsafe", 1)
            try:
                python = shlex.split(head)[-1]
                words = shlex.split(tail.split(" hook run", 1)[0])
            except (ValueError, IndexError):
                return None, None
            return python, words[words.index("--db") + 1] if "--db" in words[:-1] else None
    return None, None


def status(path: str | Path | None = None) -> HookStatus:
    """The hook state of the repository containing `path`. Raises Refused outside a repository."""
    root = repo_root(path)
    folder = hooks_dir(root)
    hook = folder / HOOK_NAME
    chained = folder / (HOOK_NAME + CHAINED_SUFFIX)
    text = _read(hook)
    ours = text is not None and MARKER in text
    configured, scope, origin = hooks_path_setting(root)
    python, db = _baked_call(text) if ours and text is not None else (None, None)
    rewrite = _read(folder / REWRITE_HOOK) or ""
    rewrite_ours = MARKER in rewrite
    return HookStatus(
        repo=str(root), hooks_dir=str(folder), hook_file=str(hook), installed=ours,
        foreign=(text is not None or hook.is_symlink()) and not ours,
        chained=str(chained) if ours and (chained.exists() or chained.is_symlink()) else None,
        hooks_path=configured, hooks_path_scope=scope, hooks_path_origin=origin,
        shared=_shared(configured, scope), local_override=scope == "local" and folder == _local_dir(root),
        log_file=str(log_file()), python=python,
        python_ok=python is None or Path(python).exists(), db=db,
        rewrite_installed=rewrite_ours, version=_version(text) if ours else 0,
        outdated=(ours or rewrite_ours) and (_version(text) < HOOK_VERSION or _version(rewrite) < HOOK_VERSION),
    )


def _version(text: str | None) -> int:
    """The version an installed memsafe hook says it is (`# memsafe-hook vN`); 0 for none."""
    for line in (text or "").splitlines()[:3]:
        if line.startswith(MARKER + " v"):
            digits = line[len(MARKER) + 2:].split(":", 1)[0]
            return int(digits) if digits.isdigit() else 0
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None


def _foreign(hook: Path) -> bool:
    text = _read(hook)
    return (text is not None or hook.is_symlink()) and MARKER not in (text or "")


def _local_dir(root: Path) -> Path:
    """The hooks folder `hook install --local` gives this repository: `LOCAL_DIR` in its common
    git folder (one for all its worktrees, as its config is)."""
    common = _text(_git(root, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    return Path(common) / LOCAL_DIR


def shared_refusal(current: HookStatus, verb: str) -> str:
    """The one line that refuses to change a hooks folder every repository uses."""
    where = (f"core.hooksPath is {current.hooks_path}, set in {scope_words(current)}: git runs the hooks "
             "there for every repository on this machine that sets none of its own")
    if verb == "uninstall":
        return (f"{where}, and memsafe's hook there records all of them; `memsafe hook uninstall --shared` "
                "removes it for every repository")
    return (f"{where}, so memsafe's hook there would record the commits of every one of them. For this "
            "repository only: `memsafe hook install --local` (its own hooks folder; the shared hooks still run); "
            "for every repository: `memsafe hook install --shared`")


def install(path: str | Path | None = None, *, db: str | None = None, local: bool = False,
            shared: bool = False) -> HookStatus:
    """Install (or refresh) the post-commit and post-rewrite hooks in the folder git runs this
    repository's hooks from. An existing foreign hook is renamed to `<name>.pre-memsafe` and run
    first by memsafe's hook; `uninstall` puts it back.

    A shared hooks folder (`HookStatus.shared`: a global or system core.hooksPath) is git's for
    every repository on the machine: installing there is refused unless `shared` (record every
    repository, knowingly); `local` instead gives this repository a hooks folder of its own
    (`_install_local`).

    Args:
        db: a database path to bake into the hook (default: resolved when the hook runs).
        local: with a shared hooks folder, install for this repository only (otherwise a no-op
            flag: the hooks folder is this repository's already).
        shared: install into a shared hooks folder, for every repository that uses it.

    Raises:
        InvalidInput: both `local` and `shared`.
        Refused: not a repository; a shared hooks folder without `local` or `shared`; the hooks
            folder cannot be written (nothing is changed then, except a hooks folder that had to
            be created).
    """
    if local and shared:
        raise InvalidInput("use --local or --shared, not both")
    current = status(path)
    if current.shared and local:
        return _install_local(current, path, db)
    if current.shared and not shared:
        raise Refused(shared_refusal(current, "install"))
    if local and not current.local_override:
        current.actions.append(f"the hooks folder {current.hooks_dir} is this repository's own: nothing to override")
    folder = Path(current.hooks_dir)
    log = log_file()
    for name in HOOK_NAMES:
        chained = folder / (name + CHAINED_SUFFIX)
        if _foreign(folder / name) and (chained.exists() or chained.is_symlink()):
            raise Refused(f"{folder / name} is not memsafe's and {chained} already exists; move one of them away")
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True)
            why = f" (core.hooksPath = {current.hooks_path})" if current.hooks_path else ""
            current.actions.append(f"created the hooks folder {folder}{why}")
        log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise Refused(f"cannot write the hook in {folder}: {exc.strerror or exc}") from None
    baked = str(settings.db_target(db)) if db else None
    for name in HOOK_NAMES:
        _install_one(folder, name, hook_script(sys.executable, baked, log, log.parent, name), current.actions)
    after = status(path)
    after.actions = current.actions
    return after


def _install_one(folder: Path, name: str, script: str, actions: list[str]) -> None:
    """Write one hook; a foreign hook of that name is kept as `<name>.pre-memsafe`. Raises Refused."""
    hook = folder / name
    chained = folder / (name + CHAINED_SUFFIX)
    foreign = _foreign(hook)
    refresh = hook.is_file() and not foreign
    tmp = hook.with_name(f".{name}.memsafe-tmp")
    renamed = False
    try:
        # Write the new hook completely first; only then move the user's hook aside and ours in,
        # so a full disk or a read-only folder never leaves the repository without its hook.
        tmp.write_text(script, encoding="utf-8")
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)
        if foreign:
            os.rename(hook, chained)
            renamed = True
            actions.append(f"kept the existing hook as {chained}; it still runs first")
        os.replace(tmp, hook)
    except OSError as exc:
        if renamed and not hook.exists():
            os.rename(chained, hook)  # put the user's hook back
        if tmp.is_file():
            tmp.unlink()
        raise Refused(f"cannot write the hook in {folder}: {exc.strerror or exc}") from None
    actions.append(("refreshed " if refresh else "installed ") + str(hook))


def _forward_script(target: Path) -> str:
    """A hook that runs `target` (the shared folder's hook of the same name) under its own path,
    so a hook that finds its helpers next to itself (husky's `h`) still does; nothing if it is gone."""
    q = shlex.quote(str(target))
    return (f"#!/bin/sh\n{FORWARD_MARKER}: runs {q}, the shared core.hooksPath's hook of this name, here too.\n"
            "# Written by `memsafe hook install --local`; `memsafe hook uninstall` removes it.\n"
            f"h={q}\n[ -x \"$h\" ] || exit 0\nexec \"$h\" \"$@\"\n")


def _write_hook(path: Path, script: str) -> None:
    """Write an executable script whole (a temporary file renamed into place). Raises OSError."""
    tmp = path.with_name(f".{path.name}.memsafe-tmp")
    try:
        tmp.write_text(script, encoding="utf-8")
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)
        os.replace(tmp, path)
    finally:
        if tmp.is_file():
            tmp.unlink()


def _install_local(current: HookStatus, path, db: str | None) -> HookStatus:
    """`install(local=True)` with a shared hooks folder: this repository gets its own hooks folder
    (`_local_dir`), set as core.hooksPath in its own config. Every hook of the shared folder (but
    memsafe's) gets a forwarder there, so it keeps running for this repository (a hook added to
    the shared folder later needs `hook install --local` again); then memsafe's hooks are
    installed in it as usual, the shared post-commit and post-rewrite running first."""
    root, shared_dir = Path(current.repo), Path(current.hooks_dir)
    folder = _local_dir(root)
    actions = []
    try:
        folder.mkdir(exist_ok=True)
        entries = sorted(shared_dir.iterdir()) if shared_dir.is_dir() else []
        for hook in entries:
            name = hook.name
            if (name.startswith(".") or name.endswith((".sample", CHAINED_SUFFIX)) or not hook.is_file()
                    or not os.access(hook, os.X_OK) or MARKER in (_read(hook) or "")):
                continue
            _write_hook(folder / (name + CHAINED_SUFFIX if name in HOOK_NAMES else name), _forward_script(hook))
            actions.append(f"{name} of {shared_dir} still runs here, through {folder}")
    except OSError as exc:
        _remove_local(root, folder)
        raise Refused(f"cannot write the hooks folder {folder}: {exc.strerror or exc}") from None
    _git(root, "config", "--local", "core.hooksPath", str(folder))
    actions.append(f"set core.hooksPath = {folder} in this repository's config (it was {shared_dir}, "
                   f"from {scope_words(current)})")
    try:
        after = install(path, db=db)
    except MemsafeError:
        _remove_local(root, folder)
        raise
    after.actions = actions + after.actions
    return after


def _remove_local(root: Path, folder: Path) -> list[str]:
    """Undo `_install_local`: its forwarders, its folder when nothing else is left in it, and the
    repository's core.hooksPath when it still names that folder. Returns what was done."""
    actions = []
    for hook in sorted(folder.iterdir()) if folder.is_dir() else []:
        if FORWARD_MARKER in (_read(hook) or ""):
            hook.unlink()
    try:
        folder.rmdir()
        actions.append(f"removed {folder}")
    except OSError:
        if folder.is_dir():
            actions.append(f"kept {folder}: it holds files memsafe did not write")
    value, scope, _ = hooks_path_setting(root)
    if scope == "local" and value == str(folder):
        _git(root, "config", "--local", "--unset", "core.hooksPath")
        actions.append("removed core.hooksPath from this repository's config: the shared hooks folder is used again")
    return actions


def uninstall(path: str | Path | None = None, *, shared: bool = False) -> HookStatus:
    """Remove what `install` added: memsafe's hooks (putting back the hooks they replaced) and,
    after `install(local=True)`, the repository's own hooks folder and core.hooksPath.

    Args:
        shared: allow removing memsafe's hooks from a shared hooks folder (every repository
            that uses it stops being recorded).

    Raises:
        Refused: memsafe's hook is not installed (a foreign hook is never touched); it is in a
            shared hooks folder and `shared` is not given.
    """
    current = status(path)
    if not current.installed and not current.rewrite_installed and not current.local_override:
        what = "another program's post-commit hook is in place; left alone" if current.foreign else "nothing to do"
        raise Refused(f"memsafe's hook is not installed in {current.hooks_dir} ({what})")
    if current.shared and not shared:
        raise Refused(shared_refusal(current, "uninstall"))
    folder = Path(current.hooks_dir)
    actions = []
    for name in HOOK_NAMES:
        hook = folder / name
        chained = folder / (name + CHAINED_SUFFIX)
        if MARKER not in (_read(hook) or ""):
            continue
        try:
            hook.unlink()
            actions.append(f"removed {hook}")
            if chained.exists() or chained.is_symlink():
                os.rename(chained, hook)
                actions.append(f"restored the previous hook {hook}")
        except OSError as exc:
            raise Refused(f"cannot change {hook}: {exc.strerror or exc}") from None
    if current.local_override:
        actions += _remove_local(Path(current.repo), folder)
    after = status(path)
    after.actions = actions
    return after


class _Current(Enum):
    """The type of `_CURRENT` (an enum member, so a type checker tells it from a branch name)."""

    BRANCH = "the branch checked out now"


_CURRENT = _Current.BRANCH  # read_commit's default branch: the one checked out now


def read_commit(repo: str | Path, commit: str = "HEAD", branch: str | None | _Current = _CURRENT) -> CommitInfo:
    """Read one commit through git (messages re-encoded to UTF-8 by git when they declare an
    encoding, else decoded as UTF-8 or Latin-1). `branch`: the branch the commit was made on, as
    the hook read it when the commit was made (None: detached HEAD); by default the branch checked
    out now. Raises Refused."""
    root = Path(repo)
    if not commit or commit.startswith("-") or any(c.isspace() or c == "\x00" for c in commit):
        raise Refused(f"{commit[:40]!r} is not a commit (a hash or a ref such as HEAD)")
    raw = _git(root, "log", "-1", "--encoding=UTF-8", "--format=%H%x00%h%x00%aI%x00%an%x00%s%x00%b",
               "--end-of-options", commit, "--")
    parts = raw.rstrip(b"\n").split(b"\x00")
    if len(parts) < 6:
        raise Refused(f"cannot read commit {commit} in {root}")
    full, short, date, author, subject = (_text(p).strip() for p in parts[:5])
    body = _text(b"\x00".join(parts[5:])).strip()
    if branch is _CURRENT:
        branch = current_branch(root)
    names = _git(root, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--root", full)
    files = [_text(n) for n in names.split(b"\x00") if n]
    return CommitInfo(full, short, subject, body, branch, files, date or None, author or None)


def current_branch(root: Path) -> str | None:
    """The branch checked out in `root`, or None on a detached HEAD."""
    return _text(_git(root, "symbolic-ref", "--short", "-q", "HEAD", check=False)).strip() or None


def history(root: Path, *, since: str | None = None, max_count: int | None = None,
            branch: str | None = None) -> Iterator[CommitInfo]:
    """The commits reachable from HEAD, oldest first, read in one `git log` (what `hook backfill`
    remembers); each carries `branch`, its author date and author. `since`: a date git understands
    (`2024-01-31`, `3 months ago`); `max_count`: the most recent N only. Raises Refused (git failed: no commit yet,
    a bad date)."""
    args = ["log", "--reverse", "--encoding=UTF-8", "-z", "--name-only", "--no-renames",
            "--format=%x1e%H%x1f%h%x1f%aI%x1f%an%x1f%s%x1f%b%x1f"]
    if since:
        args.append(f"--since={since}")
    if max_count is not None:
        args.append(f"--max-count={max_count}")
    if not _git(root, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).strip():
        return
    raw = _git(root, *args, "HEAD", "--", timeout=None)
    for record in raw.split(b"\x1e")[1:]:
        parts = record.split(b"\x1f")
        if len(parts) < 7:
            raise Refused(f"cannot read the history of {root}")
        full, short, date, author, subject = (_text(p).strip() for p in parts[:5])
        body = _text(b"\x1f".join(parts[5:-1])).strip()
        files = [_text(n) for n in parts[-1].split(b"\x00") if n.strip(b"\n")]
        yield CommitInfo(full, short, subject, body, branch, [f.strip("\n") for f in files], date or None,
                         author or None)


QUEUE_VERSION = 1


@dataclass
class QueueEntry:
    """One queue file: a commit made (`kind` 'commit', `commits` = [sha]), or commits rewritten
    (`kind` 'rebase' or 'amend', `pairs` = [(old sha, new sha)] in git's order). `branch` as the hook
    read it in the foreground (None: detached HEAD). `since`, for a rebase: (onto, the branch's
    tip before it, HEAD after it), to find the commits it made that are in no pair."""

    path: Path
    kind: str
    branch: str | None
    commits: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    since: tuple[str, str, str] | None = None


def queue_dir(root: Path) -> Path:
    """The queue folder of the repository at `root` (shared by its worktrees)."""
    common = _text(_git(root, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    return Path(common) / QUEUE_DIR


def _sha(word: str) -> bool:
    return 7 <= len(word) <= 64 and all(c in "0123456789abcdef" for c in word)


def read_queue(folder: Path) -> list[QueueEntry]:
    """The entries waiting in `folder`, oldest first (file time, then name). Files being written
    (dot names) are left alone; a file that does not parse gets kind 'bad'."""
    entries = []
    try:
        names = [p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file()]
    except FileNotFoundError:
        return []
    timed = []
    for p in names:
        try:
            timed.append((p.stat().st_mtime_ns, p.name, p))
        except FileNotFoundError:
            continue  # taken by another run meanwhile
    for _, _, path in sorted(timed):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            continue
        head = lines[0].split(" ") if lines else []
        rest = [line.split() for line in lines[1:] if line.strip()]
        if head[:1] == ["commit"] and len(rest) == 1 and _sha(rest[0][0]):
            entries.append(QueueEntry(path, "commit", " ".join(head[1:]) or None, commits=[rest[0][0]]))
        elif head[:1] == ["rewrite"] and len(head) >= 2 and all(
                (len(r) >= 2 and _sha(r[0]) and _sha(r[1])) or (i == 0 and r[0] == "since")
                for i, r in enumerate(rest)):
            since = tuple(rest.pop(0)[1:]) if rest and rest[0][0] == "since" else None
            if since is not None and not (len(since) == 3 and all(_sha(w) for w in since)):
                since = None  # the rewritten commits are still followed
            pairs = [(r[0], r[1]) for r in rest]
            entries.append(QueueEntry(path, head[1], " ".join(head[2:]) or None, pairs=pairs, since=since))
        else:
            entries.append(QueueEntry(path, "bad", None))
    return entries


def made_during(root: Path, since: tuple[str, str, str]) -> list[str]:
    """The commits a rebase made, oldest first: reachable from the HEAD it ended on, but neither
    from where it started (`onto`) nor from the branch's former tip. Raises Refused."""
    onto, orig, head = since
    return _text(_git(root, "rev-list", "--reverse", head, "--not", onto, orig, "--")).split()


def enqueue_commit(folder: Path, commit: str, branch: str | None) -> Path:
    """Add a commit to the queue as the post-commit hook does (for `hook run --commit`, which
    hooks installed by older versions call). Returns the entry's path."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{int(time.time())}-{os.getpid()}-{time.monotonic_ns()}-commit"
    tmp = folder / f".{name}"
    tmp.write_text(f"commit {branch or ''}\n{commit}\n", encoding="utf-8")
    os.replace(tmp, folder / name)
    return folder / name


@contextmanager
def queue_lock(folder: Path) -> Iterator[bool]:
    """Hold the queue's exclusive lock if no other process holds it: yields True, or False at
    once when it is taken. The kernel drops the lock when its holder dies."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def release_pid(folder: Path) -> None:
    """Remove the queue's `.pid` file if it names this process (the hooks start no new run while
    the process it names is alive)."""
    path = folder / ".pid"
    try:
        if path.read_text().strip() == str(os.getpid()):
            path.unlink()
    except (FileNotFoundError, ValueError, OSError):
        pass


# A commit message that says nothing of its own: git's and the forges' merge subjects, git's revert
# subject, a version bump. Matched on the subject; the body decides (`contentless`).
_MERGE_SUBJECT = re.compile(r"Merge (branch|remote-tracking branch|tag|commit|pull request|https?://|git://|'|\")",
                            re.IGNORECASE)
_REVERT_SUBJECT = re.compile(r'Revert ".*"\s*$', re.IGNORECASE)
_BUMP_SUBJECT = re.compile(r"(bump(ed)?|update[ds]?|set) (the )?(version|release)( number)?( to)? v?\d[\w.+-]*\.?\s*$"
                           r"|bump(ed)? to v?\d[\w.+-]*\.?\s*$", re.IGNORECASE)
# Body lines that carry nothing a question could ask for: sign-offs and trailers, git's own
# "This reverts commit …", a merge's list of conflicted files, a forge's "See merge request …".
_BOILERPLATE_LINE = re.compile(
    r"\s*($|[\w-]+-by:|(Change-Id|Cc|Fixes|Closes|Link):|This reverts commit [0-9a-f]{7,40}\.?\s*$|"
    r"#?\s*Conflicts:\s*$|See merge request\b|\(cherry picked from commit [0-9a-f]+\)\s*$)", re.IGNORECASE)
_PATH_LINE = re.compile(r"\s*#?\s*[\w./+-]+\s*$")


def contentless(info: CommitInfo) -> bool:
    """True for a commit whose message says nothing of its own, which `hook backfill` and the git
    hook do not store: a merge (git's or a forge's merge subject) or a revert (`Revert "…"`) whose
    body holds only boilerplate (sign-offs, "This reverts commit …", a list of conflicted files),
    and a version bump ("Bump version to 1.2.3") with no body. A merge whose body says what it
    brings ("Merge pull request #82 from x / Update to Unicode 11"), a revert that says why, and a
    release commit ("Release libxcb 1.15", which dates the release) are kept."""
    subject = info.subject.strip()
    lines = info.body.splitlines()
    if _MERGE_SUBJECT.match(subject) or _REVERT_SUBJECT.match(subject):
        in_conflicts = False
        for line in lines:
            if re.match(r"\s*#?\s*Conflicts:\s*$", line, re.IGNORECASE):
                in_conflicts = True
                continue
            if _BOILERPLATE_LINE.match(line) or (in_conflicts and _PATH_LINE.match(line)):
                continue
            return False
        return True
    if _BUMP_SUBJECT.match(subject):
        return all(_BOILERPLATE_LINE.match(line) for line in lines)
    return False


def commit_note(info: CommitInfo, max_files: int = MAX_FILES) -> str:
    """The memory text for a commit: subject, body, short hash, branch, changed files (at most
    `max_files` names, then a count). The body's lines are indented four spaces, as `git log`
    shows them, so a message cannot imitate the note's own lines (a `git commit …` first line,
    the `files (N): …` line)."""
    where = f" on {info.branch}" if info.branch else " (detached HEAD)"
    lines = [f"git commit {info.short}{where}: {info.subject or '(no message)'}"]
    body = info.body
    if len(body) > MAX_BODY_CHARS:
        # redact before cutting: a credential cut in two is no longer recognised, and half of one
        # would be stored as it is; then cut at a space, so no token is left in pieces
        from memsafe import safety

        body = safety.redact(body)
        if len(body) > MAX_BODY_CHARS:
            cut = body[: MAX_BODY_CHARS + 1]
            space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
            body = (cut[:space] if space > MAX_BODY_CHARS // 2 else cut[:MAX_BODY_CHARS]).rstrip() + " …"
    if body:
        lines += ["", "\n".join(f"    {line}" if line.strip() else "" for line in body.splitlines())]
    if info.files:
        shown = ", ".join(info.files[:max_files])
        more = len(info.files) - max_files
        lines += ["", f"files ({len(info.files)}): {shown}" + (f", … and {more} more" if more > 0 else "")]
    return "\n".join(lines)
