"""Responsibility: what the agent-loop hooks keep of a session, without a model: reading an agent's
transcript (JSON Lines) a piece at a time, the capture rules (data: `memsafe/data/capture_rules.json`,
patterns with a kind, tags and examples) that pick the user's explicit decisions, preferences,
conventions and corrections out of its messages, and the running session log a session summary is
written from (what was asked, files edited, commands that failed and then passed, commits). Pure
but for reading the transcript and the rules file: no database, no model.

A transcript is read from where the last hook left off (`read_transcript`): only whole lines count
(a line still being written, or cut off, is read next time), a line that is not JSON is skipped
and counted, and at most `MAX_READ_BYTES` are read per hook (a longer backlog keeps its end).
Claude Code's transcript (`{"type": "user" | "assistant", "message": {"content": ...}}`) and
Codex CLI's rollout (`{"type": "response_item", "payload": ...}`) are understood; other lines
are ignored.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["Rule", "rules", "match", "sentences", "Capture", "captures_in", "Entry", "read_transcript",
           "Chunk", "SessionLog", "MAX_READ_BYTES"]

RULES_FILE = Path(__file__).resolve().parent / "data" / "capture_rules.json"
MAX_READ_BYTES = 8 * 1024 * 1024  # per hook: a 50 MB backlog is read from its last 8 MB
MAX_SENTENCE_CHARS = 400  # longer "sentences" are pasted text, not a statement
MIN_SENTENCE_WORDS = 3
MAX_ASKED = 6  # prompts named in a session summary
MAX_FILES = 25  # files named in a session summary
MAX_LIST = 8  # commands and commits named in a session summary
EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch")


@dataclass(frozen=True)
class Rule:
    """One capture rule: `pattern` (searched case-insensitively in one sentence), the kind and tags
    a matching sentence is stored with, and sentences it must (`examples`) and no rule may (`not_`)
    capture."""

    name: str
    kind: str
    tags: tuple[str, ...]
    pattern: re.Pattern
    examples: tuple[str, ...]
    not_: tuple[str, ...]


@lru_cache(maxsize=1)
def rules() -> tuple[Rule, ...]:
    """The capture rules, in the order they are tried (first match wins), from RULES_FILE.
    Raises OSError or ValueError when the file is unreadable or malformed (a broken installation)."""
    data = json.loads(RULES_FILE.read_text(encoding="utf-8"))
    return tuple(
        Rule(r["name"], r["kind"], tuple(r.get("tags", ())), re.compile(r["pattern"], re.IGNORECASE),
             tuple(r.get("examples", ())), tuple(r.get("not", ())))
        for r in data["rules"]
    )


def match(sentence: str) -> Rule | None:
    """The first rule that captures `sentence` (one sentence, as `sentences` gives them), or None.
    A question never is (it states nothing)."""
    text = sentence.strip()
    if text.endswith("?") or len(text.split()) < MIN_SENTENCE_WORDS or len(text) > MAX_SENTENCE_CHARS:
        return None
    for rule in rules():
        if rule.pattern.search(text):
            return rule
    return None


_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(`])|\n+")


def sentences(message: str) -> Iterator[str]:
    """The sentences of a user message that may state something: code blocks, quoted lines (`>`)
    and lines that look like pasted output (indented, a prompt, a traceback) are left out."""
    text = _FENCE.sub("\n", message)
    for piece in _SPLIT.split(text):
        line = piece.strip()
        if not line or line.startswith((">", "$ ", "#", "|", "Traceback", "<")) or piece.startswith(("    ", "\t")):
            continue
        yield re.sub(r"\s+", " ", line)


@dataclass
class Capture:
    """A statement to store: its text (one sentence, verbatim), kind and tags, and the rule that
    found it."""

    text: str
    kind: str
    tags: tuple[str, ...]
    rule: str


def captures_in(messages: Iterable[str]) -> list[Capture]:
    """Every statement the rules capture in `messages` (user messages), in order, each text once."""
    out: list[Capture] = []
    seen: set[str] = set()
    for message in messages:
        for sentence in sentences(message):
            rule = match(sentence)
            key = sentence.casefold()
            if rule is not None and key not in seen:
                seen.add(key)
                out.append(Capture(sentence, rule.kind, rule.tags, rule.name))
    return out


# -- transcripts ---------------------------------------------------------------------------------


@dataclass
class Entry:
    """One thing a transcript line says: a user message (`text`), a tool use (`tool`, `input`,
    `use_id`) or a tool result (`use_id`, `failed`, `text`)."""

    kind: str  # "user" | "tool_use" | "tool_result"
    text: str = ""
    tool: str = ""
    input: dict = field(default_factory=dict)
    use_id: str = ""
    failed: bool = False


@dataclass
class Chunk:
    """What one read of a transcript found: entries, the offset to read from next time (bytes),
    how many bytes of backlog were skipped (over MAX_READ_BYTES) and how many lines were not JSON."""

    entries: list[Entry]
    offset: int
    skipped_bytes: int = 0
    bad_lines: int = 0


def read_transcript(path: str | Path, offset: int = 0, max_bytes: int = MAX_READ_BYTES) -> Chunk:
    """Read the whole lines of the JSON Lines file `path` from byte `offset` on (from 0 when the
    file is now shorter: it was replaced). A last line without its line break is left for the next
    read. At most `max_bytes` are read: a longer backlog is read from its end.

    Raises:
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if offset > size:
            offset = 0
        skipped = 0
        if size - offset > max_bytes:
            skipped = size - max_bytes - offset
            offset = size - max_bytes
        fh.seek(offset)
        data = fh.read(size - offset)
    if skipped:  # start at a line's beginning
        first = data.find(b"\n")
        if first < 0:
            return Chunk([], offset, skipped, 0)
        skipped += first + 1
        offset += first + 1
        data = data[first + 1:]
    end = data.rfind(b"\n")
    if end < 0:
        return Chunk([], offset, skipped, 0)
    entries: list[Entry] = []
    bad = 0
    for raw in data[: end + 1].splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            entries.extend(_entries(obj))
    return Chunk(entries, offset + end + 1, skipped, bad)


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _entries(obj: dict) -> Iterator[Entry]:
    """The entries of one transcript line (Claude Code's shape, or Codex CLI's rollout)."""
    kind = obj.get("type")
    if kind in ("user", "assistant") and isinstance(obj.get("message"), dict):
        if obj.get("isMeta") or obj.get("isSidechain"):
            return
        content = obj["message"].get("content")
        if kind == "user" and isinstance(content, str):
            if not content.lstrip().startswith("<"):  # <command-name>, <local-command-stdout>: not the user's words
                yield Entry("user", content)
            return
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if kind == "user" and btype == "text" and isinstance(block.get("text"), str):
                if not block["text"].lstrip().startswith("<"):
                    yield Entry("user", block["text"])
            elif kind == "assistant" and btype == "tool_use" and isinstance(block.get("input"), dict):
                yield Entry("tool_use", tool=str(block.get("name", "")), input=block["input"],
                            use_id=str(block.get("id", "")))
            elif kind == "user" and btype == "tool_result":
                text = _text_of(block.get("content"))
                failed = bool(block.get("is_error")) or bool(re.match(r"Exit code [1-9]", text))
                yield Entry("tool_result", text=text[:2000], use_id=str(block.get("tool_use_id", "")), failed=failed)
        return
    payload = obj.get("payload")
    if kind == "response_item" and isinstance(payload, dict):
        ptype = payload.get("type")
        if ptype == "message" and payload.get("role") == "user":
            text = _text_of(payload.get("content"))
            if text and not text.lstrip().startswith("<"):
                yield Entry("user", text)
        elif ptype in ("function_call", "local_shell_call"):
            try:
                args = json.loads(payload.get("arguments") or "{}")
            except ValueError:
                args = {}
            command = args.get("command") if isinstance(args, dict) else None
            if isinstance(command, list):
                command = shlex.join(str(c) for c in command)
            yield Entry("tool_use", tool="Bash" if command else str(payload.get("name", "")),
                        input={"command": command} if command else {}, use_id=str(payload.get("call_id", "")))
        elif ptype == "function_call_output":
            output = payload.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            code = None
            try:
                code = (json.loads(text).get("metadata") or {}).get("exit_code")
            except (ValueError, AttributeError):
                pass
            yield Entry("tool_result", text=text[:2000], use_id=str(payload.get("call_id", "")),
                        failed=isinstance(code, int) and code != 0)


