"""Remember and recall through the handlers: semantic and keyword recall, duplicates, forget,
restore, purge, token budgets, over-long input, FTS syntax, Unicode."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from memsafe import api, tokens
from memsafe.errors import Duplicate, InvalidInput, NotFound

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

CORPUS = [
    "We squash commits before merging a pull request into main.",
    "The CI pipeline fails with ERR_SSL_PROTOCOL when HTTPS_PROXY is set on the runner.",
    "Alice prefers tabs over spaces in Go code reviews.",
    "Production database backups run nightly at 02:00 UTC to the cold-storage bucket.",
    "Use the --frozen-lockfile flag with pnpm install in CI so dependency versions never drift.",
    "The payments service reads its settings from config/payments.toml at start-up.",
    "Our on-call rotation changes every Monday morning; the schedule lives in PagerDuty.",
]


@pytest.fixture
def filled(store):
    ids = [api.remember(store, text).id for text in CORPUS]
    return store, ids


def top_id(store, query, **kw) -> int | None:
    result = api.recall(store, query, **kw)
    return result.hits[0].memory.id if result.hits else None


@pytest.mark.parametrize(
    "query, index",
    [
        ("how do we combine branches?", 0),  # no content word shared with memory 0
        ("which person likes indentation characters", 2),
        ("when is the data saved every evening", 3),
        ("who must answer pages this week", 6),
    ],
)
def test_semantic_recall_by_paraphrase(filled, query, index):
    store, ids = filled
    assert top_id(store, query) == ids[index]


@pytest.mark.parametrize(
    "query, index",
    [("ERR_SSL_PROTOCOL", 1), ("--frozen-lockfile", 4), ("config/payments.toml", 5), ("HTTPS_PROXY", 1)],
)
def test_keyword_recall_by_exact_identifier(filled, query, index):
    store, ids = filled
    assert top_id(store, query) == ids[index]
    assert top_id(store, query, mode="lexical") == ids[index]


def test_duplicate_is_refused_with_the_existing_id(filled):
    store, ids = filled
    with pytest.raises(Duplicate) as info:
        api.remember(store, "  " + CORPUS[3] + "  ")
    assert info.value.existing_id == ids[3]
    assert str(ids[3]) in str(info.value)
    # the same text in another project is a different memory
    other = api.remember(store, CORPUS[3], project="elsewhere")
    assert other.id not in ids


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_forget_hides_from_every_path_and_restore_brings_back(filled, mode):
    store, ids = filled
    target = ids[1]
    queries = ["ERR_SSL_PROTOCOL proxy", "certificate handshake failure in the build", "runner"]
    api.forget(store, target, reason="outdated")
    for q in queries:
        for budget in (None, 30):
            found = [h.memory.id for h in api.recall(store, q, mode=mode, budget=budget).hits]
            assert target not in found
    assert api.get(store, target).status == "forgotten"
    api.restore(store, target)
    assert target in [h.memory.id for h in api.recall(store, queries[0], mode=mode).hits]


def test_forget_twice_and_unknown_ids_are_errors(filled):
    store, ids = filled
    api.forget(store, ids[0])
    with pytest.raises(InvalidInput):
        api.forget(store, ids[0])
    with pytest.raises(NotFound):
        api.forget(store, 999_999)
    with pytest.raises(InvalidInput):
        api.get(store, -3)


@pytest.mark.backends("sqlite")  # secure delete of the file and WAL: SQLite only (docs/team.md)
def test_purge_leaves_no_trace_in_the_file_or_wal(store, db_path):
    marker = "Zanzibar-quokka-7731 staging password rotation"
    keep = api.remember(store, "The staging cluster runs in eu-west-1.")
    victim = api.remember(store, marker, tags=["secret-ish"])
    api.recall(store, "Zanzibar quokka")  # touch it, so it was read and indexed
    report = api.purge(store, [victim.id])
    assert report.purged_ids == [victim.id]
    with pytest.raises(NotFound):
        api.get(store, victim.id)
    assert api.get(store, keep.id).content.startswith("The staging")
    store.close()
    blob = db_path.read_bytes()
    wal = db_path.with_name(db_path.name + "-wal")
    if wal.exists():
        blob += wal.read_bytes()
    for needle in ("Zanzibar", "quokka", "zanzibar", "secret-ish"):
        assert needle.encode() not in blob, needle
    reopened = api.open_store(str(db_path)).store
    assert reopened.integrity_check() == "ok"
    events = list(reopened.conn.execute("SELECT action, memory_id, detail FROM events WHERE action = 'purge'"))
    assert events == [("purge", victim.id, f"uid={victim.uid}")]  # content-free: an import honours it
    reopened.close()


def test_purge_names_the_migration_backups_that_still_hold_the_text(tmp_path):
    """A store upgraded from an older schema keeps `<db>.bak-v1`; purge cannot take the text
    out of that copy, so it names it with the command that removes it."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from memsafe.cli import app

    db = tmp_path / "old" / "memory.db"
    db.parent.mkdir()
    shutil.copyfile(Path(__file__).parent.parent / "fixtures" / "v1.db", db)
    runner = CliRunner()
    old = runner.invoke(app, ["--db", str(db), "purge", "2", "--yes", "--all-projects", "--json"])
    assert old.exit_code == 0, old.stderr
    backup = db.with_name("memory.db.bak-v1")
    assert backup.exists() and b"Note 1: the retry policy" in backup.read_bytes()
    doc = json.loads(old.stdout)
    assert doc["backups"] == [str(backup)] and doc["remove_command"] == f"rm -- {backup}"
    assert f"still in 1 backup memsafe made before migrating or converting the database ({backup}); remove them: " \
        f"rm -- {backup}" in " ".join(old.stderr.split())
    # a memory made after the migration is in no backup: nothing to say
    new = json.loads(runner.invoke(app, ["--db", str(db), "remember", "made after the upgrade", "--json"]).stdout)
    quiet = runner.invoke(app, ["--db", str(db), "purge", str(new["id"]), "--yes"])
    assert quiet.exit_code == 0 and "backup" not in quiet.stderr
    backup.unlink()  # the command it gave
    gone = runner.invoke(app, ["--db", str(db), "purge", "3", "--yes", "--all-projects"])
    assert gone.exit_code == 0 and "backup" not in gone.stderr


