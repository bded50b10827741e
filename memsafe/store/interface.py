"""Responsibility: the storage interface the `memsafe.api` handlers code against.

`Store` is the whole interface, assembled from one abstract class per concern (memories, full
text, vectors, graph, history, config, browse); `memsafe.store.sqlite.SQLiteStore` implements it.
Handlers receive an open `Store` and never learn which backend it is.

Shapes and units, everywhere: ids are integers; times are UTC ISO-8601 strings; a "row" is a
dict keyed by column name (DESIGN.md's data model); vectors are float32 bytes, L2-normalised;
distances are cosine distances in [0, 2]. Writes happen inside `with store.write():` (one
transaction); reads need no transaction (`snapshot()` for several consistent reads). Errors fit
to show a user are `StoreUnavailable` and `SchemaTooNew` (`memsafe.errors`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from memsafe.models import Memory, Scope

if TYPE_CHECKING:
    from memsafe.store.sqlite.encryption import Key


class LexicalHits(list):
    """What `Store.fts_search` returns: a list of (memory id, bm25-like score) best first, plus the
    exact-match evidence behind its order: `held` {id: number of the query's exact terms it
    holds} and `exact` {term: (document frequency, ids in scope holding it)} (see `exact_search`)."""

    def __init__(self, hits: Iterable[tuple[int, float]], held: dict[int, int],
                 exact: dict[str, tuple[int, set[int]]]):
        super().__init__(hits)
        self.held = held
        self.exact = exact



class Config(ABC):
    """The `config` key/value settings (strings; `memsafe.settings` parses them). Keys starting `_` are
    the store's own (embedding model, dimension)."""

    @abstractmethod
    def config_items(self) -> dict[str, str]:
        """Every setting: {key: value}."""

    @abstractmethod
    def config_get(self, key: str) -> str | None:
        """The value of `key`, or None when unset."""

    @abstractmethod
    def config_set(self, key: str, value: str) -> None:
        """Set `key` to `value` (insert or replace). Call inside `write()`."""

    @abstractmethod
    def config_delete(self, key: str) -> None:
        """Unset `key` (no error when unset). Call inside `write()`."""


