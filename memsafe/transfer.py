"""Responsibility: the export/import file formats, read and checked without a database.

Two formats (documented in docs/export-format.md):

- **memsafe** (version 1): JSON Lines. Line 1 is a header
  `{"format": "memsafe", "version": 1, "exported_at": ..., ...}`; every further line is one
  record whose `type` is `config`, `entity`, `memory` or `relation`; the last line is
  `{"type": "end", "counts": {...}}`, so a cut-off file is detected. One record per line lets
  export and import stream: neither holds more than one record (plus a batch) in memory.
- **server-memory**: the JSONL file of the official MCP memory server
  (`{"type": "entity", "name", "entityType", "observations": [...]}` and
  `{"type": "relation", "from", "to", "relationType"}`), or a JSON array of those objects.

Everything here is pure: functions take decoded JSON values and return normalised dicts, or
raise `RecordError` naming the line, the record number and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import IO, Literal, overload

from memsafe import clock
from memsafe.graph import entity_key
from memsafe.models import Kind, Source, Status
from memsafe.plural import count_of

FORMAT_NAME = "memsafe"
FORMAT_VERSION = 1

#: Columns of `memories` written to and read from a memsafe export, in output order.
#: `id` is advisory (kept when free in the target); `content_hash` and `embedded` are derived.
MEMORY_FIELDS = (
    "id", "uid", "content", "kind", "project", "source", "importance", "confidence",
    "created_at", "updated_at", "content_updated_at", "last_accessed_at", "access_count",
    "decay_level", "decay_bank", "decay_checked_at", "stability",
    "status", "status_reason", "status_changed_at", "author", "happened_at",
)
DERIVED_MEMORY_COLUMNS = ("content_hash", "embedded")
#: Columns of `memories` that link two memories (a correction and what it replaces): written as
#: the other memory's uid (ids are store-local) and linked again on import when both are there.
LINK_FIELDS = ("supersedes", "superseded_by")
#: Columns of `memory_versions` in an export (`id`, `memory_id` are store-local).
VERSION_FIELDS = (
    "content", "kind", "project", "tags", "importance", "confidence", "decay_level", "status",
    "valid_from", "valid_to", "cause", "origin_id", "author",
)
_REQUIRED_TIMES = ("created_at", "updated_at")
_OPTIONAL_TIMES = ("content_updated_at", "last_accessed_at", "decay_checked_at", "status_changed_at", "happened_at")
MAX_DECAY_LEVEL = 3
#: How an export that carries vectors (`export --vectors`) writes each one: the little-endian
#: float32 values, base64 (RFC 4648) encoded, in the memory record's `vector` field.
VECTOR_ENCODING = "float32-le-base64"
MAX_VECTOR_DIM = 8192
MAX_INTEGER = 2**63 - 1
MAX_RELATION_WEIGHT = 1000.0  # as `graph relate --weight` (api.graph.MAX_WEIGHT)
SERVER_MEMORY_DEFAULT_TYPE = "entity"
#: Record types counted by the end record (`{"type": "end", "counts": {...}}`).
RECORD_TYPES = ("config", "entity", "memory", "relation")
#: How far past the importing machine's clock a time in a file may be (clock skew between the
#: exporting and importing machines); a time later than that (`created_at` in 2099) is refused.
FUTURE_SLACK = timedelta(days=1)


class RecordError(Exception):
    """A record that cannot be imported.

    Attributes:
        line: 1-based line number in the file (array item number for a JSON array file).
        record: 1-based record number (the header is not counted), or None.
        field: the offending field, or None when the whole record is at fault.
        reason: what is wrong, fit to show a user.
    """

    def __init__(self, reason: str, *, line: int | None = None, record: int | None = None, field: str | None = None):
        super().__init__(reason)
        self.line, self.record, self.field, self.reason = line, record, field, reason

    def where(self) -> str:
        parts = []
        if self.record is not None:
            parts.append(f"record {self.record}")
        if self.line is not None:
            parts.append(f"line {self.line}")
        return ", ".join(parts) or "file"

    def __str__(self) -> str:
        field = f" {self.field}" if self.field else ""
        return f"{self.where()}:{field} {self.reason}"


__all__ = ["entity_key"]  # re-exported: the one identity key of an entity name (memsafe.graph)


# ---------------------------------------------------------------------------------------------
# Reading files


@dataclass
class Line:
    """One non-blank physical line (or array item) of an input file."""

    number: int
    text: str | None  # raw text (JSONL) or None when `value` came from a JSON array
    value: object = None


def iter_lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for every non-blank line. Bytes that are not UTF-8 become U+FFFD;
    a missing final newline is fine."""
    for number, raw in enumerate(stream, start=1):
        text = raw.decode("utf-8", errors="replace").strip()
        if text.startswith("\ufeff"):
            text = text[1:].strip()
        if text:
            yield number, text


