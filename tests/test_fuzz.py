"""Bad input, fuzzed (hypothesis): every handler either succeeds or raises a MemsafeError, whatever
it is given — arbitrary Unicode (NUL, lone surrogates, RTL, combining marks, emoji), 1 MB strings,
FTS5 syntax, odd tags and timestamps, negative and huge numbers, wrong types — and the file stays
sound (`Store.consistency_problems()` is empty) afterwards."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memsafe import api
from memsafe.errors import MemsafeError

FUZZ = settings(
    max_examples=int(os.environ.get("MEMSAFE_FUZZ_EXAMPLES", "40")),  # raise it for a deeper local run
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

SPECIAL = [
    "\x00", "\ud83d", "\udc81", "\u202e", "\u200f", "\u0301", "e\u0301", "\ufeff", "\u2028", "\uffff",
    "🚀", "👩‍💻", "🇯🇵", "👍🏽", "日本語", "مرحبا", "שלום", "\t", "\r\n", " ", "\\", "'", '"',
    '"unterminated', "NEAR(", "(python", "title:x", "AND", "OR", "NOT", "*", "^retry", "retry OR", "-", ":",
    "C++", "O'Reilly", "50%", "%", "_", "docs/setup.md", "OC-41252", "v2.0.1", "{", "}", "[", "]", ";--",
    "'; DROP TABLE memories; --", "memories_fts MATCH", "\x1b[31m", "~", "~root/x", "C:\\x\\y", "/", "//", ".",
]
# Any code point, surrogates included (hypothesis leaves them out unless asked).
any_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
pieces = st.one_of(st.text(any_char, max_size=40), st.sampled_from(SPECIAL))
texts = st.lists(pieces, max_size=8).map("".join)
numbers = st.one_of(
    st.none(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
)
ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=1, max_value=30),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=4),
)
kinds = st.one_of(st.sampled_from(["fact", "decision", "general"]), st.sampled_from(["FACT", "", "x"]), texts)
unit = st.one_of(st.none(), st.floats(min_value=0, max_value=1), numbers)
tag_lists = st.lists(st.one_of(texts, st.sampled_from(["ops", "a" * 64, "a" * 65, " ", "\x00"])), max_size=4)
maybe_text = st.one_of(st.none(), texts)


def attempt(fn, *args, **kwargs):
    """Call a handler: a MemsafeError is an acceptable outcome; anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except MemsafeError:
        return None


def assert_sound(store):
    assert store.consistency_problems() == []


@pytest.fixture
def fuzz_store(tmp_path, embedder):
    opened = api.open_store(str(tmp_path / "fuzz.db"))
    yield opened.store
    assert_sound(opened.store)
    opened.store.close()


def test_remember_fuzz(fuzz_store):
    store = fuzz_store
    stored = []

    @FUZZ
    @given(
        content=texts, kind=kinds, project=maybe_text, tags=tag_lists,
        source=st.one_of(st.sampled_from(["user", "agent", "git"]), st.just("user"), texts),
        importance=unit, confidence=unit, embed_now=st.booleans(), redact=st.booleans(),
    )
    @example(content="x\x00y\ud83d", kind="fact", project="~/My Projects/web/", tags=["ops", "OPS "],
             source="user", importance=0.5, confidence=1, embed_now=True, redact=False)
    @example(content="ok", kind="fact", project=None, tags=[], source="user", importance=float("nan"),
             confidence=2**70, embed_now=False, redact=False)
    def run(content, kind, project, tags, source, importance, confidence, embed_now, redact):
        m = attempt(
            api.remember, store, content, kind=kind, project=project, tags=tags, source=source,
            importance=importance, confidence=confidence, embed_now=embed_now, redact=redact,
        )
        if m is not None:
            got = api.get(store, m.id)
            assert got.content == m.content
            assert "\x00" not in got.content and got.content.strip() == got.content
            got.content.encode("utf-8")  # no lone surrogate survived
            stored.append(m.id)

    run()
    assert stored, "no example reached the database"