def test_purge_names_the_export_files_that_still_hold_the_text(store, cli, db_path, tmp_path, monkeypatch):
    """An export file memsafe wrote is a copy of the text too: purge names each
    one that still holds a purged memory, with the command that removes it, on every front end;
    a file exported again since, removed, or written to stdout is not named."""
    from test_server import call, inproc, text_of

    victim = api.remember(store, "Quokka-7731 rotation note for the staging vault", embed_now=False)
    other = api.remember(store, "The staging cluster runs in eu-west-1.", embed_now=False)
    monkeypatch.chdir(tmp_path)
    assert cli("export", "-o", "backup one.jsonl").exit_code == 0  # a relative path: kept absolute
    first = tmp_path / "backup one.jsonl"
    api.export_to_path(store, tmp_path / "other.jsonl")
    assert cli("export").exit_code == 0  # stdout: memsafe cannot know where it went
    result = cli("purge", str(victim.id), "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    files = [str(first), str(tmp_path / "other.jsonl")]
    assert doc["exports"] == files and doc["backups"] == []
    assert doc["remove_command"] == f"rm -- '{first}' {tmp_path / 'other.jsonl'}"
    assert f"2 files memsafe exported ({files[0]}, {files[1]}; export again" in " ".join(result.stderr.split())
    # exported again after the purge, the file no longer holds it: not named
    api.export_to_path(store, first)
    (tmp_path / "other.jsonl").unlink()
    third = api.remember(store, "Wombat-42 notes on the staging vault", embed_now=False)
    assert api.purge(store, [other.id]).exports == [str(first)]
    api.export_to_path(store, first)
    srv = inproc(db_path, cwd=str(tmp_path))  # no warm thread left running after the test
    call(srv, "forget", {"id": third.id})
    text = text_of(call(srv, "forget", {"id": third.id, "purge": True}))
    assert f"rm -- '{first}'" in text and "1 file memsafe exported" in text


def test_purge_of_unknown_id_changes_nothing(filled):
    store, ids = filled
    with pytest.raises(NotFound):
        api.purge(store, [ids[0], 424242])
    assert api.get(store, ids[0]).status == "active"


@pytest.mark.parametrize("budget", [1, 5, 20, 60, 200, 2000])
def test_every_recall_stays_within_its_budget(filled, budget):
    store, _ = filled
    api.remember(store, "A very long note about deployment. " * 200)
    for query in ("deployment", "database", "how do we merge", "pnpm"):
        result = api.recall(store, query, budget=budget)
        assert result.hits, "at least one memory is always returned"
        returned = sum(tokens.count(h.text) for h in result.hits)
        assert returned == result.tokens_used <= result.effective_budget <= budget


def test_over_long_memory_is_embedded_by_its_prefix_and_found_by_its_tail(store, embedder):
    long_text = "deploy " * 5000 + "UNIQUE_TAIL_TOKEN"
    memory = api.remember(store, long_text)
    assert api.get(store, memory.id).content == long_text
    stored = np.frombuffer(store.get_vector(memory.id), dtype=np.float32)
    encoding = embedder.tokenizer.encode(long_text)
    assert len(encoding.ids) == 256
    prefix = embedder.tokenizer.decode(encoding.ids[1:-1])
    assert float(stored @ embedder.embed_one(prefix)) > 0.9999
    assert top_id(store, "UNIQUE_TAIL_TOKEN") == memory.id
    assert api.recall(store, "deploy " * 3000).hits  # over-long query: no error


FTS_MEMORY = (
    "Fixed multi-agent retry in svc-auth. TODO: bump to v2.0.1 (don't forget) — C++ port, O'Reilly book, "
    "50% faster, see docs/setup.md, ticket OC-41252, NEAR term, AND gate"
)


@pytest.mark.parametrize(
    "query",
    ["multi-agent", "TODO:", "don't", "v2.0.1", "C++", "O'Reilly", "docs/setup.md", "OC-41252", '"unterminated',
     "retry OR", "NEAR(", "(python", "title:x", "AND", "50%", "*", "^retry", "-", ":", "NEAR", "OR"],
)
def test_fts_syntax_in_queries_never_errors(store, query):
    memory = api.remember(store, FTS_MEMORY)
    api.remember(store, "Unrelated note about lunch menus.")
    result = api.recall(store, query)
    literal_words = {"multi-agent", "TODO:", "don't", "v2.0.1", "C++", "O'Reilly", "docs/setup.md", "OC-41252",
                     "retry OR", "NEAR(", "AND", "50%", "^retry"}
    if query in literal_words:
        assert memory.id in [h.memory.id for h in result.hits]
        lexical = api.recall(store, query, mode="lexical")
        assert lexical.hits and lexical.hits[0].memory.id == memory.id


def test_emoji_round_trip_and_lone_surrogates_replaced(store):
    emoji = "🚀 shipped 👍🏽 by 👩‍💻 🇯🇵 — Müller → 日本語"
    m = api.remember(store, emoji)
    assert api.get(store, m.id).content == emoji
    assert top_id(store, "Müller 日本語") == m.id
    broken = api.remember(store, "deploy ok \ud83d truncated")
    assert api.get(store, broken.id).content == "deploy ok \ufffd truncated"
    assert api.recall(store, "\udc81 deploy").hits


@pytest.mark.parametrize("bad", ["", "   ", "\n\t", "\x00\x00"])
def test_empty_content_and_query_are_refused(store, bad):
    with pytest.raises(InvalidInput):
        api.remember(store, bad)
    with pytest.raises(InvalidInput):
        api.recall(store, bad)


def test_limits_and_options_are_validated(store):
    api.remember(store, "something to find")
    for kwargs in ({"budget": 0}, {"budget": -5}, {"limit": 0}, {"mode": "psychic"}, {"kinds": ["nope"]}):
        with pytest.raises(InvalidInput):
            api.recall(store, "something", **kwargs)
    for kwargs in ({"kind": "nope"}, {"importance": 2.0}, {"importance": float("nan")}, {"tags": [" "]}):
        with pytest.raises(InvalidInput):
            api.remember(store, "another thing", **kwargs)


def test_only_explicit_use_counts_as_access_never_being_recalled(filled):
    # Recall raising the access count of what it returned made recall feed itself.
    store, ids = filled
    returned = api.recall(store, "ERR_SSL_PROTOCOL", limit=1).hits[0].memory.id
    assert all(api.get(store, i).access_count == 0 for i in ids)
    api.get(store, returned, use=True)
    for memory_id in ids:
        assert api.get(store, memory_id).access_count == (1 if memory_id == returned else 0)


def _row(n: int, content: str, project: str | None = None) -> dict:
    at = "2026-01-01T00:00:00Z"
    return {"uid": f"u{n}", "content": content, "project": project, "created_at": at, "updated_at": at,
            "content_updated_at": at, "content_hash": f"h{n}"}


def test_graph_hop_never_takes_a_memory_that_names_the_query_entity(tmp_path):
    """The hop's 'direct' set (memories naming the queried entity, which the hop must leave out)
    was cut to that entity's newest 50: an older memory naming both the queried entity and a
    related one then got the hop boost as if it were only one relation away."""
    from memsafe.models import Scope
    from memsafe.recall import related
    from memsafe.store import SQLiteStore

    store = SQLiteStore(tmp_path / "g.db")
    at = "2026-01-01T00:00:00Z"
    with store.write():
        a = store.insert_entity("Alpha", "alpha", "concept", at)
        b = store.insert_entity("Beta", "beta", "concept", at)
        store.upsert_relation(a, "uses", b, 1.0, at)
        both = store.insert_memory(_row(0, "alpha uses beta"), [])
        store.link_memory_entities(both, [a, b])
        only_b = store.insert_memory(_row(1, "beta alone"), [])
        store.link_memory_entities(only_b, [b])
        for n in range(2, 2 + related.HOP_PER_ENTITY + 10):  # newer memories naming alpha only
            store.link_memory_entities(store.insert_memory(_row(n, f"alpha note {n}"), []), [a])
    hops, _direct = related.one_hop(store, [a], Scope())
    store.close()
    assert only_b in hops
    assert both not in hops


# -- exact identifiers, versions and CJK words ------------------

TWINS = [
    "get_users_by_ids looks up many users at once: pass a list of user ids, it returns the users found.",
    "get_user_by_id raises NotFound for an unknown id instead of returning None.",
    "What changed in v1.8: the retry policy changed to exponential backoff with jitter, and more changes.",
    "Release v1.9 removed the legacy YAML loader; TOML only from now on.",
    "deploy-v2.4.7-hotfix rolled the cache key format back after the Tuesday outage.",
    "Release 2.4.6 shipped the new cache key format.",
]


@pytest.mark.parametrize(
    "query, index",
    [
        ("get_user_by_id", 1),  # the porter index folds it with get_users_by_ids
        ("how does get_user_by_id handle missing users", 1),  # the twin shares every other word
        ("what changed in v1.9", 3),  # the v1.8 note says "changed" and is nearer by vector
        ("2.4.7", 4),  # the word index splits v2.4.7 into v2, 4, 7
    ],
)
@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_exact_identifier_version_or_code_finds_its_memory_first(store, query, index, mode):
    ids = [api.remember(store, text).id for text in TWINS]
    assert top_id(store, query, mode=mode) == ids[index]



@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_an_identifier_no_memory_holds_is_said_to_be_missing(store, mode):
    """`recall ERR_SSL_PROTOCOL` where no memory holds it returned memories found by meaning, top
    score near 1, and nothing said the identifier itself matched nothing.
    Now a note names it as typed, in every mode; an identifier a memory holds gets none, and
    neither does a query without one."""
    ids = [api.remember(store, text).id for text in TWINS]
    missing = api.recall(store, "why does ERR_SSL_PROTOCOL happen after the v1.9 release", mode=mode)
    assert [n for n in missing.notes if "as written" in n] == [
        'no memory here holds "ERR_SSL_PROTOCOL" as written; any result matches its words or its meaning']
    held = api.recall(store, "what changed in v1.9", mode=mode)
    assert not [n for n in held.notes if "as written" in n] and held.hits[0].memory.id == ids[3]
    assert not [n for n in api.recall(store, "how are users looked up", mode=mode).notes if "as written" in n]


CJK = [
    "我们在项目里使用引用计数来管理内存。",
    "悬空指针会导致程序崩溃，释放后要置空",
    "数据库连接池的大小设置为二十。",
    "日本語のドキュメントは来週までに翻訳する予定です。",
]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(
    "query, index",
    [("引用", 0), ("引用计数", 0), ("置空", 1), ("悬空", 1), ("连接池", 2), ("翻訳", 3), ("ドキュメント", 3)],
)
def test_cjk_words_inside_longer_runs_are_found_by_keyword(store, mode, query, index):
    ids = [api.remember(store, text).id for text in CJK]
    api.remember(store, "Reference counting manages memory in the parser.")
    result = api.recall(store, query, mode=mode)
    assert result.hits and result.hits[0].memory.id == ids[index], [h.memory.id for h in result.hits]
    assert result.hits[0].lexical_rank == 1


def test_a_cjk_word_stays_on_top_among_two_hundred_memories(store):
    subjects = ["缓存", "日志", "队列", "索引", "配置", "部署", "测试", "监控", "权限", "接口"]
    actions = ["需要定期检查", "在周五之前更新", "由运维团队负责", "已经迁移到新集群", "出现过一次故障"]
    for i in range(200):
        api.remember(store, f"{subjects[i % 10]}{actions[i % 5]}，编号{i}。" if i % 2 else f"Note {i}: the "
                     f"{['cache', 'log', 'queue'][i % 3]} service was checked on day {i}.")
    target = api.remember(store, "释放内存以后指针变成悬空状态，必须立即置为空值。").id
    api.remember(store, "指针运算在内核模块里很常见。")
    api.remember(store, "内存分配器使用伙伴系统。")
    for mode in ("hybrid", "lexical"):
        assert [h.memory.id for h in api.recall(store, "悬空", mode=mode).hits][:1] == [target]


def test_purge_removes_the_text_from_every_index(store, db_path, backend):
    marker = "Quixotic-zebu_4471 旋转密钥 v9.8.7"
    victim = api.remember(store, marker)
    keep = api.remember(store, "The staging cluster runs in eu-west-1.")
    for query in ("zebu_4471", "旋转", "v9.8.7"):
        assert [h.memory.id for h in api.recall(store, query, mode="lexical").hits] == [victim.id]
    api.purge(store, [victim.id])
    assert api.recall(store, "zebu_4471", mode="lexical").hits == []
    assert api.recall(store, "旋转", mode="lexical").hits == []
    assert store.consistency_problems() == []
    store.close()
    if backend != "sqlite":
        return  # PostgreSQL frees the rows; its files keep the bytes until reused (docs/team.md)
    blob = b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))
    # the whole text, its trigrams (the trigram index's terms) and its CJK words
    needles = ["Quixotic", "zebu_4471", "uixotic", "ebu_44", "旋转密钥", "旋转", "密钥", "9.8.7"]
    for needle in needles:
        assert needle.encode() not in blob and needle.lower().encode() not in blob, needle
    assert keep.id != victim.id