def first_char(path: Path) -> str:
    """The first non-whitespace character of the file ('' if empty)."""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(4096)
            if not chunk:
                return ""
            text = chunk.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
            if text:
                return text[0]


def _fffd(text: str) -> str:
    """Lone surrogates (from `\\udXXX` escapes in JSON) become U+FFFD; SQLite cannot store them."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def detect_format(path: Path) -> str:
    """'memsafe' or 'server-memory', from the first record of the file (not its name: files
    named .json often hold JSONL). Raises RecordError when neither fits."""
    if first_char(path) == "[":
        return "server-memory"
    with open(path, "rb") as f:
        for number, text in iter_lines(f):
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                raise RecordError("is not valid JSON, so the format cannot be detected; name it (CLI: --format)",
                                  line=number) from None
            if isinstance(value, dict) and value.get("format") == FORMAT_NAME:
                return "memsafe"
            if isinstance(value, dict) and value.get("type") in ("entity", "relation"):
                return "server-memory"
            raise RecordError(
                "is neither a memsafe header nor a server-memory entity or relation; name the format (CLI: --format)",
                line=number,
            )
    raise RecordError("the file is empty")


def parse_json(text: str, line: int, record: int | None = None) -> object:
    """Decode one JSON line. Raises RecordError (a cut-off line reads 'truncated or not JSON')."""
    try:
        return json.loads(text)
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        column = getattr(exc, "colno", "?")
        raise RecordError(f"is truncated or not valid JSON ({msg}; column {column})",
                          line=line, record=record) from None
    except RecursionError:
        raise RecordError("is nested too deeply to be a memsafe record", line=line, record=record) from None


# ---------------------------------------------------------------------------------------------
# memsafe format: validation


def check_header(value: object, line: int) -> dict:
    """Validate the header line. Raises RecordError for another format or a newer version."""
    if not isinstance(value, dict) or value.get("format") != FORMAT_NAME:
        raise RecordError(f'is not a memsafe export header (expected {{"format": "{FORMAT_NAME}", ...}})', line=line)
    version = value.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"has no valid version (got {version!r})", line=line, field="version")
    if version > FORMAT_VERSION:
        raise RecordError(
            f"is format version {version}; this memsafe reads up to {FORMAT_VERSION}, upgrade memsafe",
            line=line, field="version",
        )
    embedding = value.get("embedding")
    if embedding is not None:
        if not isinstance(embedding, dict):
            raise RecordError("must be an object", line=line, field="embedding")
        model, dim = embedding.get("model"), embedding.get("dim")
        if not isinstance(model, str) or not model.strip():
            raise RecordError(f"{json.dumps(model)} must be a non-empty string", line=line, field="embedding.model")
        if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= MAX_VECTOR_DIM:
            raise RecordError(f"{json.dumps(dim)} must be an integer between 1 and {MAX_VECTOR_DIM}", line=line,
                              field="embedding.dim")
        if embedding.get("encoding", VECTOR_ENCODING) != VECTOR_ENCODING:
            raise RecordError(f"{json.dumps(embedding.get('encoding'))} is not {VECTOR_ENCODING!r}", line=line,
                              field="embedding.encoding")
    return value


class _Checker:
    """Field checks for one record; every failure names the field and the bad value."""

    def __init__(self, obj: dict, line: int, record: int, now: datetime | None = None):
        self.obj, self.line, self.record, self.now = obj, line, record, now

    def fail(self, field: str, reason: str) -> RecordError:
        return RecordError(reason, line=self.line, record=self.record, field=field)

    def _shown(self, value) -> str:
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 60 else text[:57] + "..."

    @overload
    def text(self, field: str, *, optional: Literal[False] = ..., src: dict | None = ...) -> str: ...
    @overload
    def text(self, field: str, *, optional: bool, src: dict | None = ...) -> str | None: ...
    def text(self, field: str, *, optional: bool = False, src: dict | None = None) -> str | None:
        value = (src if src is not None else self.obj).get(field)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field, f"{self._shown(value)} must be a non-empty string")
        return value

    def time(self, field: str, *, optional: bool = False, src: dict | None = None) -> str | None:
        value = (src if src is not None else self.obj).get(field)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(field, f"{self._shown(value)} is not an ISO-8601 time")
        try:
            instant = clock.parse_iso(value)
        except ValueError:
            raise self.fail(field, f"{self._shown(value)} is not an ISO-8601 time") from None
        if self.now is not None and instant > clock.shift(self.now, FUTURE_SLACK):
            raise self.fail(field, f"{self._shown(value)} is in the future (this machine's clock says "
                                   f"{clock.to_iso(self.now)})")
        return clock.to_iso(instant)

    def order(self, early: str, late: str, values: dict) -> None:
        """Refuse `values[early]` later than `values[late]` (both stored UTC ISO-8601 or None)."""
        a, b = values.get(early), values.get(late)
        if a is not None and b is not None and clock.parse_iso(a) > clock.parse_iso(b):
            raise self.fail(early, f"{a} is later than {late} {b}")

    def number(self, field: str, low: float | None, high: float | None, *, optional=False, default=None,
               src: dict | None = None) -> float | None:
        value = (src if src is not None else self.obj).get(field, default)
        if value is None and optional:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or math.isinf(value):
            raise self.fail(field, f"{self._shown(value)} must be a number")
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.fail(field, f"{self._shown(value)} must be between {low:g} and {high:g}")
        return float(value)

    def integer(self, field: str, low: int, high: int | None, *, default=None, src: dict | None = None) -> int:
        value = (src if src is not None else self.obj).get(field, default)
        high = MAX_INTEGER if high is None else high  # SQLite stores 64-bit integers
        if not isinstance(value, int) or isinstance(value, bool) or value < low or value > high:
            bound = f"between {low} and {high}"
            raise self.fail(field, f"{self._shown(value)} must be an integer {bound}")
        return value

    def choice(self, field: str, enum: type[Enum], *, default=None, src: dict | None = None) -> str:
        value = (src if src is not None else self.obj).get(field, default)
        allowed = _VALUES.get(enum)
        if allowed is None:
            allowed = _VALUES[enum] = [e.value for e in enum]
        if value not in allowed:
            raise self.fail(field, f"{self._shown(value)} must be one of {', '.join(allowed)}")
        return value

    def strings(self, field: str, *, src: dict | None = None) -> list[str]:
        value = (src if src is not None else self.obj).get(field, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(field, f"{self._shown(value)} must be a list of non-empty strings")
        return list(value)


_VALUES: dict[type, list[str]] = {}  # enum -> its values, in order (`_Checker.choice`)


def check_memory(obj: dict, line: int, record: int, *, now: datetime | None = None) -> dict:
    """Normalise a memsafe `memory` record: every field of MEMORY_FIELDS (times to stored UTC form),
    plus `tags`, `entities` (entity keys) and `versions` (list of dicts with VERSION_FIELDS).

    Args:
        now: the importing machine's clock; a time later than now + FUTURE_SLACK is refused.

    Raises:
        RecordError: naming the field and the bad value, e.g. `created_at "not-a-date" is not an
            ISO-8601 time`; also a time in the future, `created_at` later than `updated_at`, and a
            version whose `valid_from` is later than its `valid_to`.
    """
    c = _Checker(obj, line, record, now)
    out: dict = {}
    memory_id = obj.get("id")
    if memory_id is not None:
        out["id"] = c.integer("id", 1, 2**63 - 1)
    else:
        out["id"] = None
    out["uid"] = c.text("uid")
    out["content"] = c.text("content")
    out["kind"] = c.choice("kind", Kind, default=Kind.GENERAL.value)
    project = obj.get("project")
    if project is not None:
        project = c.text("project")
    out["project"] = project
    out["source"] = c.choice("source", Source, default=Source.IMPORT.value)
    out["importance"] = c.number("importance", 0.0, 1.0, default=0.5)
    out["confidence"] = c.number("confidence", 0.0, 1.0, default=0.8)
    for field in _REQUIRED_TIMES:
        out[field] = c.time(field)
    for field in _OPTIONAL_TIMES:
        out[field] = c.time(field, optional=True)
    c.order("created_at", "updated_at", out)
    if out["content_updated_at"] is None:
        out["content_updated_at"] = out["updated_at"]
    if out["happened_at"] is None:  # a file from before event times: it happened when it was stored
        out["happened_at"] = out["created_at"]
    out["access_count"] = c.integer("access_count", 0, None, default=0)
    out["decay_level"] = c.integer("decay_level", 0, MAX_DECAY_LEVEL, default=0)
    out["decay_bank"] = c.number("decay_bank", None, None, default=0.0)
    out["stability"] = c.number("stability", None, None, optional=True)
    out["status"] = c.choice("status", Status, default=Status.ACTIVE.value)
    reason = obj.get("status_reason")
    out["status_reason"] = c.text("status_reason") if reason is not None else None
    out["author"] = c.text("author") if obj.get("author") is not None else None
    for field in LINK_FIELDS:
        out[field] = c.text(field) if obj.get(field) is not None else None
    out["tags"] = c.strings("tags")
    out["entities"] = c.strings("entities")
    versions = obj.get("versions", [])
    if not isinstance(versions, list):
        raise c.fail("versions", "must be a list")
    out["versions"] = [check_version(v, c, i) for i, v in enumerate(versions)]
    out["vector"] = check_vector(obj.get("vector"), c) if obj.get("vector") is not None else None
    return out


def encode_vector(vector_bytes: bytes) -> str:
    """A stored vector (float32, little-endian bytes) as the text of an export's `vector` field."""
    return base64.b64encode(vector_bytes).decode("ascii")


