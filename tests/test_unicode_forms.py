"""One text, one meaning, whatever its Unicode form: contents, queries, tags, entity names, project
names and exact identifiers agree under NFC/NFD and compatibility forms (full-width letters and
digits, ligatures, superscripts), with invisible characters inside words, on both backends,
through the lexical, vector and hybrid paths, the CLI and a real MCP client; stores made before
are migrated (`memsafe.textform`, SQLite's m012, PostgreSQL's m005)."""

from __future__ import annotations

import json
import os
import sys
import unicodedata

import apsw
import pytest

from memsafe import api, textform
from memsafe.errors import Duplicate
from memsafe.store.common import tokenizer

pytestmark = pytest.mark.backends("sqlite", "postgres")  # conftest: once per store backend

MODES = ["lexical", "vector", "hybrid"]


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _ids(result) -> list[int]:
    return [h.memory.id for h in result.hits]


def _others(store) -> None:
    """Memories no query below should find first."""
    for text in ("We squash commits before merging a pull request into main.",
                 "The nightly backup job copies the database to cold storage.",
                 "Rotate the on-call schedule every Monday morning."):
        api.remember(store, text)


# -- contents and queries -----------------------------------------------------------------------

CAFE = "Le café de la gare sert une crème brûlée le vendredi"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stored, asked", [(nfd, nfc), (nfc, nfd)], ids=["nfd-stored", "nfc-stored"])
def test_a_decomposed_or_composed_memory_is_found_by_the_other_form(store, mode, stored, asked):
    _others(store)
    memory = api.remember(store, stored(CAFE))
    assert memory.content == nfc(CAFE)  # stored NFC: looks the same, one form
    for query in ("café crème", "CAFÉ", "brûlée"):
        assert _ids(api.recall(store, asked(query), mode=mode))[:1] == [memory.id], (query, mode)


FULL_WIDTH = "ＡＰＩ ｖ２ stores sessions in ＰＯＳＴＧＲＥＳ"


@pytest.mark.parametrize("mode", MODES)
def test_full_width_letters_and_digits_match_their_ascii_forms(store, mode):
    _others(store)
    wide = api.remember(store, FULL_WIDTH)
    assert wide.content == FULL_WIDTH  # kept as written
    for query in ("API v2", "postgres", "api v2 sessions"):
        assert _ids(api.recall(store, query, mode=mode))[:1] == [wide.id], (query, mode)
    narrow = api.remember(store, "The billing service talks to Redis on port 6379", project="other")
    got = api.recall(store, "ＲＥＤＩＳ ６３７９", mode=mode, project="other")
    assert _ids(got)[:1] == [narrow.id]


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
@pytest.mark.parametrize("query", ["snake_case_name", "ｓｎａｋｅ＿ｃａｓｅ＿ｎａｍｅ", "ＳＮＡＫＥ_CASE_NAME"])
def test_exact_identifiers_match_across_forms(store, mode, query):
    """The exact-identifier path (`recall.terms.exact_terms`, `Store.exact_search`): a full-width
    identifier in a memory is found by the ASCII one and the other way round, and `holds_exact`
    still keeps `snake_case_names` apart."""
    _others(store)
    wide = api.remember(store, "call ｓｎａｋｅ＿ｃａｓｅ＿ｎａｍｅ() after login")
    plain = api.remember(store, "snake_case_name is set in settings.py", project="p")
    api.remember(store, "snake_case_names lists every column", project="p")
    result = api.recall(store, query, mode=mode, all_projects=True)
    assert set(_ids(result)[:2]) == {wide.id, plain.id}, _ids(result)
    found = store.exact_search([textform.fold(query)], api.make_scope(project=None, all_projects=True), 10)
    assert found[textform.fold(query)][1] == {wide.id, plain.id}


@pytest.mark.parametrize("version, content", [("v2.4.7", "deploy ｖ２．４．７ to staging"),
                                              ("ｖ２．４．７", "deploy v2.4.7 to staging"),
                                              ("deadbeef42", "commit ＤＥＡＤＢＥＥＦ４２ broke the build")])
def test_versions_and_hashes_match_exactly_across_forms(store, version, content):
    _others(store)
    memory = api.remember(store, content)
    api.remember(store, "deploy v2.4.70 to production")
    api.remember(store, "commit deadbeef421 is fine")
    result = api.recall(store, version, mode="lexical")
    assert _ids(result) == [memory.id]


