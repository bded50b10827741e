"""Responsibility: the SQL both backends run as it is, as mixins of `SQLiteStore` and
`PostgresStore`: memories and tags, the graph, history and audit, config, browsing, and the
fusion of word and exact-substring hits.

The dialect is the intersection of SQLite ≥ 3.39 and PostgreSQL ≥ 13: `?` placeholders
(`PgConnection` turns them into psycopg's), `ON CONFLICT DO NOTHING`, `RETURNING id`,
`IS NOT DISTINCT FROM`, `TRUE`/`FALSE`. A mixin reads and writes through `self.conn`
(`execute`, `executemany`, `changes()`) and `self._dict_rows(sql, params)`; the one SQLite-only
hint it may use is `self.NOT_INDEXED` ("" on PostgreSQL). Backend-specific SQL (opening,
migrations, full text, vectors) stays in `memsafe.store.sqlite` and `memsafe.store.postgres`.
"""