class Memories(ABC):
    """Memory rows (the columns of DESIGN.md's data model, times UTC ISO-8601) and their tags."""

    @abstractmethod
    def insert_memory(self, row: dict, tags: Sequence[str]) -> int:
        """Insert one memory row (keys = column names) and its tags; returns the new id."""

    @abstractmethod
    def insert_memories(self, items: Sequence[tuple[dict, Sequence[str]]]) -> list[int]:
        """Insert memory rows (each with a `uid`; keys = column names, `id` optional) and their
        tags, in few multi-row statements; returns the new ids in the order of `items`. The word
        indexes take a statement of many rows several times faster than as many one-row
        statements (FTS5: ~0.5 ms per statement per index), so an import inserts in batches."""

    @abstractmethod
    def update_memory(self, memory_id: int, changes: dict) -> None:
        """Set the given columns of one memory."""

    @abstractmethod
    def set_tags(self, memory_id: int, tags: Iterable[str]) -> None:
        """Replace a memory's tags with `tags` (duplicates ignored). Call inside `write()`."""

    @abstractmethod
    def get_memories(self, ids: Sequence[int], *, tags: bool = True, kind: str | None = None) -> dict[int, Memory]:
        """Memories by id (any status; only those of `kind` if given), with their tags unless
        `tags` is False (then `tags` is empty until `fill_tags`). Missing ids are absent from the result."""

    @abstractmethod
    def fill_tags(self, memories: Sequence[Memory]) -> None:
        """Set each memory's `tags` (sorted) from the store, in place."""

    def get_memory(self, memory_id: int) -> Memory | None:
        """One memory by id (any status), or None."""
        return self.get_memories([memory_id]).get(memory_id)

    @abstractmethod
    def raw_row(self, memory_id: int) -> dict | None:
        """Every column of one memory row, as a dict (for history snapshots and export)."""

    @abstractmethod
    def find_duplicate(self, content_hash: str, project: str | None) -> int | None:
        """Id of an active or archived memory with this content hash in this exact project."""

    @abstractmethod
    def touch(self, ids: Sequence[int], at: str) -> None:
        """Access bookkeeping for the memories actually returned by a recall."""

    @abstractmethod
    def rename_project(self, old: str, new: str) -> int:
        """Re-key every memory, every earlier version and every entity of project `old` to `new`
        (one transaction; an entity `new` already holds by its key absorbs `old`'s, links and
        relations kept; a no-op without taking the write lock when `old` holds nothing). Returns
        the number of memories moved."""

    @abstractmethod
    def delete_memories(self, ids: Sequence[int]) -> int:
        """Hard-delete memories with their tags, versions, links, vectors and FTS entries.
        Returns the number of history versions removed."""

    @abstractmethod
    def counts(self) -> dict[str, int]:
        """Store totals: {active, archived, forgotten, total (memories), versions, entities, relations}."""

    @abstractmethod
    def count_in_scope(self, scope: Scope, embedded_only: bool = False) -> int:
        """Memories in `scope` (its statuses); with `embedded_only`, those with a vector."""

    @abstractmethod
    def list_ids(self, scope: Scope, limit: int | None) -> list[int]:
        """Ids of the memories in `scope` (any of `scope.statuses`), newest first."""

    @abstractmethod
    def created_between(self, scope: Scope, start: str, end: str, limit: int) -> list[int]:
        """Ids of at most `limit` memories in `scope` created in [start, end) (UTC ISO-8601, the
        stored form), the latest created first (ties: higher id first)."""

    @abstractmethod
    def export_memory_rows(self, after_id: int, limit: int, statuses: Sequence[str], scope: Scope | None
                           ) -> list[dict]:
        """Full memory rows (every column) with id > after_id, in id order; only the projects of
        `scope` when given (its statuses are ignored: `statuses` says which)."""

    @abstractmethod
    def tags_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        """Tags per memory id, each list sorted; every requested id is a key (possibly with [])."""

    @abstractmethod
    def memory_by_uid(self, uid: str) -> dict | None:
        """The full row of the memory with this uid, or None."""

    @abstractmethod
    def memory_id_taken(self, memory_id: int, uid: str | None = None) -> bool:
        """True if `memory_id` may not be given to the memory `uid`: a memory holds it, or it was
        handed out before (the audit log names it; a purged memory leaves a `purge` event) to
        another memory. The memory a purge stub names (`uid=...`) may come back under its own id
        (import --allow-purged). An import inserting explicit ids asks this, so it never reuses a
        purged id for another memory; new ids come from AUTOINCREMENT."""

    @abstractmethod
    def decay_rows(self) -> list[dict]:
        """Every active memory with the columns the decay planner needs, plus `tags` and `degree`
        (number of its graph entities connected to the rest of the graph: `connected_entity_counts`)."""

    @abstractmethod
    def bank_decay(self, memory_id: int, bank: float, checked_at: str, expect_checked: str | None,
                   expect_accessed: str | None) -> bool:
        """Store a memory's decay bank if nobody touched its decay state since it was read
        (optimistic check on decay_checked_at and last_accessed_at). Returns True if written."""


class FullText(ABC):
    """Lexical search: a word index ranked by BM25 (or the closest the backend offers) and a
    trigram index for exact substrings (identifiers, versions, single CJK characters)."""

    @abstractmethod
    def fts_search(self, match: str | None, scope: Scope, limit: int, exact: Sequence[str] = ()) -> LexicalHits:
        """BM25 search, with exact matches first. `match` is a safe FTS5-syntax expression for the
        word index (see `recall.terms.fts_query`; None: none), `exact` terms from `recall.terms.exact_terms`.

        Returns a `LexicalHits`: [(memory id, score)] best first; score is a bm25 in SQLite's
        convention (negative, lower is better). Memories holding exact terms (`exact_search`) come first, most terms
        held first, with a score below every other hit's: best bm25 × (1 + held / len(exact)).
        The rest follow by bm25 (ties by id): the exact top `limit` within the scope,
        never a global top filtered afterwards. The evidence is kept on the
        result (`held`, `exact`) for fusion and term coverage.
        """

    @abstractmethod
    def exact_search(self, terms: Sequence[str], scope: Scope, limit: int) -> dict[str, tuple[int, set[int]]]:
        """Memories in scope holding each term exactly as typed (`memsafe.store.common.fulltext.holds_exact`):
        {term: (document frequency over the whole store, {ids in scope holding it})}.
        At most `limit` candidates per term are checked; the document frequency may be an upper
        bound. A 1-2 character term (a CJK character: shorter than a trigram) is found too. Indexed lookups
        only, no scan of every text.
        """

    @abstractmethod
    def fts_term_stats(
        self, terms: Sequence[str], ids: Sequence[int]
    ) -> tuple[int, dict[str, int], dict[str, set[int]]]:
        """For each safe FTS5 term (see `recall.terms.fts_terms`): its document frequency over the whole
        index, and which of `ids` match it. Returns (number of indexed memories, {term: df},
        {term: matching ids})."""

    @abstractmethod
    def compact_word_index(self, max_seconds: float | None = None,
                           stop: Callable[[], bool] | None = None) -> bool:
        """Merge the lexical indexes into their fastest form to query, in short write transactions
        (maintenance: a decay run, a large import, an idle MCP server). Returns True when they are
        compact, False when it stopped first: `max_seconds` (wall clock) ran out, `stop()` said so
        between two transactions (a server's remember), a transaction is open (the caller's
        writes come first), another writer kept the lock or kept adding texts, or the disk is
        full; what was merged stays merged. Maintenance: it never raises for those."""

    @staticmethod
    @abstractmethod
    def scratch_lexical(docs: dict[int, str], terms: Sequence[str], limit: int
                        ) -> tuple[list[tuple[int, float]], dict[str, int], dict[str, set[int]]]:
        """BM25 search of `docs` ({id: text}) for safe FTS5 `terms` (`recall.terms.fts_terms`, OR-ed)
        with the same tokenizer as the word index (time travel ranks past texts this way), with
        the statistics `fts_term_stats` gives for the word index. Touches no stored data.

        Returns:
            ([(id, bm25)] best first (FTS5 bm25: negative, lower is better; ties by id), at most
            `limit`; {term: texts holding it}; {term: hit ids holding it}).
        """


