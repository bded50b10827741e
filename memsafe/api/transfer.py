"""Responsibility: the export, import and embed handlers (formats in `memsafe.transfer`).

Import policy (docs/export-format.md):
- one transaction: a malformed record anywhere means nothing is written, unless
  `skip_invalid`, which imports everything else and reports what it skipped;
- memories merge by `uid`: an unknown uid is inserted (with its exported id when that id is
  free here); a known uid is replaced only when the file's `updated_at` is later, else left
  alone, so importing the same file twice changes nothing the second time; a new uid whose
  content already exists (not forgotten) in the same project is skipped as a duplicate;
- entities merge by key, relations by (source, relation, target), config keys the target
  already sets are kept;
- vectors: an export made with `vectors=True` carries each memory's vector and names the model
  in its header; when that is the model this memsafe uses, the vectors are stored as they are
  (a restore or a move needs no re-embedding, ~2,000 memories/s instead of the model's ~100/s).
  Otherwise, and for text changed on the way in (redaction), memories arrive pending and
  `embed_pending` fills them.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from memsafe import __version__, clock, graph, transfer
from memsafe.api import graph as graph_api
from memsafe.api.config import CONFIG_KEYS, check_config_pair
from memsafe.api.core import (
    _screen_secrets,
    backfill,
    clean_author,
    clean_project,
    clean_tags,
    clean_text,
    content_hash,
    make_scope,
    refuse_secret,
)
from memsafe.errors import InvalidInput, MemsafeError, Refused, StoreUnavailable
from memsafe.models import Source, Status
from memsafe.plural import count_of
from memsafe.store import Store
from memsafe.transfer import Notice, RecordError

__all__ = ["ExportReport", "ImportReport", "ImportInterrupted", "EmbedReport", "export", "export_to_path",
           "import_file", "embed_pending", "reembed", "ReembedReport", "IMPORT_FORMATS"]

IMPORT_FORMATS = ("auto", "memsafe", "server-memory")
EXPORT_BATCH = 500
MAX_LISTED_PROBLEMS = 10
SERVER_MEMORY_TAG = "server-memory"
_UID_NAMESPACE = uuid.UUID("6b1f5d1e-6d65-4d73-6166-652d696d706f")  # fixed: server-memory uids are stable

Progress = Callable[[int, int], None]  # (done, total) in the unit the handler documents


@dataclass
class ExportReport:
    """What an export wrote: records per type and the output path (None for a stream)."""

    path: str | None
    counts: dict[str, int]
    vectors: int = 0


@dataclass
class ImportReport:
    """What an import did (or, with dry_run, would do).

    Attributes:
        skipped: problems that dropped a record or part of one ("line 7: ..."), in file order.
        purged: memories skipped because their uid was purged here (see `import_file`).
        notes: records accepted with a default or a legacy spelling.
        embedded / pending: vectors filled after the import, and those still waiting.
    """

    path: str
    format: str
    dry_run: bool
    records: int = 0
    memories_added: int = 0
    memories_updated: int = 0
    memories_unchanged: int = 0
    duplicates: int = 0
    purged: int = 0
    entities_added: int = 0
    relations_added: int = 0
    links_added: int = 0
    config_applied: int = 0
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vectors_imported: int = 0
    embedded: int = 0
    pending: int = 0

    @property
    def partial(self) -> bool:
        return bool(self.skipped)


@dataclass
class EmbedReport:
    """Vectors filled by `embed_pending`, those still pending, and why vectors are unavailable (if so)."""

    embedded: int
    pending: int
    error: str | None = None


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C once the import's records were all written: while its transaction committed (SQLite
    checkpoints a large write as it commits), or after (the word index was compacted). `report`
    is what the import wrote, which stays if the transaction committed; one interrupted before
    its COMMIT ran was rolled back, so the caller checks the store (`memsafe import` does)."""

    def __init__(self, report: ImportReport):
        super().__init__()
        self.report = report


class _Rollback(Exception):
    """Internal: leave the import transaction without committing."""


@dataclass
class _Purged:
    """The purge stubs an import honours: {uid: purged at (UTC ISO-8601)}; empty with --allow-purged."""

    stubs: dict[str, str]

    def skip(self, uid: str, line: int | None, record: int | None, report: ImportReport,
             problems: list[Notice]) -> bool:
        """True (and reported) when `uid` was purged here: its memory must not come back."""
        at = self.stubs.get(uid)
        if at is None:
            return False
        report.purged += 1
        problems.append(Notice(line, f"uid {uid}: purged on {at[:10]}; skipped (--allow-purged brings it back)",
                               record=record, skip=True))
        return True


# ---------------------------------------------------------------------------------------------
# Export