# -- duplicates ---------------------------------------------------------------------------------

@pytest.mark.parametrize("first, second", [
    (nfd(CAFE), nfc(CAFE)),
    (FULL_WIDTH, "API v2 stores sessions in POSTGRES"),
    ("the pass\u200bword rotates monthly", "the password rotates monthly"),
    ("\ufeffrelease notes go in CHANGES.md", "release notes go in CHANGES.md"),
    ("ship it ❤️", "ship it ❤"),
    ("the ﬁle is ready", "the file is ready"),
], ids=["nfd-nfc", "full-width", "zero-width-space", "bom", "variation-selector", "ligature"])
def test_the_same_text_in_two_forms_is_a_duplicate(store, first, second):
    memory = api.remember(store, first)
    with pytest.raises(Duplicate) as caught:
        api.remember(store, second)
    assert caught.value.existing_id == memory.id
    other = api.remember(store, "something else entirely")
    with pytest.raises(Duplicate):  # an update to the other form of an existing text too
        api.update(store, other.id, content=second)


def test_case_still_tells_two_texts_apart(store):
    api.remember(store, "Deploy on Friday")
    api.remember(store, "deploy on friday")  # not a duplicate, as before


# -- tags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, asked", [
    (nfd("Résumé"), "résumé"), ("résumé", nfd("RÉSUMÉ")), ("ＲＥＬＥＡＳＥ", "release"),
    ("release", "Ｒｅｌｅａｓｅ"), ("Straße", "STRASSE"), ("road\u200bmap", "roadmap"), ("İstanbul", "istanbul"),
])
def test_a_tag_given_in_one_form_is_found_by_a_filter_in_another(store, given, asked):
    _others(store)
    memory = api.remember(store, "the quarterly review is on Thursday", tags=[given])
    assert memory.tags == [textform.name_key(given)]
    assert _ids(api.recall(store, "quarterly review", tags=[asked], mode="lexical")) == [memory.id]
    api.remember(store, "a second note about the quarterly review", tags=[asked])  # the same tag
    assert len(api.recall(store, "quarterly review", tags=[given], mode="lexical").hits) == 2


def test_the_cli_tag_filter_reads_any_form(cli):
    assert cli("remember", "the quarterly review is on Thursday", "--tag", nfd("Résumé")).exit_code == 0
    assert cli("remember", "the quarterly plan is on Friday", "--tag", "ＰＬＡＮ").exit_code == 0
    for tag, content in ((nfc("résumé"), "the quarterly review is on Thursday"),
                         ("plan", "the quarterly plan is on Friday")):
        r = cli("recall", "quarterly", "--tag", tag, "--json")
        assert r.exit_code == 0, r.stderr
        assert [x["content"] for x in json.loads(r.stdout)["results"]] == [content]


# -- entity names -------------------------------------------------------------------------------

def test_entities_added_in_one_form_are_found_by_another_without_duplicates(store):
    first = api.add_entity(store, nfd("Café Service"))
    assert first.created and first.name == nfc("Café Service")
    for other in (nfc("café service"), "ＣＡＦＥ́ Service", nfd("CAFÉ\u200b SERVICE")):
        again = api.add_entity(store, other)
        assert again.id == first.id and not again.created, other
    api.relate(store, nfd("Café Service"), "depends on", nfd("Crème Store"), create=True)
    view = api.graph_show(store, nfc("café service"), all_projects=True)
    assert {n.entity.name for n in view.nodes} == {nfc("Café Service"), nfc("Crème Store")}
    assert [(r.source, r.target) for r in view.relations] == [(nfc("Café Service"), nfc("Crème Store"))]
    memory = api.remember(store, "the cache sits in front of the checkout", entities=[nfd("Crème Store")])
    api.remember(store, "the other cache sits elsewhere", entities=["ＣＲＥＭＥ Store", nfc("crème store")])
    names = [e.name for e in api.graph_entities(store, all_projects=True)]
    assert sorted(names) == sorted({nfc("Café Service"), nfc("Crème Store"), "ＣＲＥＭＥ Store"}), names
    assert memory.id


