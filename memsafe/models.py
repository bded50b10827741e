"""Responsibility: the plain dataclasses and enums that handlers take and return, and which
memories a `Scope` admits."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Kind(str, Enum):
    """What a memory is; decay policy is chosen per kind."""

    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    TASK = "task"
    CONVERSATION = "conversation"
    EPHEMERAL = "ephemeral"
    GENERAL = "general"


class Source(str, Enum):
    """Where a memory came from. Every recall result carries it: memories are data, not instructions."""

    USER = "user"
    AGENT = "agent"
    GIT = "git"
    IMPORT = "import"
    DOCUMENT = "document"
    WEB = "web"
    HOOK = "hook"  # captured by an agent-loop hook (`memsafe agent hook`)


class Status(str, Enum):
    """Lifecycle state. Only `active` memories are recalled."""

    ACTIVE = "active"
    ARCHIVED = "archived"
    FORGOTTEN = "forgotten"


@dataclass
class Memory:
    """One stored memory. Times are UTC ISO-8601 strings; importance and confidence in [0, 1]."""

    id: int
    uid: str
    content: str
    kind: str
    project: str | None
    source: str
    tags: list[str]
    importance: float
    confidence: float
    created_at: str
    updated_at: str
    last_accessed_at: str | None
    access_count: int
    decay_level: int
    status: str
    status_reason: str | None
    embedded: bool
    author: str | None = None  # who wrote the current state (a team server's token user); None: unknown
    happened_at: str | None = None  # when the thing it tells happened (UTC ISO-8601); None: created_at
    supersedes: int | None = None  # id of the memory this one corrects (replaces)
    superseded_by: int | None = None  # id of the memory that corrects this one
    near_duplicate: dict | None = None  # set by remember only: {"id", "similarity"} of a near-duplicate
    replaces: dict | None = None  # set by remember only: {"id", "preview", "marked", "why"} (`corrections`)

    @property
    def event_at(self) -> str:
        """When the thing happened (UTC ISO-8601): `happened_at`, else the time it was stored."""
        return self.happened_at or self.created_at

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Hit:
    """One recalled memory.

    Attributes:
        text: exactly the text returned (the content, or its truncation to fit the budget).
        tokens: what it costs of the budget (cl100k_base): `text`, or in a framed recall its
            block as a model reads it (header line and indented text, `memsafe.framing`).
        score: final ranking score (higher is better; comparable within one recall only).
        lexical_rank / vector_rank: 1-based rank in each retriever's list, None if absent.
        context_of: id of the adjacent turn of the same conversation, ranked highest, that lent
            this turn relevance (`scoring.in_context`), None if none did.
    """

    memory: Memory
    text: str
    tokens: int
    score: float
    truncated: bool = False
    lexical_rank: int | None = None
    vector_rank: int | None = None
    context_of: int | None = None


@dataclass
class RecallResult:
    """Result of `api.recall`.

    Attributes:
        budget: the requested budget (tokens, cl100k_base); effective = budget × safety_multiplier.
        effective_budget: the number of tokens the returned texts may use.
        tokens_used: sum of `Hit.tokens` plus `graph_tokens` (tokens, cl100k_base).
        mode: 'hybrid', 'lexical' or 'vector'; `notes` explains any fallback.
    """

    query: str
    budget: int
    effective_budget: int
    tokens_used: int
    hits: list[Hit]
    mode: str
    scope: list[str | None] | None
    notes: list[str] = field(default_factory=list)
    graph_context: str = ""  # compact relations among the entities of the hits ('' when none)
    graph_tokens: int = 0  # cl100k_base tokens of graph_context; included in tokens_used
    at: str = ""  # UTC ISO-8601 instant of the recall: ages in a framed reply are counted to it


@dataclass
class PurgeReport:
    """What `purge` destroyed: ids and the number of history versions removed with them.

    Copies memsafe made earlier that still hold a purged memory's text are not rewritten; the
    user removes them (`remove_command`):
    `backups`: copies of the database file (migration backups `<db>.bak-v<N>`, a conversion's
    leftover `<db>.convert-tmp`); `exports`: files `export` wrote (`-o`, MCP transfer)."""

    purged_ids: list[int]
    versions_removed: int
    backups: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)

    @property
    def remove_command(self) -> str | None:
        """A shell command that removes `backups` and `exports` (None when there are none)."""
        import shlex

        copies = [*self.backups, *self.exports]
        return "rm -- " + " ".join(shlex.quote(c) for c in copies) if copies else None


@dataclass
class StatusReport:
    """State of the store and the runtime, as `memsafe status` shows it."""

    db_path: str
    db_bytes: int
    wal_bytes: int
    schema_version: int
    counts: dict[str, int]
    pending_embeddings: int
    model: dict
    vector_search: dict
    sqlite_version: str
    project: str | None
    project_rule: str
    config: dict
    encryption: dict = field(default_factory=dict)  # {encrypted, cipher, key_source}; never the key
    backend: str = "sqlite"  # or "postgresql": no WAL, pgvector, no memsafe encryption


@dataclass
class Scope:
    """Which memories a query may see.

    Attributes:
        projects: project keys to include; None means every project.
        include_global: also include memories with no project.
        kinds / tags: restrict to these kinds / to memories carrying all these tags.
        sources / exclude_sources: restrict to memories from these sources (`Source` values) /
            leave out those from these.
        since / until: only memories whose event happened at or after `since`, before `until`
            (UTC ISO-8601; `Memory.event_at`).
        statuses: lifecycle states to include (recall: active only).
    """

    projects: list[str] | None = None
    include_global: bool = True
    kinds: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    since: str | None = None
    sources: list[str] = field(default_factory=list)
    exclude_sources: list[str] = field(default_factory=list)
    until: str | None = None
    statuses: list[str] = field(default_factory=lambda: ["active"])


def in_scope(project: str | None, scope: Scope) -> bool:
    """True if a memory of `project` (None: global) is inside the projects of `scope`."""
    if scope.projects is None:
        return True
    return project in scope.projects or (project is None and scope.include_global)


def admits(scope: Scope, m) -> bool:
    """True if `m` (a `Memory` or a `history.PastState`: project, kind, source, tags, event_at as
    UTC ISO-8601) passes the project, kind, source, tag, since and until filters of `scope`; its
    status is the caller's to check (a past state has its own)."""
    at = m.event_at
    return (in_scope(m.project, scope) and (not scope.kinds or m.kind in scope.kinds)
            and (not scope.sources or m.source in scope.sources) and m.source not in scope.exclude_sources
            and set(scope.tags) <= set(m.tags) and not (scope.since and at < scope.since)
            and not (scope.until and at >= scope.until))


