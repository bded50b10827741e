"""Responsibility: the handlers of the agent-loop hooks (`memsafe agent hook`, `memsafe.agents`):
the project brief a session starts with, the memories a prompt brings along, what a session's
transcript leaves behind (captured statements and one session summary), and reviewing and undoing
a session's captures. Injection is `recall` and the store's listing, framed by `memsafe.framing`;
capture is `remember` and `update`, with credentials redacted: not a second pipeline.

A capture carries source `hook`, the tags of its rule, `captured` and `session:<session id>`
(`session_tag`); the session summary has a uid derived from the agent and the session id
(`summary_uid`), so each hook of a session rewrites that one memory in place (its earlier texts
stay in its history). Undoing a session forgets them all (`undo_session`; `memsafe restore`
brings one back).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from memsafe import clock, framing, tokens
from memsafe.api.config import config_value
from memsafe.api.hygiene import MAX_QUERY_CHARS, make_scope
from memsafe.errors import Duplicate, InvalidInput
from memsafe.models import Hit, Kind, Memory, Source, Status
from memsafe.store import Store

__all__ = ["session_brief", "prompt_context", "capture_session", "CaptureReport", "session_captures",
           "undo_session", "session_tag", "summary_uid", "SUMMARY_TAG", "CAPTURED_TAG"]

SUMMARY_TAG = "session-summary"
CAPTURED_TAG = "captured"
HIGH_CONFIDENCE = 0.9  # a memory at least this sure is part of the brief without being pinned
ITEM_TOKENS = 90  # at most this much of one memory's text in the brief (its block is marked `cut`)
SECTION_LIMIT = 8  # memories listed per section of the brief, at most
WRITE_WAIT_MS = 3000  # a hook gives up on a store another writer holds for longer
_UID_NAMESPACE = "4d3a2c1b-6e5f-4a7b-9c8d-6167656e7473"  # fixed: a session's summary uid never changes
TOOLS_NOTE = ("more with the memsafe MCP tools: recall (search), get_memory, remember (store), forget; "
              "`memsafe list --source hook` shows what the hooks captured")


_PLAIN_SESSION = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}")  # kept as it is by tag folding and within a tag's length
_DIGEST_SESSION = re.compile(r"~[0-9a-f]{24}")
_UUID_SESSION = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # Claude Code's ids


def session_tag(session_id: str) -> str:
    """The tag every capture of agent session `session_id` carries: `session:<session_id>` for an
    id a tag holds unchanged (lower-case letters, digits, `.`, `_`, `-`; at most 48 characters;
    nothing credential-like), else `session:~<digest>` (24 hex digits of its SHA-256): tags fold
    case, have a length limit and refuse credentials, and two sessions must never share a tag.
    `~<digest>` itself (as `memsafe agent captures` lists such a session) names the same tag."""
    if _UUID_SESSION.fullmatch(session_id):  # a UUID is never a credential: no scanner to load at session start
        return "session:" + session_id
    if _PLAIN_SESSION.fullmatch(session_id):
        from memsafe import safety  # here, not at import: see above
        if not safety.scan(session_id):
            return "session:" + session_id
    if _DIGEST_SESSION.fullmatch(session_id):
        return "session:" + session_id
    return "session:~" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def summary_uid(agent: str, session_id: str) -> str:
    """The uid of the summary memory of `agent`'s session `session_id`: uuid5 of both, hex."""
    import uuid  # here, not at import: it loads `platform`, which no injection needs

    return uuid.uuid5(uuid.UUID(_UID_NAMESPACE), f"agent-session\0{agent}\0{session_id}").hex


_PIECE = re.compile(r"(?<=\S)(?= \S)")  # before a single space that starts a word: a boundary of cl100k's pieces


def _line_tokens(line: str) -> int:
    """Tokens (cl100k_base) of one line of a hook's reply plus its line break, counted piece by
    piece (split before each space that starts a word, where the encoding's pre-tokenizer splits
    too), so the counts of pieces seen before (`tokens.count`'s cache) answer without loading the
    encoding in a hook's fresh process: a header's age changes from one hook to the next, its
    words do not."""
    return sum(_piece_tokens(p) for p in _PIECE.split(line)) + 1


_AGE = re.compile(r" \d{1,3}(?:s|m|h|d|w|mo|y)")  # a header's age (`clock.age`): changes from hook to hook
AGE_TOKENS = 3  # at most: a space, up to three digits, a unit


