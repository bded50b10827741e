"""Chinese, Japanese and Korean text is found by keyword: the word index cuts CJK
runs into overlapping bigrams (`memsafe.store.common.tokenizer`), on both backends, through every
path (CLI, api, time travel), and stores made before it are migrated with nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import sys

import apsw
import pytest

from memsafe import api
from memsafe.models import Scope
from memsafe.store.common import tokenizer

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

# Four memories where `recall 引用` once missed the first and `--mode lexical` returned [].
FOUR = [
    "我们在项目里使用引用计数来管理内存。",
    "悬空指针会导致程序崩溃，释放后要置空",
    "数据库连接池的大小设置为二十。",
    "The deploy script reads its settings from deploy.yml.",
]

JAPANESE = [
    "設定ファイルはホームディレクトリに置いてください。",
    "日本語のドキュメントは来週までに翻訳する予定です。",
    "テストが失敗したらログを確認してから再実行します。",
    "データベースの接続がタイムアウトした。",
]


def _ids(result) -> list[int]:
    return [h.memory.id for h in result.hits]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_cjk_word_finds_each_memory_holding_it_on_the_command_line(cli, mode):
    for text in FOUR:
        assert cli("remember", text).exit_code == 0
    r = cli("recall", "引用", "--mode", mode, "--json")
    assert r.exit_code == 0, r.stderr
    results = json.loads(r.stdout)["results"]
    assert results and results[0]["id"] == 1 and results[0]["content"] == FOUR[0]
    if mode == "lexical":  # only memories holding the word
        assert [x["id"] for x in results] == [1]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(
    "query, index",
    [("設定", 0), ("ファイル", 0), ("翻訳", 1), ("予定", 1), ("ドキュメント", 1), ("ログ", 2), ("再実行", 2),
     ("タイムアウト", 3), ("接続", 3), ("ログを確認する方法", 2), ("データベースの接続", 3)],
)
def test_japanese_words_in_kana_and_kanji_are_found(store, mode, query, index):
    ids = [api.remember(store, text).id for text in JAPANESE]
    api.remember(store, "Check the logs before you re-run the failed test.")
    result = api.recall(store, query, mode=mode)
    assert _ids(result)[:1] == [ids[index]], _ids(result)
    assert result.hits[0].lexical_rank == 1


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_longer_cjk_query_ranks_the_memory_holding_all_of_it_first(store, mode):
    """BM25 over bigrams: `引用计数` is 引用 + 用计 + 计数; the memory holding the whole word
    comes before ones holding a part (`引用` alone, `计数` alone)."""
    ids = [api.remember(store, text).id for text in (
        "这篇论文的引用格式不对，需要重新整理引用。",
        "计数器每天凌晨清零。",
        "引用计数归零时对象会被立即释放。",
    )]
    assert _ids(api.recall(store, "引用计数", mode=mode))[:1] == [ids[2]]
    assert set(_ids(api.recall(store, "引用计数", mode="lexical"))) == set(ids)  # each holds a part


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_a_cjk_question_ranks_the_memory_on_its_topic_first(store, mode):
    """BM25 weighs the rare bigrams of `内存泄漏` above the common `怎么`: the trigram pieces of the
    old index counted two pieces each here and put the wrong memory first."""
    topic = api.remember(store, "内存泄漏的排查步骤：先看堆快照，再对比两次的对象数量。").id
    api.remember(store, "怎么排查问题都写在值班手册里。")
    assert _ids(api.recall(store, "怎么排查内存泄漏", mode=mode))[:1] == [topic]


def test_mixed_text_is_found_by_its_english_and_its_cjk_words(store):
    """`部署redis缓存集群` was one unicode61 token: neither `redis` nor `缓存` found it."""
    mixed = api.remember(store, "部署redis缓存集群之前先备份。").id
    english = api.remember(store, "The redis cache cluster runs on three nodes.").id
    assert set(_ids(api.recall(store, "redis", mode="lexical"))) == {mixed, english}
    assert _ids(api.recall(store, "缓存", mode="lexical")) == [mixed]
    assert _ids(api.recall(store, "redis缓存", mode="lexical"))[:1] == [mixed]


def test_a_korean_word_with_a_particle_attached_is_found(store):
    """Korean separates words by spaces but glues particles to them: `연결이` holds `연결`."""
    target = api.remember(store, "데이터베이스 연결이 자주 끊겨서 재시도 정책을 바꿨다.").id
    api.remember(store, "캐시 서버는 매일 밤 재시작한다.")
    assert _ids(api.recall(store, "연결", mode="lexical")) == [target]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("texts, query", [
    (["데이터베이스 연결 시간 초과 오류가 발생했습니다", "안녕하세요 반갑습니다", "안전 점검 일정은 다음 주입니다"],
     "데이터베이스 연결 안 됨"),
    (["服务通过 Docker 部署到生产环境", "用户登录失败时要记录日志", "这个函数的作用是清理缓存"], "用Docker部署"),
    (["服务通过 Docker 部署到生产环境", "用户登录失败时要记录日志", "这个函数的作用是清理缓存"], "Docker 部署 在 哪"),
    (["設定ファイルはホームディレクトリに置いてください。", "このページの内容は古い", "場所の情報は地図にある"],
     "設定ファイル の 場所"),
])
def test_a_lone_cjk_character_beside_words_does_not_outrank_the_words(store, mode, texts, query):
    """A 1-character run was an exact term, and a memory holding an exact
    term ranks first, so greetings holding the particle 안 came before the memory holding
    데이터베이스 and 연결. Beside longer CJK words a lone character is a plain word."""
    ids = [api.remember(store, text).id for text in texts]
    assert _ids(api.recall(store, query, mode=mode))[:1] == [ids[0]]


def test_a_single_cjk_character_ending_a_text_is_found(store):
    """On SQLite a character ending a text started no trigram, so `recall 猫`
    found only the memory where 猫 stood inside the text (PostgreSQL found all three)."""
    ids = [api.remember(store, text).id for text in ("猫", "我喜欢猫", "我的猫很可爱")]
    api.remember(store, "狗每天早上要散步。")
    assert set(_ids(api.recall(store, "猫", mode="lexical"))) == set(ids)
    assert _ids(api.recall(store, "爱", mode="lexical")) == [ids[2]]


def test_a_single_cjk_character_is_found(store):
    """Below a bigram: looked up exactly (`terms.exact_terms`, the trigram index)."""
    cat = api.remember(store, "我家的猫喜欢在键盘上睡觉。").id
    api.remember(store, "狗每天早上要散步。")
    assert _ids(api.recall(store, "猫", mode="lexical")) == [cat]


def test_time_travel_finds_cjk_words(store, monkeypatch):
    """`recall --as-of` searches a scratch index of past texts, cut the same way."""
    monkeypatch.setenv("MEMSAFE_NOW", "2026-01-01T00:00:00Z")
    target = api.remember(store, "释放内存以后指针变成悬空状态。").id
    api.remember(store, "内存分配器使用伙伴系统。")
    monkeypatch.setenv("MEMSAFE_NOW", "2026-02-01T00:00:00Z")
    api.update(store, target, content="释放内存以后指针变成空值。")  # the word is gone now
    assert _ids(api.recall(store, "悬空", mode="lexical")) == []
    for mode in ("hybrid", "lexical"):
        result = api.recall_as_of(store, "悬空", as_of="2026-01-15T00:00:00Z", mode=mode)
        assert _ids(result)[:1] == [target], mode


def test_the_word_index_holds_cjk_bigrams_and_stays_consistent_through_changes(store):
    memory = api.remember(store, "连接池的大小设置为二十。")
    assert _ids(api.recall(store, "连接池", mode="lexical")) == [memory.id]
    api.update(store, memory.id, content="线程池的大小设置为八。")
    assert _ids(api.recall(store, "连接", mode="lexical")) == []
    assert _ids(api.recall(store, "线程池", mode="lexical")) == [memory.id]
    assert store.consistency_problems() == []
    api.purge(store, [memory.id])
    assert _ids(api.recall(store, "线程", mode="lexical")) == []
    assert store.consistency_problems() == []


def test_imported_cjk_memories_are_found_by_keyword(store, tmp_path):
    """Import writes through the same index: a SQLite store's export imported into this backend."""
    source = api.open_store(str(tmp_path / "source.db")).store
    for text in FOUR:
        api.remember(source, text, embed_now=False)
    path = tmp_path / "export.jsonl"
    api.export_to_path(source, path, all_projects=True)
    source.close()
    api.import_file(store, path)
    hits = api.recall(store, "引用", mode="lexical", all_projects=True).hits
    assert [h.memory.content for h in hits] == [FOUR[0]]
    assert store.consistency_problems() == []


