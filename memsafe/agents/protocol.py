"""Responsibility: the agent hook protocol: read the event JSON an agent writes on stdin, dispatch it
to the handlers (`memsafe.api.agent`), write the reply the agent reads on stdout. One adapter per
agent (`ADAPTERS`) names its events and fields and shapes its reply; the rest is shared.

Events, by what memsafe does (each agent's names in `Adapter.events`):

- start (SessionStart; sources startup, resume, clear, compact): the project brief
  (`api.agent.session_brief`). After clear and compact the model no longer holds what it was shown,
  so the session's record of shown memories starts again.
- prompt (UserPromptSubmit, Gemini's BeforeAgent, Cursor's beforeSubmitPrompt): the memories that
  match the prompt and clear the relevance floor, each once per session unless it changed
  (`api.agent.prompt_context`).
- compact, stop, end (PreCompact, Stop, SessionEnd; Gemini's PreCompress, AfterAgent, SessionEnd):
  capture from the transcript (`api.agent.capture_session`); nothing is printed.

A hook never fails the agent: on any error (bad JSON, a missing transcript, a `cwd` that is gone, a
locked or encrypted store, a bug) it prints nothing, exits 0 and appends one line to memsafe's hook
log (`hooks.log_file()`). stdout is written once, at the end, with the whole reply.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_LOG_BYTES = 1024 * 1024  # the hook log keeps its newest half beyond this


@dataclass(frozen=True)
class Adapter:
    """How one agent speaks the protocol: its event names (-> start, prompt, compact, stop, end), the
    fields holding the session id and the working folder, and which events take a reply (`replies`:
    event -> "hookSpecificOutput" for `{"hookSpecificOutput": {"hookEventName", "additionalContext"}}`,
    "additional_context" for `{"additional_context": ...}`)."""

    name: str
    events: dict[str, str]
    replies: dict[str, str]
    session_fields: tuple[str, ...] = ("session_id",)
    source_fields: tuple[str, ...] = ("source",)


CLAUDE_EVENTS = {"SessionStart": "start", "UserPromptSubmit": "prompt", "PreCompact": "compact", "Stop": "stop",
                 "SessionEnd": "end"}
HSO = "hookSpecificOutput"
ADAPTERS: dict[str, Adapter] = {
    "claude": Adapter("claude", CLAUDE_EVENTS, {"start": HSO, "prompt": HSO}),
    "codex": Adapter("codex", CLAUDE_EVENTS, {"start": HSO, "prompt": HSO}),
    "gemini": Adapter("gemini", {"SessionStart": "start", "BeforeAgent": "prompt", "PreCompress": "compact",
                                 "AfterAgent": "stop", "SessionEnd": "end"},
                      {"start": HSO, "prompt": HSO}, source_fields=("source", "trigger")),
    # Cursor documents context for sessionStart only; beforeSubmitPrompt can allow or block, not add.
    "cursor": Adapter("cursor", {"sessionStart": "start", "beforeSubmitPrompt": "prompt", "preCompact": "compact",
                                 "stop": "stop", "sessionEnd": "end"},
                      {"start": "additional_context"}, session_fields=("conversation_id", "session_id")),
}


class BadEvent(Exception):
    """The event JSON cannot be used (one line for the hook log says why)."""


@dataclass
class Event:
    """One hook event, as every adapter reads it. `name`: start, prompt, compact, stop or end;
    `raw_name`: the agent's own name (echoed in the reply)."""

    agent: str
    name: str
    raw_name: str
    session_id: str = ""
    cwd: str | None = None
    transcript_path: str | None = None
    prompt: str | None = None
    source: str | None = None
    extra: dict = field(default_factory=dict)