def test_ids_are_never_reused_after_purge(store):
    a = api.remember(store, "alpha note about caching").id
    b = api.remember(store, "beta note about queues").id
    api.purge(store, [b])  # the largest id
    c = api.remember(store, "gamma note about logs").id
    assert c > b > a
    api.purge(store, [a, c])
    d = api.remember(store, "delta note about metrics").id
    assert d > c
    assert not {a, b, c} & {h.memory.id for h in api.recall(store, "note", mode="lexical").hits}


def test_a_repeated_query_is_embedded_once_per_model(store, embedder, monkeypatch):
    """An agent asks the same question again: the query's vector is reused (the model costs ~5 ms
    a query), with the same hits; a query embedded for another model is not reused."""
    from collections import OrderedDict

    from memsafe.recall import vectors

    monkeypatch.setattr(vectors, "_query_vectors", OrderedDict())  # nothing from an earlier test
    api.remember(store, "The ingest worker retries uploads three times before giving up")
    api.remember(store, "Lunch is at noon on Fridays")
    calls = []
    real = type(embedder).embed
    monkeypatch.setattr(type(embedder), "embed", lambda self, texts, *a, **k: calls.append(list(texts)) or
                        real(self, texts, *a, **k))
    query = "how often does ingest retry an upload (repeated-query test)"
    first = [h.memory.id for h in api.recall(store, query).hits]
    asked = len(calls)
    assert asked >= 1
    assert [h.memory.id for h in api.recall(store, query).hits] == first
    assert len(calls) == asked  # no second model run for the same query
    monkeypatch.setattr(embedder, "model_id", embedder.model_id + "-other")  # another model
    vector = vectors.query_vector(embedder, vectors.query_text(store, query))
    assert len(calls) == asked + 1 and not vector.flags.writeable