class _NewMemories:
    """Memories an import adds, inserted many rows per statement (`Store.insert_memories`: the
    word indexes take them several times faster than one row at a time). Rows keeping their
    exported id are inserted `BATCH` at a time; rows given a new id wait for the end of the file
    (or until `HELD_ROWS` / `HELD_CHARS` of them wait), so they take ids after every exported id
    of the file instead of one a later record was to keep. What a later record is checked
    against (a duplicate text, an exported id) is written first, so every check sees the store as
    if each memory had been inserted at once."""

    BATCH = 200
    HELD_ROWS = 20_000
    HELD_CHARS = 50_000_000

    def __init__(self, store: Store, report: ImportReport) -> None:
        self.store, self.report = store, report
        self.kept: list[tuple] = []  # (row, tags, versions, entity ids, vector, dim, same text): rows with an id
        self.new: list[tuple] = []  # the same, rows given a new id
        self.new_chars = 0
        self.texts: dict[tuple[str, str | None], str] = {}  # (content_hash, project) -> uid, rows not forgotten
        self.ids: set[int] = set()  # exported ids of waiting rows

    def duplicate_of(self, digest: str, project: str | None) -> str | None:
        """The uid of a waiting row not forgotten with this content hash in this project, or None."""
        return self.texts.get((digest, project))

    def add(self, row: dict, tags: list[str], versions: list[dict], entity_ids: list[int], vector: bytes | None,
            dim: int | None, same_text: bool) -> None:
        item = (row, tags, versions, entity_ids, vector, dim, same_text)
        if row["status"] != Status.FORGOTTEN.value:
            self.texts.setdefault((row["content_hash"], row["project"]), row["uid"])
        if "id" in row:
            self.ids.add(row["id"])
            self.kept.append(item)
            if len(self.kept) >= self.BATCH:
                self._insert(self.kept)
                self.kept = []
        else:
            self.new.append(item)
            self.new_chars += len(row["content"])
            if len(self.new) >= self.HELD_ROWS or self.new_chars >= self.HELD_CHARS:
                self.flush()

    def flush(self) -> None:
        """Insert every waiting memory: those keeping their id first."""
        self._insert(self.kept)
        self._insert(self.new)
        self.kept, self.new, self.new_chars, self.texts, self.ids = [], [], 0, {}, set()

    def _insert(self, items: list[tuple]) -> None:
        """Insert rows with their history, vectors and entity links."""
        if not items:
            return
        ids = self.store.insert_memories([(row, tags) for row, tags, *_ in items])
        for memory_id, (_, _, versions, entity_ids, vector, dim, same_text) in zip(ids, items):
            if versions:
                self.store.replace_versions(memory_id, versions)
            _put_file_vector(self.store, memory_id, vector, dim, same_text, self.report)
            for entity_id in entity_ids:
                self.report.links_added += self.store.link_memory_entity(memory_id, entity_id)


def export(store: Store, out: IO[str], *, project: str | None = None, all_projects: bool = False,
           include_forgotten: bool = False, vectors: bool = False, progress: Progress | None = None) -> ExportReport:
    """Write the memsafe export (format version `transfer.FORMAT_VERSION`) to a text stream.

    Streams: memories are read and written in batches of 500, inside one read snapshot.
    Order: header, config, entities, memories (with tags, entity keys, history), relations, end.

    Args:
        project / all_projects: the scope, as recall's: the memories of `project` plus global
            ones, or every project with `all_projects` (neither: global memories only); with
            the entities they name, the entities no memory names (made by hand), and the
            relations between two exported entities.
        include_forgotten: also export forgotten memories (default: active and archived).
        vectors: also write each memory's stored vector (`transfer.VECTOR_ENCODING`, ~2 KB per
            memory at 384 dims) and the model's id in the header; memories still pending have none.
        progress: called with (memories written, memories to write).

    Raises:
        Refused: `vectors` is asked for but this store has none (or sqlite-vec is missing).
    """
    scope = make_scope(project=project, all_projects=all_projects)
    key = scope.projects[0] if scope.projects else None
    statuses = [Status.ACTIVE.value, Status.ARCHIVED.value]
    if include_forgotten:
        statuses.append(Status.FORGOTTEN.value)
    counts = {"config": 0, "entity": 0, "memory": 0, "relation": 0}
    written_vectors = 0
    with store.snapshot():
        embedding = None
        if vectors:
            model, dim = store.config_get("_embedding_model"), store.config_get("_embedding_dim")
            if not (store.vector_available and store.vector_table_exists() and model and dim):
                reason = store.vector_error or "no memory has been embedded yet"
                raise Refused(f"this store has no vectors to export ({reason}); export without --vectors")
            embedding = (model, int(dim))
        total = sum(store.counts()[s] for s in statuses) if all_projects else None
        out.write(transfer.dump_line(transfer.header(
            exported_at=clock.now_iso(), memsafe_version=__version__, schema_version=store.schema_version(),
            project=key, all_projects=all_projects, include_forgotten=include_forgotten, embedding=embedding,
        )))
        for name, value in sorted(store.config_items().items()):
            # embed_model names the model of this store's vectors: the header's `embedding` says it
            # for the vectors the file carries, and an importing store keeps its own
            if name in CONFIG_KEYS and name != "embed_model":
                out.write(transfer.dump_line({"type": "config", "key": name, "value": value}))
                counts["config"] += 1
        for entity in store.iter_entities(scope):
            out.write(transfer.dump_line({
                "type": "entity", "name": entity["name"], "key": entity["key"], "entity_type": entity["type"],
                "aliases": entity["aliases"], "created_at": entity["created_at"], "project": entity["project"],
            }))
            counts["entity"] += 1
        after = 0
        while True:
            rows = store.export_memory_rows(after, EXPORT_BATCH, statuses, scope)
            if not rows:
                break
            ids = [r["id"] for r in rows]
            tags, entities, versions = store.tags_of(ids), store.entity_keys_of(ids), store.versions_of(ids)
            stored_vectors = store.get_vectors(ids) if embedding else {}
            linked = store.get_memories([r[f] for r in rows for f in transfer.LINK_FIELDS if r[f] is not None],
                                        tags=False)
            for row in rows:
                record: dict[str, object] = {"type": "memory"}
                record.update({f: row[f] for f in transfer.MEMORY_FIELDS})
                for f in transfer.LINK_FIELDS:  # the other memory's uid: ids are this store's own
                    record[f] = linked[row[f]].uid if row[f] in linked else None
                record["tags"] = tags[row["id"]]
                record["entities"] = entities[row["id"]]
                record["versions"] = [
                    {f: (json.loads(v[f]) if f == "tags" else v[f]) for f in transfer.VERSION_FIELDS}
                    for v in versions[row["id"]]
                ]
                if row["id"] in stored_vectors:
                    record["vector"] = transfer.encode_vector(stored_vectors[row["id"]])
                    written_vectors += 1
                out.write(transfer.dump_line(record))
            counts["memory"] += len(rows)
            after = ids[-1]
            if progress:
                progress(counts["memory"], total or counts["memory"])
        for relation in store.iter_relations(scope):
            out.write(transfer.dump_line({"type": "relation", **relation}))
            counts["relation"] += 1
    out.write(transfer.dump_line({"type": "end", "counts": counts}))
    return ExportReport(path=None, counts=counts, vectors=written_vectors)