def check_vector(value: object, c: _Checker) -> bytes:
    """The bytes of a `vector` field: float32 little-endian, every value finite, not all zero.
    Its length is checked against the header's `embedding.dim` by the importer."""
    if not isinstance(value, str):
        raise c.fail("vector", f"must be {VECTOR_ENCODING} text")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise c.fail("vector", f"is not valid base64 ({VECTOR_ENCODING})") from None
    if not raw or len(raw) % 4 or len(raw) > 4 * MAX_VECTOR_DIM:
        raise c.fail("vector", f"holds {len(raw)} bytes, not a whole number of float32 values")
    import numpy as np

    values = np.frombuffer(raw, dtype="<f4")
    if not np.isfinite(values).all() or not values.any():
        raise c.fail("vector", "holds a value that is not finite, or only zeros")
    return raw


def check_version(obj: object, c: _Checker, index: int) -> dict:
    """One history version inside a memory record (field names are reported as versions[i].field)."""
    prefix = f"versions[{index}]"
    if not isinstance(obj, dict):
        raise c.fail(prefix, "must be an object")
    sub = _Checker(obj, c.line, c.record, c.now)
    try:
        tags = obj.get("tags", [])
        if isinstance(tags, str):  # tolerate the stored JSON-text form
            tags = json.loads(tags)
        sub.obj = {**obj, "tags": tags}
        project = obj.get("project")
        out = {
            "content": sub.text("content"),
            "kind": sub.choice("kind", Kind),
            "project": sub.text("project") if project is not None else None,
            "tags": sub.strings("tags"),
            "importance": sub.number("importance", 0.0, 1.0),
            "confidence": sub.number("confidence", 0.0, 1.0),
            "decay_level": sub.integer("decay_level", 0, MAX_DECAY_LEVEL, default=0),
            "status": sub.choice("status", Status, default=Status.ACTIVE.value),
            "valid_from": sub.time("valid_from"),
            "valid_to": sub.time("valid_to"),
            "cause": sub.text("cause"),
            "origin_id": sub.integer("origin_id", 1, None) if obj.get("origin_id") is not None else None,
            "author": sub.text("author") if obj.get("author") is not None else None,
        }
        sub.order("valid_from", "valid_to", out)
        return out
    except RecordError as exc:
        exc.field = f"{prefix}.{exc.field}" if exc.field else prefix
        raise
    except ValueError:
        raise c.fail(f"{prefix}.tags", "is not a list of strings") from None