def _piece_tokens(piece: str) -> int:
    """Tokens of one piece of a line: an age counts AGE_TOKENS without being counted (a new age
    every minute would make a hook's process load the encoding); the rest is counted, once ever
    (`tokens.count` keeps the counts for later processes)."""
    return AGE_TOKENS if _AGE.fullmatch(piece) else tokens.count(piece)


def _cost(text: str) -> int:
    """Tokens of a reply, line by line (`_line_tokens`): at least the exact count."""
    return sum(_line_tokens(line) for line in text.split("\n"))


def _body_cost(text: str) -> int:
    """Tokens of `framing.body(text)` and its line break, at least: the text's own count (which
    recall counted and cached) plus, per line, two for the indent and one for the break."""
    return tokens.count(text) + 3 * max(1, len(text.splitlines()) + text.endswith(("\n", "\r")))


def _cut(text: str, max_tokens: int) -> str:
    """`text`, or its longest prefix ending at a word whose `_body_cost` is at most `max_tokens`
    (found by bisection over word ends: the same text is always cut through the same prefixes,
    so after the first time their counts come from `tokens.count`'s cache, with no encoding to
    load); '' when not even the first word fits."""
    if _body_cost(text) <= max_tokens:
        return text
    ends = [m.start() for m in re.finditer(r"\s+", text)]
    low, high = 0, len(ends) - 1
    best = ""
    while low <= high:
        mid = (low + high) // 2
        prefix = text[: ends[mid]]
        if _body_cost(prefix) <= max_tokens:
            best, low = prefix, mid + 1
        else:
            high = mid - 1
    return best


def _scope(project: str | None, **extra):
    scope = make_scope(project=project, all_projects=False)
    for key, value in extra.items():
        setattr(scope, key, value)
    return scope


def _listed(store: Store, project: str | None, limit: int, **extra) -> list[Memory]:
    """The `limit` newest memories of `project` (and global ones) in the scope `extra` narrows.
    Walked newest first (`browse_ids`): the (status, project) index would make SQLite read and
    sort every row of a large store to find the few newest of one kind."""
    ids = store.browse_ids(_scope(project, **extra), limit=limit)
    found = store.get_memories(ids)
    return [found[i] for i in ids if i in found]


def _sure(store: Store, project: str | None, among: int) -> list[Memory]:
    """The memories of at least HIGH_CONFIDENCE among the `among` newest of `project`, newest
    first, with their tags (read for those only: most of the newest are less sure)."""
    ids = store.browse_ids(_scope(project), limit=among)
    found = store.get_memories(ids, tags=False)
    sure = [found[i] for i in ids if i in found and found[i].confidence >= HIGH_CONFIDENCE]
    store.fill_tags(sure)
    return sure


def session_brief(store: Store, project: str | None, *, budget: int | None = None,
                  now: datetime | None = None, session_id: str | None = None) -> str:
    """The project brief a session starts with: pinned and high-confidence memories of `project`
    (and global ones), the most recent decisions, open tasks and the last session's summary, each
    as a framed record (`[#id kind age src=…]`, text indented), under a banner that says they are
    data written earlier, and a note pointing to the MCP tools. '' when the project has none.

    Args:
        budget: tokens (cl100k_base) the whole text may take; default config `hook_brief_budget`.
        session_id: this session (its own summary is left out).

    Returns: the text, at most `budget` tokens.
    """
    budget = budget or config_value(store, "hook_brief_budget")
    now = now or clock.now()
    skip_tag = session_tag(session_id) if session_id else None
    sections: list[tuple[str, list[Memory]]] = [
        ("Pinned and high-confidence:",
         _listed(store, project, SECTION_LIMIT, tags=["pinned"])
         + [m for m in _sure(store, project, 300) if SUMMARY_TAG not in m.tags]),
        ("Recent decisions:", _listed(store, project, SECTION_LIMIT, kinds=[Kind.DECISION.value])),
        ("Open tasks:", _listed(store, project, SECTION_LIMIT, kinds=[Kind.TASK.value])),
        ("Last session:", _listed(store, project, 2, tags=[SUMMARY_TAG])),
    ]
    banner = (f"memsafe: memories of {'project ' + framing.field(project) if project else 'this machine'} "
              f"written in earlier sessions ({framing.DATA_NOTE}; text indented under [#id])")
    note = f"Note: {framing.inline(TOOLS_NOTE)}"
    used = _line_tokens(banner) + _line_tokens(note)
    seen: set[int] = set()
    lines = [banner]
    count = 0
    for title, memories in sections:
        block: list[str] = []
        cost = _line_tokens(title)
        for m in memories:
            if m.id in seen or (skip_tag and skip_tag in m.tags) or len(block) >= SECTION_LIMIT:
                continue
            text = _cut(m.content, ITEM_TOKENS)
            head = framing.header(m, now=now, cut=text != m.content)
            item = _line_tokens(head) + _body_cost(text)
            if used + cost + item > budget:
                continue
            seen.add(m.id)
            block.append(framing.block(head, text))
            cost += item
        if block:
            lines += [title, *block]
            used += cost
            count += len(block)
    if not count:
        return ""
    return "\n".join([*lines, note])


