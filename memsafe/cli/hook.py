"""Responsibility: `memsafe hook install | uninstall | status | backfill` (and the hidden `hook run`
the installed hooks start in the background)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from memsafe import api, clock, hooks, settings
from memsafe.cli._common import Group, JsonOpt, _emit_json, _fail, _session, app, err, out
from memsafe.errors import MemsafeError

hook_app = typer.Typer(
    cls=Group,
    help="Remember every git commit automatically (post-commit and post-rewrite hooks).", no_args_is_help=True,
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
    if status.installed and status.version < hooks.HOOK_VERSION:
        why = ": a rebase duplicates memories" if status.version <= hooks.STORM_VERSION else ""
        state += f" (from an older memsafe{why}; run `hook install` again)"
    rows = [("repository", status.repo), ("hooks folder", status.hooks_dir)]
    if status.hooks_path:
        how = " (by `hook install --local`)" if status.local_override else ""
        rows.append(("core.hooksPath", f"{status.hooks_path}, from {hooks.scope_words(status)}{how}"))
    else:
        rows.append(("core.hooksPath", "not set: git's own hooks folder of this repository"))
    rows.append(("post-commit", state))
    if status.installed or status.rewrite_installed:
        rows.append(("post-rewrite", "installed" if status.rewrite_installed else
                     "not installed: rebases and amends are not followed (run `hook install` again)"))
    if status.shared:
        reach = ("every repository on this machine that sets no core.hooksPath of its own" if status.installed else
                 "no repository; this folder serves every repository on this machine that sets no core.hooksPath "
                 "of its own (`hook install --local` for this one only)")
    else:
        reach = "this repository" if status.installed else "nothing"
    rows.append(("records", reach))
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
    local: Annotated[bool, typer.Option(
        "--local", help="With a global core.hooksPath: give this repository its own hooks folder, so only it "
        "is recorded (the shared hooks still run).")] = False,
    shared: Annotated[bool, typer.Option("--shared", help="With a global core.hooksPath: install there, recording "
                                         "every repository that uses it.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Install the git hooks: each commit (subject, body, hash, branch, files) becomes a memory.

    A rebase or `commit --amend` updates the memories of the commits it rewrites (post-rewrite
    hook), never duplicates them. The hooks go where git runs this repository's hooks from
    (core.hooksPath, worktrees, submodules); an existing hook is kept and still runs first. The
    hooks return at once (memsafe works in the background) and never fail git.
    When core.hooksPath is set in the global or system git config, that folder serves every
    repository on the machine: install refuses unless given --local (this repository only) or
    --shared (every repository). See docs/workflow.md.
    A database given with --db or MEMSAFE_DB is written into the hook (git tools that commit
    without your shell's environment still reach it); otherwise the default store is used.

    Examples:

      memsafe hook install

      memsafe --db ~/notes.db hook install --repo ~/src/web

      memsafe hook install --local
    """
    if uninstall_:
        _show(_call(api.hook_uninstall, repo, shared=shared), json_)
        return
    db = (ctx.obj.db if ctx.obj else None) or settings.env().db or None
    _show(_call(api.hook_install, repo, db=db, local=local, shared=shared), json_)