def check_entity(obj: dict, line: int, record: int, *, now: datetime | None = None) -> dict:
    """A memsafe `entity` record: name, key (always `entity_key(name)`: a file's key is never
    trusted), file_key (the key the file gives, which its memory and relation records use;
    default the computed key), entity_type, aliases, created_at."""
    c = _Checker(obj, line, record, now)
    name = c.text("name")
    key = entity_key(name)
    return {
        "name": name,
        "key": key,
        "file_key": c.text("key") if obj.get("key") is not None else key,
        "type": c.text("entity_type") if obj.get("entity_type") is not None else SERVER_MEMORY_DEFAULT_TYPE,
        "aliases": c.strings("aliases"),
        "created_at": c.time("created_at"),
    }


def check_relation(obj: dict, line: int, record: int, *, now: datetime | None = None) -> dict:
    """A memsafe `relation` record: source and target entity keys, relation, weight, created/updated."""
    c = _Checker(obj, line, record, now)
    out = {
        "source": c.text("source"),
        "relation": c.text("relation"),
        "target": c.text("target"),
        "weight": c.number("weight", 0.0, MAX_RELATION_WEIGHT, default=1.0),
        "created_at": c.time("created_at"),
        "updated_at": c.time("updated_at"),
    }
    c.order("created_at", "updated_at", out)
    return out