def _whole_words(text: str, max_chars: int) -> str:
    """`text`, or its longest prefix of at most `max_chars` characters that ends before a space: a
    word cut in two is a word no memory holds, and it would lower every match's coverage."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars + 1]
    end = max(cut.rfind(c) for c in " \t\n\r")
    return cut[:end].rstrip() if end > 0 else ""


BANNER_TOKENS = 40  # kept free of a prompt's budget for the banner line


MIN_PROMPT_WORDS = 2  # a prompt naming fewer content words is chat ("ok", "thanks!", "continue"): no recall
# Words of chat, not of a topic: a prompt of these alone ("yes please", "good night") asks nothing a
# memory answers, and one memory holding the word matched it fully (scripts/tune_hook_floor.py).
CHAT_WORDS = frozenset("""
okay yes yeah yep yup nope please thanks thank cheers great good nice cool sure fine awesome perfect
hello hey hiya bye goodbye morning afternoon evening night today tomorrow tonight again continue
proceed done go ahead sounds looks works right wait hmm well lol sorry
""".split())


# A word no chat holds: an identifier (snake_case, CamelCase, CONSTANT, letters with digits)
_IDENTIFIER = re.compile(r"\b(?:\w+_\w+|[A-Za-z]*[a-z][A-Z]\w*|[A-Z]{3,}\b|(?=\w*\d)(?=\w*[A-Za-z]{2})\w{3,})")


def asks_enough(prompt: str) -> bool:
    """Whether a prompt hook recalls on `prompt` at all: it names at least MIN_PROMPT_WORDS content
    words (`terms.query_words`: three letters or more, no stop words) beside CHAT_WORDS, or it
    names one and is a question or holds an identifier ("who is our designer?", "NO_COLOR")."""
    from memsafe.recall import terms

    query = _whole_words(prompt.strip(), MAX_QUERY_CHARS)  # what recall would search: a 5 MB prompt is not read whole
    named = len(terms.query_words(query) - CHAT_WORDS)
    return named >= MIN_PROMPT_WORDS or (named == 1 and (query.endswith("?")
                                                         or _IDENTIFIER.search(query) is not None))


def recall_for_prompt(store: Store, project: str | None, prompt: str, *, budget: int,
                      mode: str = "lexical") -> tuple[list[Hit], datetime]:
    """(the recall hits, best first, each with its `score`, that a prompt hook weighs for `prompt`
    in `project` and global memories, before the relevance floor; the instant recall ranked them
    at): recall on the prompt's first MAX_QUERY_CHARS characters (whole words), at most 8, within
    `budget` tokens less the banner's. No hits for a prompt holding a credential (it is not
    searched for) or nothing searchable."""
    from memsafe import safety  # here, not at import: a session start's brief never scans
    from memsafe.api.retrieval import recall

    query = _whole_words(prompt.strip(), MAX_QUERY_CHARS)
    if not query or budget <= BANNER_TOKENS or safety.scan(query):
        return [], clock.now()
    try:
        result = recall(store, query, project=project, budget=budget - BANNER_TOKENS, mode=mode, limit=8)
    except InvalidInput:  # nothing searchable in it (punctuation only)
        return [], clock.now()
    return list(result.hits), clock.parse_iso(result.at) if result.at else clock.now()


def prompt_mode(store: Store) -> str:
    """The recall mode a prompt hook uses: 'hybrid' when this process holds the embedding model
    already and the store searches vectors (a warm process, whose query vectors recall keeps), else
    'lexical': loading the model costs a hook's fresh process far more than its whole budget."""
    from memsafe import embed

    return "hybrid" if embed.loaded() and store.vector_available else "lexical"


def _prompt_banner(n: int) -> str:
    one = n == 1
    return (f"memsafe: {n} memor{'y' if one else 'ies'} written earlier that match{'es' if one else ''} "
            f"this prompt ({framing.DATA_NOTE}; text indented under [#id])")