# -- knowledge graph -----------------------------------------------------------------


@dataclass
class EntityInfo:
    """One graph entity. `aliases`: its other names (spellings seen, names given with `graph
    alias`, former names; each one finds it); `memories`: how many active memories mention it (in
    the scope asked for); `last_mentioned`: UTC ISO-8601 time of the newest of those memories (its
    creation when none), set by `graph_entities`."""

    id: int
    name: str
    type: str
    aliases: list[str] = field(default_factory=list)
    memories: int = 0
    created: bool = False
    last_mentioned: str | None = None


@dataclass
class GraphEdit:
    """What one graph edit did. `action`: rename | merge | alias-add | alias-remove | delete |
    unlink; `entity`: the entity as it is now (for delete: as it was; for merge: the survivor);
    `merged`: the name merged away; `links` / `relations`: memory links and relations moved
    (merge) or removed (delete, unlink); `memory_id`: the memory an unlink changed."""

    action: str
    entity: EntityInfo
    merged: str | None = None
    links: int = 0
    relations: int = 0
    memory_id: int | None = None
    detail: str = ""


@dataclass
class RelationInfo:
    """A typed, weighted, directed relation `source relation target` between two entities."""

    source: str
    relation: str
    target: str
    weight: float = 1.0


@dataclass
class MemoryRef:
    """A memory mentioning an entity, as graph views show it (content shortened to `preview`)."""

    id: int
    preview: str
    kind: str
    project: str | None


@dataclass
class GraphNode:
    """An entity reached by `graph show`, `distance` hops from the start, with its active memories."""

    entity: EntityInfo
    distance: int
    memories: list[MemoryRef] = field(default_factory=list)


@dataclass
class GraphView:
    """Breadth-first neighbourhood of one entity (both directions). `truncated`: the node limit cut it."""

    root: str
    depth: int
    limit: int
    nodes: list[GraphNode]
    relations: list[RelationInfo]
    truncated: bool = False


@dataclass
class GraphListing:
    """Every entity and every relation."""

    entities: list[EntityInfo]
    relations: list[RelationInfo]