@hook_app.command()
def uninstall(
    repo: RepoOpt = None,
    shared: Annotated[bool, typer.Option("--shared", help="Remove memsafe's hooks from a global core.hooksPath "
                                         "(every repository that uses it stops being recorded).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Remove what `hook install` added: memsafe's hooks (the hooks they replaced come back) and,
    after `install --local`, this repository's own hooks folder and core.hooksPath."""
    _show(_call(api.hook_uninstall, repo, shared=shared), json_)


@hook_app.command("status")
def status_(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Show what is armed where: the folder git runs this repository's hooks from, the config that
    chose it, whether memsafe's hooks are there, and which repositories they record."""
    _show(_call(api.hook_status, repo), json_)


@hook_app.command()
def backfill(
    ctx: typer.Context,
    repo: RepoOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only commits after this time: a date (2024-01-31), ISO-8601, "
                                 "a calendar name (last week: from its local start) or a relative time "
                                 "(3 months ago).")
    ] = None,
    max_: Annotated[int | None, typer.Option("--max", min=1, help="Only the most recent N commits.")] = None,
    no_embed: Annotated[
        bool, typer.Option("--no-embed", help="Store the commits only; `memsafe embed` computes their vectors.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Remember the repository's existing history, as the hook would have (one memory per commit).

    Commits reachable from HEAD, oldest first. Run it again at any time: commits already
    remembered (by the hook or an earlier backfill) are skipped. The commits are stored first,
    then their vectors are computed, with a progress bar and its rate (about 30 commits/s on two
    idle cores). Ctrl-C while embedding keeps the commits and the vectors done; `memsafe embed`
    goes on from there. With --no-embed, or where the model is unavailable, the commits are found
    by keywords only until `memsafe embed` has run (a recall embeds at most 256 of them, for at
    most 2 s).

    Examples:

      memsafe hook backfill

      memsafe hook backfill --since 2024-01-01 --max 500 --no-embed
    """
    import time

    from memsafe.cli import _plain

    with _session(ctx) as opened:
        with _plain.progress("remembering commits", not json_) as progress:
            report = api.backfill_commits(opened.store, repo, since=since, max_count=max_, progress=progress)
        if not json_:
            rate = report.remembered / report.seconds if report.seconds else 0.0
            out().print(
                f"{report.remembered:,} commit{'s' if report.remembered != 1 else ''} remembered, "
                f"{report.skipped:,} already known, from {report.seen:,} in {report.repo} "
                f"({report.seconds:.1f} s, {rate:,.0f}/s)",
                markup=False, highlight=False,
            )
        if report.pending and not no_embed:
            started = time.monotonic()
            try:
                with _plain.interrupts() as interrupted, \
                        _plain.progress("embedding", not json_, unit="vectors") as progress:
                    result = api.embed_pending(opened.store, progress=progress)
                    if interrupted:  # a Ctrl-C that a native library swallowed (loading the model)
                        raise KeyboardInterrupt
            except KeyboardInterrupt:  # each batch is its own transaction: the commits and batches written stay
                pending = opened.store.pending_count()
                message = (f"interrupted: {report.remembered:,} commits remembered, "
                           f"{report.pending - pending:,} vectors computed, {pending:,} pending; "
                           "`memsafe embed` goes on from there")
                _plain.error(message, "Interrupted", json_)
                raise _plain.Failed(130) from None  # 143 for SIGTERM (`memsafe.__main__`)
            report.embedded, report.pending, report.embed_error = result.embedded, result.pending, result.error
            report.embed_seconds = round(time.monotonic() - started, 3)
    if json_:
        _emit_json(report)
        return
    if report.embedded:
        rate = report.embedded / report.embed_seconds if report.embed_seconds else 0.0
        err.print(f"{report.embedded:,} vectors computed ({report.embed_seconds:.1f} s, {rate:,.0f}/s)",
                  markup=False, highlight=False)
    if report.pending:
        why = f" ({report.embed_error})" if report.embed_error else ""
        err.print(f"{report.pending:,} vectors pending{why}: those memories are found by keywords only until "
                  "`memsafe embed` computes them (a recall embeds at most 256, for at most 2 s)",
                  markup=False, highlight=False)


@hook_app.command(hidden=True)
def run(
    ctx: typer.Context,
    repo: Annotated[str, typer.Option("--repo", help="Repository root.")] = ".",
    queue: Annotated[str | None, typer.Option("--queue", help="The hooks' queue folder to drain.")] = None,
    commit: Annotated[
        str | None, typer.Option("--commit", help="Queue this commit first (hooks installed by memsafe < 0.2).")
    ] = None,
) -> None:
    """Drain the hooks' queue (what the installed hooks start). Always exits 0; errors go to stderr (the hook log)."""
    try:
        if commit:
            root = hooks.repo_root(repo)
            hooks.enqueue_commit(hooks.queue_dir(root), commit, hooks.current_branch(root))
        with _session(ctx) as opened:
            report = api.drain_queue(opened.store, repo, queue)
        for name, reason in report.failed:
            sys.stderr.write(f"{clock.now_iso()} memsafe hook run: queue entry {name} in {repo} failed: {reason}\n")
    except typer.Exit as exc:
        if exc.exit_code:
            sys.stderr.write(f"{clock.now_iso()} memsafe hook run failed in {repo}\n")
    except Exception as exc:  # a hook must never fail loudly; the log keeps the reason
        sys.stderr.write(f"{clock.now_iso()} memsafe hook run: {type(exc).__name__}: {exc}\n")
