"""Responsibility: input hygiene shared by every handler module: text, tags, project names and
names that may not hold credentials, as stored; numbers and ids checked; the recall scope.
Imports no other handler module, so `api.core`, `api.graph`, `api.lifecycle` and `api.transfer`
all build on it without importing each other in a circle."""

from __future__ import annotations

import functools
import math
import os
import re
import unicodedata
from collections.abc import Sequence
from enum import Enum
from typing import overload

from memsafe import settings, textform
from memsafe.api.config import CONFIG_KEYS
from memsafe.errors import InvalidInput, SecretDetected
from memsafe.models import Kind, Scope, Source

MAX_CONTENT_CHARS = 1_000_000
MAX_QUERY_CHARS = 100_000
MAX_PROJECT_CHARS = settings.MAX_PROJECT_CHARS
MAX_TAG_CHARS = 64
MAX_TAGS = 50
MAX_AUTHOR_CHARS = 200  # a person's or service account's name, as a token file gives it


def clean_text(text: str, what: str = "content", max_chars: int = MAX_CONTENT_CHARS) -> str:
    """Text fit to store: lone surrogates become U+FFFD, control characters (NUL included; tab,
    newline and carriage return kept) become a space, so `retry\\0backoff` stays two words; outer
    whitespace trimmed; NFC (`textform.canonical`: `e` + U+0301 is stored as `é`, which looks the same).

    Raises:
        InvalidInput: empty after trimming (or only invisible characters: zero-width, format,
            lone combining marks), or longer than `max_chars` characters.
    """
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be text")
    cleaned = textform.canonical(_controls_to_space(_fix_surrogates(text)).strip())
    if not _visible(cleaned):
        raise InvalidInput(f"{what} is empty")
    if len(cleaned) > max_chars:
        raise InvalidInput(f"{what} is {len(cleaned):,} characters; the limit is {max_chars:,}")
    return cleaned


_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but tab, newline and carriage return; DEL; C1 controls (Unicode category Cc).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _controls_to_space(text: str) -> str:
    """Control characters (category Cc: NUL, ESC, DEL, C1...) but tab, newline and carriage return
    replaced by a space: deleting them would glue the words on either side into one."""
    return _CONTROL.sub(" ", text)


def _visible(text: str) -> bool:
    """True if any character is a letter, number, punctuation or symbol (not only spaces, controls,
    zero-width or format characters, or lone combining marks)."""
    return any(unicodedata.category(c)[0] in "LNPS" for c in text)


def _fix_surrogates(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def content_hash(content: str) -> str:
    """sha256 (hex) of `textform.duplicate_form(content)` (NFKC, invisible characters dropped,
    whitespace runs collapsed): the same note typed in full-width letters, with a zero-width space
    or decomposed accents is a duplicate. Stored as `content_hash`; the store's migrations
    recompute it when this form changes."""
    return textform.duplicate_key(content)


def clean_tags(tags: Sequence[str]) -> list[str]:
    """Trimmed, de-duplicated tags in matching form (`textform.fold`: case, full-width letters,
    decomposed accents and invisible characters aside, so `Résumé` given either way and `ＲＥＬＥＡＳＥ`
    are the tags `résumé` and `release`), as stored and as a `--tag` filter reads them.
    Raises InvalidInput for an empty or over-long tag."""
    out: dict[str, None] = {}
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"{len(tags)} tags; at most {MAX_TAGS} are allowed")
    for raw in tags:
        tag = _controls_to_space(_fix_surrogates(str(raw))).strip()
        if not tag:
            raise InvalidInput("empty tag")
        # scanned before folding, which some patterns need
        tag = textform.name_key(refuse_secret(tag, "tag"))
        if not tag:
            raise InvalidInput("empty tag")
        if len(tag) > MAX_TAG_CHARS:
            raise InvalidInput(f"tag {tag[:20]!r}… is longer than {MAX_TAG_CHARS} characters")
        out.setdefault(tag, None)
    return list(out)


@overload
def clean_author(author: str) -> str: ...
@overload
def clean_author(author: None) -> None: ...
@overload
def clean_author(author: str | None) -> str | None: ...
def clean_author(author: str | None) -> str | None:
    """Who wrote a memory (the user a team server's token stands for), as stored: one
    line, whitespace runs collapsed, at most MAX_AUTHOR_CHARS characters; None stays None (unknown).

    Raises:
        InvalidInput: empty, not text, or too long. SecretDetected: it looks like a credential
            (a token passed by mistake where its user's name belongs).
    """
    if author is None:
        return None
    name = " ".join(clean_text(author, "author", MAX_AUTHOR_CHARS).split())
    return refuse_secret(name, "author")


