"""Responsibility: `memsafe init`: show each planned set-up step (`api.init_plan`), ask, apply
(`api.init_apply`)."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from typing import Annotated

import typer

from memsafe import settings
from memsafe.cli._common import _emit_json, _errors, _fail, _note_json, app, is_terminal, out
from memsafe.plural import count_of

_HookFlag = Annotated[bool, typer.Option("--hook/--no-hook", show_default=False,
                                         help="Install the git hook in this repository (default: yes).")]
_AgentsFlag = Annotated[bool, typer.Option("--agents/--no-agents", show_default=False, help=(
    "Register the MCP server with Claude Code, Claude Desktop, Cursor (default: yes)."))]
_RulesFlag = Annotated[bool, typer.Option("--rules/--no-rules", show_default=False,
                                          help="Add a memsafe block to CLAUDE.md / AGENTS.md (default: yes).")]


@app.command()
def init(
    ctx: typer.Context,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Make every change without asking (for scripts), but "
                                      "shell completion, which needs --completions too.")]
    = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show every change, make none.")] = False,
    undo: Annotated[bool, typer.Option("--undo", help="Remove what init added (backups of edited files are kept).")]
    = False,
    hook: _HookFlag = True,
    agents: _AgentsFlag = True,
    rules: _RulesFlag = True,
    completions: Annotated[
        bool | None,
        typer.Option("--completions/--no-completions", show_default=False,
                     help="Install completion for your shell (default: ask; with --yes: no)."),
    ] = None,
    repo: Annotated[str | None, typer.Option("--repo", help="Repository (default: the current directory's).")]
    = None,
    json_: Annotated[bool, typer.Option("--json", help="With --dry-run: print the plan as one JSON document.",
                                        callback=_note_json)]
    = False,
) -> None:
    """Connect memsafe to this machine: git hook, agents (MCP), agent rules, shell completion.

    Shows each change first (a diff for every file) and asks; edited config files keep a backup
    and their other entries. The agents are given the absolute path of this memsafe, so they
    find it even when it is not on PATH. Ends with the crontab line for nightly decay.
    Exits 1 when a change failed or was refused (a config file it cannot edit safely).

    Examples:

      memsafe init --dry-run

      memsafe init --yes --no-rules

      memsafe init --undo
    """
    from memsafe import api

    if json_ and not dry_run:
        raise _fail("--json needs --dry-run (init asks before each change)", 2)
    if not (yes or dry_run or is_terminal()):
        raise _fail("init asks before each change: on a non-terminal pass --yes (and --no-hook, --no-agents, "
                    "--no-rules to skip steps) or --dry-run", 2)
    steps = [name for name, wanted in (("hook", hook), ("agents", agents), ("rules", rules),
                                       ("completions", completions is not False)) if wanted]
    db = (ctx.obj.db if ctx.obj else None) or settings.env().db or None
    with _errors(db):
        plan = api.init_plan(repo=repo, db=db, steps=steps, undo=undo)
    if json_:  # the plan without the files' full texts (a config file may hold other servers' secrets)
        hidden = ("old", "new")
        changes = [{k: v for k, v in asdict(c).items() if k not in hidden} for c in plan.changes]
        _emit_json({**asdict(plan), "changes": changes})
        return
    console = out()
    line = lambda text="", style=None: console.print(text, style=style, markup=False, highlight=False,  # noqa: E731
                                                     soft_wrap=True)
    verb = "undo" if undo else "init"
    line(f"memsafe {verb}{' (dry run: nothing is changed)' if dry_run else ''}", "bold")
    line(f"memsafe command:  {shlex.join(plan.command)}")
    line(f"database:         {plan.db or 'the default store (see `memsafe status`)'}")
    line(f"repository:       {plan.repo or '(none: not in a git repository)'}")
    def held_back(change) -> bool:  # --yes alone leaves the user's shell set-up as it is
        return change.state == "change" and change.step == "completions" and completions is None and yes \
            and not undo

    made = failed = 0
    for change in plan.changes:
        line()
        if held_back(change):
            line(f"- {change.target}: left out with --yes alone ({change.summary}): pass --completions for it", "dim")
            continue
        mark = {"change": "•", "ok": "✓", "skip": "-", "refused": "!"}[change.state]
        style = {"change": "bold", "ok": "green", "skip": "dim", "refused": "yellow"}[change.state]
        line(f"{mark} {change.target}: {change.summary}", style)
        if change.state != "change":
            continue
        if change.command:
            line(f"  $ {shlex.join(change.command)}")
        for diff_line in change.diff.splitlines():
            colour = "green" if diff_line.startswith("+") else "red" if diff_line.startswith("-") else None
            line(f"  {diff_line}", colour)
        if dry_run:
            continue
        if not yes and not typer.confirm(f"  {'Undo' if undo else 'Apply'} this ({change.target})?", default=True):
            line("  skipped", "dim")
            continue
        try:
            with _errors(db):
                line(f"  done: {api.init_apply(change, db=plan.db)}", "green")
            made += 1
        except typer.Exit:
            failed += 1
    if not undo:
        line()
        line("Nightly decay (compress and archive what nobody uses): add this line with `crontab -e`:")
        line(f"  {plan.cron}")
    refused = sum(c.state == "refused" for c in plan.changes)
    if not dry_run:
        line()
        left_out = " (shell completion left out: pass --completions)" if any(map(held_back, plan.changes)) else ""
        if not any(c.state == "change" and not held_back(c) for c in plan.changes) and not refused:
            line("Nothing to do: " + ("nothing init added is left." if undo else
                                      f"everything is already in place{left_out}."))
        else:
            line(f"{count_of(made, 'change')} made" + (f", {failed} failed" if failed else "")
                 + (f", {refused} refused" if refused else "") + left_out + ".")
    if failed or (refused and not dry_run):
        raise typer.Exit(1)