def test_relation_types_in_two_forms_are_one_relation(store):
    api.relate(store, "api", nfd("dépend de"), "db", create=True)
    api.relate(store, "api", nfc("dépend de"), "db", create=True)
    view = api.graph_show(store, "api", all_projects=True)
    assert [r.relation for r in view.relations] == [nfc("dépend de")]


# -- get and forget, where text is matched: project names ---------------------------------------

def test_get_and_forget_reach_a_project_named_in_another_form(store):
    memory = api.remember(store, "the café app ships on Tuesdays", project=nfd("café-app"))
    assert memory.project == nfc("café-app")
    scope = api.make_scope(project=nfc("café-app"))
    assert api.get(store, memory.id, scope=scope).id == memory.id
    assert _ids(api.recall(store, "ships", project=nfc("café-app"), mode="lexical")) == [memory.id]
    api.forget(store, memory.id, scope=api.make_scope(project=nfd("café-app")))
    assert api.get(store, memory.id, scope=scope).status == "forgotten"


# -- the kind hunted: other forms that must agree (or stay apart) -------------------------------

@pytest.mark.parametrize("content, query", [
    ("the İSTANBUL office opens at nine", "istanbul office"),
    ("the istanbul office opens at nine", "İSTANBUL"),
    ("KIRMIZI alarm means stop the deploy", "kırmızı alarm"),
    ("the ﬁrewall rules live in ops/ﬁrewall.yaml", "firewall rules"),
    ("the room is 20 m² and faces north", "20 m2"),
    ("water is H₂O, said the chemist", "h2o"),
    ("the pass\u200bword policy changed in May", "password policy"),
    ("\ufeffdeploy checklist for the release", "deploy checklist"),
    ("Straße names are normalised by the geocoder", "strasse"),
], ids=["dotted-capital-i", "dotted-query", "dotless-i", "ligature", "superscript", "subscript",
        "zero-width-space", "bom", "sharp-s"])
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_compatibility_and_case_variants_are_found(store, content, query, mode):
    _others(store)
    memory = api.remember(store, content)
    assert _ids(api.recall(store, query, mode=mode))[:1] == [memory.id], (content, query, mode)


@pytest.mark.parametrize("content, query", [
    (nfd("ゲームのガイドを読む"), "ガイド"),  # kana with combining voiced marks (U+3099)
    ("ｶﾞｲﾄﾞを読んでから設定する", "ガイド"),  # half-width katakana
    ("ガイドを読んでから設定する", "ｶﾞｲﾄﾞ"),
    (nfd("한국어 문서를 번역한다"), "번역"),  # Hangul as conjoining jamo
    ("한국어 문서를 번역한다", nfd("번역")),
], ids=["nfd-kana", "half-width-kana", "half-width-query", "nfd-hangul", "nfd-hangul-query"])
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_cjk_with_combining_marks_or_half_width_forms_is_found(store, content, query, mode):
    _others(store)
    api.remember(store, "テストが失敗したらログを確認する")
    memory = api.remember(store, content)
    assert _ids(api.recall(store, query, mode=mode))[:1] == [memory.id]


def test_emoji_with_a_variation_selector_is_one_emoji(store):
    memory = api.remember(store, "release party 🎉️ on friday", tags=["🎉️"])
    assert memory.content == "release party 🎉️ on friday"  # kept as written
    assert memory.tags == ["🎉"]
    assert _ids(api.recall(store, "party", tags=["🎉"], mode="lexical")) == [memory.id]


def test_accents_count_in_exact_identifiers(store):
    """Identifiers are matched exactly in matching form: accents are letters there (`café_v2` is not
    `cafe_v2`), while the word index removes them (as it always did)."""
    accented = api.remember(store, "set café_v2 in the config")
    plain = api.remember(store, "set cafe_v2 in the config file")
    scope = api.make_scope(project=None, all_projects=True)
    assert store.exact_search(["café_v2"], scope, 10)["café_v2"][1] == {accented.id}
    assert store.exact_search(["cafe_v2"], scope, 10)["cafe_v2"][1] == {plain.id}


# -- the CLI and an MCP client ------------------------------------------------------------------

