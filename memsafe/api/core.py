"""Responsibility: the core handlers: opening the store, input hygiene, remember, get, forget,
restore, purge, recall, status and config."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from memsafe import clock, embed, framing, retrieve, settings, tokens
from memsafe.api import graph as graph_api
from memsafe.api.hygiene import (  # noqa: F401  re-exported: the handler modules and tests import them from here
    MAX_CONTENT_CHARS,
    MAX_PROJECT_CHARS,
    MAX_QUERY_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    _check_id,
    _controls_to_space,
    _enum_value,
    _fix_surrogates,
    _name_findings,
    _screen_secrets,
    _shown,
    _unit_interval,
    _visible,
    _whole,
    clean_author,
    clean_project,
    clean_tags,
    clean_text,
    content_hash,
    current_project,
    make_scope,
    refuse_secret,
)
from memsafe.errors import Duplicate, InvalidInput, NotFound, StoreUnavailable
from memsafe.models import (
    Hit,
    Kind,
    Memory,
    PurgeReport,
    RecallResult,
    Scope,
    Source,
    Status,
    StatusReport,
)
from memsafe.render import count_of
from memsafe.store import Store, connect

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "Opened", "open_store", "clean_text", "clean_tags", "clean_project", "current_project", "content_hash",
    "backfill",
    "remember", "embed_new", "embed_in_background", "get", "reachable", "in_scope", "encryption_state", "forget",
    "purge", "make_scope", "recall", "score_candidates", "status",
    "config_list", "config_get", "config_set", "config_reset", "set_db_path", "reset_db_path", "config_value",
    "MAX_CONTENT_CHARS", "MAX_QUERY_CHARS", "MAX_PROJECT_CHARS",
]

BACKFILL_BATCH = 256  # pending memories a recall embeds at most (attempts, written or skipped)
RECALL_EMBED_SECONDS = 2.0  # ... and for at most this long, then answers from what it has
BACKGROUND_EMBED_SECONDS = 300.0  # a detached embedder stops after this; `memsafe embed` does the rest
WRITE_GRACE_MS = 250  # least wait for the write lock of a time-bounded fill (about one SQLite commit under load)


# ---------------------------------------------------------------------------------------------
# Opening


@dataclass
class Opened:
    """What `open_store` found: the store plus warnings and notes for the user (stderr, never stdout)."""

    store: Store
    path: Path | str  # a SQLite file, or a PostgreSQL URL
    origin: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def open_store(db: str | None = None, *, create: bool = True, origin: str | None = None) -> Opened:
    """Resolve the DB path (see `settings.resolve_db_path`) and open it, migrating if needed.
    `origin` names where `db` came from when the caller resolved it itself (the MCP server
    resolves it once at start: MEMSAFE_DB, config, default), instead of "--db".

    A store created somewhere other than the default path while a store already exists at the
    default path yields a loud warning (FIELD-CASES F18), never a silent fresh store; any other new
    store a note with its path (so a mistyped `--db` is noticed).

    Raises:
        StoreUnavailable, SchemaTooNew, InvalidInput.
    """
    path, resolved_from = settings.resolve_db_path(db)
    origin = origin or resolved_from
    store = connect(path, create=create)
    opened = Opened(store, path, origin)
    if store.created:
        default = settings.default_db_path()
        if path != default and default.exists() and default.stat().st_size > 0:
            opened.warnings.append(
                f"created a new empty store at {path} (from {origin}); "
                f"an existing store was found at {default}"
            )
        else:
            opened.notes.append(f"created a new store at {path}" + ("" if origin == "default" else f" (from {origin})"))
    if store.backup_path:
        opened.warnings.append(f"migrated {path}; backup of the previous version at {store.backup_path}")
    return opened


# ---------------------------------------------------------------------------------------------
# Embedding helpers


def _embedder(store: Store) -> embed.Embedder | None:
    """The shared embedder when vectors can be used with this store, else None."""
    if not store.vector_available:
        return None
    return embed.get_embedder()


def _vector_bytes(vec) -> bytes:
    return vec.astype("float32").tobytes()


def backfill(store: Store, *, limit: int | None = BACKFILL_BATCH, batch_size: int = embed.BATCH_SIZE,
             max_seconds: float | None = None, newest_first: bool = False,
             progress: Callable[[int], None] | None = None, unsaved: dict | None = None) -> int:
    """Fill pending vectors (deferred embeddings) in batches. Returns how many were written.

    One walk over the pending memories, oldest first (or newest first: what was just remembered
    is what a recall is likely asked about). Each batch is embedded outside any transaction, then
    written in one short transaction; a memory changed meanwhile (an update, a decay step) is
    skipped: it stays pending for a later call and is not retried in this one (the walk goes on
    past it). So the work is bounded whatever other processes do (issue 17.2):

    - `limit` counts the memories embedded (written or skipped), not only those written;
    - `max_seconds` (wall clock) stops before a new batch once it has passed; after the first
      batch (embed.TIMED_FIRST_BATCH texts) each batch is sized to the time left at the rate
      measured so far (`embed.timed_batch`), so the overrun is about one text's embedding. Its
      writes wait for another writer's lock (a decay's, an import's) only for the time left (at
      least WRITE_GRACE_MS), and a lock that is not free by then ends it: the batch stays pending.

    `progress(written so far)` is called after each batch. `unsaved`, when given, receives
    {memory id: (dim,) vector} of the memories embedded but not written for want of the lock, so
    a recall can still use them.

    Raises:
        StoreUnavailable: without `max_seconds`, another writer held the lock for 30 s.
    """
    embedder = _embedder(store)
    if embedder is None:
        return 0
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds

    def write(most_ms: int = 30_000):  # a time-bounded fill waits for the write lock only as long as it has time
        left_ms = most_ms if deadline is None else min(most_ms, int((deadline - time.monotonic()) * 1000))
        return store.write(wait_ms=max(WRITE_GRACE_MS, left_ms))

    if not store.vectors_ready(embedder.model_id):
        try:
            with write(30_000 if deadline is None else WRITE_GRACE_MS):
                store.ensure_vector_table(embedder.model_id, embedder.dim)
        except StoreUnavailable:
            if deadline is None:
                raise
            write = _no_write  # no vector table yet and no lock in time: embed, keep in `unsaved`
    done = attempted = 0
    cursor: int | None = None  # the last id walked
    # rows per transaction; embedded in length-sorted batches of `batch_size`
    take_max = max(batch_size, BACKFILL_BATCH) if deadline is None else batch_size
    while limit is None or attempted < limit:
        take = take_max
        if deadline is not None:
            now = time.monotonic()
            take = embed.timed_batch(attempted, now - started, deadline - now, take_max)
            if not take:
                break
        if limit is not None:
            take = min(take, limit - attempted)
        if newest_first:
            rows = store.pending_embeddings(take, newest_first=True, before_id=cursor)
        else:
            rows = store.pending_embeddings(take, after_id=cursor or 0)
        if not rows:
            break
        attempted += len(rows)
        cursor = rows[-1][0]
        vectors = embedder.embed([content for _, content in rows], batch_size=batch_size)
        tokens.keep_counts([content for _, content in rows])  # a CLI recall of them needs no tokenizer
        try:
            with write():
                current = {m.id: m.content for m in store.get_memories([i for i, _ in rows]).values()}
                for (memory_id, content), vec in zip(rows, vectors):
                    if current.get(memory_id) == content:
                        store.put_vector(memory_id, _vector_bytes(vec))
                        done += 1
        except StoreUnavailable:
            if deadline is None:
                raise
            if unsaved is not None:
                unsaved.update((memory_id, vec) for (memory_id, _), vec in zip(rows, vectors))
            break  # out of time while another writer held the lock: this batch stays pending
        if progress is not None:
            progress(done)
        if len(rows) < take:
            break
    return done


def _no_write():
    raise StoreUnavailable("no time left to wait for the write lock")


def embed_new(store: Store, *, limit: int = embed.BATCH_SIZE) -> tuple[int, list[tuple[int, dict]]]:
    """Embed the `limit` newest pending memories (taken in id order) and report the near-duplicates among
    them: what `remember` would have said had it embedded inline (a server's remember replies
    before its vector exists; its warm thread calls this, FIELD-CASES/issue 13).

    Each memory's nearest neighbour is looked up among the stored vectors (one pass for the whole
    batch, `Store.nearest_each`) and among the memories embedded before it in this batch (their
    vectors are compared here: unit vectors, so the dot product is the cosine), so two
    near-identical memories in one batch are still reported. The lookups run before the write,
    which then only stores the vectors: a short write, so a `remember` arriving meanwhile waits for
    it as little as possible. A memory changed meanwhile stays pending.

    Returns:
        (vectors written, [(memory id, {'id': nearest memory, 'similarity': cosine})]).

    Raises:
        embed.ModelUnavailable: the model fails on these texts (they stay pending).
    """
    embedder = _embedder(store)
    if embedder is None:
        return 0, []
    # newest first: what `remember` just stored, even while older rows keep changing (a decay)
    rows = sorted(store.pending_embeddings(limit, newest_first=True))
    if not rows:
        return 0, []
    vectors = embedder.embed([content for _, content in rows])
    tokens.keep_counts([content for _, content in rows])  # a CLI recall of them needs no tokenizer
    with store.write():
        store.ensure_vector_table(embedder.model_id, embedder.dim)
    current = store.get_memories([i for i, _ in rows])
    threshold = config_value(store, "near_duplicate_threshold")
    fresh = [(memory_id, vec) for (memory_id, content), vec in zip(rows, vectors)
             if memory_id in current and current[memory_id].content == content]
    stored = _near_duplicates(store, embedder, [vec for _, vec in fresh],
                              [current[memory_id].project for memory_id, _ in fresh], [i for i, _ in fresh])
    kept: list[tuple[int, object, dict | None]] = []  # (memory id, vector, its near-duplicate)
    for (memory_id, vec), near in zip(fresh, stored):
        memory = current[memory_id]
        for other_id, other_vec, _ in kept:  # earlier in this batch: not stored yet
            other = current[other_id]
            similarity = float(vec @ other_vec)
            if other.project == memory.project and other.status == Status.ACTIVE.value and similarity >= threshold \
                    and (near is None or similarity > near["similarity"]):
                near = {"id": other_id, "similarity": round(similarity, 4)}
        kept.append((memory_id, vec, near))
    done, near_found = 0, []
    with store.write():
        now = store.get_memories([i for i, _, _ in kept])
        for memory_id, vec, near in kept:
            if memory_id not in now or now[memory_id].content != current[memory_id].content:
                continue
            store.put_vector(memory_id, _vector_bytes(vec))
            done += 1
            if near is not None:
                near_found.append((memory_id, near))
    return done, near_found


def embed_in_background(db_path: str | os.PathLike) -> bool:
    """Start a detached process that fills the pending vectors of `db_path` and exits (at most one
    per database at a time: it holds `<db>.embed.lock`; a second one exits at once, and the holder
    looks for new pending memories after releasing the lock, so none is left behind). It walks
    what is pending newest first (the memory just remembered first), each memory once a round, at
    most 10 rounds and BACKGROUND_EMBED_SECONDS in all (issue 17.2: opportunistic embedding is
    bounded in attempts and time); a backlog beyond that is `memsafe embed`'s work.

    Nothing is lost if it never runs or is killed: the memories stay pending, `status` counts them,
    and the next `embed`, `serve` or default `recall` fills them. `MEMSAFE_BACKGROUND_EMBED=0`
    turns it off. Returns whether a process was started (False when turned off or spawning failed).
    """
    import subprocess
    import sys

    if os.environ.get("MEMSAFE_BACKGROUND_EMBED", "1") == "0" or os.environ.get("MEMSAFE_NO_MODEL"):
        return False
    code = "import sys; from memsafe.api.core import _background_embedder; _background_embedder(sys.argv[1])"
    detach: dict = {"start_new_session": True} if os.name == "posix" else {
        "creationflags": getattr(subprocess, "DETACHED_PROCESS", 0) | getattr(subprocess, "CREATE_NO_WINDOW", 0)}
    try:
        subprocess.Popen([sys.executable, "-c", code, str(db_path)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, **detach)
    except OSError:
        return False
    return True


def _background_embedder(db_path: str) -> None:
    """Body of the process `embed_in_background` starts (see there). It runs at a lower CPU
    priority (nice +10): the commands a user or an agent runs meanwhile come first."""
    with contextlib.suppress(AttributeError, OSError):
        os.nice(10)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; a second embedder only repeats work, never loses it
        fcntl = None
    lock_path = f"{db_path}.embed.lock"
    if settings.is_db_url(db_path):  # one lock per database URL, in the user's data folder
        import hashlib

        settings.data_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = str(settings.data_dir() / f"embed-{hashlib.sha256(db_path.encode()).hexdigest()[:16]}.lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + BACKGROUND_EMBED_SECONDS
    try:
        for _round in range(10):  # bounded: a memory the model keeps failing on stays pending
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return  # another embedder holds it and will see our memories
            try:
                opened = open_store(db_path, create=False)
                try:  # one walk, newest (the memory just remembered) first; each memory tried once
                    backfill(opened.store, limit=None, newest_first=True, max_seconds=deadline - time.monotonic())
                finally:
                    opened.store.close()
            finally:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            opened = open_store(db_path, create=False)
            try:  # a memory committed while we held the lock, whose own embedder gave up
                left = opened.store.pending_count() if _embedder(opened.store) is not None else 0
            finally:
                opened.store.close()
            if not left or time.monotonic() >= deadline:
                return
    except Exception:  # a detached helper: never a traceback on a terminal that is not ours
        return
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Handlers


def remember(
    store: Store,
    content: str,
    *,
    kind: str = Kind.GENERAL.value,
    project: str | None = None,
    tags: Sequence[str] = (),
    source: str = Source.USER.value,
    importance: float | None = None,
    confidence: float | None = None,
    embed_now: bool | str = True,
    entities: Sequence[str] = (),
    redact: bool = False,
    uid: str | None = None,
    author: str | None = None,
) -> Memory:
    """Store a memory. Returns it with its new id; `near_duplicate` names the closest memory in
    the same project when it is nearly the same (cosine ≥ `near_duplicate_threshold`); it is
    reported, not refused.

    Args:
        content: the text (`clean_text`: control characters become spaces), at most 1,000,000 chars.
        project: project key or name; None stores a global memory.
        embed_now: compute the vector now (True), or leave it pending (False) for `backfill`,
            `embed_new` or `embed_in_background`; "if-loaded": now only if this process already
            has the model loaded (a fresh CLI process would spend ~0.3 s loading it), else pending.
            A pending memory is found by keywords at once and by meaning once embedded.
        entities: entity names to link besides those extracted from the content (graph).
        redact: store content that looks like a credential with each secret replaced by
            `[REDACTED:<type>]` (see `memsafe.safety`) instead of refusing it.
        uid: the stable uid to give the memory (a git commit's, see `api.hooks.commit_uid`);
            default a random one. The caller makes sure it is not taken.
        author: who wrote it (`clean_author`; a team server passes its token's user); None: unknown.

    Raises:
        InvalidInput: bad content, kind, source, tag, author or number.
        SecretDetected: the content looks like a credential and `redact` is False.
        Duplicate: the same content already exists (not forgotten) in the same project; the
            message and `existing_id` name it.
    """
    text = _screen_secrets(clean_text(content), redact)
    kind_v = _enum_value(Kind, kind, "kind")
    source_v = _enum_value(Source, source, "source")
    tag_list = clean_tags(tags)
    project_v = clean_project(project)
    importance_v = _unit_interval(importance, "importance", 0.5)
    confidence_v = _unit_interval(confidence, "confidence", 0.8)
    digest = content_hash(text)
    entity_names = graph_api.clean_entity_names(entities)
    author_v = clean_author(author)

    existing = store.find_duplicate(digest, project_v)
    if existing is not None:
        raise Duplicate(f"already remembered as memory {existing}", existing)

    if embed_now == "if-loaded":
        embed_now = embed.loaded()
    embedder = _embedder(store) if embed_now else None
    try:
        vector = embedder.embed_one(text) if embedder else None
    except embed.ModelUnavailable:
        vector = None  # stored now, embedded later by a process whose model works
    near = _near_duplicate(store, embedder, vector, project_v)

    now = clock.now_iso()
    with store.write():
        existing = store.find_duplicate(digest, project_v)
        if existing is not None:
            raise Duplicate(f"already remembered as memory {existing}", existing)
        memory_id = store.insert_memory(
            {
                "uid": uid or uuid.uuid4().hex,
                "content": text,
                "kind": kind_v,
                "project": project_v,
                "source": source_v,
                "importance": importance_v,
                "confidence": confidence_v,
                "created_at": now,
                "updated_at": now,
                "content_updated_at": now,
                "content_hash": digest,
                "author": author_v,
            },
            tag_list,
        )
        if vector is not None:
            store.ensure_vector_table(embedder.model_id, embedder.dim)
            store.put_vector(memory_id, _vector_bytes(vector))
        graph_api.link_entities(store, memory_id, text, entity_names, now)
        store.add_event(now, "remember", memory_id, f"source={source_v}")
    memory = store.get_memory(memory_id)
    memory.near_duplicate = near
    return memory


def _near_duplicates(store: Store, embedder, vectors: list, projects: list[str | None],
                     exclude: list[int | None]) -> list[dict | None]:
    """For each vector ((dim,) float32), {'id', 'similarity'} of the closest active memory in
    exactly that project (other than the id at the same place in `exclude`: the memory itself when
    another process embedded it meanwhile) when its cosine similarity is at least config
    `near_duplicate_threshold`, else None; in order. A batch is one pass over the stored vectors
    (`Store.nearest_each`) instead of one search each."""
    if not vectors or not store.vectors_ready(embedder.model_id):
        return [None] * len(vectors)
    threshold = config_value(store, "near_duplicate_threshold")
    found = store.nearest_each([_vector_bytes(v) for v in vectors], projects, exclude)
    return [None if hit is None or 1.0 - hit[1] < threshold else {"id": hit[0], "similarity": round(1.0 - hit[1], 4)}
            for hit in found]


def _near_duplicate(store: Store, embedder, vector, project: str | None) -> dict | None:
    """`_near_duplicates` of one vector (None: not embedded, no duplicate)."""
    return None if vector is None else _near_duplicates(store, embedder, [vector], [project], [None])[0]


def get(store: Store, memory_id: int, *, scope: Scope | None = None, use: bool = False) -> Memory:
    """One memory by id, whatever its status.

    Args:
        scope: the projects the caller may reach (`make_scope`: the current project plus global,
            or every project); None reaches any project (internal callers). See `reachable`.
        use: a person or an agent asked for this memory explicitly (CLI `get`, MCP get_memory):
            count it as used (access_count + 1, last used now), the only use signal besides
            `confirm` and `update`; being returned by `recall` is not one (issue 11: recall
            would feed itself). Bookkeeping only: a busy store skips it rather than fail the read.

    Raises: NotFound, InvalidInput.
    """
    memory = reachable(store, [_check_id(memory_id)], scope)[memory_id]
    if use and memory.status == Status.ACTIVE.value:
        try:
            with store.write(wait_ms=2000):
                store.touch([memory.id], clock.now_iso())
        except StoreUnavailable:
            pass
    return memory


def reachable(store: Store, memory_ids: Sequence[int], scope: Scope | None, *, after: str = "") -> dict[int, Memory]:
    """The memories of `memory_ids` (checked ids) that a caller with `scope` may read or change:
    the one scope check of every handler that takes an id (get, history, update, forget,
    restore, purge, confirm, confidence), so a write can never read or edit another project's
    memory by guessing its id (issue 12).

    Args:
        scope: see `get`; None reaches any project.
        after: text put after the ids in the NotFound message (e.g. "; nothing was purged").

    Returns: {id: Memory} for every id.

    Raises:
        NotFound: an id does not exist, or its memory is outside `scope`. Within a scope the two
            get the same message, which names the scope searched and how to widen it, so it
            neither confirms nor denies that the memory exists in another project. An id that was
            purged is said to be (its content-free audit stub holds no project, so every scope gets
            the same words: that the id was purged, and when), instead of suggesting
            --all-projects, which cannot find it either.
    """
    found = store.get_memories(memory_ids)
    missing = [i for i in memory_ids if i not in found or (scope is not None and not in_scope(found[i].project, scope))]
    if not missing:
        return found
    purged = {i: at for i in missing if i not in found and (at := store.last_event_at(i, "purge"))}
    absent = [i for i in missing if i not in purged]
    said = []
    if absent:
        said.append(f"no memory with id {_ids_shown(absent)}")
        if scope is not None and scope.projects is not None:
            said[0] += (f" in project {scope.projects[0]} or among global memories" if scope.projects
                        else " among global memories (no project here)")
    if purged:
        when = min(purged.values())[:16].replace("T", " ") + (" UTC or later" if len(purged) > 1 else " UTC")
        said.append(("memories {} were" if len(purged) > 1 else "memory {} was").format(_ids_shown(list(purged)))
                    + f" purged ({when}): the text is gone from this store; only `import --allow-purged` of a file "
                    "that still holds it brings it back")
    hint = "; --all-projects (MCP: all_projects=true on the read tools) looks in every project" \
        if absent and scope is not None and scope.projects is not None else ""
    raise NotFound("; ".join(said) + after + hint)


def _ids_shown(ids: Sequence[int]) -> str:
    """'3, 4 and 9 more': at most ten ids, for messages."""
    return ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def in_scope(project: str | None, scope: Scope) -> bool:
    """True if a memory of `project` (None: global) is inside the projects of `scope`."""
    if scope.projects is None:
        return True
    return project in scope.projects or (project is None and scope.include_global)


def admits(scope: Scope, m) -> bool:
    """True if `m` (a `Memory` or a `history.PastState`: project, kind, tags, created_at as UTC
    ISO-8601) passes the project, kind, tag and since filters of `scope`; its status is the
    caller's to check (a past state has its own)."""
    return (in_scope(m.project, scope) and (not scope.kinds or m.kind in scope.kinds)
            and set(scope.tags) <= set(m.tags) and not (scope.since and m.created_at < scope.since))


def forget(store: Store, memory_id: int, *, reason: str | None = None, scope: Scope | None = None) -> Memory:
    """Soft-forget: hidden from every recall path (lexical, vector, graph, export by default),
    kept for audit and `restore`. `scope` as in `get` (a memory outside it is NotFound).
    Raises NotFound, InvalidInput (already forgotten)."""
    why = _controls_to_space(_fix_surrogates(reason)).strip()[:200] if reason else None
    now = clock.now_iso()
    with store.write():
        memory = get(store, memory_id, scope=scope)
        if memory.status == Status.FORGOTTEN.value:
            raise InvalidInput(
                f"memory {memory_id} is already forgotten; `restore {memory_id}` brings it back "
                "(MCP: forget with undo=true)"
            )
        store.update_memory(
            memory_id,
            {"status": Status.FORGOTTEN.value, "status_reason": why, "status_changed_at": now, "updated_at": now},
        )
        store.add_event(now, "forget", memory_id, "reason given" if why else None)
    return get(store, memory_id)


def purge(store: Store, memory_ids: Sequence[int], *, scope: Scope | None = None) -> PurgeReport:
    """Destroy memories: rows, tags, FTS entries, vectors, history, graph links. Irreversible.

    Freed pages are zeroed (secure_delete, FTS5 secure-delete) and the WAL is checkpointed and
    truncated, so the text is gone from the file. A content-free audit stub remains per memory:
    action `purge`, its id and `uid=<uid>` (a random id, or for server-memory observations a
    hash of entity and text), so an import never brings it back (`import_file`).

    Copies memsafe made before are not rewritten: those that still hold a purged memory are
    named, with `PurgeReport.remove_command`, for the user to remove: in `PurgeReport.backups`
    the copies of the database file (migration backups `<db>.bak-v<N>`, a killed conversion's
    `<db>.convert-tmp`: `Store.backups_holding`), in `PurgeReport.exports` the files `export`
    wrote (to a path; the audit log keeps it) that still exist and hold a purged uid.

    Args:
        scope: as in `get`: an id outside it counts as missing.

    Raises:
        InvalidInput: no ids; NotFound: an id does not exist or is outside `scope` (nothing is
        purged then).
    """
    if isinstance(memory_ids, (str, bytes)) or not isinstance(memory_ids, Iterable):
        raise InvalidInput(f"purge takes a list of memory ids, got {_shown(memory_ids)}")
    ids = list(dict.fromkeys(_check_id(i) for i in memory_ids))
    if not ids:
        raise InvalidInput("no memory ids to purge")
    now = clock.now_iso()
    with store.write():
        found = reachable(store, ids, scope, after="; nothing was purged")
        linked = [e for ents in store.memory_entity_ids(ids).values() for e in ents]
        versions = store.delete_memories(ids)
        store.delete_orphan_entities(linked)  # names extracted from the purged text go too
        for i in ids:
            store.add_event(now, "purge", i, f"uid={found[i].uid}")
    store.checkpoint()
    from memsafe import transfer  # the export format: only purge reads export files

    uids = [found[i].uid for i in ids]
    return PurgeReport(purged_ids=ids, versions_removed=versions,
                       backups=[str(b) for b in store.backups_holding(uids)],
                       exports=transfer.files_holding(store.export_paths(), uids))


# ---------------------------------------------------------------------------------------------
# Recall


def config_value(store: Store, key: str):
    """The effective value of a config key (stored, else default)."""
    spec = settings.CONFIG_KEYS[key]
    raw = store.config_get(key)
    return spec.default if raw is None else spec.parse(raw)


def _config_snapshot(store: Store) -> dict:
    """Every config key's effective value, read in one query (recall reads ~18 of them)."""
    stored = store.config_items()
    return {
        name: spec.parse(stored[name]) if name in stored else spec.default
        for name, spec in settings.CONFIG_KEYS.items()
    }


def recall(
    store: Store,
    query: str,
    *,
    project: str | None = None,
    all_projects: bool = False,
    kinds: Sequence[str] = (),
    tags: Sequence[str] = (),
    since: str | None = None,
    budget: int | None = None,
    limit: int | None = None,
    mode: str = "hybrid",
    include_forgotten: bool = False,
    framed: bool = False,
) -> RecallResult:
    """Find the memories most relevant to `query`, packed into a token budget.

    Pipeline (DESIGN.md), one named step each: scope → time (the windows the query names,
    `retrieve.parse_query`) → candidates (BM25 and vector KNN, plus memories one relation away
    from entities the query names; `_candidates`) → fusion on absolute scales with the time and
    graph terms (`retrieve.fuse`) → multi-signal score (`retrieve.rank`) → packing into
    effective budget = budget × safety_multiplier (tokens, cl100k_base, counted on the exact
    returned text), of which `graph_share` is reserved for graph context (`_pack`). No
    bookkeeping: being returned by recall is not a use (it would feed itself: issue 11); only
    explicit use counts (`get` from a person or an agent, `confirm`, `update`).
    `tokens_used` = memory tokens + `graph_tokens` ≤ effective.

    Args:
        mode: 'hybrid' (default), 'lexical' or 'vector'.
        budget: tokens; default from config `token_budget`.
        limit: maximum memories; default from config `recall_limit`.
        framed: each memory costs its block in a reply framed for a model (`memsafe.framing`:
            header line and indented text, as MCP replies and agent hooks show it), and the graph
            context its `[graph]` block; otherwise the text alone (the CLI's table and JSON).

    Raises:
        InvalidInput: empty query, budget or limit < 1, unknown kind or mode.
    """
    text = clean_text(query, "query", MAX_QUERY_CHARS)
    cfg = _config_snapshot(store)
    if mode not in ("hybrid", "lexical", "vector"):
        raise InvalidInput(f"unknown mode {_shown(mode)}; use hybrid, lexical or vector")
    budget_v = cfg["token_budget"] if budget is None else _whole(budget, "token_budget", "budget")
    limit_v = cfg["recall_limit"] if limit is None else _whole(limit, "recall_limit", "limit")
    scope = make_scope(project=project, all_projects=all_projects, kinds=kinds, tags=tags, since=since)
    if include_forgotten:  # forgotten memories are otherwise invisible to every path (FIELD-CASES F10)
        scope.statuses = [Status.ACTIVE.value, Status.FORGOTTEN.value]
    effective = max(1, int(budget_v * cfg["safety_multiplier"]))
    notes: list[str] = []
    now = clock.now()
    q = retrieve.parse_query(text, now)
    cands, memories, used_mode = _candidates(store, q, scope, max(cfg["candidate_depth"], limit_v), mode, cfg, notes)
    ranked = score_candidates(cands, q, one_half_weight(cfg, used_mode, notes))
    heads = Heads(store, [memories[c.id] for _, c in ranked], now, framed=framed, tagged=bool(scope.tags))
    hits, graph_text, graph_tokens = _pack(store, ranked, memories, effective, cfg["graph_share"], limit_v, scope,
                                           notes, heads)
    if ranked and not hits:
        notes.append(f"a budget of {count_of(budget_v, 'token')} is too small for any memory")
    elif not ranked and scope.projects is not None:
        notes += _found_elsewhere(store, q.lexical_text, scope)
    return RecallResult(
        query=text,
        budget=budget_v,
        effective_budget=effective,
        tokens_used=sum(h.tokens for h in hits) + graph_tokens,
        hits=hits,
        mode=used_mode,
        scope=_scope_list(scope),
        notes=notes,
        graph_context=graph_text,
        graph_tokens=graph_tokens,
        at=clock.to_iso(now),
    )


ELSEWHERE_CAP = 100  # keyword matches counted in other projects when a recall finds nothing in its own


def _found_elsewhere(store: Store, text: str, scope: Scope) -> list[str]:
    """For a recall that found nothing in `scope` (a project and global memories): a note saying
    how many memories of other projects match `text` by keyword (the same filters; one word-index
    query of at most ELSEWHERE_CAP hits, and their rows; no vector search) and how to reach them,
    as `reachable` says for ids; no note when none does."""
    match, exact = retrieve.fts_query(text), retrieve.exact_terms(text)
    if match is None and not exact:
        return []
    hits = store.fts_search(match, dataclasses.replace(scope, projects=None, include_global=True), ELSEWHERE_CAP,
                            exact)
    found = store.get_memories([i for i, _ in hits], tags=False)
    projects = Counter(m.project for m in found.values() if not in_scope(m.project, scope))
    if not projects:
        return []
    n = sum(projects.values())
    here = (f"project {scope.projects[0]} or global memories" if scope.projects
            else "global memories (no project here)")
    most = sorted(projects.items(), key=lambda item: (-item[1], item[0]))[:3]  # most matches first, then by name
    named = ", ".join(f"{name} {k}" for name, k in most) + (", …" if len(projects) > 3 else "")
    return [f"nothing in {here}; {'at least ' if len(hits) >= ELSEWHERE_CAP else ''}"
            f"{count_of(n, 'match')} in other projects ({named}): --all-projects (MCP: all_projects=true) "
            "searches them"]


def default_config() -> dict:
    """Every config key's default value."""
    return {name: spec.default for name, spec in settings.CONFIG_KEYS.items()}


def one_half_weight(cfg: dict, mode: str, notes: list[str]) -> dict:
    """The config a recall of one half alone ranks with (`mode` 'lexical' or 'vector': asked
    for, or lexical when vectors are unavailable): `cfg` with that half's fusion weight at its
    default when it is set to 0, and a note saying so. A fusion weight scales one half against the
    other; 0 is allowed beside a non-zero other half (`check_config_pair`), and alone it ranked
    nothing: `weight_lexical 0` made every recall without the model, and `--mode lexical`, return
    nothing (break-it, session 11). `cfg` itself is returned unchanged otherwise."""
    key = {"lexical": "weight_lexical", "vector": "weight_vector"}.get(mode)
    if key is None or cfg[key] > 0:
        return cfg
    default = settings.CONFIG_KEYS[key].default
    notes.append(f"{key} is 0, which ranks nothing in a {mode}-only recall; {default:g} (its default) was used")
    return {**cfg, key: default}


def score_candidates(cands: Sequence[retrieve.Candidate], q: retrieve.Query, cfg: dict
                     ) -> list[tuple[float, retrieve.Candidate]]:
    """Steps fusion (with time and graph), context (answers before questions), a time-only
    query's time first (`retrieve.time_first`), exact terms first and scoring, pure:
    [(score, candidate)] best first."""
    fusion = retrieve.Fusion(
        weight_lexical=cfg["weight_lexical"], weight_vector=cfg["weight_vector"],
        min_similarity=cfg["min_similarity"], coverage_power=cfg["coverage_power"],
        substance_words=cfg["substance_words"], weight_time=cfg["weight_time"], weight_hop=cfg["weight_hop"],
        weight_context=cfg["weight_context"],
    )
    weights = retrieve.Weights(
        recency=cfg["weight_recency"], access=cfg["weight_access"], graph=cfg["weight_graph"],
        confidence=cfg["weight_confidence"], decay=cfg["weight_decay"],
        recency_half_life_days=cfg["recency_half_life_days"],
    )
    relevance = retrieve.in_context(cands, retrieve.fuse(cands, q, fusion), fusion.weight_context)
    relevance = retrieve.answers_first(relevance, cands, cfg["weight_question"])
    relevance = retrieve.time_first(relevance, cands, q, cfg["weight_time"])
    held = {c.id: c.exact for c in cands if c.exact}
    for i in held:  # a memory holding an exact term ranks first in every mode, found by meaning or not
        relevance.setdefault(i, 0.0)
    return retrieve.rank(cands, retrieve.exact_first(relevance, held), weights, q.now or clock.now())


def _candidates(store: Store, q: retrieve.Query, scope: Scope, depth: int, mode: str, cfg: dict, notes: list[str]
                ) -> tuple[list[retrieve.Candidate], dict[int, Memory], str]:
    """Step "candidates": BM25 (on the query without its date words) and vector KNN (on the query
    without the words half the store holds, `_vector_text`; in vector mode the memories holding
    an exact term join too) in `scope`, plus memories one relation away from an entity the query
    names (when weight_hop > 0), with the features the pure steps read. Returns (candidates in
    scope, their memories, mode used)."""
    # The query is embedded on a worker thread (loading the model first in a fresh process) while
    # this thread runs the BM25 search: ONNX Runtime and SQLite both release the GIL.
    # Everything that does not need the query's vector runs before waiting for it, the rows and
    # features of the lexical and graph candidates included: a new query's embedding (~8 ms on 2
    # cores) outlasts the BM25 search at 10,000 memories, and what follows the wait is the latency
    # that remains (session 12: 6.6 ms after the wait, of 16.4 at the median).
    query_vector = (_embed_query_async(store, _vector_text(store, q.text), scope, depth)
                    if mode in ("hybrid", "vector") else None)
    lexical = _lexical(store, q.lexical_text, scope, depth) if mode in ("hybrid", "lexical") else []
    coverage, idf_sum = _coverage(store, q.lexical_text, lexical) if lexical else ({}, 0.0)
    # no BM25 in vector mode, but the memories holding an exact term still come first
    exact = store.fts_search(None, scope, depth, retrieve.exact_terms(q.lexical_text)) if mode == "vector" else lexical
    held = getattr(exact, "held", {}) if mode == "vector" else {}
    notes += _unheld_notes(q.text, getattr(exact, "exact", {}))
    hops = graph_api.one_hop(store, graph_api.query_entities(store, q.text), scope)[0] if cfg["weight_hop"] > 0 else {}
    rows = _Rows(store, scope, cfg["weight_context"] > 0)
    dated = _dated(store, q, scope, depth) if cfg["weight_time"] > 0 else []
    by_id = _lexical_candidates(held, lexical, coverage, idf_sum, hops, dated)
    rows.read(list(by_id))
    _memory_features([c for i, c in by_id.items() if i in rows.memories], rows.memories, rows.degrees)
    vector, used_mode = ([], mode) if query_vector is None else _vector(store, query_vector, mode, scope, depth, notes)
    if mode == "vector" and used_mode == "lexical":  # vectors unavailable: fall back to BM25
        lexical, held = _lexical(store, q.lexical_text, scope, depth), {}
        coverage, idf_sum = _coverage(store, q.lexical_text, lexical) if lexical else ({}, 0.0)
        by_id = _lexical_candidates(held, lexical, coverage, idf_sum, hops, dated)
    for rank, (i, sim) in enumerate(vector, start=1):
        c = by_id.setdefault(i, retrieve.Candidate(i))
        c.similarity, c.vector_rank = sim, rank
    rows.read(list(by_id))
    memories = rows.memories
    if rows.turns:
        retrieve.link_turns(by_id, {i: m for i, m in memories.items()
                                    if i in by_id or (m.status in scope.statuses and admits(scope, m))})
    shown = {i: c for i, c in by_id.items() if i in memories and memories[i].status in scope.statuses}
    _memory_features([c for c in shown.values() if c.created_at is None], memories, rows.degrees)
    _word_features(shown.values(), memories, cfg, q.words)
    return list(shown.values()), memories, used_mode


def _dated(store: Store, q: retrieve.Query, scope: Scope, depth: int) -> list[int]:
    """Step "time", as a candidate source: the `depth` latest memories in `scope` created in each
    window the query names. A query such as "what happened last week?" says nothing a memory
    holds but its time, and found nothing (session 12); these rank below every memory that
    matches what the query says (`retrieve.fuse`), and one that does gains the time term."""
    ids: dict[int, None] = {}
    for w in q.windows:
        ids.update(dict.fromkeys(store.created_between(scope, clock.to_iso(w.start), clock.to_iso(w.end), depth)))
    return list(ids)


def _lexical_candidates(held: dict[int, int], lexical: list[tuple[int, float]], coverage: dict[int, float],
                        idf_sum: float, hops: dict[int, float], dated: Sequence[int]
                        ) -> dict[int, retrieve.Candidate]:
    """Step "candidates": {id: Candidate} of the memories holding exact terms (`held`: how many),
    the BM25 hits (`lexical`, best first; bm25 over `idf_sum`, with their `coverage`), the
    memories one relation away from a named entity (`hops`: strength) and those created in a
    time the query names (`dated`, `_dated`): every candidate that needs no query vector."""
    by_id = {i: retrieve.Candidate(i, exact=n) for i, n in held.items()}
    exact = getattr(lexical, "held", {})
    for rank, (i, bm25) in enumerate(lexical, start=1):
        by_id[i] = retrieve.Candidate(i, bm25=-bm25 / idf_sum if idf_sum > 0 else 0.0,
                                      coverage=coverage.get(i, 0.0), lexical_rank=rank, exact=exact.get(i, 0))
    for i, strength in hops.items():
        by_id.setdefault(i, retrieve.Candidate(i)).hop = strength
    for i in dated:
        by_id.setdefault(i, retrieve.Candidate(i)).dated = True
    return by_id


class _Rows:
    """Step "candidates": the rows a recall's candidates need, read in batches as the candidates
    become known (the lexical and graph ones before the query's vector is ready, the vector ones
    after), each id once: the memories and their entity degrees (`Store.recall_rows`: shared,
    without tags, so read only; where the scope filters by tags, `admits`, read with them), and
    with `turns` (weight_context > 0) the conversation turns just before and after each candidate
    turn (`retrieve.link_turns`; a neighbour of another kind is never linked,
    `retrieve.same_conversation`)."""

    def __init__(self, store: Store, scope: Scope, turns: bool):
        self.store, self.scope, self.turns = store, scope, turns
        self.memories: dict[int, Memory] = {}
        self.degrees: dict[int, int] = {}
        self._read: set[int] = set()  # ids read in full
        self._near: set[int] = set()  # neighbouring turns asked for (read only if conversation turns)
        self._around: set[int] = set()  # candidate turns whose neighbours were asked for

    def read(self, ids: Sequence[int]) -> None:
        """Read the rows of those of `ids` (candidates) not read yet, and with `turns` those of the
        turns just before and after each candidate turn: a turn first read as another's neighbour
        is read again only for its own neighbours (break-it, session 12)."""
        ids = list(dict.fromkeys(ids))
        new = [i for i in ids if i not in self._read and i not in self.memories]
        if new:
            self._read.update(new)
            self._add(new, None)
        if not self.turns:
            return
        turns = [i for i in ids if i not in self._around and i in self.memories
                 and self.memories[i].kind == Kind.CONVERSATION.value]
        self._around.update(turns)
        wanted = {n for i in turns for n in (i - 1, i + 1)} - self._read - self._near - self.memories.keys()
        if wanted:
            self._near.update(wanted)
            self._add(sorted(wanted), Kind.CONVERSATION.value)

    def _add(self, ids: list[int], kind: str | None) -> None:
        if self.scope.tags:
            memories = self.store.get_memories(ids, kind=kind)
            degrees = self.store.entity_degrees(list(memories))
        else:
            memories, degrees = self.store.recall_rows(ids, kind=kind)
        self.memories.update(memories)
        self.degrees.update(degrees)


def fill_features(store: Store, cands: dict[int, retrieve.Candidate], memories: dict, cfg: dict,
                  known: frozenset[str] = frozenset()) -> None:
    """Step "candidates": set each candidate's features that the memory holds (`retrieve.Candidate`:
    times, uses, confidence, decay level, entity degree: `_memory_features`; content words beyond
    the query's words `known`: `_word_features`) from `memories` ({id: `Memory` or
    `history.PastState`}, holding every id of `cands`)."""
    _memory_features(cands.values(), memories, store.entity_degrees(list(cands)))
    _word_features(cands.values(), memories, cfg, known)


def _memory_features(cands: Iterable[retrieve.Candidate], memories: dict, degrees: dict[int, int]) -> None:
    """Set each candidate's times, uses, confidence, decay level and entity degree (`degrees`,
    absent: 0) from its memory in `memories`."""
    for c in cands:
        m = memories[c.id]
        c.created_at = clock.parse_iso(m.created_at)
        c.last_used_at = clock.parse_iso(m.last_accessed_at) if m.last_accessed_at else None
        c.access_count, c.confidence, c.decay_level = m.access_count, m.confidence, m.decay_level
        c.graph_degree = degrees.get(c.id, 0)


def _word_features(cands: Iterable[retrieve.Candidate], memories: dict, cfg: dict, known: frozenset[str]) -> None:
    """Set each candidate's content words beyond the query's words `known` (`retrieve.content_words`),
    read by the vector half only (0 for a candidate it did not find) and only up to
    `substance_words`, the most it weighs; and the share of its text that asks a question
    (`retrieve.question_share`), when `weight_question` reads it."""
    words = math.ceil(cfg["substance_words"])
    asks = cfg["weight_question"] > 0
    for c in cands:
        content = memories[c.id].content
        c.words = retrieve.content_words(content, words, known) if c.similarity is not None else 0
        c.asks = retrieve.question_share(content) if asks else 0.0


def _pack(store: Store, ranked: list[tuple[float, retrieve.Candidate]], memories: dict[int, Memory], effective: int,
          graph_share: float, limit: int, scope: Scope, notes: list[str], heads: Heads) -> tuple[list[Hit], str, int]:
    """Step "packing": memories first into (effective − graph share); the relations among their
    entities into the graph share; what the graph leaves unused flows back to memories. Each
    memory costs what `heads` says (its text, or its block in a framed reply). Notes name a
    memory cut to fit and better matches that did not fit. Returns (hits, graph text, its tokens)."""
    texts = [memories[c.id].content for _, c in ranked]
    reserve = int(effective * graph_share)

    def fill(room: int) -> tuple[list[retrieve.Packed], str, int]:
        packed = retrieve.pack(texts, max(1, room), heads.count, heads.truncate, limit=limit, overhead=heads.overhead)
        used = sum(p.tokens for p in packed)
        text, n = graph_api.context_text(store, [ranked[p.index][1].id for p in packed],
                                         min(reserve, effective - used), scope, framed=heads.framed)
        return packed, text, n

    packed, graph_text, graph_tokens = fill(effective - reserve)
    if reserve and graph_tokens < reserve and (
        any(p.truncated for p in packed) or len(packed) < min(limit, len(texts))
    ):  # a memory was cut or left out: give memories the graph share the relations do not need
        packed, graph_text, graph_tokens = fill(effective - graph_tokens)
    notes += _pack_notes(packed, [c.id for _, c in ranked], heads.whole, limit)
    order = {c.id: n for n, (_, c) in enumerate(ranked)}

    def context_of(c: retrieve.Candidate) -> int | None:  # the neighbour that lent it relevance, ranked highest
        near = [n for n in (c.before, c.after) if n in order]
        return min(near, key=order.__getitem__) if near else None

    return [
        Hit(memory=heads.memory(p.index), text=p.text, tokens=p.tokens, score=round(score, 6), truncated=p.truncated,
            lexical_rank=c.lexical_rank, vector_rank=c.vector_rank, context_of=context_of(c))
        for p in packed
        for score, c in [ranked[p.index]]
    ], graph_text, graph_tokens


class Heads:
    """Step "packing": what each ranked memory (`memories`, best first) costs in the reply, for
    `retrieve.pack`: with `framed`, its block as a model reads it (`memsafe.framing`: the header
    line, ages as of `now`, and the text indented); otherwise its text alone (the CLI shows it
    in a table or as JSON). Tokens: cl100k_base.

    Returned memories are copies, with their tags (`memory`): the rows `_candidates` read are
    shared with later recalls (`Store.recall_rows`) and hold none unless `tagged`; tags are read
    in batches of BATCH as packing reaches a memory, one query for a usual recall."""

    BATCH = 16

    def __init__(self, store: Store, memories: Sequence[Memory], now: datetime, *, framed: bool, tagged: bool):
        self.store, self.memories, self.now, self.framed = store, memories, now, framed
        self._tags: dict[int, list[str]] = {m.id: list(m.tags) for m in memories} if tagged else {}
        self._cost: dict[tuple[int, bool], int] = {}
        self.count = framing.body_tokens if framed else tokens.count
        self.truncate = framing.cut_body if framed else tokens.truncate

    def memory(self, index: int) -> Memory:
        """A copy of the memory at `index`, with its tags."""
        m = self.memories[index]
        if m.id not in self._tags:
            batch = [x.id for x in self.memories[index:index + self.BATCH] if x.id not in self._tags]
            self._tags.update(self.store.tags_of(batch))
        return dataclasses.replace(m, tags=list(self._tags[m.id]))

    def overhead(self, index: int, cut: bool) -> int:
        """Tokens the framing adds to the memory at `index` (its header line, `framing.head_tokens`;
        `cut`: as an excerpt); 0 unframed."""
        if not self.framed:
            return 0
        key = (index, cut)
        if key not in self._cost:
            self._cost[key] = framing.head_tokens(framing.header(self.memory(index), now=self.now, cut=cut))
        return self._cost[key]

    def whole(self, index: int) -> int:
        """Tokens of the memory at `index` whole, framing included."""
        return self.overhead(index, False) + self.count(self.memories[index].content)


def _pack_notes(packed: Sequence[retrieve.Packed], ids: Sequence[int], whole: Callable[[int], int],
                limit: int) -> list[str]:
    """What a recall's packing (`retrieve.pack` of the ranked memories `ids`, best first) cut or
    left out for lack of budget, as notes naming the memories and their size (`whole(index)`:
    tokens of one whole, as packing counts it), so nothing relevant vanishes silently (issue 17.6): a memory cut
    to fit, better matches that did not fit, and lower-ranked matches that did not fit while the
    limit left room for them."""
    notes = []
    for p in packed:
        if p.truncated:
            notes.append(f"memory {ids[p.index]} cut to {p.tokens} of {whole(p.index)} tokens to fit "
                         f"the budget; `get {ids[p.index]}` shows it whole")
    if not packed:
        return notes  # the caller says the budget is too small for any memory

    def named(indexes: list[int]) -> str:
        shown = ", ".join(f"{ids[i]} ({count_of(whole(i), 'token')})" for i in indexes[:5])
        return shown + (f" and {len(indexes) - 5} more" if len(indexes) > 5 else "")

    above, below = retrieve.unfitted(packed, len(ids), limit)
    if above:
        notes.append(f"better-ranked memories did not fit the budget: {named(above)}; raise the budget or `get` them")
    if below:
        notes.append(f"lower-ranked matches did not fit the budget: {named(below)}; raise the budget or `get` them")
    return notes


def _lexical(store: Store, text: str, scope: Scope, depth: int) -> list[tuple[int, float]]:
    """The BM25 hits of the word index, memories holding the query's exact terms (identifiers,
    versions, single CJK characters: `retrieve.exact_terms`) first; the evidence rides on the result
    (`memsafe.store.LexicalHits`: `held`, `exact`)."""
    match, exact = retrieve.fts_query(text), retrieve.exact_terms(text)
    return store.fts_search(match, scope, depth, exact) if match is not None or exact else []


def _unheld_notes(text: str, found: dict[str, tuple[int, set[int]]]) -> list[str]:
    """A note for each exact term of the query (an identifier, a version, a path: `retrieve.exact_terms`)
    that no memory in scope holds (`found`: `LexicalHits.exact`), named as the query wrote it: the
    results then match its words or its meaning, and nothing else says the term itself was not found."""
    notes = []
    for term, (_, ids) in found.items():
        if not ids:
            written = re.search(re.escape(term), text, re.IGNORECASE)
            shown = written.group(0) if written else term
            notes.append(f'no memory here holds "{shown}" as written; any result matches its words or its meaning')
    return notes


def _vector(store: Store, query_vector: Future, mode: str, scope: Scope, depth: int, notes: list[str]
            ) -> tuple[list[tuple[int, float]], str]:
    """([(id, cosine similarity)] best first, mode used) from the query's embedding job: `mode`, or
    'lexical' with a note when vectors are unavailable or the model fails. Fills pending vectors first."""
    try:
        embedder, qvec = query_vector.result()
    except embed.ModelUnavailable as exc:
        notes.append(f"vector search failed ({exc}); lexical results only")
        return [], "lexical"
    if embedder is None:
        reason = store.vector_error or embed.load_error() or "model unavailable"
        notes.append(f"vector search unavailable ({reason}); lexical results only")
        return [], "lexical"
    hits: list[tuple[int, float]] = []
    unsaved: dict[int, object] = {}
    fill = bool(store.pending_count()) or not store.vectors_ready(embedder.model_id)
    try:
        if fill:
            # bounded (issue 17.2); newest first, so a memory just remembered is found by meaning
            backfill(store, max_seconds=RECALL_EMBED_SECONDS, newest_first=True,  # also after a model change
                     unsaved=unsaved)
        if store.vectors_ready(embedder.model_id):
            hits = [(i, 1.0 - d) for i, d in store.vector_search(_vector_bytes(qvec), scope, depth)]
        if unsaved:
            hits = _with_unsaved(store, hits, unsaved, qvec, scope, depth)
    except embed.ModelUnavailable as exc:
        notes.append(f"vector search failed ({exc}); lexical results only")
        mode = "lexical"
    pending = store.pending_count() if fill else 0  # what the fill left
    if pending:
        notes.append(f"{count_of(pending, 'memory')} still waiting for embedding, found by keywords only (a recall "
                     f"embeds at most {BACKFILL_BATCH} of them, for at most {RECALL_EMBED_SECONDS:g} s, newest "
                     "first; `memsafe embed` does the rest)")
    return hits, mode


def _with_unsaved(store: Store, hits: list[tuple[int, float]], unsaved: dict, qvec, scope: Scope, depth: int
                  ) -> list[tuple[int, float]]:
    """`hits` plus the memories in `scope` among `unsaved` (embedded by this recall, not stored: a
    writer held the lock), by their cosine similarity to `qvec` (unit vectors: the dot product):
    the `depth` best, best first. So the memory just remembered is found by meaning even while a
    decay keeps the store locked (issue 17.2)."""
    seen = {i for i, _ in hits}
    memories = store.get_memories([i for i in unsaved if i not in seen])
    extra = [(i, float(unsaved[i] @ qvec)) for i, m in memories.items()
             if m.status in scope.statuses and admits(scope, m)]
    return sorted([*hits, *extra], key=lambda h: -h[1])[:depth]


def _vector_text(store: Store, text: str) -> str:
    """The query text the vector half embeds: without the words half the store holds
    (`retrieve.common_words`, `retrieve.vector_text`). One count per query term in the word index."""
    n, df, _ = store.fts_term_stats(retrieve.fts_terms(text), [])
    return retrieve.vector_text(text, retrieve.common_words(df, n))


def _coverage(store: Store, text: str, hits: list[tuple[int, float]]) -> tuple[dict[int, float], float]:
    """`retrieve.lexical_scale` of the BM25 hits: the term statistics of the word index, with an
    exact term counted by its exact matches (issue 12.9)."""
    exact = getattr(hits, "exact", {})
    terms = [t for t in retrieve.fts_terms(text) if t[1:-1].replace('""', '"') not in exact]
    n, df, matches = store.fts_term_stats(terms, [i for i, _ in hits])
    return retrieve.lexical_scale(n, df, matches, exact)


_embed_pool = None
_embed_pool_lock = threading.Lock()


def _forget_embed_pool() -> None:
    """In a forked child: the parent's pool has no thread there, so work given to it never runs."""
    global _embed_pool, _embed_pool_lock
    _embed_pool, _embed_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_embed_pool)


# The query vectors a process embedded last, by (model id, query text): an agent asks the same
# question again and again in one session, and a query's vector depends on nothing in the store.
# 256 vectors of 384 float32: 0.4 MB.
QUERY_VECTORS_KEPT = 256
_query_vectors: OrderedDict = OrderedDict()
_query_vectors_lock = threading.Lock()


def _known_query_vector(embedder: embed.Embedder, text: str):
    """The vector `_query_vector` gave for `text` with this model lately, else None."""
    with _query_vectors_lock:
        key = (embedder.model_id, text)
        vector = _query_vectors.get(key)
        if vector is not None:
            _query_vectors.move_to_end(key)
        return vector


def _query_vector(embedder: embed.Embedder, text: str):
    """(dim,) float32, L2-normalised, read-only: `embedder.embed_one(text)`, from the last
    QUERY_VECTORS_KEPT queries when asked before (a new query costs the model ~5 ms of CPU).

    Raises:
        embed.ModelUnavailable: the model fails.
    """
    vector = _known_query_vector(embedder, text)
    if vector is None:
        vector = embedder.embed_one(text)
        vector.setflags(write=False)
        with _query_vectors_lock:
            _query_vectors[(embedder.model_id, text)] = vector
            if len(_query_vectors) > QUERY_VECTORS_KEPT:
                _query_vectors.popitem(last=False)
    return vector


def _embed_query_async(store: Store, text: str, scope: Scope | None = None, k: int = 0) -> Future:
    """Embed a query on the shared worker thread (`_query_vector`), then prepare there the
    search of its `k` nearest in `scope` (`Store.prepare_vector_search`). The future gives (embedder,
    (dim,) float32 vector), or (None, None) when vectors cannot be used here; it raises
    embed.ModelUnavailable if the model fails. A query embedded lately by the loaded model is
    answered at once, without the worker: handing it over and back cost up to a few ms while this
    thread held the GIL (session 8)."""
    global _embed_pool

    if embed.loaded() and store.vector_available:
        embedder = embed.get_embedder()
        vector = _known_query_vector(embedder, text)
        if vector is not None:
            from concurrent.futures import Future

            done = Future()
            done.set_result((embedder, vector))
            return done

    def job():
        embedder = _embedder(store)  # reads only attributes set when the store was opened
        if embedder is None:
            return None, None
        vector = _query_vector(embedder, text)
        store.prepare_vector_search(_vector_bytes(vector), scope, k)  # overlaps this thread's BM25 search
        return embedder, vector

    with _embed_pool_lock:
        if _embed_pool is None:
            from concurrent.futures import ThreadPoolExecutor  # with logging: ~10 ms a lexical command skips

            _embed_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsafe-embed")
    return _embed_pool.submit(job)


def _scope_list(scope: Scope) -> list[str | None] | None:
    if scope.projects is None:
        return None
    return [*scope.projects, None]


# ---------------------------------------------------------------------------------------------
# Status and config


def vector_fix() -> str:
    """What to do when sqlite-vec is not loaded: unset the switch the user set, else reinstall."""
    if os.environ.get("MEMSAFE_NO_VEC"):
        return "unset MEMSAFE_NO_VEC"
    return "`pip install --force-reinstall sqlite-vec` (apsw loads it on every platform)"


def status(opened: Opened, *, project: str | None, project_rule: str, load_model: bool = True) -> StatusReport:
    """Paths, sizes, schema version, counts, pending embeddings, model and vector-search state."""
    store = opened.store
    db_bytes, wal_bytes = store.sizes()
    model: dict = {"loaded": False}
    if load_model and store.vector_available:
        embedder = embed.get_embedder()
        if embedder is not None:
            model = {"loaded": True, "id": embedder.model_id, "dim": embedder.dim}
        else:
            model = {"loaded": False, "error": embed.load_error()}
    elif not store.vector_available:
        model = {"loaded": False, "error": "vector search unavailable"}
    vector = {
        "available": store.vector_available,
        "sqlite_vec": store.vec_version(),
        "error": None if store.vector_available else f"{store.vector_error}; fix: {vector_fix()}",
        "vectors": store.vector_count(),
        "stored_model": store.config_get("_embedding_model"),
    }
    return StatusReport(
        db_path=str(opened.path),
        db_bytes=db_bytes,
        wal_bytes=wal_bytes,
        schema_version=store.schema_version(),
        counts=store.counts(),
        pending_embeddings=store.pending_count(),
        model=model,
        vector_search=vector,
        sqlite_version=store.sqlite_version(),
        project=project,
        project_rule=project_rule,
        config={"db_origin": opened.origin, "token_encoding": tokens.encoding_name()},
        encryption=encryption_state(store),
        backend="sqlite" if isinstance(opened.path, Path) else "postgresql",
    )


def encryption_state(store: Store) -> dict:
    """{encrypted, cipher, key_source} of an open store, for status and doctor (never the key)."""
    from memsafe import encryption

    if store.key is None:
        return {"encrypted": False, "cipher": None, "key_source": None}
    return {"encrypted": True, "cipher": encryption.cipher_name(), "key_source": store.key.source}


def config_list(store: Store) -> dict[str, dict]:
    """Every config key: {value, default, help}."""
    stored = store.config_items()
    out = {}
    for name, spec in settings.CONFIG_KEYS.items():
        value = spec.parse(stored[name]) if name in stored else spec.default
        out[name] = {"value": value, "default": spec.default, "help": spec.help}
    return out


def config_get(store: Store, key: str):
    """One config value. Raises InvalidInput for an unknown key (naming the known ones)."""
    _config_spec(key)
    return config_value(store, key)


def config_set(store: Store, key: str, value: str):
    """Validate and store a config value; returns the parsed value. Raises InvalidInput."""
    spec = _config_spec(key)
    parsed = spec.parse(value)
    with store.write():
        check_config_pair(store, key, parsed)
        store.config_set(key, str(parsed))
        store.add_event(clock.now_iso(), "config", None, key)
    return parsed


def check_config_pair(store: Store, key: str, parsed) -> None:
    """Refuse a value that, with the store's current config, leaves recall nothing to rank: the
    fusion weights cannot both be 0. Every way a config key is set goes through here (set, import).

    Raises: InvalidInput."""
    partner = {"weight_lexical": "weight_vector", "weight_vector": "weight_lexical"}.get(key)
    if partner and parsed == 0 and _config_snapshot(store)[partner] == 0:
        raise InvalidInput(f"{key} and {partner} cannot both be 0: recall would rank nothing; "
                           f"raise {partner} first")


def config_reset(store: Store, key: str):
    """Return a key to its default. Raises InvalidInput for an unknown key."""
    spec = _config_spec(key)
    with store.write():
        store.config_delete(key)
        store.add_event(clock.now_iso(), "config", None, f"{key} reset")
    return spec.default


def _config_spec(key: str) -> settings.ConfigKey:
    spec = settings.CONFIG_KEYS.get(key)
    if spec is None:
        raise InvalidInput(f"unknown config key {key!r}; known keys: {', '.join(settings.CONFIG_KEYS)}, db")
    return spec


def set_db_path(path: str) -> Path | str:
    """Remember a DB path in the user config file (resolved to an absolute path now, so later
    runs from any working directory use the same file), or a PostgreSQL URL (checked: libpq
    syntax, no password in it). Returns what was saved.

    Raises: InvalidInput."""
    if settings.is_db_url(path):
        from memsafe.store.postgres import check_url

        url = path.strip()
        check_url(url)
        values = settings.read_user_config()
        values["db"] = url
        settings.write_user_config(values)
        return url
    resolved = settings.expand_path(path)
    if resolved.is_dir():
        raise InvalidInput(f"{resolved} is a directory; give the path of a database file inside it")
    values = settings.read_user_config()
    values["db"] = str(resolved)
    settings.write_user_config(values)
    return resolved


def reset_db_path() -> Path | str:
    """Forget the DB path saved by `set_db_path`; returns the path used from now on (by default)."""
    values = settings.read_user_config()
    if values.pop("db", None) is not None:
        settings.write_user_config(values)
    return settings.resolve_db_path()[0]