def _enum_value(enum: type[Enum], value, what: str) -> str:
    try:
        return enum(value).value
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise InvalidInput(f"unknown {what} {_shown(value)}; use one of: {allowed}") from None


def _unit_interval(value: float | None, what: str, default: float) -> float:
    if value is None:
        return default
    if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise InvalidInput(f"{what} must be between 0 and 1, got {_shown(value)}")
    return float(value)


_USER_AT_HOST = re.compile(r"^[^@/\s]+@(?:\[[0-9A-Fa-f:.]+\]|[^:/\s]+):")  # git@github.com:org/repo.git


def current_project(store, cwd=None, mode: str = "git-root") -> str | None:
    """The project key of the working directory `cwd` (default: the current one), as
    `settings.detect_project` gives it, after moving the memories a store keeps under the
    repository's former key (its path, before repositories were keyed by their origin remote)
    to that key: once, in one transaction, nothing lost; nothing to do costs one
    indexed lookup. A read-only store keeps its old keys (recall then finds them under `--project
    PATH` only after a write-capable run)."""
    import apsw

    key, legacy = settings.detect_project_keys(cwd, mode)
    if key is not None and legacy is not None:
        try:
            store.rename_project(legacy, key)
        except (apsw.ReadOnlyError, apsw.CantOpenError):
            pass
    return key


@overload
def clean_project(project: str, *, mode: str = ..., path: bool = ..., check_secrets: bool = ...,
                  store=...) -> str: ...
@overload
def clean_project(project: None, *, mode: str = ..., path: bool = ..., check_secrets: bool = ...,
                  store=..., expand: bool = ...) -> None: ...
@overload
def clean_project(project: str | None, *, mode: str = ..., path: bool = ..., check_secrets: bool = ...,
                  store=..., expand: bool = ...) -> str | None: ...
def clean_project(project: str | None, *, mode: str = "git-root", path: bool = False,
                  check_secrets: bool = True, store=None, expand: bool = True) -> str | None:
    """A project name or path as stored: a name is NFC (`textform.canonical`); a path (containing
    / or \\, `.`, `..`, `~`, or any text with `path=True`, as `--project-path` gives) becomes
    `settings.project_for_path` (symlinks resolved, up to the repository root in mode
    'git-root'), the key `detect_project` gives inside that folder. Every way a project is named
    (CLI, MCP, `serve --project`, import records) comes through here: control characters become
    spaces, credentials are refused.

    `store`: a path into a repository keyed by its origin remote also moves the memories `store`
    keeps under the repository's path key to that key (`current_project` from inside it), so
    `serve --project PATH` and `--project-path` see what was stored before origin keys.

    `expand`: environment variables in a name someone typed or a client passed (`$HOME/web`,
    `${workspaceFolder}`) are expanded or refused (`settings.expand_vars`), so a placeholder never
    becomes a project; False for a key read back from an export, which is stored as it was.

    `check_secrets=False` is only for a name looked up (a recall scope), never stored: it skips
    the credential scan, which would load detect-secrets into every read-only command; every
    handler that stores a project name scans it.

    Raises:
        InvalidInput: empty, or longer than MAX_PROJECT_CHARS (before or after resolving), or
            holding a variable that cannot be expanded.
        SecretDetected: it looks like a credential (unless `check_secrets` is False).
    """
    if project is None:
        return None
    text = _controls_to_space(_fix_surrogates(str(project))).strip()
    if not text:
        raise InvalidInput("empty project")
    if len(text) > MAX_PROJECT_CHARS:
        raise InvalidInput(f"project name or path is {len(text):,} characters; at most {MAX_PROJECT_CHARS:,}")
    if expand:
        text = settings.expand_vars(text, "project path" if path else "project").strip()
        if not text:
            raise InvalidInput("empty project")
    if not path and ("://" in text or _USER_AT_HOST.match(text)):  # a remote URL names its repository
        key = settings.remote_key(text)  # without the user and password it may hold
        if key is not None:
            return refuse_secret(key, "project name") if check_secrets else key
    if check_secrets:
        refuse_secret(text, "project name")
    if text.startswith(settings.ORIGIN_PREFIX) and not path:  # a repository's key, as memsafe shows it
        return text
    if path or "/" in text or "\\" in text or text in (".", "..") or text.startswith("~"):
        key = settings.project_for_path(text, mode)
        if len(key) > MAX_PROJECT_CHARS:
            raise InvalidInput(f"project path resolves to {len(key):,} characters; at most {MAX_PROJECT_CHARS:,}")
        if store is not None and key.startswith(settings.ORIGIN_PREFIX):  # an existing folder of a repository
            folder = os.path.realpath(os.path.expanduser(text))
            current_project(store, folder if os.path.isdir(folder) else os.path.dirname(folder), mode)
        return key
    return textform.canonical(text)  # a name: NFC, as stored (a path or remote names a file: kept as it is)