def test_the_cli_finds_a_decomposed_memory_by_a_composed_query(cli):
    assert cli("remember", nfd(CAFE)).exit_code == 0
    assert cli("remember", FULL_WIDTH).exit_code == 0
    r = cli("remember", "API v2 stores sessions in POSTGRES")
    assert r.exit_code == 1 and "already remembered as memory 2" in r.stderr
    for query, content in (("café", nfc(CAFE)), ("postgres", FULL_WIDTH)):
        r = cli("recall", query, "--mode", "lexical", "--json")
        assert r.exit_code == 0, r.stderr
        assert [x["content"] for x in json.loads(r.stdout)["results"]] == [content]


def test_an_mcp_client_finds_full_width_and_decomposed_text(db_path, tmp_path, embedder):
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
                    assert not (await s.call_tool("remember", {"content": FULL_WIDTH, "tags": ["ＤＢ"]})).is_error
                    assert not (await s.call_tool("remember", {"content": nfd(CAFE)})).is_error
                    dup = await s.call_tool("remember", {"content": "API v2 stores sessions in POSTGRES"})
                    wide = await s.call_tool("recall", {"query": "postgres", "tags": ["db"]})
                    cafe = await s.call_tool("recall", {"query": nfc("café"), "limit": 1})
                    return dup, wide, cafe

    dup, wide, cafe = anyio.run(session)
    text = lambda r: "\n".join(c.text for c in r.content)  # noqa: E731
    assert dup.is_error and "already remembered" in text(dup)
    assert not wide.is_error and FULL_WIDTH in text(wide) and "café" not in text(wide), text(wide)
    assert not cafe.is_error and nfc(CAFE) in text(cafe), text(cafe)


# -- the forms themselves (pure) ----------------------------------------------------------------

@pytest.mark.backends("sqlite")  # no store
@pytest.mark.parametrize("text, folded", [
    ("ＡＰＩ ｖ２", "api v2"), (nfd("Café"), "café"), ("ﬁle", "file"), ("x²", "x2"), ("Straße", "strasse"),
    ("ΣΊΣΥΦΟΣ", "σίσυφοσ"), ("İSTANBUL", "istanbul"), ("KIRMIZI", "kirmizi"), ("kırmızı", "kirmizi"),
    ("pass\u200bword", "password"), ("\ufeffbom", "bom"), ("soft\u00adhyphen", "softhyphen"), ("❤️", "❤"),
    ("ｶﾞｲﾄﾞ", "ガイド"), (nfd("번역"), "번역"), ("already plain", "already plain"),
])
def test_fold(text, folded):
    assert textform.fold(text) == folded
    assert textform.fold(folded) == folded  # idempotent


@pytest.mark.backends("sqlite")  # no store
def test_canonical_keeps_what_was_written_visually():
    assert textform.canonical(nfd("crème")) == "crème"
    assert textform.canonical(FULL_WIDTH) == FULL_WIDTH  # compatibility forms are kept in the text
    assert textform.canonical("ship it ❤️") == "ship it ❤️"


@pytest.mark.backends("sqlite")  # no store
@pytest.mark.parametrize("text, form", [
    ("ＡＰＩ ｖ２ ＰＯＳＴＧＲＥＳ", "API v2 POSTGRES"), ("ﬁle x² ①", "file x2 1"), ("pass\u200bword", "password"),
    (nfd("café"), "café"), ("ｶﾞｲﾄﾞを読む", "ガイドを読む"),
    ("wait… then", "wait… then"), ("全角，标点", "全角，标点"),  # punctuation: read as punctuation either way
])
def test_the_model_reads_letters_and_digits_in_their_compatibility_form(text, form):
    assert textform.embed_form(text) == form


def _tokenize(text: str) -> list[tuple]:
    conn = apsw.Connection(":memory:")
    tokenizer.register(conn)
    name, *args = tokenizer.TOKENIZE.split()
    return conn.fts5_tokenizer(name, args)(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None)


@pytest.mark.backends("sqlite")  # no store: the tokenizer alone
@pytest.mark.parametrize("a, b", [(nfd(CAFE), nfc(CAFE)), (FULL_WIDTH, "API v2 stores sessions in POSTGRES"),
                                  ("pass\u200bword ﬁle", "password file"), (nfd("한국어 번역"), "한국어 번역"),
                                  ("ｶﾞｲﾄﾞ 設定", "ガイド 設定")])
