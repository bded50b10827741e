"""Responsibility: `memsafe agent hook | captures | undo | plugin`: memsafe in an agent's lifecycle
hooks (the hook itself runs without the Typer app: `memsafe.__main__` hands a plain
`agent hook` command line to `memsafe.agents.protocol`; this command is what `--help` and an
unusual command line reach)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memsafe import api, clock, framing, render
from memsafe.cli._common import Group, JsonOpt, _emit_json, _fail, _session, app, err, out
from memsafe.errors import MemsafeError

agent_app = typer.Typer(
    cls=Group,
    help="Memory in the agent's loop: lifecycle hooks for Claude Code, Codex CLI, Gemini CLI and Cursor.",
    no_args_is_help=True,
)
app.add_typer(agent_app, name="agent")

AGENTS = ("claude", "codex", "gemini", "cursor")
PLUGIN = Path(__file__).resolve().parents[1] / "data" / "claude-plugin"


@agent_app.command("hook")
def hook_(
    ctx: typer.Context,
    agent: Annotated[str, typer.Option("--agent", help="Whose hook protocol the event speaks: "
                                       + ", ".join(AGENTS) + ".")] = "claude",
    event: Annotated[str | None, typer.Option("--event", help="The event's name, when the agent does not put "
                                              "it in the JSON (`hook_event_name`).")] = None,
) -> None:
    """Handle one hook event: its JSON on stdin, the reply (context for the model) on stdout.

    At session start: a brief of the project's pinned and high-confidence memories, recent
    decisions and open tasks. With each prompt: the memories that match it, each once per
    session. At compaction, stop and session end: the user's explicit decisions, preferences,
    conventions and corrections, and one session summary, are captured from the transcript.
    Always exits 0 and prints nothing on an error (the hook log says why). See docs/agents.md.

    Examples:

      echo '{"hook_event_name":"SessionStart","session_id":"s1","cwd":"."}' | memsafe agent hook
    """
    from memsafe.agents import protocol  # the one way in (tests/test_layers.py ENTRY_POINTS)

    if agent not in AGENTS:  # exit 2 would block the prompt in Claude Code: a hook only logs
        protocol.log(f"memsafe agent hook: unknown agent {agent!r}; one of {', '.join(AGENTS)}")
        raise typer.Exit(0)

    db = ctx.obj.db if ctx.obj else None
    raise typer.Exit(protocol.main(db, agent, event))


@agent_app.command("captures")
def captures(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="At most this many sessions.")] = None,
    json_: JsonOpt = False,
) -> None:
    """List the agent sessions whose hooks captured memories, newest first: each session's id,
    project, how many of its captures are active, and when the last was made. Their text:
    `memsafe list --source hook`; forget one session's: `memsafe agent undo SESSION_ID`.

    Examples:

      memsafe agent captures --json
    """
    with _session(ctx) as opened:
        memories = api.session_captures(opened.store)
    sessions: dict[str, dict] = {}
    for m in memories:  # newest first: a session's first row is its last capture
        sid = next((t[len("session:"):] for t in m.tags if t.startswith("session:")), "")
        row = sessions.setdefault(sid, {"session": sid, "project": m.project, "active": 0, "total": 0,
                                        "last": m.created_at})
        row["total"] += 1
        row["active"] += m.status == "active"
    rows = list(sessions.values())[:limit] if limit else list(sessions.values())
    if json_:
        _emit_json(rows)
        return
    if not rows:
        err.print("The agent hooks captured nothing yet.", markup=False)
        return
    now = clock.now()
    console = out()
    for r in rows:
        console.print(f"{r['session']}\t{r['project'] or 'global'}\t{r['active']}/{r['total']} active\t"
                      f"{clock.age(r['last'], now)} ago", markup=False, highlight=False)


@agent_app.command("undo")
def undo(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="The session whose captures to forget.")],
    json_: JsonOpt = False,
) -> None:
    """Forget everything the agent hooks captured in one session (statements and its summary).

    Forgotten, not purged: `memsafe restore ID` brings one back.

    Examples:

      memsafe agent undo 3f9c2a1e-77b0-4c55-9e2d-1b2c3d4e5f60
    """
    try:
        with _session(ctx) as opened:
            ids = api.undo_session(opened.store, session_id)
    except MemsafeError as exc:
        raise _fail(str(exc), exc.exit_code, type(exc).__name__) from None
    if json_:
        _emit_json({"session": session_id, "forgotten": ids})
        return
    shown = framing.inline(session_id)
    shown = shown if len(shown) <= 80 else shown[:80] + "…"  # one bounded line, whatever was passed
    if not ids:
        err.print(f"Nothing captured in session {shown} is active.", markup=False)
        return
    out().print(f"Forgot {render.count_of(len(ids), 'memory')} captured in session {shown}: "
                + ", ".join(f"#{i}" for i in ids), markup=False, highlight=False)


@agent_app.command("plugin")
def plugin() -> None:
    """Print the folder of memsafe's Claude Code plugin (also a marketplace of its own).

    Examples:

      claude plugin marketplace add "$(memsafe agent plugin)"
    """
    out().print(str(PLUGIN), markup=False, highlight=False, soft_wrap=True)