def _text_field(data: dict, *names: str) -> str | None:
    for name in names:
        value = data.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def parse_event(agent: str, raw: bytes, event_name: str | None = None) -> Event | None:
    """The event in `raw` (the JSON object on the hook's stdin), or None for an event memsafe does
    not handle. `event_name` (from the command line) stands in for a missing `hook_event_name`.
    Unknown fields are ignored.

    Raises:
        BadEvent: not a JSON object, or a field memsafe needs has the wrong type.
    """
    adapter = ADAPTERS[agent]
    try:
        data = json.loads(raw.decode("utf-8", "surrogatepass") if raw.strip() else "{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEvent(f"the event is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BadEvent(f"the event is a JSON {type(data).__name__}, not an object")
    raw_name = _text_field(data, "hook_event_name") or event_name or ""
    name = adapter.events.get(raw_name)
    if name is None:
        return None
    cwd = _text_field(data, "cwd")
    if cwd is None and isinstance(data.get("workspace_roots"), list) and data["workspace_roots"]:
        first = data["workspace_roots"][0]
        cwd = first if isinstance(first, str) and first else None
    prompt = data.get("prompt")
    if name == "prompt" and prompt is not None and not isinstance(prompt, str):
        raise BadEvent(f"`prompt` is a JSON {type(prompt).__name__}, not a string")
    return Event(agent, name, raw_name, session_id=_text_field(data, *adapter.session_fields) or "",
                 cwd=cwd, transcript_path=_text_field(data, "transcript_path"),
                 prompt=prompt if isinstance(prompt, str) else None,
                 source=_text_field(data, *adapter.source_fields))


def reply(event: Event, text: str) -> str:
    """What the hook prints for `text` (context for the model): the agent's JSON reply, or '' when
    the event takes none or `text` is empty."""
    how = ADAPTERS[event.agent].replies.get(event.name)
    if not text or how is None:
        return ""
    if how == "additional_context":
        return json.dumps({"additional_context": text}, ensure_ascii=False)
    return json.dumps({HSO: {"hookEventName": event.raw_name, "additionalContext": text}}, ensure_ascii=False)


def log(line: str) -> None:
    """Append one line (UTC time first) to memsafe's hook log; never raises."""
    try:
        from memsafe import clock, hooks

        path = hooks.log_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
            keep = path.read_bytes()[-MAX_LOG_BYTES // 2:]
            path.write_bytes(keep[keep.find(b"\n") + 1:])
        one = " ".join(line.split())[:1000]
        with open(path, "a", encoding="utf-8", errors="replace") as fh:
            fh.write(f"{clock.now_iso()} {one}\n")
    except Exception:  # the log is the last resort: nothing is left to tell
        pass


def handle(event: Event, db: str | None = None) -> str:
    """Run `event` against the store (`db`, else the default one); returns the context text for the
    model ('' for none).

    Raises:
        MemsafeError, OSError, sessions.Busy: whatever stopped it (the caller logs it).
    """
    from memsafe import settings
    from memsafe.agents import sessions
    from memsafe.api import agent as handlers
    from memsafe.api.config import config_value
    from memsafe.api.hygiene import current_project
    from memsafe.errors import StoreUnavailable
    from memsafe.store import connect  # not `api.core.open_store`: its module loads what only writing needs

    if not event.cwd:
        raise BadEvent("the event names no `cwd`")
    if not os.path.isdir(event.cwd):
        raise BadEvent(f"cwd {event.cwd} is not a folder (any more)")
    capture = event.name in ("compact", "stop", "end")
    if capture:  # `python -m memsafe` starts a hook without the garbage collector; a capture's long read needs it
        import gc

        gc.enable()
    if capture and not event.transcript_path:
        raise BadEvent("the event names no `transcript_path`")
    if capture and not event.session_id:
        raise BadEvent("the event names no session id")
    path, _ = settings.resolve_db_path(db)
    try:
        store = connect(path, create=capture)
    except StoreUnavailable:
        if not capture and isinstance(path, os.PathLike) and not os.path.exists(path):
            return ""  # no store yet: nothing to inject
        raise
    try:
        project = current_project(store, event.cwd, mode=config_value(store, "project_mode"))
        state_path = sessions.path_of(event.agent, event.session_id) if event.session_id else None
        if event.name == "start":
            text = handlers.session_brief(store, project, session_id=event.session_id or None)
            if state_path is not None:
                sessions.prune()
                with sessions.locked(state_path) as state:
                    shown = {} if event.source in ("clear", "compact", "startup") else dict(state.get("shown") or {})
                    for memory_id, updated in _shown_in(store, text).items():
                        shown[memory_id] = updated
                    state["shown"] = shown
            return text
        if event.name == "prompt":
            if not event.prompt:
                return ""
            if state_path is None:
                return handlers.prompt_context(store, project, event.prompt)[0]
            with sessions.locked(state_path) as state:
                text, shown = handlers.prompt_context(store, project, event.prompt, shown=state.get("shown") or {},
                                                      session_id=event.session_id)
                state["shown"] = shown
            return text
        assert state_path is not None and event.transcript_path is not None
        with sessions.locked(state_path) as state:
            report = handlers.capture_session(store, project, agent=event.agent, session_id=event.session_id,
                                              transcript=event.transcript_path, cwd=event.cwd,
                                              state=state.get("capture") or {})
            state["capture"] = report.state  # saved once the block ends: after the store committed
        if report.skipped_bytes or report.bad_lines:
            log(f"memsafe agent hook {event.agent} {event.raw_name}: transcript {event.transcript_path}: "
                f"{report.skipped_bytes} bytes of backlog skipped, {report.bad_lines} lines not JSON")
        return ""
    finally:
        store.close()


def _shown_in(store, text: str) -> dict[str, str]:
    """{memory id: updated_at} of the records of a framed `text`."""
    if not text:
        return {}
    from memsafe import framing

    ids = [r.id for r in framing.parse(text).records if r.id is not None]
    found = store.get_memories(ids, tags=False)
    return {str(i): found[i].updated_at for i in ids if i in found}


def parse_argv(argv: list[str]) -> tuple[str | None, str, str | None] | None:
    """(db, agent, event name) when `argv` is exactly `[--db PATH] agent hook [--agent NAME]
    [--event NAME] [--db PATH]`, else None (the CLI answers: --help, a typo)."""
    db = None
    agent = "claude"
    event_name = None
    i = 0
    seen: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if len(seen) < 2 and arg in ("agent", "hook") and arg == ("agent", "hook")[len(seen)]:
            seen.append(arg)
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        if name not in ("--db", "--agent", "--event") or (name != "--db" and len(seen) < 2):
            return None
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
        else:
            return None
        if name == "--db":
            db = value
        elif name == "--agent":
            if value not in ADAPTERS:
                return None
            agent = value
        else:
            event_name = value
    return (db, agent, event_name) if len(seen) == 2 else None


def main(db: str | None, agent: str, event_name: str | None = None) -> int:
    """Run one hook: the event from stdin, the reply on stdout. Always returns 0 (see the module
    docstring); errors go to the hook log."""
    label = f"memsafe agent hook {agent}"
    try:
        raw = sys.stdin.buffer.read(MAX_EVENT_BYTES + 1)
        if len(raw) > MAX_EVENT_BYTES:
            raise BadEvent(f"the event is larger than {MAX_EVENT_BYTES} bytes")
        event = parse_event(agent, raw, event_name)
        if event is None:
            return 0
        label = f"{label} {event.raw_name}"
        out = reply(event, handle(event, db))
    except (Exception, KeyboardInterrupt) as exc:
        log(f"{label}: {type(exc).__name__}: {exc}")
        return 0
    if out:
        try:
            sys.stdout.write(out)
            sys.stdout.flush()
        except (OSError, ValueError) as exc:
            log(f"{label}: could not write the reply: {exc}")
    return 0
