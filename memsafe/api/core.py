"""Responsibility: the core handlers: opening the store, remember, get, forget, restore, purge,
embedding what is pending, and status. Input hygiene is `api.hygiene`, recall `api.retrieval`,
config `api.config`."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memsafe import clock, embed, settings, tokens
from memsafe.api import graph as graph_api
from memsafe.api.config import config_value
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
from memsafe.errors import Duplicate, IndexDamaged, IndexHealed, InvalidInput, NotFound, Refused, StoreUnavailable
from memsafe.models import (
    Kind,
    Memory,
    PurgeReport,
    Scope,
    Source,
    Status,
    StatusReport,
    in_scope,
)
from memsafe.recall.vectors import backfill, embedder_for, ensure_table, model_conflict, model_for, vector_bytes
from memsafe.store import Store, connect

if TYPE_CHECKING:
    pass

__all__ = [
    "Opened", "open_store", "clean_text", "clean_tags", "clean_project", "current_project", "content_hash",
    "backfill",
    "remember", "embed_new", "embed_in_background", "get", "reachable", "in_scope", "encryption_state", "forget",
    "purge", "make_scope", "status",
    "MAX_CONTENT_CHARS", "MAX_QUERY_CHARS", "MAX_PROJECT_CHARS",
]

BACKGROUND_EMBED_SECONDS = 300.0  # a detached embedder stops after this; `memsafe embed` does the rest


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
    default path yields a loud warning, never a silent fresh store; any other new
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


def embed_new(store: Store, *, limit: int = embed.BATCH_SIZE) -> tuple[int, list[tuple[int, dict]]]:
    """Embed the `limit` newest pending memories (taken in id order) and report the near-duplicates among
    them: what `remember` would have said had it embedded inline (a server's remember replies
    before its vector exists; its warm thread calls this).

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
    embedder = embedder_for(store)
    if embedder is None:
        return 0, []
    # newest first: what `remember` just stored, even while older rows keep changing (a decay)
    rows = sorted(store.pending_embeddings(limit, newest_first=True))
    if not rows:
        return 0, []
    vectors = embedder.embed([content for _, content in rows])
    tokens.keep_counts([content for _, content in rows])  # a CLI recall of them needs no tokenizer
    with store.write():
        ensure_table(store, embedder)
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
            store.put_vector(memory_id, vector_bytes(vec))
            done += 1
            if near is not None:
                near_found.append((memory_id, near))
    return done, near_found


