"""Responsibility: the input-shape benchmark (`memsafe bench --inputs`): how long one large memory
takes to store, for each shape of text that has made a per-memory step super-linear before
(entity extraction rebuilt the text per match, the secret scan
backtracked on long unbroken runs).

Each shape is a 1,000,000-character text (memsafe's content limit), made deterministically:

- letters: one unbroken run of random a–z;
- hex: one unbroken run of random hex digits;
- base64: one unbroken base64 line;
- prose: developer sentences with names, paths and versions, wrapped in lines;
- repeated: the token "Node 1.2 " repeated (a real store's degenerate case);
- long-line: words joined by punctuation and no space (`a.b/c-d_e…`), one line;
- key-run: one fake AWS access key repeated with no separator (each window of the scan holds
  hundreds of findings: widening each across the whole run was quadratic);
- key-lines: `aws_access_key_id = AKIA…` lines of one fake key (a finding on every line);
- spaced: words and versions apart by runs of 20,000 spaces, tabs and newlines (the version
  pattern of entity extraction split each run every way).

For each it times, in one process with the model already loaded: the credential scan
(`safety.scan`), entity extraction (`graph.extract_entities`), token counting (`tokens.count`),
and the whole `api.remember` (cleaning, scan, FTS5 insert, entity links, embedding), in a
temporary store. A shape passes when its whole remember takes less than `limit_s` (2 s).
Times are wall-clock on whatever else the machine runs: compare runs on one machine only.
"""

from __future__ import annotations

import base64
import os
import random
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["SHAPES", "make_input", "run_inputs", "inputs_table"]

SHAPES = ("letters", "hex", "base64", "prose", "repeated", "long-line", "key-run", "key-lines", "spaced")
_FAKE_KEY = "AKIA2DN2YBY6AWTY2O7O"  # a made-up key in AWS's format (its documented example is no finding)
SIZE = 1_000_000  # characters: the content limit (api.MAX_CONTENT_CHARS)
LIMIT_S = 2.0

_WORDS = (
    "the queue retries three times with jitter before the billing-service gives up and PostgreSQL "
    "keeps the row; we decided to move src/billing/handlers.py to Redis 7 because p95 went from "
    "800 ms to 120 ms. Ana said the OrderParser in config/app.yaml needs v2.4.7 and --dry-run first"
).split()


def make_input(shape: str, size: int = SIZE, seed: int = 0) -> str:
    """A deterministic text of exactly `size` characters of one of `SHAPES`. Raises ValueError."""
    rng = random.Random(seed)
    if shape == "letters":
        return "".join(rng.choices(string.ascii_lowercase, k=size))
    if shape == "hex":
        return "".join(rng.choices("0123456789abcdef", k=size))
    if shape == "base64":
        return base64.b64encode(rng.randbytes(size)).decode()[:size]
    if shape == "prose":
        lines, length = [], 0
        while length < size:
            line = " ".join(rng.choices(_WORDS, k=14))
            line = line[:1].upper() + line[1:] + "."
            lines.append(line)
            length += len(line) + 1
        return "\n".join(lines)[:size]
    if shape == "repeated":
        return ("Node 1.2 " * (size // 9 + 1))[:size]
    if shape == "long-line":
        pieces = [w.strip(".,;") for w in _WORDS]
        text = "".join(rng.choice(pieces) + rng.choice("./-_:") for _ in range(size // 6 + 10))
        return text[:size]
    if shape == "key-run":
        return (_FAKE_KEY * (size // len(_FAKE_KEY) + 1))[:size]
    if shape == "key-lines":
        line = f"aws_access_key_id = {_FAKE_KEY}\n"
        return (line * (size // len(line) + 1))[:size]
    if shape == "spaced":
        unit = "We run Postgres" + " \t\n" * 6_667 + "16.2 "
        return (unit * (size // len(unit) + 1))[:size]
    raise ValueError(f"unknown input shape {shape!r}; use one of {', '.join(SHAPES)}")


def _timed(fn: Callable, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def run_inputs(
    shapes: tuple[str, ...] = SHAPES, *, size: int = SIZE, limit_s: float = LIMIT_S,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Time storing one `size`-character memory of each shape in a temporary store.

    Returns {"size", "limit_s", "model", "load_avg", "ok", "shapes": [{"shape", "scan_s",
    "entities_s", "tokens_s", "remember_s", "findings", "entities", "tokens", "ok"}]}; seconds are
    wall-clock. The user's own store is never opened.
    """
    from memsafe import api, embed, graph, safety, tokens

    tokens.warm()
    safety.scan("warm up the detectors")
    embedder = embed.get_embedder()
    if embedder is not None:
        embedder.embed_one("warm up the model")
    rows = []
    with tempfile.TemporaryDirectory(prefix="memsafe-inputs-") as tmp:
        opened = api.open_store(str(Path(tmp) / "bench.db"))
        try:
            for shape in shapes:
                text = make_input(shape, size)
                if progress:
                    progress(f"{shape}: {len(text):,} characters")
                scan_s, findings = _timed(safety.scan, text)
                entities_s, entities = _timed(graph.extract_entities, text)
                tokens_s, count = _timed(tokens.count, text)
                # redact: a random run may look like a key; the benchmark measures storing, not refusing
                remember_s, _ = _timed(api.remember, opened.store, text, redact=True, project=shape)
                rows.append({
                    "shape": shape, "scan_s": round(scan_s, 3), "entities_s": round(entities_s, 3),
                    "tokens_s": round(tokens_s, 3), "remember_s": round(remember_s, 3),
                    "findings": len(findings), "entities": len(entities), "tokens": count,
                    "ok": remember_s < limit_s,
                })
        finally:
            opened.store.close()
    return {
        "size": size, "limit_s": limit_s, "model": embedder.model_id if embedder else None,
        "load_avg": round(os.getloadavg()[0], 2), "ok": all(r["ok"] for r in rows), "shapes": rows,
    }


def inputs_table(result: dict):
    """Rich table of a `run_inputs` result: one row per shape."""
    from rich.table import Table

    table = Table(title=f"storing one {result['size']:,}-character memory (limit {result['limit_s']:g} s, "
                        f"load avg {result['load_avg']})")
    for name in ("shape", "scan s", "entities s", "tokens s", "remember s", "ok"):
        table.add_column(name, justify="left" if name == "shape" else "right")
    for r in result["shapes"]:
        table.add_row(r["shape"], f"{r['scan_s']:.3f}", f"{r['entities_s']:.3f}", f"{r['tokens_s']:.3f}",
                      f"{r['remember_s']:.3f}", "yes" if r["ok"] else "NO")
    return table