class Vectors(ABC):
    """One embedding per memory (float32, L2-normalised, `dim` values, as bytes), searched by
    cosine distance (0 = same direction, 2 = opposite)."""

    @abstractmethod
    def vector_table_exists(self) -> bool:
        """True once a vector table was created (`ensure_vector_table`)."""

    @abstractmethod
    def ensure_vector_table(self, model_id: str, dim: int) -> None:
        """Create the vector table for `model_id` with `dim` dimensions, or empty it (every memory
        pending again) if the stored vectors came from another model; records both in config
        (`_embedding_model`, `_embedding_dim`). Call inside `write()`."""

    @abstractmethod
    def put_vector(self, memory_id: int, vector_bytes: bytes) -> None:
        """Set a memory's vector (replacing any) and mark it embedded. Call inside `write()`."""

    @abstractmethod
    def delete_vector(self, memory_id: int) -> None:
        """Remove a memory's vector (if any) and mark it pending. Call inside `write()`.

        Raises:
            StoreUnavailable: vectors exist but the backend cannot reach them here."""

    @abstractmethod
    def get_vector(self, memory_id: int) -> bytes | None:
        """A memory's vector bytes, or None when it has none."""

    @abstractmethod
    def vector_count(self) -> int:
        """Number of stored vectors (0 without vector support)."""

    @abstractmethod
    def pending_embeddings(self, limit: int, after_id: int = 0, *, newest_first: bool = False,
                           before_id: int | None = None, embedded_too: bool = False) -> list[tuple[int, str]]:
        """(id, content) of at most `limit` memories (any status but forgotten) whose vector is
        missing (`embedded_too`: with a vector or not): oldest first with ids > after_id, or with
        `newest_first` newest first with ids < before_id (None: from the newest). Either way a
        caller walks them once by passing the last id it got."""

    @abstractmethod
    def pending_count(self) -> int:
        """Memories (any status but forgotten) still waiting for their vector."""

    @abstractmethod
    def prepare_vector_search(self, query_bytes: bytes, scope: Scope | None = None, k: int = 0) -> None:
        """A hint that `vector_search(query_bytes, scope, k)` follows: do now, on the calling thread
        (any thread; never this connection's SQL), what that search can use. A recall calls it
        on the thread that embeds the query, so the work overlaps its BM25 search."""

    @abstractmethod
    def vector_search(self, query_bytes: bytes, scope: Scope, k: int) -> list[tuple[int, float]]:
        """The k nearest memories in scope by cosine distance: [(id, distance)] nearest first, ties
        by id. `query_bytes` is a float32 vector of the stored dimension. Filters never starve the
        result: the answer is the top k within the scope, not a global top k
        filtered afterwards. A stored vector with no distance (zero, not finite) never ranks."""

    @abstractmethod
    def get_vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        """Stored vectors by memory id (absent when pending or when vectors are unavailable)."""

    def nearest(self, vector_bytes: bytes, project: str | None, k: int) -> list[tuple[int, float]]:
        """The k nearest active memories in exactly this project (None = global only).
        Returns [(id, cosine distance)] nearest first."""
        scope = Scope(projects=[project] if project is not None else [], include_global=project is None)
        return self.vector_search(vector_bytes, scope, k)

    def nearest_each(self, queries: Sequence[bytes], projects: Sequence[str | None],
                     exclude: Sequence[int | None]) -> list[tuple[int, float] | None]:
        """For each query vector (bytes, as `nearest` takes), its nearest active memory in exactly
        that query's project (None = global only) other than the memory id at the same place in
        `exclude`: (id, cosine distance), or None when there is none. The same answers as
        `nearest` query by query (SQLite answers a batch in one pass over the vectors)."""
        found: list[tuple[int, float] | None] = []
        for query, project, other in zip(queries, projects, exclude):
            hits = [hit for hit in self.nearest(query, project, 2) if hit[0] != other]
            found.append(hits[0] if hits else None)
        return found


