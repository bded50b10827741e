"""How the vector half of recall (`Store.vector_search`) scales with the number of vectors, without
the model: N memory rows over 8 projects + global, with clustered unit vectors (topic centroids +
noise, like sentence embeddings), then k=50 searches scoped to one project (+ global) and to all
projects. Prints p50/p95 ms per size. Used to explain recall cost from 10k to 100k memories.

    python scripts/knn_scale.py 10000 100000
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memsafe.models import Scope
from memsafe.store import SQLiteStore

PROJECTS = [None, "web", "api", "mobile", "infra", "data", "cli", "docs"]


def build(path: Path, n: int, seed: int = 0) -> SQLiteStore:
    rng = np.random.default_rng(seed)
    centroids = rng.normal(size=(64, 384)).astype(np.float32)
    store = SQLiteStore(path)
    with store.write():
        store.ensure_vector_table("knn-scale", 384)
        for i in range(n):
            v = centroids[i % 64] + rng.normal(scale=0.8, size=384).astype(np.float32)
            v /= np.linalg.norm(v)
            memory_id = store.insert_memory(
                {"uid": f"u{i}", "content": f"memory {i}", "project": PROJECTS[i % len(PROJECTS)],
                 "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                 "content_updated_at": "2026-01-01T00:00:00Z", "content_hash": f"h{i}"},
                [],
            )
            store.put_vector(memory_id, v.tobytes())
    return store


def measure(store: SQLiteStore, queries: int = 30) -> dict:
    rng = np.random.default_rng(1)
    out = {}
    scopes = {
        "project": Scope(projects=["web"], include_global=True, kinds=[], tags=[], since=None),
        "all_projects": Scope(projects=None, include_global=True, kinds=[], tags=[], since=None),
    }
    for name, scope in scopes.items():
        times = []
        for _ in range(queries):
            q = rng.normal(size=384).astype(np.float32)
            q /= np.linalg.norm(q)
            t0 = time.perf_counter()
            store.vector_search(q.tobytes(), scope, 50)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out[f"{name}_ms_p50"] = round(times[len(times) // 2], 1)
        out[f"{name}_ms_p95"] = round(times[int(len(times) * 0.95) - 1], 1)
    return out


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [10000, 100000]
    base = Path(tempfile.mkdtemp(prefix="memsafe-knn-"))
    results = {}
    for n in sizes:
        t0 = time.perf_counter()
        store = build(base / f"knn-{n}.db", n)
        build_s = time.perf_counter() - t0
        results[n] = {"build_seconds": round(build_s, 1), **measure(store)}
        store.close()
        print(json.dumps({n: results[n]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