def check_end_counts(counts: object, read: dict[str, int], line: int) -> list[Notice]:
    """Fatal notices when the end record's `counts` differ from the records of each type read
    (a file that lost or gained lines in the middle); [] when they agree."""
    if not isinstance(counts, dict) or not all(
            isinstance(counts.get(t, 0), int) and not isinstance(counts.get(t, 0), bool) for t in RECORD_TYPES):
        return [Notice(line, "end counts must be an object of record counts per type", fatal=True)]
    return [
        Notice(line, f"end counts say {count_of(counts.get(t, 0), t + ' record')} but the file holds {read[t]}: "
                     "lines were lost or added", fatal=True)
        for t in RECORD_TYPES if counts.get(t, 0) != read[t]
    ]


def check_config(obj: dict, line: int, record: int, known: dict) -> tuple[str, str]:
    """A memsafe `config` record: (key, value as text). `known` maps key -> parser raising on a bad value."""
    c = _Checker(obj, line, record)
    key = c.text("key")
    if key not in known:
        raise c.fail("key", f"{json.dumps(key)} is not a memsafe config key")
    value = obj.get("value")
    try:
        return key, str(known[key](value))
    except Exception as exc:  # the config parser's own message (InvalidInput)
        raise c.fail("value", str(exc)) from None


# ---------------------------------------------------------------------------------------------
# memsafe format: writing


def header(*, exported_at: str, memsafe_version: str, schema_version: int, project: str | None,
           include_forgotten: bool, all_projects: bool = False, embedding: tuple[str, int] | None = None) -> dict:
    """The first line of an export. `filter` records the scope (`project` plus global memories,
    or `all_projects`). `embedding` = (model id, dim) when the records carry vectors."""
    out = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "exported_at": exported_at,
        "memsafe_version": memsafe_version,
        "schema_version": schema_version,
        "filter": {"project": project, "all_projects": all_projects, "include_forgotten": include_forgotten},
    }
    if embedding is not None:
        out["embedding"] = {"model": embedding[0], "dim": embedding[1], "encoding": VECTOR_ENCODING}
    return out


