"""Recall latency on real developer prose instead of the scale benchmark's templates.

The scale benchmark's memories come from templates over a small vocabulary, so each query term
matches 10-16% of them and BM25 must score ~25,000 memories per query at 100k. Real notes have a
long-tailed vocabulary. This script takes the paragraphs of the docstrings of the Python packages
installed beside memsafe and of the standard library (real developer prose, hundreds of authors),
stores N of them (random unit vectors: the vector half costs the same whatever the text), and
times in-process recall (warm model) for queries made of words from other paragraphs, as
`scripts/recall_phases.py` does.

    python scripts/prose_scale.py /tmp/prose.db 100000      # builds the store once, then measures
"""

from __future__ import annotations

import ast
import random
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from memsafe import api, embed
from memsafe.store import SQLiteStore


def paragraphs(limit: int) -> list[str]:
    """Docstring paragraphs of 8-120 words from the installed packages and the standard library,
    deduplicated, in file order."""
    seen: set[str] = set()
    out: list[str] = []
    roots = [Path(sysconfig.get_paths()[k]) for k in ("purelib", "stdlib")]
    for path in [p for root in roots for p in sorted(root.rglob("*.py"))]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                doc = ast.get_docstring(node)
                for para in (doc or "").split("\n\n"):
                    text = " ".join(para.split())
                    if 8 <= len(text.split()) <= 120 and text not in seen:
                        seen.add(text)
                        out.append(text)
                        if len(out) >= limit:
                            return out
    return out


def build(path: str, n: int) -> list[str]:
    texts = paragraphs(n + 2000)
    if len(texts) < n + 200:
        raise SystemExit(f"only {len(texts)} paragraphs found; ask for fewer")
    rng = np.random.default_rng(5)
    store = SQLiteStore(Path(path))
    projects = [None, "web", "api", "mobile", "infra", "data", "cli", "docs"]
    with store.write():
        store.ensure_vector_table(embed.get_embedder().model_id, 384)
    for start in range(0, n, 2000):
        with store.write():
            for i in range(start, min(n, start + 2000)):
                memory_id = store.insert_memory({
                    "uid": f"p{i}", "content": texts[i], "project": projects[i % len(projects)],
                    "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
                    "content_updated_at": "2026-01-01T00:00:00+00:00", "content_hash": f"p{i}",
                }, [])
                v = rng.normal(size=384).astype(np.float32)
                store.put_vector(memory_id, (v / np.linalg.norm(v)).tobytes())
    store.checkpoint()
    store.close()
    return texts[n:]


def main(path: str, n: int, queries: int = 60) -> None:
    if not Path(path).exists():
        spare = build(path, n)
    else:
        spare = paragraphs(n + 2000)[n:]
    rng = random.Random(9)
    qs = [" ".join(rng.sample(t.split(), min(4, len(t.split())))) for t in rng.sample(spare, queries + 5)]
    store = api.open_store(path).store
    embed.get_embedder()
    for q in qs[:5]:
        api.recall(store, q, all_projects=True)
    lat = []
    for i, q in enumerate(qs[5:]):
        start = time.perf_counter()
        api.recall(store, q, project=["web", "api", "docs"][i % 3])
        lat.append((time.perf_counter() - start) * 1000)
    lat.sort()
    print(f"{n} docstring paragraphs: recall p50 {lat[len(lat) // 2]:.1f} ms, p95 {lat[int(len(lat) * 0.95)]:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