def test_the_mcp_server_finds_cjk_words(db_path, tmp_path, embedder):
    """Through a real MCP client over stdio: remember the four memories, recall `引用`."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    (tmp_path / "srv").mkdir()

    async def session():
        params = StdioServerParameters(command=sys.executable, args=["-m", "memsafe", "--db", str(db_path), "serve"],
                                       env={**os.environ, "MEMSAFE_HOME": str(tmp_path / "home")},
                                       cwd=str(tmp_path / "srv"))
        with open(tmp_path / "server.err", "a", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    for text in FOUR:
                        assert not (await s.call_tool("remember", {"content": text})).is_error
                    return await s.call_tool("recall", {"query": "引用", "limit": 1})

    result = anyio.run(session)
    text = "\n".join(c.text for c in result.content)
    assert not result.is_error and FOUR[0] in text and FOUR[1] not in text, text


# -- the tokenizer ----------------------------------------------------------------------------------

PLAIN = [
    "We squash commits before merging a pull request into main.",
    "settings live in /etc/harbor/config.toml; v2.4.7 of checkout-api, café déjà-vu",
    "ＦＵＬＬＷＩＤＴＨ letters, émoji 🎉 and tabs\tand\nnewlines",
    "",
]


def _tokenize(spec: str, text: str) -> list[tuple]:
    conn = apsw.Connection(":memory:")
    tokenizer.register(conn)
    name, *args = spec.split()
    return conn.fts5_tokenizer(name, args)(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None)


@pytest.mark.backends("sqlite")  # no store: the tokenizer alone
@pytest.mark.parametrize("text", PLAIN)
def test_text_without_cjk_gets_exactly_fts5s_own_tokens(text):
    assert _tokenize(tokenizer.TOKENIZE, text) == _tokenize(tokenizer.BASE, text)


@pytest.mark.backends("sqlite")  # no store: the tokenizer alone
def test_cjk_runs_become_bigrams_with_their_byte_offsets():
    text = "Use 引用计数 in redis缓存, 猫 and ドキュメント."
    found = _tokenize(tokenizer.TOKENIZE, text)
    assert [t[2] for t in found] == ["us", "引用", "用计", "计数", "in", "redi", "缓存", "猫", "and",
                                     "ドキ", "キュ", "ュメ", "メン", "ント"]
    utf8 = text.encode()
    for start, end, token in found:
        if tokenizer.CJK_RUN.fullmatch(token):
            assert utf8[start:end].decode() == token
        else:
            assert utf8[start:end].decode().lower().startswith(token[:2])


# -- stores made before the bigrams -----------------------------------------------------------------

OLD_TEXTS = [*FOUR, "Note 1: the cache service was checked.", "Note 2: the queue service was checked twice."]


def _raw_insert(conn, texts, mark="?") -> None:
    for n, text in enumerate(texts):
        conn.execute(
            "INSERT INTO memories(uid, content, created_at, updated_at, content_updated_at, content_hash) "
            f"VALUES ({mark}, {mark}, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', {mark})",
            (f"u{n}", text, f"h{n}"),
        )


@pytest.mark.backends("sqlite")  # the SQLite migration m007; PostgreSQL's m003 below
def test_a_schema_6_sqlite_store_gets_bigrams_with_nothing_lost(tmp_path, embedder, monkeypatch):
    """A file as m001-m006 made it (CJK runs one token each) is migrated: backup first, every row as
    it was, the word index rebuilt in one transaction; a migration that fails after it (a crash)
    leaves the old file, and the next open does it again. English searches rank as before."""
    from memsafe.store.sqlite import migrations

    path = tmp_path / "old" / "memory.db"
    path.parent.mkdir()
    conn = apsw.Connection(str(path))
    conn.execute("BEGIN")
    for number, (_name, fn) in enumerate(migrations.MIGRATIONS[:6], start=1):
        fn(conn)
        conn.execute(f"PRAGMA user_version = {number}")
    _raw_insert(conn, OLD_TEXTS)
    conn.execute("COMMIT")
    english = {q: conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? "
                               "ORDER BY bm25(memories_fts), rowid", (q,)).fetchall()
               for q in ('"service"', '"checked" OR "twice"', '"deploy.yml"')}
    assert conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH '\"引用\"'").fetchone()[0] == 0
    before = conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
    conn.close()
    pristine = tmp_path / "pristine.db"
    shutil.copyfile(path, pristine)

    def crash(conn):
        raise apsw.IOError("simulated crash after the word index was rebuilt")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m999_crash", crash)])
    with pytest.raises(Exception, match="simulated crash"):
        api.open_store(str(path))
    monkeypatch.undo()
    conn = apsw.Connection(str(path))  # unchanged: version 6, the old index, writable without the tokenizer
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
    assert conn.execute("SELECT * FROM memories ORDER BY id").fetchall() == before
    assert tokenizer.NAME not in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0]
    conn.close()

    opened = api.open_store(str(path))
    store = opened.store
    try:
        assert store.schema_version() == migrations.latest()
        assert opened.store.backup_path is not None and opened.store.backup_path.exists()
        assert store.conn.execute("SELECT * FROM memories ORDER BY id").fetchall() == before
        assert store.consistency_problems() == []
        for query, rows in english.items():
            assert store.conn.execute(  # the same order (scores move: CJK rows have more tokens now)
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? "
                "ORDER BY bm25(memories_fts), rowid", (query,)).fetchall() == rows, query
        assert _ids(api.recall(store, "引用", mode="lexical", all_projects=True)) == [1]
        assert _ids(api.recall(store, "悬空", mode="lexical", all_projects=True)) == [2]
        added = api.remember(store, "新的引用说明", embed_now=False)
        assert set(_ids(api.recall(store, "引用", mode="lexical", all_projects=True))) == {1, added.id}
        assert store.consistency_problems() == []
    finally:
        store.close()


def _old_tsvector(text: str) -> tuple[str, int]:
    """A word-index entry as PostgreSQL's m002 wrote it: FTS5's tokens without the bigrams."""
    conn = apsw.Connection(":memory:")
    name, *args = tokenizer.BASE.split()
    found = conn.fts5_tokenizer(name, args)(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                                            include_offsets=False, include_colocated=False)
    positions: dict[str, list[int]] = {}
    for at, token in enumerate(found, start=1):
        positions.setdefault(token, []).append(at)
    literal = " ".join("'" + t.replace("'", "''") + "':" + ",".join(map(str, p)) for t, p in positions.items())
    return literal, len(found)


@pytest.mark.backends("postgres")  # PostgreSQL's migration m003; SQLite's m007 above
def test_a_schema_2_postgres_store_gets_bigrams_with_nothing_lost(pg_server, embedder):
    import psycopg

    from memsafe.store.postgres import PgConnection, close_pool, migrations

    pg_server.admin("CREATE DATABASE schema_two")
    url = pg_server.url("schema_two")
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            conn = PgConnection(raw)
            conn.script("CREATE EXTENSION vector; CREATE EXTENSION pg_trgm;")
            migrations.m001_initial(conn)
            migrations.m002_fts5_words(conn)
            conn.script("CREATE TABLE memsafe_schema (version INTEGER NOT NULL); "
                        "INSERT INTO memsafe_schema VALUES (2);")
            _raw_insert(conn, OLD_TEXTS)
            for memory_id, text in conn.execute("SELECT id, content FROM memories ORDER BY id").fetchall():
                tsv, dl = _old_tsvector(text)
                conn.execute("INSERT INTO memory_fts(memory_id, tsv, dl) VALUES (?, ?::tsvector, ?)",
                             (memory_id, tsv, dl))
            before = conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
            english = conn.execute("SELECT memory_id, tsv::text, dl FROM memory_fts WHERE memory_id > 3 "
                                   "ORDER BY memory_id").fetchall()
        store = api.open_store(url).store
        try:
            assert store.schema_version() == migrations.latest()
            assert store.conn.execute("SELECT * FROM memories ORDER BY id").fetchall() == before
            assert store.consistency_problems() == []  # every entry as the tokenizer makes it now
            assert store.conn.execute("SELECT memory_id, tsv::text, dl FROM memory_fts WHERE memory_id > 3 "
                                      "ORDER BY memory_id").fetchall() == english  # untouched
            assert [i for i, _ in store.fts_search('"引用"', Scope(), 5)] == [1]
            assert _ids(api.recall(store, "悬空", mode="lexical", all_projects=True)) == [2]
            # a memsafe from before m003 still running writes entries without the tokenizer's name:
            # refused (before: it wrote '旧进程在迁移之后写入' whole, found by no search)
            for memory_id in (1, 10**9):  # an update of an entry, a new entry
                with pytest.raises(psycopg.errors.NotNullViolation):
                    store.conn.execute("INSERT INTO memory_fts(memory_id, tsv, dl) VALUES (?, ?::tsvector, ?) "
                                       "ON CONFLICT (memory_id) DO UPDATE SET tsv = excluded.tsv, dl = excluded.dl",
                                       (memory_id, *_old_tsvector("旧进程在迁移之后写入")))
        finally:
            store.close()
    finally:
        close_pool(url)
        pg_server.admin("DROP DATABASE schema_two WITH (FORCE)")


@pytest.mark.backends("sqlite")  # the benchmark's store is a SQLite file
def test_the_cjk_benchmark_corpus_is_found_by_its_words(tmp_path, monkeypatch):
    """`memsafe bench --scale`'s CJK phase (index sizes, remember and recall time): every query
    word of its corpus puts a memory holding the word first."""
    from memsafe.bench import scale

    monkeypatch.setenv("MEMSAFE_NO_MODEL", "1")
    out = scale._phase_cjk(str(tmp_path / "cjk.db"), 300, len(scale.CJK_QUERIES))
    assert out["cjk_first_hit_holds_word_pct"] == 100.0
    assert out["cjk_word_index_bytes_per_memory"] > 0 and out["cjk_trigram_index_bytes_per_memory"] > 0


@pytest.mark.backends("sqlite")  # no store: the tokenizer alone
def test_bigrams_stop_at_the_bound_without_splitting_a_word():
    """Past BIGRAM_MAX_CHARS characters (the trigram index's bound) CJK runs are one token each,
    as FTS5 makes them, so a 1 MB CJK text is not ~333,000 bigrams; no other word is cut."""
    bound = tokenizer.BIGRAM_MAX_CHARS
    straddling = "x" * (bound - 2) + "引用计数 after"  # the run crosses the bound
    assert [t[2] for t in _tokenize(tokenizer.TOKENIZE, straddling)][1:] == ["引用", "计数", "after"]  # cut at it
    assert [t[2] for t in _tokenize(tokenizer.TOKENIZE, straddling + " 悬空指针")][-1] == "悬空指针"
    english = "引用 " + "word " * (bound // 5) + "悬空指针"  # one word ends past the bound: not cut
    found = [t[2] for t in _tokenize(tokenizer.TOKENIZE, english)]
    assert found[0] == "引用" and found[-1] == "悬空指针" and set(found[1:-1]) == {"word"}
    huge = "测试" * 200_000
    assert len(_tokenize(tokenizer.TOKENIZE, huge)) == bound - 1 + 1  # the bigrams, then the rest as one token