def dump_line(record: dict) -> str:
    """One record as one line of UTF-8 JSON (non-ASCII kept; lone surrogates cannot occur in stored text)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


#: A memory record's uid as `dump_line` writes it (`"uid":"…"`; a quote inside a string value is
#: escaped, so text cannot forge it).
_UID_FIELD = re.compile(rb'"uid":("(?:[^"\\\n]|\\.)*")')


def files_holding(paths: list[str], uids: list[str]) -> list[str]:
    """Those of `paths` (files `export` wrote) that still hold a memory record with one of `uids`,
    in the order given. A path that no longer exists or is not a regular file is left out; one
    that cannot be read is listed (it may hold them). Each file is read once (memory-mapped), in
    time linear in its size whatever the number of uids."""
    wanted = set(uids)
    out = []
    for name in paths:
        try:
            if not os.path.isfile(name):
                continue
            with open(name, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    held = any(json.loads(m.group(1)) in wanted for m in _UID_FIELD.finditer(data))
        except (OSError, ValueError):
            held = True
        if held:
            out.append(name)
    return out


# ---------------------------------------------------------------------------------------------
# server-memory format


@dataclass
class Notice:
    """Something reported about an input line: skipped (with --skip-invalid or by policy) or defaulted."""

    line: int | None
    reason: str
    record: int | None = None
    fatal: bool = False  # True: refuses the whole import unless --skip-invalid
    skip: bool = False  # True: the record (or part) was left out by policy; not fatal

    def __str__(self) -> str:
        where = []
        if self.record is not None:
            where.append(f"record {self.record}")
        if self.line is not None:
            where.append(f"line {self.line}")
        return f"{', '.join(where) or 'file'}: {self.reason}"


@dataclass
class SMEntity:
    line: int
    name: str
    key: str
    type: str
    observations: list[str]


@dataclass
class SMRelation:
    line: int
    source: str
    target: str
    relation: str


def check_server_memory(value: object, line: int, notices: list[Notice]) -> SMEntity | SMRelation | None:
    """One server-memory object. Appends notices for what it defaulted or dropped; returns None when
    the whole object is unusable (a fatal notice says why, or a non-fatal one for unknown types).

    Policy: `entityName` is accepted as a legacy spelling of `name`; a missing `entityType` becomes
    "entity"; a non-string or empty observation is dropped with a fatal notice (refuses the import
    unless --skip-invalid); an unknown `type` is skipped with a notice (not fatal)."""
    if not isinstance(value, dict):
        notices.append(Notice(line, "is not a JSON object", fatal=True))
        return None
    kind = value.get("type")
    if kind == "entity":
        name = value.get("name")
        if name is None and "entityName" in value:
            name = value["entityName"]
            notices.append(Notice(line, "uses the legacy key entityName; read as name"))
        if not isinstance(name, str) or not name.strip():
            notices.append(Notice(line, f"entity name {json.dumps(name)} must be a non-empty string", fatal=True))
            return None
        etype = value.get("entityType")
        if etype is None:
            etype = SERVER_MEMORY_DEFAULT_TYPE
            notices.append(Notice(line, f'entity {json.dumps(name)} has no entityType; set to "entity"'))
        elif not isinstance(etype, str) or not etype.strip():
            notices.append(Notice(line, f"entityType {json.dumps(etype)} must be a string", fatal=True))
            return None
        observations = value.get("observations", [])
        if not isinstance(observations, list):
            notices.append(Notice(line, "observations must be a list of strings", fatal=True))
            return None
        kept = []
        for i, obs in enumerate(observations):
            if isinstance(obs, str) and obs.strip():
                kept.append(obs)
            else:
                notices.append(Notice(line, f"observations[{i}] {json.dumps(obs)} is not a non-empty string",
                                      fatal=True))
        name, etype = _fffd(name).strip(), _fffd(etype).strip()
        return SMEntity(line, name, entity_key(name), etype, kept)
    if kind == "relation":
        parts = {}
        for field in ("from", "to", "relationType"):
            v = value.get(field)
            if not isinstance(v, str) or not v.strip():
                notices.append(Notice(line, f"relation {field} {json.dumps(v)} must be a non-empty string", fatal=True))
                return None
            parts[field] = _fffd(v).strip()
        return SMRelation(line, parts["from"], parts["to"], parts["relationType"])
    notices.append(Notice(line, f"unknown type {json.dumps(kind)}; skipped", skip=True))
    return None