def injected(hits: list[Hit], *, floor: float, budget: int, now: datetime,
             keep: Callable[[Hit], bool] = lambda h: True) -> list[Hit]:
    """The hits of `recall_for_prompt` a prompt hook injects: those scoring at least `floor` that
    `keep` admits (not shown in the session before), in order, as many as fit in `budget` tokens
    with the banner and each record's header."""
    chosen = [h for h in hits if h.score >= floor and keep(h)]
    kept, used = [], _line_tokens(_prompt_banner(len(chosen)))
    for h in chosen:  # recall counted the texts; the framed blocks cost their headers and indents too
        cost = _line_tokens(framing.header(h.memory, now=now, cut=h.truncated)) + _body_cost(h.text)
        if used + cost <= budget:
            kept.append(h)
            used += cost
    return kept


def prompt_context(store: Store, project: str | None, prompt: str, *, shown: dict[str, str] | None = None,
                   budget: int | None = None, floor: float | None = None, mode: str | None = None,
                   session_id: str | None = None) -> tuple[str, dict[str, str]]:
    """The memories of `project` (and global ones) relevant to `prompt`, framed for the model, when
    the prompt asks something (`asks_enough`) and a memory clears the relevance floor; ''
    otherwise (an unrelated prompt gets nothing). The floors were chosen on data
    (scripts/tune_hook_floor.py): the lowest at which at most 1% of prompts unrelated to a project
    inject anything there.

    Args:
        shown: {memory id (str): its updated_at} of what this session was shown already; a memory
            there is not shown again unless it changed since.
        budget: tokens (cl100k_base) of the whole text; default config `hook_prompt_budget`.
        floor: recall score a memory needs; default config `hook_relevance_floor` (lexical) or
            `hook_relevance_floor_hybrid` (hybrid).
        mode: recall mode; default `prompt_mode()`: hybrid only when this process holds the model
            already, else lexical (a hook's process never loads the model).
        session_id: this session (its own captures, the user's own words, are not shown back).

    Returns: (text, `shown` with what the text shows added). A prompt holding a credential gets
    nothing and is not searched for.
    """
    seen = dict(shown or {})
    if not asks_enough(prompt):
        return "", seen
    budget = budget or config_value(store, "hook_prompt_budget")
    mode = mode or prompt_mode(store)
    if floor is None:
        floor = config_value(store, "hook_relevance_floor_hybrid" if mode == "hybrid" else "hook_relevance_floor")
    found, now = recall_for_prompt(store, project, prompt, budget=budget, mode=mode)
    if not found:
        return "", seen
    skip_tag = session_tag(session_id) if session_id else None
    hits = injected(found, floor=floor, budget=budget, now=now,
                    keep=lambda h: seen.get(str(h.memory.id)) != h.memory.updated_at
                    and not (skip_tag and skip_tag in h.memory.tags))
    if not hits:
        return "", seen
    banner = _prompt_banner(len(hits))
    out = framing.for_model(hits, banner_line=banner, now=now)
    for h in hits:
        seen[str(h.memory.id)] = h.memory.updated_at
    return out, seen


@dataclass
class CaptureReport:
    """What one capture did: ids of the statements stored, of the summary (written or updated),
    duplicates skipped, statements left out over the session's cap, the new reading `state`
    (for the next hook of the session), bytes of backlog skipped and lines that were not JSON."""

    captured: list[int] = field(default_factory=list)
    summary_id: int | None = None
    summary_changed: bool = False
    duplicates: int = 0
    over_cap: int = 0
    skipped_bytes: int = 0
    bad_lines: int = 0
    state: dict = field(default_factory=dict)


