"""Responsibility: the graph's part in recall: the stored entities a query names and the memories
one relation away from them (step "candidates": the graph hop), and the relations among the
entities of the packed memories (step "packing": the graph share of the budget).
"""

from __future__ import annotations

from collections.abc import Sequence

from memsafe import framing, graph, tokens
from memsafe.models import Scope
from memsafe.store import Store


def query_entities(store: Store, text: str, scope: Scope | None = None) -> list[int]:
    """Ids of the stored entities a query names (by identity key of its entities and word runs):
    of every project `scope` reads (`Store.owners_of`; None: every project)."""
    return store.entity_ids_by_keys(graph.query_keys(text), None if scope is None else store.owners_of(scope))


HOP_PER_ENTITY = 50  # newest memories per entity taken by the graph hop (see one_hop)


def one_hop(store: Store, entity_ids: Sequence[int], scope: Scope, per_entity: int = HOP_PER_ENTITY
            ) -> tuple[dict[int, float], set[int]]:
    """Memories one relation away from the given entities, and memories naming them directly,
    the newest `per_entity` of each entity's memories (an entity named by thousands of memories
    would otherwise make all of them candidates: at 100k memories that cost 9 ms at p95).

    Returns:
        ({memory id: hop strength in [0, 1] = max weight (capped at 1) of the relations reaching
        an entity it mentions}, {ids of memories mentioning a given entity}). Both in scope.
    """
    if not entity_ids:
        return {}, set()
    # Only entities the scope may see: a name from another project's text leads nowhere here.
    given = store.visible_entities(list(entity_ids), scope) if scope.projects is not None else set(entity_ids)
    if not given:
        return {}, set()
    strength: dict[int, float] = {}
    for _rid, s, _rel, t, w in store.relations_touching(list(given)):
        for other in (s, t):
            if other not in given:
                strength[other] = max(strength.get(other, 0.0), min(1.0, w))
    direct = {m for ids in store.entity_memories(list(given), scope, per_entity).values() for m in ids}
    reached = store.entity_memories(list(strength), scope, per_entity)
    # A memory naming a given entity is direct even when it is not among that entity's newest
    # `per_entity` (the cap bounds the candidates, not which memories count as direct).
    names_given = {m for m, entities in store.memory_entity_ids([m for ids in reached.values() for m in ids]).items()
                   if given.intersection(entities)}
    hops: dict[int, float] = {}
    for entity_id, memory_ids in reached.items():
        for memory_id in memory_ids:
            if memory_id not in direct and memory_id not in names_given:
                hops[memory_id] = max(hops.get(memory_id, 0.0), strength[entity_id])
    return hops, direct


def context_text(store: Store, memory_ids: Sequence[int], max_tokens: int, scope: Scope | None = None,
                 *, framed: bool = False) -> tuple[str, int]:
    """Compact graph context for recalled memories: relations among their entities first, then
    relations with one endpoint among them, heavier first, one `source relation target` line
    each, as many as fit in `max_tokens` (cl100k_base; with `framed`, counted as the `[graph]`
    block of a reply framed for a model, `memsafe.framing`). Returns (text, tokens); ('', 0) if
    none fit. With `scope`, only relations whose two ends the scope may see (as `graph_show`).
    """
    if max_tokens <= 0 or not memory_ids:
        return "", 0
    by_memory = store.memory_entity_ids(memory_ids)
    entity_ids = {e for ids in by_memory.values() for e in ids}
    rows = store.relations_touching(list(entity_ids))
    if scope is not None and rows:  # the other end may be a name from another project's text
        visible = store.visible_entities(list({e for r in rows for e in (r[1], r[3])}), scope)
        rows = [r for r in rows if r[1] in visible and r[3] in visible]
    if not rows:
        return "", 0
    rows = sorted(rows, key=lambda r: (-(r[1] in entity_ids and r[3] in entity_ids), -r[4], r[0]))
    names = store.entity_rows([r[1] for r in rows] + [r[3] for r in rows])
    lines = graph.format_relations([(names[r[1]]["name"], r[2], names[r[3]]["name"], r[4]) for r in rows])
    chosen: list[str] = []
    used = 0
    head = framing.head_tokens(framing.GRAPH_HEAD) if framed else 0
    for line in lines:
        candidate = "\n".join([*chosen, line])
        n = head + (framing.body_tokens(candidate) if framed else tokens.count(candidate))
        if n > max_tokens:
            break
        chosen.append(line)
        used = n
    return "\n".join(chosen), used