def test_recall_hits_carry_their_tags_read_only_for_what_is_returned(filled):
    """Candidates are read without tags (~0.6 ms of a recall at 10,000 memories); the
    returned hits must still carry every tag, sorted, on both backends, and a tag-scoped recall
    still sees tags when it filters and links conversation turns."""
    store, ids = filled
    api.update(store, ids[1], tags=["ci", "network", "proxy"])
    api.update(store, ids[5], tags=["config"])
    result = api.recall(store, "why does the CI pipeline fail behind a proxy?")
    by_id = {h.memory.id: h.memory.tags for h in result.hits}
    assert by_id[ids[1]] == ["ci", "network", "proxy"]
    assert all(tags == ([] if i not in (ids[1], ids[5]) else tags) for i, tags in by_id.items())
    scoped = api.recall(store, "settings file at start-up", tags=["config"])
    assert [h.memory.id for h in scoped.hits] == [ids[5]] and scoped.hits[0].memory.tags == ["config"]


def test_a_recall_sees_every_change_since_the_last_and_returns_the_callers_own_memories(filled, db_path):
    """A store may keep the rows recalls read while it is unchanged (`Store.recall_rows`; SQLite:
    per connection, keyed by `PRAGMA data_version` and its own writes). Whatever
    changed since the last recall, through this connection or another, the next one sees; and the
    memories a recall returns are the caller's own: changing them changes nothing kept."""
    store, ids = filled
    other = api.open_store(str(db_path)).store
    query = "pnpm lockfile in CI"
    try:
        hit = api.recall(store, query).hits[0]
        assert hit.memory.id == ids[4] and hit.memory.content == CORPUS[4]
        hit.memory.content = "changed by the caller"
        hit.memory.tags.append("caller")
        again = api.recall(store, query).hits[0]
        assert (again.memory.content, again.memory.tags) == (CORPUS[4], [])

        new_text = "Use --frozen-lockfile with pnpm install in CI; yarn's flag is --immutable."
        api.update(other, ids[4], content=new_text, tags=["ci"])  # another connection
        seen = api.recall(store, query).hits[0]
        assert (seen.memory.id, seen.memory.content, seen.memory.tags) == (ids[4], new_text, ["ci"])

        api.update(store, ids[4], content=CORPUS[4])  # this connection's own write
        assert api.recall(store, query).hits[0].memory.content == CORPUS[4]

        api.forget(other, ids[4])
        assert ids[4] not in [h.memory.id for h in api.recall(store, query).hits]
    finally:
        other.close()


