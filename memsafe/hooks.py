"""Responsibility: the git post-commit hook: installing, chaining, removing it, and reading a
commit into a note. Talks to git (subprocess) and the hooks folder; never to the database.

The hook is a small POSIX sh script marked `# memsafe-hook`. It runs any hook it replaced
(kept beside it as `post-commit.pre-memsafe`), then starts `<python> -m memsafe hook run` in
the background with all output going to a log file, and exits with the chained hook's status.
So it returns at once and can never block or fail a commit. The hooks folder comes from
`git rev-parse --git-path hooks`, which honours `core.hooksPath` and linked worktrees.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from memsafe import settings
from memsafe.errors import InvalidInput

HOOK_NAME = "post-commit"
MARKER = "# memsafe-hook"
CHAINED_SUFFIX = ".pre-memsafe"
MAX_FILES = 20  # changed file names listed in a commit note
MAX_BODY_CHARS = 4000  # commit body kept in a note
GIT_TIMEOUT_S = 10


@dataclass
class HookStatus:
    """Where the hook lives and what state it is in.

    Attributes:
        installed: memsafe's hook is the post-commit hook.
        chained: path of the hook memsafe's hook runs first (the one it replaced), if any.
        foreign: a post-commit hook that is not memsafe's is in place.
        hooks_path: the `core.hooksPath` setting, if any.
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
    python: str | None = None
    python_ok: bool = True
    db: str | None = None
    actions: list[str] = field(default_factory=list)


@dataclass
class CommitInfo:
    """One commit as the hook reads it. `files` holds every changed path (not truncated)."""

    hash: str
    short: str
    subject: str
    body: str
    branch: str | None
    files: list[str]