def test_the_word_index_gives_two_forms_the_same_tokens(a, b):
    assert [t[2] for t in _tokenize(a)] == [t[2] for t in _tokenize(b)]


@pytest.mark.backends("sqlite")  # no store: the tokenizer alone
@pytest.mark.parametrize("text", [FULL_WIDTH, nfd(CAFE), "mixed ＡＢＣ and ｶﾞｲﾄﾞ 引用计数 end", "x² ﬁ ß İ"])
def test_token_offsets_point_into_the_original_text(text):
    utf8 = text.encode()
    found = _tokenize(text)
    assert found
    for start, end, token in found:
        assert 0 <= start < end <= len(utf8)
        piece = utf8[start:end].decode()  # on character boundaries
        assert textform.fold(piece).strip() != ""
    assert [s for s, _e, _t in found] == sorted(s for s, _e, _t in found)


@pytest.mark.backends("sqlite")  # no store
def test_ascii_text_gets_exactly_fts5s_own_tokens():
    """The word index of an ASCII text is what it was before folding (no rebuild needed for it)."""
    conn = apsw.Connection(":memory:")
    name, *args = tokenizer.BASE.split()
    base = conn.fts5_tokenizer(name, args)
    text = "Deploy v2.4.7 of checkout-API; see /etc/harbor/config.toml"
    assert _tokenize(text) == base(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None)


# -- stores made before the forms ---------------------------------------------------------------

OLD_ROWS = [  # (content, tags, project) as an older memsafe stored them: no NFC, tags lower-cased only
    (FULL_WIDTH, ["ｄｂ"], None),
    (nfd(CAFE), [nfd("résumé")], nfd("café-app")),
    ("call ｓｎａｋｅ＿ｃａｓｅ＿ｎａｍｅ() after login", ["road\u200bmap", "release  notes"], None),
    ("The deploy script reads its settings from deploy.yml.", ["ops"], None),
]


def _old_hash(content: str) -> str:
    import hashlib

    return hashlib.sha256(" ".join(nfc(content).split()).encode()).hexdigest()


def _old_rows(conn, mark: str = "?") -> None:
    for n, (content, tags, project) in enumerate(OLD_ROWS, start=1):
        conn.execute(
            "INSERT INTO memories(id, uid, content, project, created_at, updated_at, content_updated_at, content_hash) "
            f"VALUES ({mark}, {mark}, {mark}, {mark}, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', "
            f"'2026-01-01T00:00:00Z', {mark})", (n, f"u{n}", content, project, _old_hash(content)))
        for tag in tags:
            conn.execute(f"INSERT INTO memory_tags(memory_id, tag) VALUES ({mark}, {mark})", (n, tag))
    conn.execute("INSERT INTO entities(name, key, type, created_at) VALUES "
                 f"({mark}, {mark}, 'entity', '2026-01-01T00:00:00Z')", ("Road\u200bmap", "road\u200bmap"))
    conn.execute("INSERT INTO entities(name, key, type, created_at) VALUES "
                 f"({mark}, {mark}, 'entity', '2026-01-01T00:00:00Z')", ("Ops", "ops"))


def _check_migrated(store) -> None:
    """What an older store's rows answer once migrated."""
    everywhere = {"all_projects": True}
    assert store.conn.execute("SELECT content FROM memories ORDER BY id").fetchall() == [
        (c,) for c, _t, _p in OLD_ROWS]  # texts as written
    assert store.consistency_problems() == []
    assert _ids(api.recall(store, "postgres", mode="lexical", **everywhere)) == [1]
    assert _ids(api.recall(store, nfc("café crème"), mode="lexical", **everywhere)) == [2]
    assert _ids(api.recall(store, "snake_case_name", mode="lexical", **everywhere)) == [3]
    assert _ids(api.recall(store, "deploy.yml", mode="lexical", **everywhere)) == [4]
    for tag, query, memory_id in (("db", "sessions", 1), ("ＤＢ", "sessions", 1), (nfc("résumé"), "gare", 2),
                                  ("roadmap", "login", 3), ("release notes", "login", 3)):
        assert _ids(api.recall(store, query, tags=[tag], mode="lexical", **everywhere)) == [memory_id], tag
    assert _ids(api.recall(store, nfc("café"), project=nfc("café-app"), mode="lexical")) == [2]
    for text, memory_id in (("API v2 stores sessions in POSTGRES", 1), (nfc(CAFE), 2)):
        project = nfc("café-app") if memory_id == 2 else None
        with pytest.raises(Duplicate) as caught:
            api.remember(store, text, project=project, embed_now=False)
        assert caught.value.existing_id == memory_id
    again = api.add_entity(store, "ROADMAP")
    assert again.name == "Road\u200bmap" and not again.created  # the old entity, its key refolded
    added = api.remember(store, "a new note about ＰＯＳＴＧＲＥＳ", embed_now=False)
    assert set(_ids(api.recall(store, "postgres", mode="lexical", **everywhere))) == {1, added.id}
    assert store.consistency_problems() == []