def test_a_turn_read_as_a_neighbour_then_found_by_meaning_is_linked_to_its_own_neighbours(store):
    """Recall reads its candidates' rows in two batches: the lexical ones, with the
    turns around each conversation turn, before the query's vector is ready; the vector ones
    after. A turn first read as a neighbour (the answer after the question BM25 found) and then
    found by the vector search is a candidate like any other: it is linked to the turn after it
    too, as recall did before and `recall --as-of` does (`candidates.link_turns` on every
    candidate turn). Otherwise that turn was never read, so the link was missing (no
    ranking reads it today: a turn no retriever found gains no relevance, `scoring.in_context`)."""
    from memsafe import clock
    from memsafe.api import config
    from memsafe.recall import candidates, terms

    for fact in ["We squash commits before merging a pull request into main.",
                 "The CI pipeline fails with ERR_SSL_PROTOCOL when HTTPS_PROXY is set on the runner.",
                 "Alice prefers tabs over spaces in Go code reviews.",
                 "Production database backups run nightly at 02:00 UTC."]:
        api.remember(store, fact)
    puppy, question, beagle, after = [api.remember(store, turn, kind="conversation").id for turn in [
        "Ana: I finally adopted a puppy from the shelter on Friday.",
        "Ben: Wonderful news, what breed is it?",  # the only BM25 hit
        "Ana: A little beagle, she sleeps all day and chews my slippers.",  # found by meaning only
        "Ben: Ha, mine did the same years ago.",  # found by neither (the vector search takes 5)
    ]]
    query = terms.parse_query("what dog breed", clock.now())
    cands, memories, _ = candidates.gather(store, query, api.make_scope(project=None), 5, "hybrid",
                                           config._config_snapshot(store), [])
    by_id = {c.id: c for c in cands}
    assert by_id[question].lexical_rank == 1 and (by_id[question].before, by_id[question].after) == (puppy, beagle)
    assert by_id[beagle].lexical_rank is None and by_id[beagle].vector_rank is not None
    assert by_id[after].vector_rank is None and by_id[beagle].after == after
    assert all(memories[i].content for i in by_id)


