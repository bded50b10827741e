"""Per-memory steps stay linear on long, repetitive or unbroken text; the
speed itself is measured by `memsafe bench --inputs`. These tests pin what the linear versions
must still compute."""

from __future__ import annotations

from memsafe import api, graph, tokens
from memsafe.bench import inputs
from memsafe.models import Scope
from memsafe.store.sqlite import migrations


def test_token_count_of_long_text_is_exact_at_spaces_and_close_on_unbroken_runs():
    enc = tokens._encoding()
    prose = inputs.make_input("prose", 60_000)
    assert tokens.count(prose) == len(enc.encode(prose, disallowed_special=()))
    run = inputs.make_input("letters", 40_000)
    exact = len(enc.encode(run, disallowed_special=()))
    assert exact <= tokens.count(run) <= exact + 40_000 // tokens.PIECE + 1


def test_truncate_reads_only_what_it_needs_and_cuts_on_a_token_boundary():
    text = inputs.make_input("letters", 1_000_000)
    cut = tokens.truncate(text, 50)
    assert text.startswith(cut) and 0 < tokens.count(cut) <= 50
    short = "a short note"
    assert tokens.truncate(short, 50) == short


def test_entities_of_a_repeated_token_are_those_of_its_first_occurrences():
    text = "Node 1.2 " * 16_000
    names = [e.name for e in graph.extract_entities(text)]
    assert names == ["Node 1.2", "Node"]  # the version, then the name once it is not sentence-initial
    assert [e.name for e in graph.extract_entities("We run Node 1.2 here.")] == ["Node 1.2", "Node"]


def test_every_input_shape_is_made_at_the_requested_size():
    for shape in inputs.SHAPES:
        assert len(inputs.make_input(shape, 5000)) == 5000


def _long_memory(marker: str) -> str:
    """A memory longer than the trigram index holds: `marker` inside a CJK run near its start,
    then unbroken base64-like filler."""
    head = f"部署说明{marker}引用计数在这里 "
    return head + inputs.make_input("base64", migrations.TRIGRAM_MAX_CHARS + 20_000)


def test_the_trigram_index_holds_a_bounded_prefix_and_stays_consistent(store):
    """The trigram index holds the first TRIGRAM_MAX_CHARS characters of a memory,
    so a 1 MB unbroken text is not indexed as ~260,000 terms. A CJK word in that prefix is still
    found by keyword, and update, forget and purge keep the index consistent with its rows."""
    text = _long_memory("悬空") + " 尾部标记"  # a word past the bound
    memory = api.remember(store, text, redact=True)
    assert memory.id in {h.memory.id for h in api.recall(store, "悬空", mode="lexical").hits}
    found = store.exact_search(["悬空", "尾部标记"], Scope(), 10)
    assert found["悬空"][1] == {memory.id} and found["尾部标记"][1] == set()  # the index ends at the bound
    tail = api.remember(store, inputs.make_input("base64", migrations.TRIGRAM_MAX_CHARS + 5_000) + " retry_policy_v2",
                        redact=True, embed_now=False)
    assert store.exact_search(["retry_policy_v2"], Scope(), 10)["retry_policy_v2"][1] == {tail.id}  # by its words
    api.update(store, memory.id, content=_long_memory("缓存"))
    assert store.consistency_problems() == []
    assert memory.id in {h.memory.id for h in api.recall(store, "缓存", mode="lexical").hits}
    api.forget(store, memory.id)
    api.purge(store, [memory.id])
    assert store.consistency_problems() == []


def test_the_bounded_trigram_migration_rebuilds_an_index_holding_longer_texts(tmp_path, monkeypatch):
    """A store written before m006 indexed whole texts; upgrading rebuilds the index when a memory
    is longer than the bound, so deleting that memory later feeds FTS5 the text it indexed."""
    path = tmp_path / "old.db"
    newest = migrations.MIGRATIONS
    monkeypatch.setattr(migrations, "MIGRATIONS", [m for m in newest if m[0] != "m006_trigram_index_bounded"])
    old = api.open_store(str(path)).store
    memory_id = api.remember(old, _long_memory("悬空"), redact=True, embed_now=False).id
    old.close()
    monkeypatch.setattr(migrations, "MIGRATIONS", newest)
    store = api.open_store(str(path)).store
    try:
        assert store.schema_version() == migrations.latest()
        assert store.consistency_problems() == []
        api.forget(store, memory_id)
        api.purge(store, [memory_id])
        assert store.consistency_problems() == []
    finally:
        store.close()


def test_memories_around_the_trigram_bound_stay_found_and_consistent(store):
    """Memories of TRIGRAM_MAX_CHARS - 1, exactly, and + 1 characters, ending in multi-byte
    characters or holding a word that straddles the bound, through update (across the bound both
    ways), forget, restore and purge: every step leaves both indexes consistent with the rows, and
    each memory's words are found by exact search wherever they sit."""
    n = migrations.TRIGRAM_MAX_CHARS

    made = iter(range(100))

    def text(length: int, tail: str) -> str:
        head = f"note{next(made)} "
        return head + inputs.make_input("prose", length - len(head) - len(tail)) + tail

    ids = {}
    for length in (n - 1, n, n + 1):
        for tail in ("é", "😀", " 缓存é"):
            ids[length, tail] = api.remember(store, text(length, tail), redact=True, embed_now=False).id
    straddle = api.remember(store, text(n - 5, " ") + "zq_bound_marker " + "filler " * 10, redact=True,
                            embed_now=False).id
    assert store.consistency_problems() == []
    assert straddle in store.exact_search(["zq_bound_marker"], Scope(), 50)["zq_bound_marker"][1]
    moved = ids[n + 1, "😀"]
    api.update(store, moved, content=text(n - 1, " shrunk_marker"))
    assert store.consistency_problems() == []
    assert store.exact_search(["shrunk_marker"], Scope(), 50)["shrunk_marker"][1] == {moved}
    api.update(store, moved, content=text(n + 2, " grown_marker"))
    assert store.consistency_problems() == []
    assert store.exact_search(["grown_marker"], Scope(), 50)["grown_marker"][1] == {moved}
    for memory_id in (ids[n, "😀"], ids[n + 1, "é"], straddle):
        api.forget(store, memory_id)
    api.restore(store, ids[n, "😀"])
    assert store.consistency_problems() == []
    api.purge(store, [ids[n + 1, "é"], straddle])
    assert store.consistency_problems() == []
    assert store.exact_search(["zq_bound_marker"], Scope(), 50)["zq_bound_marker"][1] == set()