def test_recall_fuzz(fuzz_store):
    store = fuzz_store
    for text in ["Fixed multi-agent retry in svc-auth. TODO: bump to v2.0.1 (don't forget) — C++ port",
                 "Müller → 日本語 🚀 naïve", "deploy pipeline for OC-41252"]:
        api.remember(store, text)
    answered = []

    @FUZZ
    @given(
        query=texts, project=maybe_text, all_projects=st.booleans(),
        kinds=st.lists(kinds, max_size=2), tags=st.lists(texts, max_size=2),
        since=st.one_of(st.none(), texts, st.sampled_from(["2026-01-01T00:00:00Z", "9999", "-1", "\x00"])),
        budget=st.one_of(st.none(), st.integers(1, 5000), numbers),
        limit=st.one_of(st.none(), st.integers(1, 50), numbers),
        mode=st.one_of(st.sampled_from(["hybrid", "lexical", "vector"]), texts),
        remember_too=maybe_text,
    )
    @example(query="retry OR", project=None, all_projects=True, kinds=[], tags=[], since=None, budget=2**70,
             limit=2**70, mode="lexical", remember_too=None)
    @example(query='"unterminated NEAR( (python title:x ^retry *', project=None, all_projects=False, kinds=[],
             tags=[], since=None, budget=1, limit=1, mode="hybrid", remember_too=None)
    def run(query, project, all_projects, kinds, tags, since, budget, limit, mode, remember_too):
        if remember_too is not None:
            attempt(api.remember, store, remember_too, project=project, embed_now=False)
        result = attempt(
            api.recall, store, query, project=project, all_projects=all_projects, kinds=kinds, tags=tags,
            since=since, budget=budget, limit=limit, mode=mode,
        )
        if result is not None:
            answered.append(len(result.hits))
            assert result.tokens_used <= max(result.effective_budget, max((h.tokens for h in result.hits), default=0))

    run()
    assert answered, "no example reached the search"


def test_id_handlers_fuzz(fuzz_store):
    store = fuzz_store
    for i in range(5):
        api.remember(store, f"memory number {i} about the build", embed_now=False)

    @FUZZ
    @given(
        op=st.sampled_from(["get", "forget", "restore", "purge"]),
        memory_id=ids, more=st.lists(ids, max_size=3), reason=maybe_text,
    )
    @example(op="purge", memory_id=2**63, more=[], reason=None)
    @example(op="get", memory_id=2**63 - 1, more=[], reason=None)
    @example(op="forget", memory_id=1, more=[], reason="\ud83d\x00" * 300)
    def run(op, memory_id, more, reason):
        if op == "get":
            attempt(api.get, store, memory_id)
        elif op == "forget":
            attempt(api.forget, store, memory_id, reason=reason)
        elif op == "restore":
            attempt(api.restore, store, memory_id)
        else:
            attempt(api.purge, store, [memory_id, *more])

    run()
    # Wrong container types for purge.
    for bad in (None, 5, "12", [None], [[1]], {"a": 1}):
        attempt(api.purge, store, bad)


def test_config_set_fuzz(fuzz_store):
    store = fuzz_store
    from memsafe.api.config import CONFIG_KEYS

    keys = st.one_of(st.sampled_from(sorted(CONFIG_KEYS)), texts)
    values = st.one_of(
        texts, numbers, st.sampled_from(["1e999", "-1e999", "nan", "inf", "9" * 5000, "0x10", "1_000", " 5 ", "true"])
    )

    @FUZZ
    @given(key=keys, value=values)
    @example(key="token_budget", value=float("inf"))
    @example(key="recall_limit", value=float("nan"))
    @example(key="safety_multiplier", value=10**400)
    def run(key, value):
        if attempt(api.config_set, store, key, value) is not None:
            api.config_get(store, key)  # what was stored reads back
        attempt(api.config_get, store, key)
        attempt(api.config_reset, store, key)

    run()
    assert api.config_list(store)  # every stored value still parses
    api.recall(store, "anything at all")


@pytest.mark.parametrize("embed_now", [False, True])
def test_megabyte_strings(fuzz_store, embed_now):
    """1 MB content is stored and found lexically; just over the limit is refused cleanly."""
    store = fuzz_store
    body = ("deploy svc-auth to prod 🚀 after the canary, Müller said; " * 20_000)[: 1_000_000 - 20]
    m = api.remember(store, body + " UNIQUE_TAIL_TOKEN", embed_now=embed_now)
    assert len(api.get(store, m.id).content) <= 1_000_000
    hits = api.recall(store, "UNIQUE_TAIL_TOKEN", mode="lexical", budget=50).hits
    assert hits and hits[0].memory.id == m.id and hits[0].truncated
    assert attempt(api.remember, store, "y" * 1_000_001, embed_now=embed_now) is None
    assert attempt(api.recall, store, "q " * 600_000) is None