def _recall_view(result) -> tuple:
    """What a recall shows, to compare two recalls: each hit's id, score, text, ranks, context and
    memory (content, tags, kind, project, status, confidence, uses, decay level), the notes and
    the graph text."""
    return ([(h.memory.id, h.score, h.text, h.lexical_rank, h.vector_rank, h.context_of, h.memory.content,
              h.memory.tags, h.memory.kind, h.memory.project, h.memory.status, h.memory.confidence,
              h.memory.access_count, h.memory.decay_level) for h in result.hits],
            result.notes, result.graph_context, result.mode)


def test_a_long_lived_store_recalls_what_a_fresh_one_does_after_every_kind_of_change(
        store, db_path, tmp_path, monkeypatch):
    """A connection kept open (the MCP server keeps them between calls, an
    agent's process keeps one) holds what its recalls read (`SQLiteStore.recall_rows`, the
    process's vector copy, the top k prepared on the embedding thread). After every kind of change,
    by another connection or by its own, in every scope, its next recall must be the one a newly
    opened connection gives: update (text, tags, project, kind), forget, restore, confirm, purge,
    decay, import, a project renamed, entities linked (the degree ranks), the turn beside a
    conversation turn moved or forgotten."""
    from memsafe.api import graph as graph_api
    from memsafe.store.sqlite import vectors as sqlite_vectors

    monkeypatch.setenv("MEMSAFE_NOW", "2026-06-01T12:00:00+00:00")  # the same ranking time for both
    other = api.open_store(str(db_path)).store
    ids = [api.remember(store, text, project=("alpha" if n % 2 else None), tags=(["ops"] if n % 3 == 0 else []))
           .id for n, text in enumerate(CORPUS)]
    turns = [api.remember(store, text, kind="conversation", project="alpha", tags=["chat"]).id for text in [
        "Ana: Which flag keeps the lockfile fixed when CI installs dependencies?",
        "Ben: The frozen one, otherwise versions drift between runs.",
        "Ana: And who gets paged when the nightly backup job fails?",
        "Ben: Whoever is on call that week, see the rotation.",
    ]]
    queries = ["pnpm lockfile in CI", "who is paged when backups fail"]
    scopes = [{}, {"project": "alpha"}, {"all_projects": True, "tags": ["chat"]},
              {"all_projects": True, "kinds": ["conversation", "general"]},
              {"project": "alpha", "include_forgotten": True}, {"all_projects": True, "since": "2026-01-01"},
              {"project": "alpha", "mode": "lexical"},
              {"all_projects": True, "mode": "vector"}]

    def same(step: str) -> None:
        fresh = api.open_store(str(db_path)).store
        try:
            # first a query new to the process: its top k is prepared on the embedding thread, from
            # the process's vector copy as the last search left it
            for query in [f"lockfile, backups and settings after the {step} change", *queries]:
                for kw in scopes:
                    kept = _recall_view(api.recall(store, query, **kw))
                    # the newly opened connection, without the process's vector copy either
                    with monkeypatch.context() as m:
                        m.setattr(sqlite_vectors, "CACHE_MIN_VECTORS", 10**9)
                        new = _recall_view(api.recall(fresh, query, **kw))
                    assert [h[0] for h in kept[0]] == [h[0] for h in new[0]], (step, query, kw)
                    assert all(abs(a[1] - b[1]) < 1e-4 and a[2:] == b[2:] for a, b in zip(kept[0], new[0])), \
                        (step, query, kw)
                    assert kept[1:] == new[1:], (step, query, kw)
        finally:
            fresh.close()

    export = tmp_path / "elsewhere.jsonl"
    source = api.open_store(str(tmp_path / "elsewhere.db")).store
    try:
        api.remember(source, "The pnpm store lives on a cache volume shared by the CI runners.", project="alpha")
        api.export_to_path(source, export, all_projects=True)
    finally:
        source.close()
    try:
        same("start")
        for step, change in [
            ("text", lambda: api.update(other, ids[4], content="Pin it: pnpm install --frozen-lockfile in CI.")),
            ("tags", lambda: api.update(other, ids[5], tags=["config", "chat"])),
            ("project", lambda: api.update(other, ids[3], project="alpha")),
            ("kind", lambda: api.update(other, ids[6], kind="conversation")),
            ("own write", lambda: api.update(store, ids[4], content=CORPUS[4], tags=["ci"])),
            ("forget", lambda: api.forget(other, ids[4])),
            ("restore", lambda: api.restore(other, ids[4])),
            ("confirm", lambda: api.confirm(other, ids[1])),
            ("neighbour forgotten", lambda: api.forget(other, turns[1])),
            ("neighbour moved", lambda: api.update(other, turns[3], project="beta")),
            ("neighbour back", lambda: (api.restore(other, turns[1]), api.update(other, turns[3], project="alpha"))),
            ("entities", lambda: _linked(other, graph_api, ids[6], ["PagerDuty", "Monday", "on-call"])),
            ("renamed", lambda: _renamed(other, "alpha", "gamma")),
            ("renamed back", lambda: _renamed(other, "gamma", "alpha")),
            ("import", lambda: api.import_file(other, export)),
            ("purge", lambda: api.purge(other, [ids[5]])),
            ("decay", lambda: api.decay(other, now=datetime(2026, 9, 1, tzinfo=UTC))),  # summaries, briefs
            ("decay", lambda: api.decay(other, now=datetime(2031, 1, 1, tzinfo=UTC))),  # all archived
        ]:
            done = change()
            assert step != "decay" or done.changes
            same(step)
    finally:
        other.close()