class Graph(ABC):
    """The knowledge graph: entities (an owning project, '' for the global graph; a display name;
    an identity `key` unique within the project; a type), their aliases, which memories mention
    them, and typed weighted relations between them."""

    @staticmethod
    @abstractmethod
    def owners_of(scope: Scope) -> list[str] | None:
        """The projects whose entities `scope` reads and writes ('' is the global graph), its own
        project first; None for every project."""

    @abstractmethod
    def entity_degrees(self, ids: Sequence[int]) -> dict[int, int]:
        """Number of graph entities each memory mentions (the ranking's graph signal, tuned on the bench)."""

    @abstractmethod
    def connected_entity_counts(self, ids: Sequence[int]) -> dict[int, int]:
        """Decay's graph signal: how many of each memory's entities are connected to the rest of the graph
        (in a relation, or mentioned by another memory). A name only this memory mentions does not count,
        so automatic entity extraction alone does not slow a memory's decay."""

    @abstractmethod
    def entity_keys_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        """Keys of the entities each memory is linked to, sorted."""

    @abstractmethod
    def iter_entities(self, scope: Scope | None = None) -> Iterator[dict]:
        """Entities (id, project: None for global, name, key, type, created_at, aliases) by key
        then project: every one without a scope (or one of every project), else those the
        scope's projects own (`owners_of`)."""

    @abstractmethod
    def iter_relations(self, scope: Scope | None = None) -> Iterator[dict]:
        """Relations as entity keys with each end's project (`source_project`, `target_project`:
        None for global), ordered by (source, relation, target): those whose two ends an export
        of `scope` carries."""

    @abstractmethod
    def entity_id_by_key(self, key: str, project: str = "") -> int | None:
        """The id of the entity of `project` ('' global) this identity key finds (its own key or
        an alias key), or None."""

    @abstractmethod
    def entity_ids_by_keys(self, keys: Sequence[str], owners: Sequence[str] | None = None) -> list[int]:
        """Ids of every entity these identity keys find (own or alias key), of the projects
        `owners` ('' global; None: every project), by id."""

    @abstractmethod
    def entity_ids_by_key(self, key: str) -> list[int]:
        """Ids of the entities this identity key finds in every project (own or alias key), by id."""

    @abstractmethod
    def entity_name(self, entity_id: int) -> str | None:
        """An entity's display name, or None when it does not exist."""

    @abstractmethod
    def add_entity_aliases(self, entity_id: int, aliases: Iterable[str]) -> None:
        """Add aliases to an entity (existing ones ignored). Call inside `write()`."""

    @abstractmethod
    def link_memory_entity(self, memory_id: int, entity_id: int) -> bool:
        """Link a memory to an entity; False if the link existed."""

    @abstractmethod
    def add_relation(self, source_id: int, relation: str, target_id: int, weight: float, created_at: str,
                     updated_at: str) -> bool:
        """Insert a relation unless the (source, relation, target) triple exists; True if inserted."""

    @abstractmethod
    def entity_names(self, memory_id: int) -> list[str]:
        """Names of the graph entities a memory mentions, alphabetically."""

    @abstractmethod
    def entities_by_keys(self, keys: Sequence[str], owners: Sequence[str] | None = None
                         ) -> dict[str, tuple[int, str, str]]:
        """{identity key: (entity id, display name, type)} for the keys that find an entity: its
        own key, or one of its alias keys (`add_alias_key`). `owners`: only entities of these
        projects ('' global), the earlier one first when two find the key (`owners_of`); None:
        any project's, the oldest first."""

    @abstractmethod
    def alias_keys(self, entity_ids: Sequence[int]) -> dict[int, list[str]]:
        """{entity id: [identity keys of its other names (`entity_alias_keys`), sorted]}."""

    @abstractmethod
    def add_alias_key(self, entity_id: int, key: str) -> bool:
        """Make `key` find the entity too (False: the key already finds one). Call inside `write()`."""

    @abstractmethod
    def delete_alias_key(self, entity_id: int, key: str) -> bool:
        """`key` no longer finds the entity; False if it did not. Call inside `write()`."""

    @abstractmethod
    def delete_aliases(self, entity_id: int, aliases: Iterable[str]) -> int:
        """Remove alias spellings from an entity; returns how many. Call inside `write()`."""

    @abstractmethod
    def rename_entity(self, entity_id: int, name: str, key: str) -> None:
        """Give an entity a new display name and identity key (the caller checked the key is
        free). Call inside `write()`."""

    @abstractmethod
    def entity_usage(self, entity_id: int) -> tuple[int, int]:
        """(memory links, relations) of an entity, in every project."""

    @abstractmethod
    def move_project_entities(self, old: str, new: str, at: str) -> None:
        """Give project `old`'s entities and alias keys to project `new`, merging each into the
        entity `new` holds by its key (`merge_entity`). `at`: UTC ISO. Call inside `write()`."""

    @abstractmethod
    def merge_entity(self, source_id: int, target_id: int, at: str) -> tuple[int, int]:
        """Fold entity `source_id` into `target_id`: its memory links, relations (a relation
        between the two is dropped; one the target has already keeps the higher weight), aliases
        and alias keys move, its own key becomes an alias key of the target, and it is deleted.
        Returns (memory links added to the target, relations moved). Call inside `write()`."""

    @abstractmethod
    def delete_entity(self, entity_id: int) -> None:
        """Delete an entity with its aliases, memory links and relations. Call inside `write()`."""

    @abstractmethod
    def unlink_memory_entity(self, memory_id: int, entity_id: int) -> bool:
        """Remove one memory's link to an entity; False if there was none. Call inside `write()`."""

    @abstractmethod
    def shared_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` also named by a memory (any status) outside the scope's
        projects: editing them would change other projects' graphs. Empty for every project."""

    @abstractmethod
    def insert_entity(self, name: str, key: str, type_: str, at: str, project: str = "") -> int:
        """Insert an entity of `project` ('' global; its display name is also its first alias);
        returns its id. Call inside `write()`."""

    @abstractmethod
    def add_alias(self, entity_id: int, alias: str) -> None:
        """Add one alias to an entity (ignored if it has it). Call inside `write()`."""

    @abstractmethod
    def set_entity_type(self, entity_id: int, type_: str) -> None:
        """Set an entity's type. Call inside `write()`."""

    @abstractmethod
    def link_memory_entities(self, memory_id: int, entity_ids: Iterable[int]) -> None:
        """Link a memory to entities (existing links ignored). Call inside `write()`."""

    @abstractmethod
    def upsert_relation(self, source_id: int, relation: str, target_id: int, weight: float, at: str) -> None:
        """Add a typed relation, or update the weight of the same (source, relation, target)."""

    @abstractmethod
    def delete_relations(self, source_id: int, relation: str | None, target_id: int) -> int:
        """Delete the relation (any relation type when `relation` is None); returns how many."""

    @abstractmethod
    def entity_rows(self, ids: Sequence[int]) -> dict[int, dict]:
        """{id: {id, project ('' global), name, key, type, created_at, aliases}} for existing entity ids."""

    @abstractmethod
    def relations_touching(self, entity_ids: Sequence[int]) -> list[tuple[int, int, str, int, float]]:
        """Relations with either endpoint in `entity_ids`: [(id, source_id, relation, target_id, weight)]."""

    @abstractmethod
    def all_relations(self) -> list[tuple[int, int, str, int, float]]:
        """Every relation: [(id, source_id, relation, target_id, weight)] by id."""

    @abstractmethod
    def entity_memories(self, entity_ids: Sequence[int], scope: Scope, per_entity: int | None = None
                        ) -> dict[int, list[int]]:
        """{entity id: [memory ids in scope that mention it, newest first]}, at most `per_entity`
        each when given (None: all)."""

    @abstractmethod
    def delete_orphan_entities(self, entity_ids: Iterable[int]) -> int:
        """Delete those of `entity_ids` no memory mentions and no relation uses (their names came
        from purged text). Returns how many were deleted. Call inside `write()`."""

    @abstractmethod
    def memory_entity_ids(self, memory_ids: Sequence[int]) -> dict[int, list[int]]:
        """{memory id: [entity ids it mentions]}."""

    @abstractmethod
    def visible_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` the scope may see (the graph's scope rule, `api.graph` module
        docstring): an entity named by an active memory, or by no memory, or used by a relation;
        and owned by one of the scope's projects (`owners_of`)."""

    @abstractmethod
    def foreign_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` that other projects own (`owners_of`): names a write in the
        scope treats as unknown. Empty when the scope is every project."""

    @abstractmethod
    def list_entities(self, scope: Scope) -> list[dict]:
        """The entities `scope` may see (`visible_entities`), by key, each with the number of
        memories in the scope (its statuses) that mention it and the creation time of the newest of
        them (the entity's own when none): [{id, name, type, memories, last_mentioned}]."""


class History(ABC):
    """Earlier versions of memories (valid over [valid_from, valid_to)) and the content-free audit log."""

    @abstractmethod
    def add_version(self, snapshot: dict, tags: Sequence[str], valid_to: str, cause: str) -> None:
        """Keep the state `snapshot` (a `raw_row`) as a version valid until `valid_to`."""

    @abstractmethod
    def add_event(self, at: str, action: str, memory_id: int | None = None, detail: str | None = None) -> None:
        """Append a content-free audit event (action, id, short reason; never memory text)."""

    @abstractmethod
    def versions_of(self, ids: Sequence[int]) -> dict[int, list[dict]]:
        """History versions per memory id (every column but id and memory_id), oldest first."""

    @abstractmethod
    def replace_versions(self, memory_id: int, versions: Sequence[dict]) -> None:
        """Set a memory's history to exactly `versions` (dicts with the memory_versions columns;
        `tags` a list)."""

    @abstractmethod
    def versions(self, memory_id: int) -> list[dict]:
        """Every stored version of one memory (its own and those merged in), oldest end first.
        Each dict has the memory_versions columns; `tags` is decoded to a list."""

    @abstractmethod
    def add_foreign_version(self, memory_id: int, version: dict, cause: str, origin_id: int) -> None:
        """Copy one version (a `versions()` dict or a `raw_row` with `tags`, `valid_from`,
        `valid_to`) of memory `origin_id` into the history of `memory_id`."""

    @abstractmethod
    def rows_created_until(self, at: str) -> list[dict]:
        """Every memory row (any status) created at or before `at` (UTC ISO-8601)."""

    @abstractmethod
    def own_versions_ending_after(self, at: str) -> list[dict]:
        """A memory's own versions (not merged-in copies) still valid after `at`, ordered per
        memory by end time: the first one per memory is its state at `at`."""

    @abstractmethod
    def status_events_until(self, at: str) -> list[tuple[int, str, str]]:
        """(memory id, action, at) of every status change (forget, restore, archive) at or before
        `at`, in the order they happened."""

    @abstractmethod
    def last_event_at(self, memory_id: int, action: str) -> str | None:
        """When the latest audit event `action` on this memory happened (UTC ISO-8601), or None."""

    @abstractmethod
    def purged_uids(self) -> dict[str, str]:
        """{uid: when it was purged} from the purge stubs of the audit log (detail `uid=<uid>`;
        stubs written before uids were kept carry none)."""

    @abstractmethod
    def export_paths(self) -> list[str]:
        """The absolute paths of the files `export` wrote from this store, oldest first, each
        once, from the audit log's `export` events (detail `path=<JSON string>`); whether they
        still exist is the caller's to check."""


class Browse(ABC):
    """Read-only paging, facet counts and aggregates for `memsafe ui`; nothing here writes."""

    @abstractmethod
    def browse_ids(self, scope: Scope, *, after_id: int | None = None, created_before: str | None = None,
                   limit: int = 50) -> list[int]:
        """Ids of memories in `scope`, newest (highest id) first, at most `limit`, all below
        `after_id` when given (keyset pagination: the cost of a page does not grow with its
        position, unlike OFFSET). `created_before`: only memories created before this UTC
        ISO-8601 instant."""

    @abstractmethod
    def count_browse(self, scope: Scope, *, created_before: str | None = None, cap: int = 1000) -> tuple[int, bool]:
        """(how many memories `browse_ids` walks through for this filter, whether the count
        stopped at `cap`). Exact for status and project filters; with a kind, tag or age filter the
        count may stop after `cap`."""

    @abstractmethod
    def project_counts(self) -> list[tuple[str | None, int]]:
        """[(project key or None for global, memories of any status)], largest first."""

    @abstractmethod
    def tag_counts(self, limit: int = 200) -> list[tuple[str, int]]:
        """[(tag, memories carrying it)], most used first, at most `limit`."""

    @abstractmethod
    def status_counts(self) -> dict[str, int]:
        """{status: memories}."""

    @abstractmethod
    def active_profile(self, edges: Sequence[str]) -> list[tuple[str, int, int, int]]:
        """Active memories counted by (kind, decay level, age bin): [(kind, level, bin, count)].
        Age bins follow `edges` (UTC ISO-8601 creation times, newest first): bin 0 is created at
        or after edges[0], bin i in [edges[i], edges[i-1]), bin len(edges) before the last edge."""

    @abstractmethod
    def last_access_days(self, since: str) -> list[tuple[str, int]]:
        """[(UTC day 'YYYY-MM-DD', memories whose latest recall fell on that day)] since `since`,
        oldest first. From `last_accessed_at`: each memory counts once, on its latest access."""

    @abstractmethod
    def event_days(self, since: str) -> list[tuple[str, str, int]]:
        """[(UTC day, audit action, count)] of audit events since `since`, oldest day first."""

    @abstractmethod
    def memory_events(self, memory_id: int, limit: int = 200) -> list[dict]:
        """A memory's audit events (content-free), oldest first, at most the latest `limit`."""

    @abstractmethod
    def entity_names_like(self, prefix: str, limit: int = 20) -> list[str]:
        """Entity names whose identity key starts with `prefix` (already a key), by name."""

    @abstractmethod
    def top_entities(self, limit: int = 24) -> list[tuple[str, int]]:
        """[(entity name, active memories mentioning it)] for the most mentioned entities."""


class Store(Memories, FullText, Vectors, Graph, History, Config, Browse):
    """An open memsafe store: every concern above, plus opening state, transactions and checks.

    Attributes every implementation sets when it opens:
        path: where the data lives (a file `Path` for SQLite, the URL for PostgreSQL), for messages
            and `status`.
        created: True when opening created a new, empty store.
        backup_path: the copy written before a migration, or None.
        vector_error: why vectors are unavailable (None when they are available).
        key: the key the data is encrypted with at rest (SQLite only), or None.

    A store is a context manager: `with connect(...) as store:` closes it at the end.

    One thread at a time: a store is one connection, and what it keeps between calls
    (`recall_rows`, the term counts, the vector copy found current) assumes calls one after the
    other. Two threads at once on a SQLite store fail (apsw's ThreadingViolationError) and can
    leave the connection reading an old snapshot, blind to every later write (with
    the recall caches and without them). The servers give each call its own
    store (`memsafe.mcp.tools.ServerState.store`) and the UI holds a lock; the only other thread a call
    uses, the query's embedding, runs no SQL on it (`prepare_vector_search`).
    """

    path: Path | str
    created: bool
    backup_path: Path | None
    vector_error: str | None
    key: Key | None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Defaults that combine several concerns (memories and the graph; vectors and config)

    def recall_rows(self, ids: Sequence[int], *, kind: str | None = None) -> tuple[dict[int, Memory], dict[int, int]]:
        """What a recall reads of its candidates: ({id: memory without tags (any status; only
        those of `kind` if given)}, {id: `entity_degrees`}). A backend may keep them while the
        store is unchanged, so the memories may be shared with later calls: read them, never
        change them (copy one to fill its tags)."""
        memories = self.get_memories(ids, tags=False, kind=kind)
        return memories, self.entity_degrees(list(memories))

    def vectors_ready(self, model_id: str) -> bool:
        """True when vectors can be searched and written for `model_id`: the backend has vector
        support, and the vector table exists and holds that model's vectors."""
        return (
            self.vector_available
            and self.vector_table_exists()
            and self.config_get("_embedding_model") == model_id
        )

    @property
    @abstractmethod
    def encrypted(self) -> bool:
        """True when the stored data is encrypted at rest by memsafe (`memsafe.store.sqlite.encryption`)."""

    @property
    @abstractmethod
    def vector_available(self) -> bool:
        """True when this connection can store and search vectors (else `vector_error` says why)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""

    @abstractmethod
    def write(self, wait_ms: int = 30_000) -> AbstractContextManager[None]:
        """One short write transaction: everything written inside commits together or not at all
        (an exception rolls it back and propagates). Nested use joins the outer transaction.

        Raises:
            StoreUnavailable: another writer held the lock for longer than `wait_ms` milliseconds.
        """

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """A read transaction: every read inside sees one consistent state."""

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version of the stored data (the number of migrations applied)."""

    @abstractmethod
    def sqlite_version(self) -> str:
        """The version of the database engine, for `status` and `doctor`."""

    @abstractmethod
    def vec_version(self) -> str | None:
        """The version of the vector extension, or None without vector support."""

    @abstractmethod
    def integrity_check(self) -> str:
        """The engine's own integrity check: `ok`, or its findings joined by `; `."""

    @abstractmethod
    def checkpoint(self) -> None:
        """Fold pending log files into the main data (SQLite: copy the WAL in and truncate it), best
        effort while others read; a no-op where the engine manages this itself."""

    @abstractmethod
    def no_checkpoint_on_close(self, on: bool = True) -> None:
        """Leave the stored files untouched when this connection closes (read-only runs; `on=False`
        undoes it); a no-op where closing writes nothing."""

    def still_current(self) -> bool:
        """Whether this open connection may serve one more call as a fresh open would: the schema is
        still this code's (another process may have migrated it since). SQLite also checks that no
        transaction is left open and that the file at the path is still the one it opened."""
        return self.schema_version() == self.latest_schema()

    @abstractmethod
    def consistency_problems(self) -> list[str]:
        """Everything that would make the stored data untrustworthy, one line each; [] when it is
        sound: the engine's integrity and foreign keys, the lexical indexes against the rows, and
        the vectors against the rows (no vector for a missing row, `embedded = 1` iff a vector
        exists)."""

    @abstractmethod
    def primary_damage(self) -> list[str]:
        """The part of `consistency_problems` about the stored data itself (memories, history,
        graph), one line each; [] when it is sound. Damage here is not repaired by memsafe."""

    @abstractmethod
    def index_damage(self) -> list[str]:
        """The part of `consistency_problems` about the indexes derived from the memories (the
        word and trigram indexes, the vectors and their bookkeeping), one line each; [] when they
        are sound. Each of these `repair_indexes` can rebuild from the memories."""

    @abstractmethod
    def repair_indexes(self) -> list[str]:
        """Rebuild every damaged derived index (`index_damage`) from the memories in one write
        transaction, writing nothing else: the memories, their history and ids are unchanged.
        Vectors found missing or unusable are marked pending (a backfill recomputes them).
        Returns what was done, one line each ([] when nothing was damaged).

        Raises:
            StoreUnavailable: the store cannot be written (locked, a full disk: DiskFull).
        """

    @abstractmethod
    def requeue_missing_vectors(self) -> int:
        """Mark pending each memory marked embedded whose vector is gone (deleted by another tool,
        a damaged table), so the next backfill recomputes it; one write. Returns how many. Safe
        at any time: it writes only the `embedded` flag, which says whether a vector exists.

        Raises:
            StoreUnavailable: the store cannot be written.
        """

    @abstractmethod
    def backup_files(self) -> list[Path]:
        """The copies of this database memsafe itself wrote (SQLite: migration backups
        `<db>.bak-v<N>`, `<db>.bak-v<N>.<n>`, and the `<db>.convert-tmp` an `encrypt`, `decrypt`
        or `rekey` killed before its rename left), sorted; [] where there are none."""

    @abstractmethod
    def backups_holding(self, uids: Sequence[str]) -> list[Path]:
        """Those of `backup_files` that hold a memory with one of `uids` (opened read-only, with
        the store's key when it is encrypted). A backup that cannot be read (another key, no uid
        column, damaged) is listed too: it may hold them."""

    @abstractmethod
    def latest_schema(self) -> int:
        """The schema version this code writes for this backend (its number of migrations)."""

    @abstractmethod
    def sizes(self) -> tuple[int, int]:
        """(bytes the store takes, bytes of its write-ahead log not yet folded in; 0 where the
        engine keeps no such log of its own)."""

    @abstractmethod
    def memory_columns(self) -> list[str]:
        """The column names of a memory row (what `raw_row` and export carry)."""

    @abstractmethod
    def version_columns(self) -> list[str]:
        """The column names of a history version row."""
