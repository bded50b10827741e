"""Responsibility: giving every entity of an older store its owning project, the same on both
backends (SQLite's migration m015, PostgreSQL's m008).

An entity belongs to one project (`entities.project`; '' is the global graph, that of memories
with no project, which every project sees). Before, one entity row served every project that
named it; now an entity that global memories name stays one global entity (a project's memory
may link a global entity, `api.graph.link_entities`), an entity no memory names (made by hand)
is global too, as it was visible to every project, and any other is split: each project that
names it has an entity of its own, with the same name, key, type, aliases and alias keys, and
its memories are linked to that one. A relation is carried to each project where both of its ends
are visible (the project's own copy of an end, else the global one), so it stays in every graph
that showed it; a relation no single project could see (its ends in two different projects) is
kept as it was, between the original rows (shown to every-project views, as before).
"""

from __future__ import annotations

GLOBAL = ""  # `entities.project` of the global graph


def assign_entity_projects(conn) -> None:
    """Split each entity among the projects whose memories (any status) name it, in the
    caller's transaction. `conn.execute` takes `?` parameters (an apsw connection or the
    PostgreSQL store's `PgConnection`); `entities.project` and `entity_alias_keys.project`
    exist and are '' on every row."""
    owners: dict[int, list[str]] = {}
    for entity_id, project in conn.execute(
        "SELECT DISTINCT me.entity_id, coalesce(m.project, '') FROM memory_entities me "
        "JOIN memories m ON m.id = me.memory_id ORDER BY 1, 2"
    ).fetchall():
        owners.setdefault(entity_id, []).append(project)
    copies: dict[int, dict[str, int]] = {}  # entity id -> {project: its entity there}, for split ones
    for entity_id, projects in owners.items():
        if GLOBAL in projects:
            owners[entity_id] = [GLOBAL]
            continue
        first, *rest = projects
        if first != GLOBAL:
            conn.execute("UPDATE entities SET project = ? WHERE id = ?", (first, entity_id))
            conn.execute("UPDATE entity_alias_keys SET project = ? WHERE entity_id = ?", (first, entity_id))
        if not rest:
            continue
        ids = {first: entity_id}
        for project in rest:
            new_id = conn.execute(
                "INSERT INTO entities(project, name, key, type, created_at) SELECT ?, name, key, type, created_at "
                "FROM entities WHERE id = ? RETURNING id", (project, entity_id)).fetchone()[0]
            conn.execute("INSERT INTO entity_aliases(entity_id, alias) SELECT ?, alias FROM entity_aliases "
                         "WHERE entity_id = ?", (new_id, entity_id))
            conn.execute("INSERT INTO entity_alias_keys(project, key, entity_id) SELECT ?, key, ? "
                         "FROM entity_alias_keys WHERE entity_id = ?", (project, new_id, entity_id))
            conn.execute("UPDATE memory_entities SET entity_id = ? WHERE entity_id = ? AND memory_id IN "
                         "(SELECT id FROM memories WHERE coalesce(project, '') = ?)", (new_id, entity_id, project))
            ids[project] = new_id
        copies[entity_id] = ids
    if not copies:
        return
    project_of = {e: ps[0] for e, ps in owners.items()}
    split = list(copies)
    marks = ",".join("?" * len(split))
    rows = conn.execute(
        "SELECT id, source_id, relation, target_id, weight, created_at, updated_at FROM relations "
        f"WHERE source_id IN ({marks}) OR target_id IN ({marks}) ORDER BY id", [*split, *split]).fetchall()
    for rel_id, source, relation, target, weight, created, updated in rows:
        ends = [copies.get(e, {project_of.get(e, GLOBAL): e}) for e in (source, target)]
        pairs: list[tuple[int, int]] = []
        for project in sorted(set(ends[0]) | set(ends[1])):
            s, t = (end.get(project, end.get(GLOBAL)) for end in ends)
            if s is not None and t is not None and (s, t) not in pairs:
                pairs.append((s, t))
        if not pairs or (source, target) in pairs:
            pairs = [p for p in pairs if p != (source, target)]
        else:
            conn.execute("DELETE FROM relations WHERE id = ?", (rel_id,))
        for s, t in pairs:
            conn.execute(
                "INSERT INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", (s, relation, t, weight, created, updated))