def _linked(store, graph_api, memory_id: int, names: list[str]) -> None:
    with store.write():
        graph_api.link_entities(store, memory_id, "", names, "2026-06-01T12:00:00+00:00")


def _renamed(store, old: str, new: str) -> None:
    with store.write():
        store.rename_project(old, new)


@pytest.mark.backends("sqlite")  # what a SQLite connection keeps (`SQLiteStore.recall_rows`); PostgreSQL keeps nothing
def test_the_rows_a_connection_keeps_for_recalls_are_bounded_by_their_text(store, db_path, monkeypatch):
    """A connection keeps the rows its recalls read while the file is unchanged,
    bounded by a count of memories; but a memory may hold 1,000,000 characters, so 20,000 kept
    rows could have held gigabytes (787 memories of 40,000 characters
    added 29 MB). The text kept is bounded too: past SQLiteStore.ROWS_KEPT_CHARS the connection
    starts again, and recalls stay the same as a new connection's."""
    from memsafe.store.sqlite import SQLiteStore

    monkeypatch.setattr(SQLiteStore, "ROWS_KEPT_CHARS", 6_000)
    topics = ["lockfile", "backups", "proxy", "rotation", "payments", "squash", "tabs", "kiln"]
    ids = {t: api.remember(store, f"Notes on the {t}: " + " ".join(f"{t}{n}" for n in range(180))).id
           for t in topics}  # ~2,000 characters each: two are kept, not three
    fresh = api.open_store(str(db_path)).store
    try:
        kept_most = 0
        for query in [*topics, *topics]:
            kept = [h.memory.id for h in api.recall(store, query, mode="lexical").hits]
            assert kept == [h.memory.id for h in api.recall(fresh, query, mode="lexical").hits]
            assert ids[query] in kept
            chars = sum(len(m.content) for m, _ in (store._rows or {}).values())
            assert chars <= SQLiteStore.ROWS_KEPT_CHARS
            kept_most = max(kept_most, chars)
        assert kept_most > 0  # it does keep rows within the bound
    finally:
        fresh.close()