def capture_session(store: Store, project: str | None, *, agent: str, session_id: str,
                    transcript: str | Path, cwd: str | None = None, state: dict | None = None,
                    now: datetime | None = None) -> CaptureReport:
    """Read `transcript` (JSON Lines) from where the last capture of this session stopped
    (`state`; from its start when the session's transcript is another file now), store the user's
    explicit statements the capture rules find (source `hook`, credentials redacted, duplicates of
    stored memories and statements of this session undone before skipped, at most config
    `hook_capture_max` per session) and write or update the session's summary memory, in one
    transaction.

    Args:
        state: what the previous capture of the session returned as `CaptureReport.state` ({} first).

    Returns: the report; its `state` is for the next capture, once this one is committed.

    Raises:
        OSError: the transcript cannot be read (nothing is stored).
        StoreUnavailable: another writer held the store for WRITE_WAIT_MS (nothing is stored).
    """
    from memsafe import capture, safety  # here, not at import: only the capture events read transcripts
    from memsafe.api.core import remember
    from memsafe.api.lifecycle import update

    state = dict(state or {})
    # an offset is into the file it was read from: another transcript is read from its start
    same_file = state.get("transcript") in (None, str(transcript))
    chunk = capture.read_transcript(transcript, _count(state, "offset") if same_file else 0)
    log = capture.SessionLog.from_dict(state.get("log") or {})
    messages = log.add(chunk.entries, cwd)
    found = capture.captures_in(messages)
    report = CaptureReport(skipped_bytes=chunk.skipped_bytes, bad_lines=chunk.bad_lines)
    left = config_value(store, "hook_capture_max") - _count(state, "captured")
    tag = session_tag(session_id)
    now = now or clock.now()
    with store.write(wait_ms=WRITE_WAIT_MS):
        # what `undo_session` forgot stays forgotten when the transcript is read again (another
        # file, a lost state): a forgotten memory is no duplicate to `remember`
        undone = {m.content for m in session_captures(store, session_id)
                  if m.status != Status.ACTIVE.value} if found else set()
        for item in found:
            if safety.redact_for_capture(item.text)[0].strip() in undone:
                report.duplicates += 1
                continue
            if left <= 0:
                report.over_cap += 1
                continue
            try:
                memory = remember(store, item.text, kind=item.kind, project=project,
                                  tags=[*item.tags, CAPTURED_TAG, tag], source=Source.HOOK.value, confidence=0.7,
                                  embed_now=False, redact=True)
            except Duplicate:
                report.duplicates += 1
                continue
            report.captured.append(memory.id)
            left -= 1
        if not log.empty():
            uid = summary_uid(agent, session_id)
            heading = f"Session of {now.date().isoformat()} ({agent}, session {framing.inline(session_id)[:36]})"
            text = log.summary(heading)
            row = store.memory_by_uid(uid)
            if row is None:
                try:
                    memory = remember(store, text, kind=Kind.CONVERSATION.value, project=project,
                                      tags=[SUMMARY_TAG, tag], source=Source.HOOK.value, embed_now=False,
                                      redact=True, uid=uid)
                    report.summary_id, report.summary_changed = memory.id, True
                except Duplicate:
                    pass
            elif row["status"] == Status.ACTIVE.value:  # a forgotten one (undone) stays so
                report.summary_id = row["id"]
                if safety.redact_for_capture(text)[0] != row["content"]:
                    update(store, row["id"], content=text, redact=True, embed_now=False)
                    report.summary_changed = True
    report.state = {**state, "offset": chunk.offset, "log": log.to_dict(),
                    "captured": _count(state, "captured") + len(report.captured),
                    "transcript": str(transcript)}
    return report


def _count(state: dict, key: str) -> int:
    """A count or byte offset of a session's state; 0 when missing or not a whole number >= 0 (a
    state file edited or damaged by hand must not stop every later hook of the session)."""
    value = state.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def session_captures(store: Store, session_id: str | None = None, *, limit: int | None = None) -> list[Memory]:
    """What the agent hooks stored (source `hook`), newest first, in every project and status:
    of one session when `session_id` is given."""
    scope = make_scope(project=None, all_projects=True)
    scope.statuses = [s.value for s in Status]
    if session_id:
        scope.tags = [session_tag(session_id)]
    ids = store.list_ids(scope, None)
    found = store.get_memories(ids)
    out = [found[i] for i in ids if i in found and found[i].source == Source.HOOK.value]
    return out[:limit] if limit else out


def undo_session(store: Store, session_id: str) -> list[int]:
    """Forget every active memory the hooks stored in session `session_id` (statements and the
    summary), in one transaction; `memsafe restore ID` brings one back. Returns their ids.

    Raises:
        InvalidInput: an empty session id.
    """
    from memsafe.api.core import forget

    if not session_id.strip():
        raise InvalidInput("empty session id")
    with store.write():  # listed inside: a capture committing meanwhile is undone too, not left behind
        ids = [m.id for m in session_captures(store, session_id) if m.status == Status.ACTIVE.value]
        for memory_id in ids:
            forget(store, memory_id, reason=f"undo of the captures of agent session {framing.inline(session_id)[:80]}")
    return ids