def refuse_secret(text: str, what: str) -> str:
    """`text` (a tag, project, entity or relation name: stored and shown as it is, so it cannot be
    redacted) unless it looks like a credential. Raises SecretDetected."""
    problem = _name_findings(text)
    if problem:
        raise SecretDetected(f"refused: the {what} looks like a credential ({problem}); memsafe does not store secrets")
    return text


@functools.lru_cache(maxsize=4096)
def _name_findings(text: str) -> str:
    """`safety.describe` of the credentials in a name ('' if none). Names repeat (tags, projects,
    entity keys in every record of an import), so the scan result is kept per process."""
    from memsafe import safety  # on first use: its patterns cost a recall, which scans nothing, ~5 ms to compile

    findings = safety.scan(text)
    return safety.describe(findings) if findings else ""


def _screen_secrets(text: str, redact: bool) -> str:
    """Refuse (or, with `redact`, redact) credentials in content before it is stored. `text` has
    passed `clean_text`'s length limit; its redacted form may be longer (`[REDACTED:aws-access-key]`
    is 25 characters, the key 20) and is stored whole: a text within the limit is never refused
    for what redaction added."""
    from memsafe import safety

    findings = safety.scan(text)
    if not findings:
        return text
    if not redact:
        raise SecretDetected(
            f"refused: the content looks like a credential ({safety.describe(findings)}); memsafe does not "
            "store secrets. To keep the rest of the note with each secret replaced by [REDACTED:<type>], "
            "remember it again with --redact (MCP/API: redact=true)"
        )
    redacted = safety.redact(text, findings)
    return clean_text(redacted, max_chars=max(MAX_CONTENT_CHARS, len(redacted)))


def _shown(value, width: int = 40) -> str:
    """repr of a user value, cut to `width` characters (messages never echo megabytes)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _whole(value, key: str, what: str) -> int:
    """An integer argument within the bounds of config key `key` (e.g. limit within recall_limit's).
    Raises InvalidInput naming the range."""
    spec = CONFIG_KEYS[key]
    assert spec.low is not None and spec.high is not None  # a key that bounds a whole number has both bounds
    if not isinstance(value, int) or isinstance(value, bool) or not spec.low <= value <= spec.high:
        raise InvalidInput(f"{what} must be a whole number from {spec.low:g} to {spec.high:g}, got {_shown(value)}")
    return value


def _check_id(memory_id: int) -> int:
    if not isinstance(memory_id, int) or isinstance(memory_id, bool) or memory_id < 1 or memory_id > 2**63 - 1:
        raise InvalidInput(f"memory id must be a positive integer, got {_shown(memory_id)}")
    return memory_id


def make_scope(
    *,
    project: str | None,
    all_projects: bool = False,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    sources: Sequence[str] = (),
    exclude_sources: Sequence[str] = (),
) -> Scope:
    """The recall scope: the project (if any) plus global memories, or every project; `since` /
    `until` (UTC ISO-8601) bound when the thing happened (`Memory.event_at`); `sources` /
    `exclude_sources`: only / not memories from these sources (`Source` values). Raises
    InvalidInput (an unknown kind or source)."""
    return Scope(
        projects=None if all_projects else ([clean_project(project, check_secrets=False)] if project else []),
        include_global=True,
        kinds=[_enum_value(Kind, k, "kind") for k in kinds],
        tags=clean_tags(tags),
        since=None if since is None else clean_text(since, "since"),  # no lone surrogate reaches SQL
        sources=[_enum_value(Source, s, "source") for s in sources],
        exclude_sources=[_enum_value(Source, s, "source") for s in exclude_sources],
        until=None if until is None else clean_text(until, "until"),
    )