def test_a_recall_inside_a_write_that_rolls_back_leaves_nothing_kept(filled, db_path, monkeypatch):
    """A recall inside an open write transaction reads what that
    transaction wrote; nothing it read may outlive a rollback, on this connection (the rows kept
    for recalls, `Store.recall_rows`) or on another in the process (its vector copy, shared by
    every connection to the file, may be brought up to date inside the transaction)."""
    from memsafe.recall import vectors

    store, ids = filled
    monkeypatch.setenv("MEMSAFE_NOW", "2030-01-01T00:00:00+00:00")  # one ranking time for every recall
    other = api.open_store(str(db_path)).store
    query = "pnpm lockfile in CI"
    try:
        before = [_recall_view(api.recall(s, query)) for s in (store, other, store, other)][-2:]
        with pytest.raises(KeyboardInterrupt), store.write():
            store.update_memory(ids[4], {"content": "Uncommitted: yarn berry replaced pnpm."})
            store.update_memory(ids[1], {"status": "forgotten"})
            vector = vectors.vector_bytes(vectors.query_vector(vectors.embedder_for(store), query))
            store.put_vector(ids[5], vector)  # the payments memory now looks like the query
            inside = api.recall(store, query)
            assert ids[5] in [h.memory.id for h in inside.hits]
            assert _recall_view(api.recall(other, query)) == before[1]  # nothing uncommitted elsewhere
            raise KeyboardInterrupt
        assert _recall_view(api.recall(store, query)) == before[0]
        assert _recall_view(api.recall(other, query)) == before[1]
    finally:
        other.close()
