"""Responsibility: `memsafe hook install | uninstall | status` (and the hidden `hook run` the
post-commit hook calls)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from memsafe import api, clock
from memsafe.cli._common import JsonOpt, _emit_json, _fail, _session, app, err, out
from memsafe.errors import MemsafeError

hook_app = typer.Typer(
    help="Remember every git commit automatically (a post-commit hook).", no_args_is_help=True,
)
app.add_typer(hook_app, name="hook")

RepoOpt = Annotated[
    str | None, typer.Option("--repo", help="Repository (default: the one containing the current directory).")
]


def _show(status: api.HookStatus, json_: bool) -> None:
    if json_:
        _emit_json(status)
        return
    for action in status.actions:
        err.print(action, markup=False)
    console = out()
    state = "installed" if status.installed else ("another hook is in place" if status.foreign else "not installed")
    rows = [("repository", status.repo), ("hooks folder", status.hooks_dir), ("post-commit", state)]
    if status.hooks_path:
        rows.append(("core.hooksPath", status.hooks_path))
    if status.chained:
        rows.append(("runs first", status.chained))
    if status.python:
        rows.append(("python", status.python + ("" if status.python_ok else "  (missing: run `hook install` again)")))
    if status.installed:
        rows.append(("database", status.db or "the default store, resolved when the hook runs (see `memsafe status`)"))
    rows.append(("log", status.log_file))
    for key, value in rows:
        console.print(f"{key:<15}{value}", markup=False, highlight=False)


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code, type(exc).__name__) from None


@hook_app.command()
def install(
    ctx: typer.Context,
    repo: RepoOpt = None,
    uninstall_: Annotated[bool, typer.Option("--uninstall", help="Same as `memsafe hook uninstall`.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Install the post-commit hook: each commit (subject, body, hash, branch, files) becomes a memory.

    Honours core.hooksPath and worktrees; an existing hook is kept and still runs first.
    The hook returns at once (memsafe works in the background) and never fails a commit.
    A database given with --db or MEMSAFE_DB is written into the hook (git tools that commit
    without your shell's environment still reach it); otherwise the default store is used.

    Examples:

      memsafe hook install

      memsafe --db ~/notes.db hook install --repo ~/src/web
    """
    if uninstall_:
        _show(_call(api.hook_uninstall, repo), json_)
        return
    db = (ctx.obj.db if ctx.obj else None) or os.environ.get("MEMSAFE_DB") or None
    _show(_call(api.hook_install, repo, db=db), json_)


@hook_app.command()
def uninstall(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Remove memsafe's post-commit hook and restore the hook it replaced."""
    _show(_call(api.hook_uninstall, repo), json_)


@hook_app.command("status")
def status_(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Show whether the hook is installed in this repository, and where."""
    _show(_call(api.hook_status, repo), json_)


@hook_app.command(hidden=True)
def run(
    ctx: typer.Context,
    repo: Annotated[str, typer.Option("--repo", help="Repository root.")] = ".",
    commit: Annotated[str, typer.Option("--commit", help="Commit to remember.")] = "HEAD",
) -> None:
    """Remember one commit (what the installed hook runs). Always exits 0; errors go to stderr (the hook log)."""
    try:
        with _session(ctx) as opened:
            api.remember_commit(opened.store, repo, commit=commit)
    except typer.Exit as exc:
        if exc.exit_code:
            sys.stderr.write(f"{clock.now_iso()} memsafe hook run failed for {commit} in {repo}\n")
    except Exception as exc:  # a hook must never fail loudly; the log keeps the reason
        sys.stderr.write(f"{clock.now_iso()} memsafe hook run: {type(exc).__name__}: {exc}\n")