def export_to_path(store: Store, path: Path, *, overwrite: bool = True, **options) -> ExportReport:
    """`export` into a file, written beside it and renamed into place, so a failure leaves no
    half-written file. The file is created readable by the owner only (it holds every memory).
    Its absolute path is kept in the audit log (an `export` event), so a later `purge` names the
    file if it still holds the purged text (`transfer.files_holding`).

    Args:
        overwrite: replace an existing regular file (the CLI's `-o`); False refuses (MCP).

    Raises:
        Refused: the folder does not exist or cannot be written; the target is the database
            itself (or its -wal/-shm), is not a regular file, or exists and `overwrite` is False.
    """
    path = Path(path)
    resolved = path.resolve()
    database = store.path.resolve() if isinstance(store.path, Path) else None  # None: a PostgreSQL URL
    if database is not None and resolved in {database, database.with_name(database.name + "-wal"),
                                             database.with_name(database.name + "-shm")}:
        raise Refused(f"{path} is the database itself; export to another file")
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise Refused(f"{path} exists and is not a regular file; export to a new file")
        if not overwrite:
            raise Refused(f"{path} already exists; choose a new file name")
    # Through a symbolic link the file it points to is replaced: renaming over the link would
    # leave the old export, every memory it held in plain text, at the link's target.
    target = resolved if path.is_symlink() else path
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise Refused(f"cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            report = export(store, f, **options)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise Refused(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    with store.write():  # ASCII JSON: a path that is not UTF-8 (surrogate escapes) is kept exactly
        store.add_event(clock.now_iso(), "export", None, "path=" + json.dumps(str(resolved)))
    report.path = str(path)
    return report


# ---------------------------------------------------------------------------------------------
# Import


# An import that wrote at least this share of the store's memories compacts the word index after
# it (`Store.compact_word_index` rewrites the whole index: ~2.5 s at 100,000 memories;
# a small import adds a piece or two, which cost a query term ~8 µs each).
COMPACT_IMPORT_SHARE = 0.1


def import_file(
    store: Store,
    path: str | Path,
    *,
    fmt: str = "auto",
    dry_run: bool = False,
    skip_invalid: bool = False,
    project: str | None = None,
    progress: Progress | None = None,
    redact: bool = True,
    allow_purged: bool = False,
    author: str | None = None,
) -> ImportReport:
    """Import a memsafe export or an MCP memory-server file in one transaction.

    Purge is a promise: a memory whose uid was purged here (the purge's audit stub keeps the
    uid, never the text) is skipped and reported ("purged on DATE"), on every format, unless
    `allow_purged`.

    Args:
        fmt: 'auto' (detected from the first record), 'memsafe' or 'server-memory'.
        dry_run: do everything, then roll back; the report says what would change.
        skip_invalid: import what is valid and list what was skipped, instead of refusing.
        project: server-memory only: the project for the imported observations (default global).
        progress: called with (bytes read, file size).
        redact: store text that looks like a credential with each secret replaced by
            `[REDACTED:<type>]` (the default: an import is text memsafe takes in on its own, and
            nobody is there to ask; a note names each such record). False: such a record is
            invalid, like any malformed record, as `remember` refuses it. Names (tags, entities,
            relations, projects) are shown as they are: one that looks like a credential is
            always invalid.
        allow_purged: bring back memories that were purged here (the explicit way back).
        author: who imports (`clean_author`; a team server passes its token's user): the author of
            each imported memory whose record names none. Authors a memsafe export carries (of
            memories and their versions) are kept as they are; None: unknown.

    Raises:
        InvalidInput: unknown format. Refused: a missing or unreadable file, or (without
            skip_invalid) any malformed record; the message names the record/line and the
            field, and nothing was written.
        ImportInterrupted: Ctrl-C while or after the transaction committed; it carries the report of
            what was written (see the class).
    """
    path = Path(path)
    if fmt not in IMPORT_FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}; use one of: {', '.join(IMPORT_FORMATS)}")
    if not path.exists():
        raise Refused(f"no file at {path}")
    if not path.is_file():
        raise Refused(f"{path} is not a regular file (a directory, device or pipe); import a file")
    try:
        if fmt == "auto":
            fmt = transfer.detect_format(path)
    except RecordError as exc:
        raise Refused(f"{path}: {exc}") from None
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None
    author = clean_author(author)
    report = ImportReport(path=str(path), format=fmt, dry_run=dry_run)
    problems: list[Notice] = []
    written_all = False  # every record is in the transaction: a Ctrl-C from here on may follow its commit
    try:
        with store.write():
            purged = _Purged({} if allow_purged else store.purged_uids())
            if fmt == "memsafe":
                _import_memsafe(store, path, report, problems, progress, redact, purged, author)
            else:
                _import_server_memory(store, path, report, problems, clean_project(project) if project else None,
                                      progress, redact, purged, author)
            problems.sort(key=lambda p: (p.line is None, p.line or 0))  # file order (stable)
            fatal = [p for p in problems if p.fatal]
            if fatal and not skip_invalid:
                raise _Rollback
            report.skipped = [str(p) for p in problems if p.fatal or p.skip]
            report.notes = [str(p) for p in problems if not (p.fatal or p.skip)]
            changed = (report.memories_added + report.memories_updated + report.entities_added
                       + report.relations_added + report.links_added + report.config_applied)
            if changed:  # a re-import that changes nothing leaves no trace either
                store.add_event(
                    clock.now_iso(), "import", None,
                    f"format={fmt} added={report.memories_added} updated={report.memories_updated}",
                )
            if dry_run:
                raise _Rollback
            written_all = True
    except _Rollback:
        fatal = [p for p in problems if p.fatal]
        if fatal and not skip_invalid:
            listed = "; ".join(str(p) for p in fatal[:MAX_LISTED_PROBLEMS])
            more = f" (and {len(fatal) - MAX_LISTED_PROBLEMS} more)" if len(fatal) > MAX_LISTED_PROBLEMS else ""
            raise Refused(
                f"nothing imported from {path.name}: {count_of(len(fatal), 'invalid record')}: {listed}{more}. "
                "Fix them, or pass --skip-invalid (MCP/API: skip_invalid=true) to import the rest"
            ) from None
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        if written_all:  # during the COMMIT (a Ctrl-C lands when it returns): the report stands if it committed
            raise ImportInterrupted(report) from None
        raise
    try:  # committed: a Ctrl-C from here on stops only the compaction, and the report stands
        written = 0 if dry_run else report.memories_added + report.memories_updated
        if written and written >= COMPACT_IMPORT_SHARE * store.counts()["total"]:
            store.compact_word_index()  # a bulk write leaves the word index in many pieces
        report.pending = store.pending_count()
    except KeyboardInterrupt:
        raise ImportInterrupted(report) from None
    return report