@pytest.mark.backends("sqlite")  # SQLite's m012; PostgreSQL's m005 below
def test_a_schema_11_sqlite_store_is_brought_to_the_forms_with_nothing_lost(tmp_path, embedder, monkeypatch):
    """A file as m001-m011 made it, its word index cut without folding, is migrated: backup first,
    texts as written, both text indexes rebuilt, tags, entity keys, project names and hashes
    refolded; a migration that fails after it leaves the file as it was."""
    from memsafe.store.sqlite import migrations

    path = tmp_path / "old" / "memory.db"
    path.parent.mkdir()
    conn = apsw.Connection(str(path))
    with monkeypatch.context() as patch:  # the word index as an older memsafe cut it: no folding
        patch.setattr(tokenizer, "_fold_mapped", lambda text: (text, None))
        tokenizer.register(conn)
        conn.execute("BEGIN")
        for number, (_name, fn) in enumerate(migrations.MIGRATIONS[:11], start=1):
            fn(conn)
            conn.execute(f"PRAGMA user_version = {number}")
        _old_rows(conn)
        conn.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH '\"postgres\"'"
                            ).fetchone()[0] == 0  # not found before
    before = conn.execute("SELECT id, content FROM memories ORDER BY id").fetchall()
    conn.close()

    def crash(conn):
        raise apsw.IOError("simulated crash after the forms")

    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, ("m999_crash", crash)])
        with pytest.raises(Exception, match="simulated crash"):
            api.open_store(str(path))
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 11
    assert conn.execute("SELECT tag FROM memory_tags WHERE memory_id = 1").fetchall() == [("ｄｂ",)]
    conn.close()

    opened = api.open_store(str(path))
    store = opened.store
    try:
        assert store.schema_version() == migrations.latest()
        assert store.backup_path is not None and store.backup_path.exists()
        assert store.conn.execute("SELECT id, content FROM memories ORDER BY id").fetchall() == before
        _check_migrated(store)
    finally:
        store.close()


@pytest.mark.backends("postgres")  # PostgreSQL's m005; SQLite's m012 above
def test_a_schema_4_postgres_store_is_brought_to_the_forms_with_nothing_lost(pg_server, embedder, monkeypatch):
    import psycopg

    from memsafe.store.postgres import PgConnection, close_pool, migrations
    from memsafe.store.postgres.fulltext import index_rows

    pg_server.admin("CREATE DATABASE schema_four")
    url = pg_server.url("schema_four")
    try:
        with psycopg.connect(url, autocommit=True) as raw, monkeypatch.context() as patch:
            patch.setattr(tokenizer, "_fold_mapped", lambda text: (text, None))
            conn = PgConnection(raw)
            conn.script("CREATE EXTENSION vector; CREATE EXTENSION pg_trgm;")
            for _name, fn in migrations.MIGRATIONS[:4]:
                fn(conn)
            conn.script("CREATE TABLE memsafe_schema (version INTEGER NOT NULL); "
                        "INSERT INTO memsafe_schema VALUES (4);")
            _old_rows(conn)
            conn.execute("SELECT setval(pg_get_serial_sequence('memories', 'id'), 4)")
            index_rows(conn, conn.execute("SELECT id, content FROM memories ORDER BY id").fetchall(), folded=False)
        store = api.open_store(url).store
        try:
            assert store.schema_version() == migrations.latest()
            _check_migrated(store)
        finally:
            store.close()
    finally:
        close_pool(url)
        pg_server.admin("DROP DATABASE schema_four WITH (FORCE)")