# -- the session log -----------------------------------------------------------------------------

_COMMIT_LINE = re.compile(r"^\[(?P<branch>[^\]\s]+)(?: \(root-commit\))? (?P<hash>[0-9a-f]{7,40})\] (?P<subject>.+)$",
                          re.MULTILINE)


def _short(text: str, n: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


@dataclass
class SessionLog:
    """What a session did so far, kept between hooks (`to_dict` / `from_dict`): the first prompts,
    the files edited, commands that failed and then passed, commits; tool uses still waiting for
    their result (`pending`: use id -> (tool, command)); `failing`: commands whose last run failed."""

    asked: list[str] = field(default_factory=list)
    prompts: int = 0
    files: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    pending: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"asked": self.asked, "prompts": self.prompts, "files": self.files, "fixed": self.fixed,
                "commits": self.commits, "failing": self.failing, "pending": self.pending}

    @classmethod
    def from_dict(cls, data: dict) -> SessionLog:
        """A log from `to_dict`'s output; fields of the wrong type start empty."""
        def lst(key: str) -> list[str]:
            value = data.get(key)
            return [str(v) for v in value] if isinstance(value, list) else []

        pending = data.get("pending")
        prompts = data.get("prompts")
        return cls(lst("asked"), prompts if isinstance(prompts, int) else 0, lst("files"), lst("fixed"),
                   lst("commits"), lst("failing"),
                   {str(k): [str(x) for x in v] for k, v in pending.items() if isinstance(v, list)}
                   if isinstance(pending, dict) else {})

    def add(self, entries: Iterable[Entry], cwd: str | None = None) -> list[str]:
        """Take in `entries`; returns the user messages among them (for the capture rules)."""
        messages = []
        for e in entries:
            if e.kind == "user":
                messages.append(e.text)
                self.prompts += 1
                if len(self.asked) < MAX_ASKED:
                    self.asked.append(_short(e.text, 160))
            elif e.kind == "tool_use":
                if e.tool in EDIT_TOOLS:
                    path = e.input.get("file_path") or e.input.get("notebook_path") or e.input.get("path")
                    if isinstance(path, str) and path:
                        self._file(path, cwd)
                command = e.input.get("command")
                if isinstance(command, str) and command.strip():
                    self.pending[e.use_id] = [e.tool, _short(command, 200)]
            elif e.kind == "tool_result":
                tool_command = self.pending.pop(e.use_id, None)
                if tool_command is None:
                    continue
                command = tool_command[1]
                if e.failed:
                    if command not in self.failing:
                        self.failing.append(command)
                    continue
                if command in self.failing:
                    self.failing.remove(command)
                    if command not in self.fixed and len(self.fixed) < MAX_LIST:
                        self.fixed.append(command)
                for m in _COMMIT_LINE.finditer(e.text):
                    line = f"{m['hash'][:12]} {_short(m['subject'], 100)}"
                    if line not in self.commits and len(self.commits) < MAX_LIST:
                        self.commits.append(line)
        if len(self.pending) > 200:  # results that never came: keep the newest
            self.pending = dict(list(self.pending.items())[-100:])
        self.failing = self.failing[-50:]
        return messages

    def _file(self, path: str, cwd: str | None) -> None:
        if cwd and path.startswith(cwd.rstrip("/") + "/"):
            path = path[len(cwd.rstrip("/")) + 1:]
        if path not in self.files and len(self.files) < MAX_FILES:
            self.files.append(path)

    def empty(self) -> bool:
        """Nothing a summary could say."""
        return not (self.asked or self.files or self.fixed or self.commits)

    def summary(self, heading: str) -> str:
        """The session summary: `heading`, then one line each for what was asked, the files edited,
        the commands that failed and then passed, and the commits (those that have something)."""
        lines = [heading]
        if self.asked:
            more = f" (+{self.prompts - len(self.asked)} more prompts)" if self.prompts > len(self.asked) else ""
            lines.append("Asked: " + " | ".join(self.asked) + more)
        if self.files:
            lines.append("Files edited: " + ", ".join(self.files))
        if self.fixed:
            lines.append("Failed, then passed: " + " | ".join(self.fixed))
        if self.commits:
            lines.append("Commits: " + " | ".join(self.commits))
        return "\n".join(lines)