def embed_in_background(db_path: str | os.PathLike) -> bool:
    """Start a detached process that fills the pending vectors of `db_path` and exits (at most one
    per database at a time: it holds `<db>.embed.lock`; a second one exits at once, and the holder
    looks for new pending memories after releasing the lock, so none is left behind). It walks
    what is pending newest first (the memory just remembered first), each memory once a round, at
    most 10 rounds and BACKGROUND_EMBED_SECONDS in all (opportunistic embedding is
    bounded in attempts and time); a backlog beyond that is `memsafe embed`'s work.

    Nothing is lost if it never runs or is killed: the memories stay pending, `status` counts them,
    and the next `embed`, `serve` or default `recall` fills them. `MEMSAFE_BACKGROUND_EMBED=0`
    turns it off. Returns whether a process was started (False when turned off or spawning failed).
    """
    import subprocess
    import sys

    if not settings.env().background_embed or settings.env().no_model:
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
        fcntl = None  # type: ignore[assignment]  # a module or None: an optional import mypy cannot type
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
                left = opened.store.pending_count() if embedder_for(opened.store) is not None else 0
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
    at: str | None = None,
    happened_at: str | None = None,
    supersedes: int | None = None,
    keep_both: bool = False,
    scope: Scope | None = None,
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
        at: when the thing happened, as a person types it (`when.parse_when`: ISO-8601, a date,
            `3 days ago`); default now. Recall's time filters and time words read it.
        happened_at: the same as a stored UTC ISO-8601 instant (a commit's author date); a time
            after now is taken as now (a clock ahead of ours). `at` wins when both are given.
        supersedes: the id of the memory this one corrects: it is marked replaced (a link both
            ways, `Memory.supersedes` / `superseded_by`). It must be an active memory of the same
            project not replaced already.
        keep_both: do not mark the memory this one looks like it replaces (it is still named).
        scope: the projects the caller may reach for `supersedes` (see `get`); None: any.

    Without `supersedes`, a memory of the same project that this one looks like it corrects
    (`recall.corrections.replaces`: same subject, changed value) is named in `Memory.replaces`
    ({"id", "preview", "why", "marked"}) and, unless `keep_both`, marked replaced when it has the
    same source. Only what a person, an agent or a hook states now (`STATED_SOURCES`) is read as
    a correction: commits, imports, documents, pages and conversation turns are records.

    Raises:
        InvalidInput: bad content, kind, source, tag, author or number; `at` unreadable or in
            the future (InvalidTime); `supersedes` with `keep_both`.
        NotFound: `supersedes` names no memory in reach, or a purged one.
        Refused: `supersedes` names a memory of another project, a forgotten one, or one replaced
            already (the message names its correction).
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
    event_at = _event_time(at, happened_at)
    if supersedes is not None and keep_both:
        raise InvalidInput("--supersedes and --keep-both contradict each other; give one")
    target = None if supersedes is None else _correction_target(store, _check_id(supersedes), project_v, scope)

    existing = store.find_duplicate(digest, project_v)
    if existing is not None:
        raise Duplicate(f"already remembered as memory {existing}", existing)

    if embed_now == "if-loaded":
        embed_now = embed.loaded()
    embedder = embedder_for(store) if embed_now else None
    try:
        vector = embedder.embed_one(text) if embedder else None
    except embed.ModelUnavailable:
        vector = None  # stored now, embedded later by a process whose model works
    try:
        near = _near_duplicate(store, embedder, vector, project_v)
    except IndexDamaged:  # the vectors cannot be read: stored now, embedded once they are rebuilt
        near, vector = None, None

    if target is not None:
        replaced: dict | None = {"id": target.id, "preview": _preview(target.content), "why": "--supersedes",
                                 "marked": True}
    elif source_v not in STATED_SOURCES or kind_v in (Kind.CONVERSATION.value, Kind.EPHEMERAL.value):
        replaced = None
    else:
        replaced = _looks_replaced(store, text, project_v, source_v, vector, embedder, keep_both)
    mark = replaced["id"] if replaced and replaced["marked"] else None
    args = (store, text, kind_v, project_v, source_v, importance_v, confidence_v, digest, author_v, uid, tag_list,
            embedder, vector, entity_names, event_at, mark, target is not None)
    try:
        memory_id = _store_memory(*args)
    except IndexHealed:  # rolled back, and the damaged word index rebuilt from the memories: once more
        memory_id = _store_memory(*args)
    memory = store.get_memory(memory_id)
    assert memory is not None  # written just above
    memory.near_duplicate = near
    if replaced is not None and mark is not None and memory.supersedes is None:  # another writer was first
        replaced = {**replaced, "marked": False}
    memory.replaces = replaced
    return memory


def _event_time(at: str | None, happened_at: str | None) -> str | None:
    """The stored UTC ISO-8601 event time of `remember`'s `at` (typed) or `happened_at` (stored
    form; one after now is now), None for now. Raises InvalidTime."""
    if at is not None:
        from memsafe import when

        return clock.to_iso(when.parse_when(clean_text(at, "--at"), clock.now(), what="--at time"))
    if happened_at is not None:
        return min(clock.to_iso(clock.parse_iso(happened_at)), clock.now_iso())
    return None


def _preview(text: str, chars: int = 80) -> str:
    """`text` on one line, cut to `chars` characters (with … when cut)."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 1].rstrip() + "…"


def _correction_target(store: Store, memory_id: int, project: str | None, scope: Scope | None) -> Memory:
    """The memory `remember(supersedes=memory_id)` may mark replaced. Raises NotFound (absent,
    outside `scope`, purged) or Refused (another project, not active, replaced already)."""
    old = reachable(store, [memory_id], scope)[memory_id]
    if old.project != project:
        where = f"project {old.project}" if old.project else "the global memories"
        raise Refused(f"memory {memory_id} belongs to {where}, not to {project or 'the global memories'}; "
                      "a correction replaces a memory of its own project; nothing stored")
    if old.status != Status.ACTIVE.value:
        raise Refused(f"memory {memory_id} is {old.status}; only an active memory can be replaced; nothing stored")
    if old.superseded_by is not None:
        raise Refused(f"memory {memory_id} was already replaced by memory {old.superseded_by}; "
                      f"--supersedes {old.superseded_by} corrects the current one; nothing stored")
    return old


CORRECTION_CANDIDATES = 8  # memories of the same project a new one is compared with (best matches)
# Sources whose memories state a fact as it is now, one at a time: a new one may correct an older.
# Commits, imports, documents and pages are records of their own time, stored in bulk (an import
# carries its correction links with it): none is read as a correction.
STATED_SOURCES = frozenset({Source.USER.value, Source.AGENT.value, Source.HOOK.value})


def _looks_replaced(store: Store, text: str, project: str | None, source: str, vector, embedder,
                    keep_both: bool) -> dict | None:
    """{"id", "preview", "why", "marked"} of the active, not yet replaced memory of exactly
    `project` that `text` looks like it corrects (`corrections.replaces`), among the best keyword
    matches and, when `vector` is given, the nearest by meaning; the best match first. `marked`:
    the same source and not `keep_both`. None when there is none."""
    from memsafe.recall import corrections, terms

    # a long text is a note, not one fact (`corrections.MAX_WORDS`): no search for what it corrects
    if len(text) > 30 * corrections.MAX_WORDS or len(text.split()) > corrections.MAX_WORDS:
        return None
    scope = Scope(projects=[project] if project is not None else [], include_global=project is None)
    ids: list[int] = []
    with contextlib.suppress(IndexDamaged):
        match = terms.fts_query(text)
        if match is not None:
            ids += [i for i, _ in store.fts_search(match, scope, CORRECTION_CANDIDATES)]
        if vector is not None and embedder is not None and store.vectors_ready(embedder.model_id):
            ids += [i for i, _ in store.nearest(vector_bytes(vector), project, CORRECTION_CANDIDATES)]
    found = store.get_memories(list(dict.fromkeys(ids)), tags=False)
    for memory_id in dict.fromkeys(ids):
        old = found.get(memory_id)
        if old is None or old.status != Status.ACTIVE.value or old.superseded_by is not None \
                or old.project != project or old.source == Source.GIT.value:
            continue
        verdict = corrections.replaces(text, old.content)
        if verdict is not None:
            return {"id": old.id, "preview": _preview(old.content), "why": verdict.why,
                    "marked": old.source == source and not keep_both}
    return None


def _store_memory(store: Store, text, kind_v, project_v, source_v, importance_v, confidence_v, digest, author_v,
                  uid, tag_list, embedder, vector, entity_names, event_at, supersedes, explicit) -> int:
    """`remember`'s one write transaction: the row, its vector, its entities and its event; and
    the link both ways to the memory it replaces (`supersedes`: an id, or None), which must
    still be active and not replaced: else, when the user named it (`explicit`), nothing is
    written; when remember found it, the memory is stored unlinked. Returns the new memory's id.
    Raises Duplicate, Refused, IndexHealed, StoreUnavailable."""
    now = clock.now_iso()
    with store.write():
        existing = store.find_duplicate(digest, project_v)
        if existing is not None:
            raise Duplicate(f"already remembered as memory {existing}", existing)
        if supersedes is not None:
            old = store.get_memory(supersedes)
            if old is None or old.status != Status.ACTIVE.value or old.superseded_by is not None:
                if explicit:
                    raise Refused(f"memory {supersedes} changed meanwhile (replaced, forgotten or purged); "
                                  "nothing stored")
                supersedes = None
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
                "happened_at": event_at or now,
                "supersedes": supersedes,
            },
            tag_list,
        )
        if supersedes is not None:
            store.update_memory(supersedes, {"superseded_by": memory_id})
            store.add_event(now, "supersede", supersedes, f"by={memory_id}")
        if vector is not None and embedder is not None:  # (a vector only from an embedder)
            ensure_table(store, embedder)
            store.put_vector(memory_id, vector_bytes(vector))
        graph_api.link_entities(store, memory_id, text, entity_names, now, project_v)
        store.add_event(now, "remember", memory_id, f"source={source_v}")
    return memory_id


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
    found = store.nearest_each([vector_bytes(v) for v in vectors], projects, exclude)
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
            `confirm` and `update`; being returned by `recall` is not one (recall
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
    memory by guessing its id.

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


def forget(store: Store, memory_id: int, *, reason: str | None = None, scope: Scope | None = None) -> Memory:
    """Soft-forget: hidden from every recall path (lexical, vector, graph, export by default),
    kept for audit and `restore`. `scope` as in `get` (a memory outside it is NotFound).
    Forgetting a correction unlinks it from the memory it replaced, which is current again.
    Raises NotFound, Refused (already forgotten)."""
    why = _controls_to_space(_fix_surrogates(reason)).strip()[:200] if reason else None
    now = clock.now_iso()
    with store.write():
        memory = get(store, memory_id, scope=scope)
        if memory.status == Status.FORGOTTEN.value:
            raise Refused(
                f"memory {memory_id} is already forgotten; `restore {memory_id}` brings it back "
                "(MCP: forget with undo=true)"
            )
        store.update_memory(
            memory_id,
            {"status": Status.FORGOTTEN.value, "status_reason": why, "status_changed_at": now, "updated_at": now},
        )
        if memory.supersedes is not None:  # a correction forgotten: what it replaced is current again
            old = store.get_memory(memory.supersedes)
            if old is not None and old.superseded_by == memory_id:
                store.update_memory(old.id, {"superseded_by": None})
            store.update_memory(memory_id, {"supersedes": None})
        store.add_event(now, "forget", memory_id, "reason given" if why else None)
    return get(store, memory_id)


def again_after_heal(handler):
    """Run `handler` once more when its write met a damaged word index, was rolled back and the
    index rebuilt from the memories (`IndexHealed`: nothing of the first run was written)."""
    import functools

    @functools.wraps(handler)
    def run(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except IndexHealed:
            return handler(*args, **kwargs)

    return run


@again_after_heal
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
# Status and config


def vector_fix() -> str:
    """What to do when sqlite-vec is not loaded: unset the switch the user set, else reinstall."""
    if settings.env().no_vec:
        return "unset MEMSAFE_NO_VEC"
    return "`pip install --force-reinstall sqlite-vec` (apsw loads it on every platform)"


def status(opened: Opened, *, project: str | None, project_rule: str, load_model: bool = True) -> StatusReport:
    """Paths, sizes, schema version, counts, pending embeddings, model and vector-search state.

    `model` is {"loaded": True, "id", "dim"} when the model loads: known without loading it when
    this model file loaded before with this onnxruntime (`embed.known_model`), else by loading it
    (with `load_model`); {"loaded": False, "error"} when it does not."""
    store = opened.store
    db_bytes, wal_bytes = store.sizes()
    model: dict = {"loaded": False}
    name = model_for(store) if store.vector_available and not model_conflict(store) else None
    known = embed.known_model(name) if name is not None and not embed.loaded(name) else None
    if known is not None:
        model = {"loaded": True, "name": name, **known}
    elif load_model and store.vector_available:
        embedder = embedder_for(store)
        if embedder is not None:
            model = {"loaded": True, "name": embedder.name, "id": embedder.model_id, "dim": embedder.dim}
        else:
            from memsafe.recall.vectors import unavailable_reason

            model = {"loaded": False, "error": unavailable_reason(store)}
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


POSTGRES_ENCRYPTION = "not memsafe's on PostgreSQL (the server's disk encryption and TLS)"  # status, doctor


def encryption_state(store: Store) -> dict:
    """{encrypted, cipher, key_source} of an open store, for status and doctor (never the key)."""
    from memsafe.store.sqlite import encryption

    if store.key is None:
        return {"encrypted": False, "cipher": None, "key_source": None}
    return {"encrypted": True, "cipher": encryption.cipher_name(), "key_source": store.key.source}


