"""Responsibility: the knowledge graph: entities, aliases, memory links and typed relations, and
which of them a scope may see (a mixin of both stores; see `memsafe.store.common`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from memsafe.models import Scope
from memsafe.store.common.base import SQLStoreBase
from memsafe.store.common.owners import GLOBAL
from memsafe.store.common.sql import chunked


class SQLGraph(SQLStoreBase):
    """See the module docstring."""

    @staticmethod
    def owners_of(scope: Scope) -> list[str] | None:
        """The projects whose entities `scope` reads and writes, in order of preference (its
        own project first, then '' for the global graph); None for every project."""
        if scope.projects is None:
            return None
        return [*scope.projects, *([GLOBAL] if scope.include_global else [])]

    @classmethod
    def _owners_sql(cls, scope: Scope | None, alias: str = "e") -> tuple[str, list]:
        """(SQL condition, parameters) selecting the entities `scope` owns (None: every one)."""
        owners = None if scope is None else cls.owners_of(scope)
        if owners is None:
            return "TRUE", []
        if not owners:
            return "FALSE", []
        return f"{alias}.project IN ({','.join('?' * len(owners))})", owners

    def entity_degrees(self, ids: Sequence[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for chunk, marks in chunked(ids):
            out.update(self.conn.execute(
                f"SELECT memory_id, count(*) FROM memory_entities WHERE memory_id IN ({marks}) GROUP BY memory_id",
                chunk,
            ))
        return out

    def connected_entity_counts(self, ids: Sequence[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for chunk, marks in chunked(ids):
            out.update(self.conn.execute(
                f"SELECT me.memory_id, count(*) FROM memory_entities me WHERE me.memory_id IN ({marks}) AND ("
                "EXISTS (SELECT 1 FROM relations r WHERE r.source_id = me.entity_id OR r.target_id = me.entity_id) "
                "OR EXISTS (SELECT 1 FROM memory_entities o WHERE o.entity_id = me.entity_id "
                "AND o.memory_id != me.memory_id)) GROUP BY me.memory_id",
                chunk,
            ))
        return out

    def entity_keys_of(self, ids: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {i: [] for i in ids}
        for chunk, marks in chunked(out):
            for memory_id, key in self.conn.execute(
                "SELECT me.memory_id, e.key FROM memory_entities me JOIN entities e ON e.id = me.entity_id "
                f"WHERE me.memory_id IN ({marks}) ORDER BY me.memory_id, e.key",
                chunk,
            ):
                out[memory_id].append(key)
        return out

    def _exported_entities_sql(self, scope: Scope | None) -> tuple[str, list]:
        """Entities an export of `scope` carries: every one (None), else those the scope's
        projects own (`owners_of`)."""
        return self._owners_sql(scope)

    def iter_entities(self, scope: Scope | None = None) -> Iterator[dict]:
        """Entities (id, project: None for global, name, key, type, created_at, aliases) by key
        then project: those an export of `scope` carries (`_exported_entities_sql`)."""
        where, params = self._exported_entities_sql(scope)
        sql = (f"SELECT e.id, e.project, e.name, e.key, e.type, e.created_at FROM entities e WHERE {where} "
               "ORDER BY e.key, e.project")
        for entity_id, project, name, key, etype, created in list(self.conn.execute(sql, params)):
            aliases = [a for (a,) in self.conn.execute(
                "SELECT alias FROM entity_aliases WHERE entity_id = ? ORDER BY alias", (entity_id,))]
            yield {"id": entity_id, "project": project or None, "name": name, "key": key, "type": etype,
                   "created_at": created, "aliases": aliases}

    def iter_relations(self, scope: Scope | None = None) -> Iterator[dict]:
        sql = (
            "SELECT s.key, r.relation, t.key, r.weight, r.created_at, r.updated_at, s.project, t.project "
            "FROM relations r JOIN entities s ON s.id = r.source_id JOIN entities t ON t.id = r.target_id"
        )
        params: list = []
        if scope is not None and scope.projects is not None:
            where, more = self._exported_entities_sql(scope)
            sql += (f" WHERE r.source_id IN (SELECT e.id FROM entities e WHERE {where})"
                    f" AND r.target_id IN (SELECT e.id FROM entities e WHERE {where})")
            params = [*more, *more]
        order = " ORDER BY s.key, r.relation, t.key, s.project, t.project"
        for s, rel, t, weight, created, updated, s_project, t_project in self.conn.execute(sql + order, params):
            yield {"source": s, "relation": rel, "target": t, "weight": weight, "created_at": created,
                   "updated_at": updated, "source_project": s_project or None, "target_project": t_project or None}

    def entity_id_by_key(self, key: str, project: str = GLOBAL) -> int | None:
        row = self.conn.execute("SELECT id FROM entities WHERE project = ? AND key = ?", (project, key)).fetchone()
        if row is None:
            row = self.conn.execute("SELECT entity_id FROM entity_alias_keys WHERE project = ? AND key = ?",
                                    (project, key)).fetchone()
        return row[0] if row else None

    def entity_ids_by_keys(self, keys: Sequence[str], owners: Sequence[str] | None = None) -> list[int]:
        if owners is not None and not owners:
            return []
        where = "" if owners is None else f" AND e.project IN ({','.join('?' * len(owners))})"
        more = [] if owners is None else list(owners)
        out: set[int] = set()
        for chunk, marks in chunked(keys):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT e.id FROM entities e WHERE e.key IN ({marks}){where} UNION SELECT e.id FROM "
                f"entity_alias_keys a JOIN entities e ON e.id = a.entity_id WHERE a.key IN ({marks}){where}",
                [*chunk, *more, *chunk, *more]))
        return sorted(out)

    def entity_ids_by_key(self, key: str) -> list[int]:
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM entities WHERE key = ? UNION SELECT entity_id FROM entity_alias_keys WHERE key = ? "
            "ORDER BY 1", (key, key))]

    def entity_name(self, entity_id: int) -> str | None:
        row = self.conn.execute("SELECT name FROM entities WHERE id = ?", (entity_id,)).fetchone()
        return row[0] if row else None

    def add_entity_aliases(self, entity_id: int, aliases: Iterable[str]) -> None:
        self.conn.executemany(
            "INSERT INTO entity_aliases(entity_id, alias) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(entity_id, a) for a in aliases],
        )

    def link_memory_entity(self, memory_id: int, entity_id: int) -> bool:
        self.conn.execute(
            "INSERT INTO memory_entities(memory_id, entity_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (memory_id, entity_id),
        )
        return self.conn.changes() > 0

    def add_relation(self, source_id: int, relation: str, target_id: int, weight: float, created_at: str,
                     updated_at: str) -> bool:
        self.conn.execute(
            "INSERT INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (source_id, relation, target_id, weight, created_at, updated_at),
        )
        return self.conn.changes() > 0

    def entity_names(self, memory_id: int) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT e.name FROM memory_entities me JOIN entities e ON e.id = me.entity_id "
                "WHERE me.memory_id = ? ORDER BY e.name",
                (memory_id,),
            )
        ]

    def entities_by_keys(self, keys: Sequence[str], owners: Sequence[str] | None = None
                         ) -> dict[str, tuple[int, str, str]]:
        rank = {p: n for n, p in enumerate(owners)} if owners is not None else None
        if rank is not None and not rank:
            return {}
        where, params = ("", []) if rank is None else (f" AND e.project IN ({','.join('?' * len(rank))})", list(rank))
        best: dict[str, tuple[int, tuple[int, str, str]]] = {}

        def take(rows) -> None:
            for key, project, entity_id, name, etype in rows:
                order = (rank or {}).get(project, 0) if rank is not None else entity_id
                if key not in best or order < best[key][0]:
                    best[key] = (order, (entity_id, name, etype))

        for chunk, marks in chunked(keys):
            take(self.conn.execute(f"SELECT e.key, e.project, e.id, e.name, e.type FROM entities e "
                                   f"WHERE e.key IN ({marks}){where}", [*chunk, *params]))
        rest = [k for k in dict.fromkeys(keys) if k not in best]
        for chunk, marks in chunked(rest):
            take(self.conn.execute(
                "SELECT a.key, e.project, e.id, e.name, e.type FROM entity_alias_keys a "
                f"JOIN entities e ON e.id = a.entity_id WHERE a.key IN ({marks}){where}", [*chunk, *params],
            ))
        return {k: v for k, (_order, v) in best.items()}

    def alias_keys(self, entity_ids: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for chunk, marks in chunked(entity_ids):
            for entity_id, key in self.conn.execute(
                f"SELECT entity_id, key FROM entity_alias_keys WHERE entity_id IN ({marks}) ORDER BY key", chunk
            ):
                out.setdefault(entity_id, []).append(key)
        return out

    def add_alias_key(self, entity_id: int, key: str) -> bool:
        self.conn.execute("INSERT INTO entity_alias_keys(project, key, entity_id) SELECT project, ?, id "
                          "FROM entities WHERE id = ? ON CONFLICT DO NOTHING", (key, entity_id))
        return self.conn.changes() > 0

    def delete_alias_key(self, entity_id: int, key: str) -> bool:
        self.conn.execute("DELETE FROM entity_alias_keys WHERE key = ? AND entity_id = ?", (key, entity_id))
        return self.conn.changes() > 0

    def delete_aliases(self, entity_id: int, aliases: Iterable[str]) -> int:
        n = 0
        for alias in aliases:
            self.conn.execute("DELETE FROM entity_aliases WHERE entity_id = ? AND alias = ?", (entity_id, alias))
            n += self.conn.changes()
        return n

    def rename_entity(self, entity_id: int, name: str, key: str) -> None:
        self.conn.execute("UPDATE entities SET name = ?, key = ? WHERE id = ?", (name, key, entity_id))
        self.add_alias(entity_id, name)

    def entity_usage(self, entity_id: int) -> tuple[int, int]:
        links = self.conn.execute("SELECT count(*) FROM memory_entities WHERE entity_id = ?", (entity_id,)).fetchone()
        rels = self.conn.execute("SELECT count(*) FROM relations WHERE source_id = ? OR target_id = ?",
                                 (entity_id, entity_id)).fetchone()
        return int(links[0]), int(rels[0])

    def merge_entity(self, source_id: int, target_id: int, at: str) -> tuple[int, int]:
        moved = self.conn.execute(
            "SELECT count(*) FROM memory_entities WHERE entity_id = ? AND memory_id NOT IN "
            "(SELECT memory_id FROM memory_entities WHERE entity_id = ?)", (source_id, target_id)).fetchone()[0]
        self.conn.execute(
            "INSERT INTO memory_entities(memory_id, entity_id) SELECT memory_id, ? FROM memory_entities "
            "WHERE entity_id = ? ON CONFLICT DO NOTHING", (target_id, source_id))
        relations = 0
        for _rid, s, relation, t, weight in self.relations_touching([source_id]):
            s2, t2 = (target_id if s == source_id else s), (target_id if t == source_id else t)
            if s2 == t2:
                continue  # a relation between the two merged entities would relate the survivor to itself
            row = self.conn.execute("SELECT weight FROM relations WHERE source_id = ? AND relation = ? "
                                    "AND target_id = ?", (s2, relation, t2)).fetchone()
            self.upsert_relation(s2, relation, t2, max(weight, row[0]) if row else weight, at)
            relations += 1
        self.conn.execute(
            "INSERT INTO entity_aliases(entity_id, alias) SELECT ?, alias FROM entity_aliases WHERE entity_id = ? "
            "ON CONFLICT DO NOTHING", (target_id, source_id))
        self.conn.execute(
            "INSERT INTO entity_alias_keys(project, key, entity_id) SELECT e.project, a.key, e.id "
            "FROM entity_alias_keys a JOIN entities e ON e.id = ? WHERE a.entity_id = ? ON CONFLICT DO NOTHING",
            (target_id, source_id))
        key = self.conn.execute("SELECT key FROM entities WHERE id = ?", (source_id,)).fetchone()[0]
        self.conn.execute("DELETE FROM entities WHERE id = ?", (source_id,))
        self.add_alias_key(target_id, key)
        return int(moved), relations

    def move_project_entities(self, old: str, new: str, at: str) -> None:
        """Give project `old`'s graph to `new` (`rename_project`; inside its write transaction):
        an entity whose key (or alias key) `new` holds already merges into that one
        (`merge_entity`: links, relations and aliases kept); the rest change owner with their
        alias keys, but for an alias key that names one of `new`'s entities already. `at`: UTC ISO."""
        for entity_id, key in self.conn.execute("SELECT id, key FROM entities WHERE project = ?", (old,)).fetchall():
            there = self.entity_id_by_key(key, new)
            if there is not None and there != entity_id:
                self.merge_entity(entity_id, there, at)
        self.conn.execute("DELETE FROM entity_alias_keys WHERE project = ? AND key IN (SELECT key FROM "
                          "entity_alias_keys WHERE project = ? UNION SELECT key FROM entities WHERE project = ?)",
                          (old, new, new))
        self.conn.execute("UPDATE entities SET project = ? WHERE project = ?", (new, old))
        self.conn.execute("UPDATE entity_alias_keys SET project = ? WHERE project = ?", (new, old))

    def delete_entity(self, entity_id: int) -> None:
        self.conn.execute("DELETE FROM entities WHERE id = ?", (entity_id,))

    def unlink_memory_entity(self, memory_id: int, entity_id: int) -> bool:
        self.conn.execute("DELETE FROM memory_entities WHERE memory_id = ? AND entity_id = ?", (memory_id, entity_id))
        return self.conn.changes() > 0

    def shared_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` also named by a memory (any status) outside the scope's
        projects. Empty for every project."""
        if scope.projects is None or not entity_ids:
            return set()
        projects, params = self._project_sql(scope)
        out: set[int] = set()
        for chunk, marks in chunked(entity_ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT DISTINCT me.entity_id FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
                f"WHERE me.entity_id IN ({marks}) AND NOT ({projects})", [*chunk, *params]))
        return out

    def insert_entity(self, name: str, key: str, type_: str, at: str, project: str = GLOBAL) -> int:
        entity_id = self.conn.execute(
            "INSERT INTO entities(project, name, key, type, created_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
            (project, name, key, type_, at),
        ).fetchone()[0]
        self.add_alias(entity_id, name)
        return entity_id

    def add_alias(self, entity_id: int, alias: str) -> None:
        self.conn.execute(
            "INSERT INTO entity_aliases(entity_id, alias) VALUES (?, ?) ON CONFLICT DO NOTHING", (entity_id, alias)
        )

    def set_entity_type(self, entity_id: int, type_: str) -> None:
        self.conn.execute("UPDATE entities SET type = ? WHERE id = ?", (type_, entity_id))

    def link_memory_entities(self, memory_id: int, entity_ids: Iterable[int]) -> None:
        self.conn.executemany(
            "INSERT INTO memory_entities(memory_id, entity_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(memory_id, e) for e in entity_ids],
        )

    def upsert_relation(self, source_id: int, relation: str, target_id: int, weight: float, at: str) -> None:
        self.conn.execute(
            "INSERT INTO relations(source_id, relation, target_id, weight, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(source_id, relation, target_id) "
            "DO UPDATE SET weight = excluded.weight, updated_at = excluded.updated_at",
            (source_id, relation, target_id, weight, at, at),
        )

    def delete_relations(self, source_id: int, relation: str | None, target_id: int) -> int:
        params: tuple[int | str, ...]
        if relation is None:
            sql, params = "DELETE FROM relations WHERE source_id = ? AND target_id = ?", (source_id, target_id)
        else:
            sql = "DELETE FROM relations WHERE source_id = ? AND relation = ? AND target_id = ?"
            params = (source_id, relation, target_id)
        self.conn.execute(sql, params)
        return self.conn.changes()

    def entity_rows(self, ids: Sequence[int]) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for chunk, marks in chunked(ids):
            for r in self.conn.execute(
                f"SELECT id, name, key, type, created_at, project FROM entities WHERE id IN ({marks})", chunk
            ):
                out[r[0]] = {"id": r[0], "name": r[1], "key": r[2], "type": r[3], "created_at": r[4], "aliases": [],
                             "project": r[5]}
            for entity_id, alias in self.conn.execute(
                f"SELECT entity_id, alias FROM entity_aliases WHERE entity_id IN ({marks}) ORDER BY alias", chunk
            ):
                if alias != out[entity_id]["name"]:
                    out[entity_id]["aliases"].append(alias)
        return out

    def relations_touching(self, entity_ids: Sequence[int]) -> list[tuple[int, int, str, int, float]]:
        if not entity_ids:
            return []
        out: dict[int, tuple] = {}
        for chunk, marks in chunked(entity_ids, 400):
            for r in self.conn.execute(
                "SELECT id, source_id, relation, target_id, weight FROM relations "
                f"WHERE source_id IN ({marks}) OR target_id IN ({marks}) ORDER BY id",
                [*chunk, *chunk],
            ):
                out[r[0]] = tuple(r)
        return [out[k] for k in sorted(out)]

    def all_relations(self) -> list[tuple[int, int, str, int, float]]:
        return [
            tuple(r)
            for r in self.conn.execute("SELECT id, source_id, relation, target_id, weight FROM relations ORDER BY id")
        ]

    def entity_memories(self, entity_ids: Sequence[int], scope: Scope, per_entity: int | None = None
                        ) -> dict[int, list[int]]:
        if not entity_ids:
            return {}
        where, params = self._scope_sql(scope)
        out: dict[int, list[int]] = {}
        inner = (
            "SELECT me.entity_id, m.id AS memory_id, "
            "row_number() OVER (PARTITION BY me.entity_id ORDER BY m.id DESC) AS n "
            "FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
            "WHERE me.entity_id IN ({marks}) AND " + where
        )
        cap = 2**63 - 1 if per_entity is None else per_entity
        for chunk, marks in chunked(entity_ids):
            sql = f"SELECT entity_id, memory_id FROM ({inner.format(marks=marks)}) WHERE n <= ? ORDER BY entity_id, n"
            for entity_id, memory_id in self.conn.execute(sql, [*chunk, *params, cap]):
                out.setdefault(entity_id, []).append(memory_id)
        return out

    def delete_orphan_entities(self, entity_ids: Iterable[int]) -> int:
        n = 0
        for entity_id in set(entity_ids):
            self.conn.execute(
                "DELETE FROM entities WHERE id = ? "
                "AND NOT EXISTS (SELECT 1 FROM memory_entities WHERE entity_id = ?) "
                "AND NOT EXISTS (SELECT 1 FROM relations WHERE source_id = ? OR target_id = ?)",
                (entity_id, entity_id, entity_id, entity_id),
            )
            n += self.conn.changes()
        return n

    def memory_entity_ids(self, memory_ids: Sequence[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for chunk, marks in chunked(memory_ids):
            for memory_id, entity_id in self.conn.execute(
                f"SELECT memory_id, entity_id FROM memory_entities WHERE memory_id IN ({marks}) ORDER BY entity_id",
                chunk,
            ):
                out.setdefault(memory_id, []).append(entity_id)
        return out

    @classmethod
    def _entity_visible_sql(cls, scope: Scope, alias: str = "e") -> tuple[str, list]:
        """Which entities a scope may see (the graph's scope rule, `api.graph` module docstring):
        an entity named by an active memory, or by no memory, or used by a relation; and owned
        by one of the scope's projects (`owners_of`), so another project's graph stays there."""
        any_active = (f"EXISTS (SELECT 1 FROM memory_entities me JOIN memories m ON m.id = me.memory_id "
                      f"WHERE me.entity_id = {alias}.id AND m.status = 'active')")
        unlinked = f"NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = {alias}.id)"
        related = f"EXISTS (SELECT 1 FROM relations r WHERE r.source_id = {alias}.id OR r.target_id = {alias}.id)"
        where = f"({any_active} OR {unlinked} OR {related})"
        owned, params = cls._owners_sql(scope, alias)
        return f"{where} AND {owned}", params

    def visible_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` the scope may see (`_entity_visible_sql`)."""
        where, params = self._entity_visible_sql(scope)
        out: set[int] = set()
        for chunk, marks in chunked(entity_ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT e.id FROM entities e WHERE e.id IN ({marks}) AND {where}", [*chunk, *params]))
        return out

    def foreign_entities(self, entity_ids: Sequence[int], scope: Scope) -> set[int]:
        """Those of `entity_ids` that other projects own (`owners_of`). Empty for every project.
        A write in the scope treats them as names that do not exist."""
        if scope.projects is None or not entity_ids:
            return set()
        owned, params = self._owners_sql(scope)
        out: set[int] = set()
        for chunk, marks in chunked(entity_ids):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT e.id FROM entities e WHERE e.id IN ({marks}) AND NOT ({owned})", [*chunk, *params]))
        return out

    def list_entities(self, scope: Scope) -> list[dict]:
        """The entities `scope` may see (`_entity_visible_sql`), by key, each with the number of
        memories in the scope (its statuses) that mention it."""
        visible, v_params = self._entity_visible_sql(scope)
        where, params = self._scope_sql(scope)
        sql = (
            "SELECT e.id, e.name, e.type, (SELECT count(*) FROM memory_entities me JOIN memories m "
            f"ON m.id = me.memory_id WHERE me.entity_id = e.id AND {where}), "
            "coalesce((SELECT max(m.created_at) FROM memory_entities me JOIN memories m "
            f"ON m.id = me.memory_id WHERE me.entity_id = e.id AND {where}), e.created_at) FROM entities e "
            f"WHERE {visible} ORDER BY e.key"
        )
        return [{"id": r[0], "name": r[1], "type": r[2], "memories": r[3], "last_mentioned": r[4]}
                for r in self.conn.execute(sql, [*params, *params, *v_params])]