def _git(repo: Path, *args: str, check: bool = True) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise InvalidInput("git is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise InvalidInput(f"git {args[0]} took more than {GIT_TIMEOUT_S}s in {repo}") from None
    if check and done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InvalidInput(f"git {args[0]} failed in {repo}: {message[-1] if message else done.returncode}")
    return done.stdout


def _text(raw: bytes) -> str:
    """Git output as text: UTF-8, else Latin-1 (commit messages without an encoding header)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def repo_root(path: str | Path | None = None) -> Path:
    """The working-tree root of the repository containing `path` (default: cwd).
    Raises InvalidInput outside a repository."""
    start = Path(path or os.getcwd()).expanduser()
    if not start.exists():
        raise InvalidInput(f"no such folder: {start}")
    out = _git(start, "rev-parse", "--show-toplevel", check=False).strip()
    if not out:
        raise InvalidInput(f"{start} is not inside a git repository (with a working tree)")
    return Path(_text(out))


def hooks_dir(root: Path) -> Path:
    """The folder git reads hooks from (honours core.hooksPath and worktrees)."""
    return Path(_text(_git(root, "rev-parse", "--path-format=absolute", "--git-path", "hooks").strip()))


def log_file() -> Path:
    """Where the hook's background runs append errors."""
    return settings.data_dir() / "hook.log"


def hook_script(python: str, db: str | None, log: Path, workdir: Path) -> str:
    """The post-commit script (POSIX sh). Paths are quoted for the shell."""
    db_args = f" --db {shlex.quote(db)}" if db else ""
    q = shlex.quote
    return f"""#!/bin/sh
{MARKER} v1: remembers each commit. Installed by `memsafe hook install`; undo with `memsafe hook uninstall`.
# Never blocks or fails a commit: memsafe runs in the background, its errors go to {log}.
status=0
chained="$(dirname "$0")/{HOOK_NAME}{CHAINED_SUFFIX}"
if [ -x "$chained" ]; then "$chained" "$@"; status=$?; fi
commit=$(git rev-parse HEAD 2>/dev/null) || exit $status
repo=$(pwd)
(cd {q(str(workdir))} 2>/dev/null || cd /
 {q(python)} -m memsafe{db_args} hook run --repo "$repo" --commit "$commit" </dev/null >>{q(str(log))} 2>&1 &) \\
 >/dev/null 2>&1 || true
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
    """The hook state of the repository containing `path`. Raises InvalidInput outside a repository."""
    root = repo_root(path)
    folder = hooks_dir(root)
    hook = folder / HOOK_NAME
    chained = folder / (HOOK_NAME + CHAINED_SUFFIX)
    text = _read(hook)
    ours = text is not None and MARKER in text
    configured = _text(_git(root, "config", "--get", "core.hooksPath", check=False)).strip() or None
    python, db = _baked_call(text) if ours else (None, None)
    return HookStatus(
        repo=str(root), hooks_dir=str(folder), hook_file=str(hook), installed=ours,
        foreign=(text is not None or hook.is_symlink()) and not ours,
        chained=str(chained) if ours and (chained.exists() or chained.is_symlink()) else None,
        hooks_path=configured, log_file=str(log_file()), python=python,
        python_ok=python is None or Path(python).exists(), db=db,
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None


def install(path: str | Path | None = None, *, db: str | None = None) -> HookStatus:
    """Install (or refresh) the post-commit hook. An existing foreign hook is renamed to
    `post-commit.pre-memsafe` and run first by memsafe's hook; `uninstall` puts it back.

    Args:
        db: a database path to bake into the hook (default: resolved when the hook runs).

    Raises:
        InvalidInput: not a repository, or the hooks folder cannot be written.
    """
    current = status(path)
    folder = Path(current.hooks_dir)
    hook = Path(current.hook_file)
    chained = folder / (HOOK_NAME + CHAINED_SUFFIX)
    log = log_file()
    tmp = hook.with_name(f".{HOOK_NAME}.memsafe-tmp")
    renamed = False
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True)
            why = f" (core.hooksPath = {current.hooks_path})" if current.hooks_path else ""
            current.actions.append(f"created the hooks folder {folder}{why}")
        log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if current.foreign and (chained.exists() or chained.is_symlink()):
            raise InvalidInput(f"{hook} is not memsafe's and {chained} already exists; move one of them away")
        # Write the new hook completely first; only then move the user's hook aside and ours in,
        # so a full disk or a read-only folder never leaves the repository without its hook.
        tmp.write_text(
            hook_script(sys.executable, str(settings.expand_path(db)) if db else None, log, log.parent),
            encoding="utf-8",
        )
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRUSR)
        if current.foreign:
            os.rename(hook, chained)
            renamed = True
            current.actions.append(f"kept the existing hook as {chained}; it still runs first")
        os.replace(tmp, hook)
    except OSError as exc:
        if renamed and not hook.exists():
            os.rename(chained, hook)  # put the user's hook back
        if tmp.is_file():
            tmp.unlink()
        raise InvalidInput(f"cannot write the hook in {folder}: {exc.strerror or exc}") from None
    current.actions.append(("refreshed " if current.installed else "installed ") + str(hook))
    after = status(path)
    after.actions = current.actions
    return after


def uninstall(path: str | Path | None = None) -> HookStatus:
    """Remove memsafe's hook and put back the hook it replaced, if any.

    Raises:
        InvalidInput: memsafe's hook is not installed (a foreign hook is never touched).
    """
    current = status(path)
    hook = Path(current.hook_file)
    if not current.installed:
        what = "another program's post-commit hook is in place; left alone" if current.foreign else "nothing to do"
        raise InvalidInput(f"memsafe's hook is not installed in {current.hooks_dir} ({what})")
    actions = []
    try:
        hook.unlink()
        actions.append(f"removed {hook}")
        if current.chained:
            os.rename(current.chained, hook)
            actions.append(f"restored the previous hook {hook}")
    except OSError as exc:
        raise InvalidInput(f"cannot change {hook}: {exc.strerror or exc}") from None
    after = status(path)
    after.actions = actions
    return after


def read_commit(repo: str | Path, commit: str = "HEAD") -> CommitInfo:
    """Read one commit through git (messages re-encoded to UTF-8 by git when they declare an
    encoding, else decoded as UTF-8 or Latin-1). Raises InvalidInput."""
    root = Path(repo)
    if not commit or commit.startswith("-") or any(c.isspace() or c == "\x00" for c in commit):
        raise InvalidInput(f"{commit[:40]!r} is not a commit (a hash or a ref such as HEAD)")
    raw = _git(root, "log", "-1", "--encoding=UTF-8", "--format=%H%x00%h%x00%s%x00%b", "--end-of-options",
               commit, "--")
    parts = raw.rstrip(b"\n").split(b"\x00")
    if len(parts) < 4:
        raise InvalidInput(f"cannot read commit {commit} in {root}")
    full, short, subject = (_text(p).strip() for p in parts[:3])
    body = _text(b"\x00".join(parts[3:])).strip()
    branch = _text(_git(root, "symbolic-ref", "--short", "-q", "HEAD", check=False)).strip() or None
    names = _git(root, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--root", full)
    files = [_text(n) for n in names.split(b"\x00") if n]
    return CommitInfo(full, short, subject, body, branch, files)


def commit_note(info: CommitInfo, max_files: int = MAX_FILES) -> str:
    """The memory text for a commit: subject, body, short hash, branch, changed files (at most
    `max_files` names, then a count)."""
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
        lines += ["", body]
    if info.files:
        shown = ", ".join(info.files[:max_files])
        more = len(info.files) - max_files
        lines += ["", f"files ({len(info.files)}): {shown}" + (f", … and {more} more" if more > 0 else "")]
    return "\n".join(lines)