def _read(path: Path, progress: Progress | None):
    """(line number, text) of every non-blank line, reporting bytes read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        done = 0
        for number, text in transfer.iter_lines(f):
            yield number, text
            if progress and number % 200 == 0:
                done = f.tell()
                progress(done, size)
        if progress:
            progress(size, size)


def _import_memsafe(store: Store, path: Path, report: ImportReport, problems: list[Notice],
                    progress: Progress | None, redact: bool, purged: _Purged, author: str | None) -> None:
    header_seen = False
    end_seen = False
    now = clock.now()
    read = dict.fromkeys(transfer.RECORD_TYPES, 0)  # records per type, to check the end record's counts
    keys: dict[str, str] = {}  # entity key as the file writes it -> identity key of the entity's name
    key_lines: dict[str, int] = {}  # entity key as the file writes it -> line of its entity record
    known_config = {k: spec.parse for k, spec in CONFIG_KEYS.items()}
    record_no = 0
    dim = None  # vector size when the file's vectors are usable here
    seen_uids: dict[str, int] = {}  # uid -> line of its first memory record in this file
    added = _NewMemories(store, report)
    known = _FileEntities(store, report)  # the file's entity records, as entities of their projects
    links: list[tuple[str, str | None, str | None]] = []  # (uid, supersedes uid, superseded_by uid)
    for number, text in _read(path, progress):
        if not header_seen:
            try:
                head = transfer.check_header(transfer.parse_json(text, number), number)
            except RecordError as exc:
                raise Refused(f"{path.name}: {exc}") from None
            header_seen = True
            dim = _usable_vectors(store, head.get("embedding"), problems)
            continue
        record_no += 1
        report.records += 1
        try:
            if end_seen:
                raise RecordError("comes after the end record", line=number, record=record_no)
            value = transfer.parse_json(text, number, record_no)
            if not isinstance(value, dict):
                raise RecordError("is not a JSON object", line=number, record=record_no)
            kind = value.get("type")
            if kind in read:
                read[kind] += 1
            if kind == "memory":
                rec = transfer.check_memory(value, number, record_no, now=now)
                rec["entities"] = [keys.get(k, k) for k in rec["entities"]]
                first = seen_uids.get(rec["uid"])
                if first is not None:
                    problems.append(Notice(number, f"uid {rec['uid']} appeared already on line {first}; skipped",
                                           record=record_no, skip=True))
                    continue
                if rec["uid"] in purged.stubs and rec["uid"] not in seen_uids \
                        and store.memory_by_uid(rec["uid"]) is None \
                        and purged.skip(rec["uid"], number, record_no, report, problems):  # looked up only if purged
                    continue
                _apply_memory(store, rec, report, problems, number, record_no, redact, dim, author, added, known)
                seen_uids[rec["uid"]] = number  # only once taken: an invalid first copy does not hide a valid one
                if rec["supersedes"] or rec["superseded_by"]:
                    links.append((rec["uid"], rec["supersedes"], rec["superseded_by"]))
            elif kind == "entity":
                entity = transfer.check_entity(value, number, record_no, now=now)
                try:
                    entity["name"] = graph_api.clean_entity_names([entity["name"]])[0]
                except MemsafeError as exc:
                    raise RecordError(str(exc), line=number, record=record_no, field="name") from None
                # The key is the identity key of the name, whatever the file says (a record
                # {"name": "Bar", "key": "foo"} must not make a second Bar); the file's key still
                # names the entity in this file's memory and relation records, so it may name one.
                entity["key"] = graph.entity_key(entity["name"])
                earlier = keys.get(entity["file_key"])
                if earlier is not None and earlier != entity["key"]:
                    raise RecordError(f"{json.dumps(entity['file_key'])} already names another entity in this file "
                                      f"(line {key_lines[entity['file_key']]}); which one its memories and relations "
                                      "mean is unknown", line=number, record=record_no, field="key")
                keys[entity["file_key"]] = entity["key"]
                key_lines.setdefault(entity["file_key"], number)
                if "project" in value:  # the project that owns it (None: global)
                    try:
                        owner = (clean_project(value["project"], expand=False) or "") if value["project"] else ""
                    except MemsafeError as exc:
                        raise RecordError(str(exc), line=number, record=record_no, field="project") from None
                    known.made[(owner, entity["key"])] = _apply_entity(store, entity, report, owner)
                else:  # a file made before entities had projects: made where its memories are
                    known.records[entity["key"]] = entity
            elif kind == "relation":
                rel = transfer.check_relation(value, number, record_no, now=now)
                for side in ("source", "target"):
                    rel[side] = keys.get(rel[side], rel[side])
                ends = known.relation_ends(rel, value)
                if None in ends:
                    missing = rel["source"] if ends[0] is None else rel["target"]
                    raise RecordError(f"names entity {json.dumps(missing)}, which is in neither the file nor the "
                                      "store", line=number, record=record_no, field="source" if ends[0] is None
                                      else "target")
                try:
                    refuse_secret(rel["relation"], "relation type")
                except MemsafeError as exc:
                    raise RecordError(str(exc), line=number, record=record_no, field="relation") from None
                for source_id, target_id in known.pairs(ends):
                    if store.add_relation(source_id, rel["relation"], target_id, rel["weight"], rel["created_at"],
                                          rel["updated_at"]):
                        report.relations_added += 1
            elif kind == "config":
                key, val = transfer.check_config(value, number, record_no, known_config)
                if store.config_get(key) is None and key != "embed_model":  # (see `export`)
                    try:
                        check_config_pair(store, key, known_config[key](val))
                    except InvalidInput as exc:
                        raise RecordError(str(exc), line=number, record=record_no, field="value") from None
                    store.config_set(key, val)
                    report.config_applied += 1
            elif kind == "end":
                end_seen = True
                record_no -= 1
                report.records -= 1
                end = (number, value.get("counts"))
            else:
                raise RecordError(f"type {json.dumps(kind)} is not config, entity, memory, relation or end",
                                  line=number, record=record_no, field="type")
        except RecordError as exc:
            problems.append(Notice(exc.line, f"{exc.field + ' ' if exc.field else ''}{exc.reason}",
                                   record=exc.record, fatal=True))
        except MemsafeError as exc:  # input hygiene (clean_text...) on a field
            problems.append(Notice(number, str(exc), record=record_no, fatal=True))
    added.flush()
    known.finish()
    _link_corrections(store, links)
    if not header_seen:
        raise Refused(f"{path.name} is empty")
    if not end_seen:
        problems.append(Notice(None, "the file has no end record: it looks truncated", fatal=True))
    else:
        problems.extend(transfer.check_end_counts(end[1], read, end[0]))


def _link_corrections(store: Store, links: Sequence[tuple[str, str | None, str | None]]) -> None:
    """Link again the corrections of an imported file (`transfer.LINK_FIELDS`, by uid) where both
    memories are in the store now; a memory linked here already keeps its own link."""
    for uid, supersedes, superseded_by in links:
        row = store.memory_by_uid(uid)
        if row is None:
            continue
        changes = {}
        for column, other_uid in (("supersedes", supersedes), ("superseded_by", superseded_by)):
            other = store.memory_by_uid(other_uid) if other_uid else None
            if other is not None and row[column] is None:
                changes[column] = other["id"]
        store.update_memory(row["id"], changes)


def _usable_vectors(store: Store, embedding: dict | None, problems: list[Notice]) -> int | None:
    """The vector size when the file's vectors come from the model this memsafe uses (and can be
    stored here); else None, with a note saying the memories will be embedded again."""
    from memsafe.recall.vectors import embedder_for, ensure_table, unavailable_reason

    if embedding is None:
        return None
    embedder = embedder_for(store)
    if embedder is None:
        reason = unavailable_reason(store)
        problems.append(Notice(1, f"the file's vectors are not used: vector search is unavailable ({reason})"))
        return None
    if embedding["model"] != embedder.model_id or embedding["dim"] != embedder.dim:
        problems.append(Notice(1, f"the file's vectors come from model {embedding['model']} ({embedding['dim']} "
                                  f"dims), this memsafe uses {embedder.model_id} ({embedder.dim} dims): the memories "
                                  "will be embedded again"))
        return None
    ensure_table(store, embedder)
    return embedder.dim


def _apply_entity(store: Store, entity: dict, report: ImportReport, owner: str) -> int:
    """The entity of project `owner` ('' global) an entity record names, made when missing."""
    entity_id = store.entity_id_by_key(entity["key"], owner)
    if entity_id is None:
        entity_id = store.insert_entity(entity["name"], entity["key"], refuse_secret(entity["type"], "entity type"),
                                        entity["created_at"], owner)
        report.entities_added += 1
    aliases = [refuse_secret(a, "entity alias") for a in entity.get("aliases", [])]
    store.add_entity_aliases(entity_id, aliases)
    for key in dict.fromkeys(graph.entity_key(a) for a in [entity["name"], *aliases]):
        if key and store.entity_id_by_key(key, owner) is None:  # its other names find it here too
            store.add_alias_key(entity_id, key)
    return entity_id


class _FileEntities:
    """The entities of a memsafe file's entity records, by (owning project, identity key).

    A record that names its project (`project`, None for global) is an entity of that project.
    A record of a file made before entities had projects is made lazily: in the project of each
    memory that names it, and, when no memory names it, in the global graph (as a migrated store
    does, `memsafe.store.common.owners`). A relation record without its ends' projects is carried
    to each project where both ends are (the project's own, else the global one)."""

    def __init__(self, store: Store, report: ImportReport):
        self.store, self.report = store, report
        self.made: dict[tuple[str, str], int] = {}
        self.records: dict[str, dict] = {}  # identity key -> a project-less entity record

    def get(self, key: str, owner: str, linked: bool = False) -> int | None:
        """The entity of `owner` for `key`: this file's, else the store's; with `linked` (a
        memory's link, `api.graph.link_entities`), else a global one; made in `owner` from a
        project-less record of this file when there is one."""
        found = self.made.get((owner, key)) or self.store.entity_id_by_key(key, owner)
        if found is None and linked and owner:
            found = self.made.get(("", key)) or self.store.entity_id_by_key(key, "")
            if found is not None:
                return found
        if found is None and key in self.records:
            found = _apply_entity(self.store, self.records[key], self.report, owner)
        if found is not None:
            self.made[(owner, key)] = found
        return found

    def relation_ends(self, rel: dict, value: dict) -> list:
        """[source, target]: each an entity id (the record names its ends' projects) or a
        {owner: id} of the candidates (a record that does not), None when there is none."""
        ends: list = []
        for side in ("source", "target"):
            if f"{side}_project" in value:
                owner = value[f"{side}_project"] or ""
                ends.append(self.get(rel[side], owner if isinstance(owner, str) else ""))
                continue
            found = {o: i for (o, k), i in self.made.items() if k == rel[side]}
            if not found:
                entity_id = self.get(rel[side], "")
                found = {"": entity_id} if entity_id is not None else {}
            ends.append(found or None)
        return ends

    @staticmethod
    def pairs(ends: list) -> list[tuple[int, int]]:
        """The (source id, target id) pairs a relation record is stored as (`relation_ends`)."""
        source, target = ends
        if isinstance(source, int) and isinstance(target, int):
            return [(source, target)]
        source = source if isinstance(source, dict) else {"": source}
        target = target if isinstance(target, dict) else {"": target}
        out: list[tuple[int, int]] = []
        for owner in sorted(set(source) | set(target)):
            s, t = source.get(owner, source.get("")), target.get(owner, target.get(""))
            if s is not None and t is not None and (s, t) not in out:
                out.append((s, t))
        if not out:  # its ends are in two projects: kept between them, as a migrated store keeps it
            out.append((min(source.items())[1], min(target.items())[1]))
        return out

    def finish(self) -> None:
        """Make, in the global graph, the project-less records no memory or relation named."""
        used = {k for _o, k in self.made}
        for key, record in self.records.items():
            if key not in used:
                self.get(key, "")


def _screened(text: str, redact: bool, problems: list[Notice], line: int | None, what: str = "content") -> str:
    """`text` cleaned and screened for credentials (`_screen_secrets`); a note when redacted."""
    cleaned = clean_text(text)
    screened = _screen_secrets(cleaned, redact)
    if screened != cleaned:
        problems.append(Notice(line, f"{what}: stored with a credential redacted"))
    return screened


def _apply_memory(store: Store, rec: dict, report: ImportReport, problems: list[Notice], line: int,
                  record: int, redact: bool = False, dim: int | None = None, author: str | None = None,
                  added: _NewMemories | None = None, known: _FileEntities | None = None) -> None:
    """Apply one checked memory record: update the memory of its uid when the file's is newer,
    else insert it (through `added`, in batches, when given). `known`: entity ids known by
    key (the file's entity records), looked up in the store otherwise. Raises RecordError."""
    vector = rec["vector"]
    if vector is not None and dim is not None and len(vector) != 4 * dim:
        raise RecordError(f"holds {len(vector) // 4} values; the header's model has {dim}", line=line,
                          record=record, field="vector")
    try:
        content = _screened(rec["content"], redact, problems, line)
        for version in rec["versions"]:  # history is stored text too: no credential gets in that way
            version["content"] = _screened(version["content"], redact, problems, line, "an earlier version")
            for tag in version["tags"]:
                refuse_secret(tag, "tag")
            if version["project"] is not None:
                refuse_secret(version["project"], "project name")
        if rec["status_reason"] is not None:
            refuse_secret(rec["status_reason"], "status reason")
        tags = clean_tags(rec["tags"])
        project = clean_project(rec["project"], expand=False)  # a stored key, kept as it was
        rec["author"] = clean_author(rec["author"]) or author
        for version in rec["versions"]:
            version["author"] = clean_author(version["author"])
    except MemsafeError as exc:
        raise RecordError(str(exc), line=line, record=record) from None
    entity_ids = []
    owner = project or ""
    for key in rec["entities"]:
        entity_id = known.get(key, owner, linked=True) if known is not None else \
            (store.entity_id_by_key(key, owner) or store.entity_id_by_key(key, ""))
        if entity_id is None:
            raise RecordError(f"{json.dumps(key)} names no entity record", line=line, record=record, field="entities")
        entity_ids.append(entity_id)
    digest = content_hash(content)
    row = {f: rec[f] for f in transfer.MEMORY_FIELDS if f not in ("id", "uid")}
    row.update(content=content, project=project, content_hash=digest)
    existing = store.memory_by_uid(rec["uid"])
    if existing is not None:
        if clock.parse_iso(existing["updated_at"]) >= clock.parse_iso(rec["updated_at"]):
            report.memories_unchanged += 1
        else:
            memory_id = existing["id"]
            _keep_local_history(store, memory_id, rec["versions"], content)
            if existing["content"] != content:
                store.delete_vector(memory_id)
                row["embedded"] = 0
            store.update_memory(memory_id, row)
            store.set_tags(memory_id, tags)
            report.memories_updated += 1
            _put_file_vector(store, memory_id, vector, dim, content == rec["content"], report)
        memory_id = existing["id"]
    else:
        if rec["status"] != Status.FORGOTTEN.value:
            duplicate = store.find_duplicate(digest, project)
            waiting = added.duplicate_of(digest, project) if added is not None and duplicate is None else None
            if duplicate is not None or waiting is not None:
                report.duplicates += 1
                what = f"memory {duplicate}" if duplicate is not None else f"uid {waiting}, earlier in this file"
                problems.append(Notice(line, f"uid {rec['uid']} duplicates {what}; skipped", record=record, skip=True))
                return
        row["uid"] = rec["uid"]
        if rec["id"] is not None and not (added is not None and rec["id"] in added.ids) \
                and not store.memory_id_taken(rec["id"], rec["uid"]):
            row = {"id": rec["id"], **row}
        report.memories_added += 1
        if added is not None:
            added.add(row, tags, rec["versions"], entity_ids, vector, dim, content == rec["content"])
            return
        memory_id = store.insert_memory(row, tags)
        store.replace_versions(memory_id, rec["versions"])
        _put_file_vector(store, memory_id, vector, dim, content == rec["content"], report)
    for entity_id in entity_ids:
        report.links_added += store.link_memory_entity(memory_id, entity_id)


def _put_file_vector(store: Store, memory_id: int, vector: bytes | None, dim: int | None, same_text: bool,
                     report: ImportReport) -> None:
    """Store the file's vector for a memory, when the file's model is ours and the text was stored
    as the file has it (a redacted text gets a fresh embedding instead)."""
    if vector is not None and dim is not None and same_text:
        import numpy as np

        values = np.frombuffer(vector, dtype="<f4").astype(np.float64)  # float32 squares over/underflow
        norm = float(np.linalg.norm(values))  # > 0 and finite: check_vector refused zeros and non-finite values
        if abs(norm - 1.0) > 1e-4:  # search assumes unit length; a vector already unit is kept bit for bit
            vector = (values / norm).astype("<f4").tobytes()
        store.put_vector(memory_id, vector)
        report.vectors_imported += 1


def _keep_local_history(store: Store, memory_id: int, file_versions: list[dict], new_content: str) -> None:
    """Set a memory's history to the file's versions without losing local ones: local versions the
    file does not have are kept, and the local state being replaced becomes a version (cause
    `import`) unless the file already holds that text. Nothing but `purge` destroys content."""
    known = {(v["valid_from"], v["content"]) for v in file_versions}
    local = []
    for v in store.versions_of([memory_id])[memory_id]:
        if (v["valid_from"], v["content"]) not in known:
            v = dict(v)
            v["tags"] = json.loads(v["tags"]) if isinstance(v["tags"], str) else v["tags"]
            local.append(v)
    merged = sorted([*file_versions, *local], key=lambda v: (v["valid_from"], v["valid_to"]))
    store.replace_versions(memory_id, merged)
    current = store.raw_row(memory_id)
    texts = {content for _, content in known} | {new_content}
    if current is not None and current["content"] not in texts:
        store.add_version(current, store.tags_of([memory_id])[memory_id], clock.now_iso(), "import")


def _import_server_memory(store: Store, path: Path, report: ImportReport, problems: list[Notice],
                          project: str | None, progress: Progress | None, redact: bool, purged: _Purged,
                          author: str | None) -> None:
    items: list[tuple[int, object]] = []
    if transfer.first_char(path) == "[":
        try:
            values = json.loads(path.read_text(encoding="utf-8-sig", errors="replace"))
        except json.JSONDecodeError as exc:
            raise Refused(f"{path.name}: not a valid JSON array (line {exc.lineno}: {exc.msg})") from None
        except ValueError as exc:  # not a syntax error: an integer past Python's digit limit
            raise Refused(f"{path.name}: not a valid JSON array ({exc})") from None
        except RecursionError:
            raise Refused(f"{path.name}: nested too deeply to be a memory-server file") from None
        items = list(enumerate(values, start=1))
        if progress:
            progress(1, 1)
    else:
        for number, text in _read(path, progress):
            try:
                items.append((number, transfer.parse_json(text, number)))
            except RecordError as exc:
                problems.append(Notice(exc.line, exc.reason, fatal=True))
    entities: dict[str, transfer.SMEntity] = {}
    relations: list[transfer.SMRelation] = []
    for number, value in items:
        report.records += 1
        parsed = transfer.check_server_memory(value, number, problems)
        if isinstance(parsed, transfer.SMEntity):
            parsed.key = _key_of(parsed.name)
            if parsed.key in entities:  # duplicate line or entity split over lines: merge observations
                seen = entities[parsed.key].observations
                seen.extend(o for o in parsed.observations if o not in seen)
            else:
                entities[parsed.key] = parsed
        elif isinstance(parsed, transfer.SMRelation):
            relations.append(parsed)
    now = clock.now_iso()
    ids: dict[str, int] = {}
    for key, entity in entities.items():
        try:
            name = refuse_secret(clean_text(entity.name, "entity name"), "entity name")
            refuse_secret(entity.type, "entity type")
        except MemsafeError as exc:
            problems.append(Notice(entity.line, str(exc), fatal=True))
            continue
        entity_id = store.entity_id_by_key(key, project or "")
        if entity_id is None:
            entity_id = store.insert_entity(name, key, entity.type, now, project or "")
            report.entities_added += 1
        else:
            name = store.entity_name(entity_id) or name  # the stored spelling, so re-imports match
        ids[key] = entity_id
        for observation in entity.observations:
            try:
                content = _screened(f"{name}: {clean_text(observation, 'observation')}", redact, problems,
                                    entity.line, "observation")
            except MemsafeError as exc:
                problems.append(Notice(entity.line, f"observation: {exc}", fatal=True))
                continue
            _apply_observation(store, entity_id, key, content, project, now, report, problems, purged, entity.line,
                               author)
    for rel in relations:
        ends = []
        for name in (rel.source, rel.target):
            key = _key_of(name)
            ends.append(ids.get(key) or store.entity_id_by_key(key, project or ""))
        if None in ends:
            missing = rel.source if ends[0] is None else rel.target
            problems.append(Notice(rel.line, f"relation {rel.source} -{rel.relation}-> {rel.target}: entity "
                                   f"{json.dumps(missing)} is in neither the file nor the store; skipped", skip=True))
            continue
        try:
            relation = refuse_secret(clean_text(rel.relation, "relationType"), "relation type")
        except MemsafeError as exc:
            problems.append(Notice(rel.line, str(exc), fatal=True))
            continue
        source_id, target_id = ends
        assert source_id is not None and target_id is not None  # `None in ends` skipped it above
        if store.add_relation(source_id, relation, target_id, 1.0, now, now):
            report.relations_added += 1


def _key_of(name: str) -> str:
    """Identity key of a name as `graph add-entity` would store it (cleaned first: a control
    character is a space there, so it must be here too)."""
    try:
        return graph.entity_key(graph.clean_name(clean_text(name, "entity name")))
    except MemsafeError:
        return graph.entity_key(name)  # refused later, with the line, when the entity is stored


def _apply_observation(store: Store, entity_id: int, key: str, content: str, project: str | None, now: str,
                       report: ImportReport, problems: list[Notice], purged: _Purged, line: int,
                       author: str | None) -> None:
    uid = uuid.uuid5(_UID_NAMESPACE, f"server-memory\0{key}\0{content}").hex
    existing = store.memory_by_uid(uid)
    if existing is None and purged.skip(uid, line, None, report, problems):
        return
    memory_id = existing["id"] if existing else store.find_duplicate(content_hash(content), project)
    if memory_id is not None:
        report.memories_unchanged += 1
    else:
        memory_id = store.insert_memory(
            {
                "uid": uid, "content": content, "kind": "fact", "project": project, "source": Source.IMPORT.value,
                "created_at": now, "updated_at": now, "content_updated_at": now,
                "content_hash": content_hash(content), "author": author,
            },
            [SERVER_MEMORY_TAG],
        )
        report.memories_added += 1
    report.links_added += store.link_memory_entity(memory_id, entity_id)


# ---------------------------------------------------------------------------------------------
# Deferred embedding


def embed_pending(store: Store, *, progress: Progress | None = None) -> EmbedReport:
    """Fill every pending vector (memories stored with deferred embedding), 256 at a time
    (`backfill`), each batch in its own short write; memories marked embedded whose vector is gone
    are pending again first (`Store.requeue_missing_vectors`). `progress` gets (vectors written,
    pending at start).

    Returns the count written and what is still pending; `error` says why when vectors cannot be
    computed here (no model or no sqlite-vec), in which case nothing is written."""
    from memsafe.recall.vectors import embedder_for, unavailable_reason

    if store.vector_available:
        try:  # vectors lost from the table (never found by meaning): computed again with the rest
            store.requeue_missing_vectors()
        except StoreUnavailable:  # locked, or a full disk: the pending ones only
            pass
    total = store.pending_count()
    if not store.vector_available:
        return EmbedReport(0, total, f"vector search unavailable: {store.vector_error}")
    if total and embedder_for(store) is None:
        return EmbedReport(0, total, f"embedding model unavailable: {unavailable_reason(store)}")
    # One walk: each pending memory is tried once; a memory another process changes meanwhile (an
    # update, a decay) stays pending and is counted below, never retried without end.
    done = backfill(store, limit=None, progress=(lambda n: progress(n, max(total, n))) if progress else None)
    return EmbedReport(done, store.pending_count())


@dataclass
class ReembedReport:
    """What `reembed` did: the model now making the store's vectors (`model`, its id and vector
    size), the vectors written, the memories left pending (changed while they were embedded, or
    added meanwhile: the next `memsafe embed` fills them with the same model), and the model
    the vectors came from before."""

    model: str
    model_id: str
    dim: int
    embedded: int
    pending: int
    previous: str


REEMBED_BATCH = 256  # memories read and embedded at a time


def reembed(store: Store, model: str, *, progress: Progress | None = None) -> ReembedReport:
    """Embed every memory (any status but forgotten) again with the registry model `model`
    (`embed.MODELS`) and make it the store's model (`recall.vectors.store_model`).

    Atomic: the new vectors are computed first and kept in memory (n × dim × 4 bytes: ~150 MB for
    100,000 memories at 384 dims), then the old vectors are replaced by them in one write, so an
    interrupted or failed run leaves the store's vectors and model as they were. A memory changed
    while the run embedded it is left pending (as one added meanwhile). `progress(done, total)`
    counts memories embedded.

    Raises:
        InvalidInput: an unknown model name (naming the known ones).
        Refused: vectors cannot be used here (no sqlite-vec / pgvector), or the model cannot be
            loaded (its package is not installed: the message names the extra to install).
        StoreUnavailable: another writer held the lock for 30 s at the final write.
    """
    from memsafe import embed
    from memsafe.recall.vectors import MODEL_KEY, ensure_table, store_model, vector_bytes

    try:
        spec = embed.model_spec(model)
    except embed.ModelUnavailable as exc:
        raise InvalidInput(str(exc)) from None
    if not store.vector_available:
        raise Refused(f"vector search unavailable: {store.vector_error}")
    embedder = embed.get_embedder(name=spec.name)
    if embedder is None:
        raise Refused(f"embedding model {spec.name} unavailable: {embed.load_error(spec.name)}")
    previous = store_model(store) if store.vector_table_exists() else "none"
    rows: list[tuple[int, str]] = []
    while True:  # every memory to embed, by id (a memory added after this walk stays pending)
        more = store.pending_embeddings(REEMBED_BATCH, rows[-1][0] if rows else 0, embedded_too=True)
        rows += more
        if len(more) < REEMBED_BATCH:
            break
    import numpy as np

    vectors = np.zeros((len(rows), embedder.dim), dtype=np.float32)
    for start in range(0, len(rows), REEMBED_BATCH):
        part = rows[start:start + REEMBED_BATCH]
        vectors[start:start + len(part)] = embedder.embed([content for _, content in part])
        if progress is not None:
            progress(start + len(part), len(rows))
    written = 0
    with store.write(wait_ms=30_000):
        store.config_delete("_embedding_model")  # the table is made anew even for the same model
        ensure_table(store, embedder)
        store.config_set(MODEL_KEY, embedder.name)
        for start in range(0, len(rows), 2000):
            part = rows[start:start + 2000]
            current = {m.id: m.content for m in store.get_memories([i for i, _ in part], tags=False).values()}
            for n, (memory_id, content) in enumerate(part, start):
                if current.get(memory_id) == content:
                    store.put_vector(memory_id, vector_bytes(vectors[n]))
                    written += 1
        store.add_event(clock.now_iso(), "config", None, f"{MODEL_KEY} {embedder.name} (re-embedded)")
    return ReembedReport(embedder.name, embedder.model_id, embedder.dim, written, store.pending_count(), previous)
