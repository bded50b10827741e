"""Where the time of an in-process recall goes: every Store method is timed while `api.recall`
answers the scale benchmark's queries (warm model, one project + global, no access write) on an
existing store, e.g. the one `memsafe bench --scale 100000 --json` leaves in its `work_dir`. Prints ms per recall
for the whole recall and for each Store method (a method's time includes the methods it calls).

    python scripts/recall_phases.py /path/to/scale-100000.db [queries]
"""

from __future__ import annotations

import collections
import functools
import sys
import time

from memsafe import api, embed
from memsafe.bench.scale import synthetic_queries
from memsafe.store import SQLiteStore

PROJECTS = ["web", "api", "mobile", "infra", "data", "cli", "docs"]


def _instrument(totals: dict, calls: collections.Counter) -> None:
    seen = set()
    for cls in SQLiteStore.__mro__[:-1]:  # every mixin's methods, the most derived first
        for name, member in vars(cls).items():
            if name in seen:
                continue
            seen.add(name)
            _wrap(totals, calls, name, member)


def _wrap(totals: dict, calls: collections.Counter, name: str, member) -> None:
    if name.startswith("__") or not callable(member) or isinstance(member, (staticmethod, classmethod)) \
            or name in ("write", "snapshot"):
        return

    def timed(*args, _f=member, _name=name, **kwargs):
        start = time.perf_counter()
        try:
            return _f(*args, **kwargs)
        finally:
            totals[_name] += time.perf_counter() - start
            calls[_name] += 1

    setattr(SQLiteStore, name, functools.wraps(member)(timed))


def main(path: str, n: int = 60) -> None:
    totals: dict = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    _instrument(totals, calls)
    store = api.open_store(path).store
    embed.get_embedder()
    queries = synthetic_queries(n + 5)
    for q in queries[:5]:
        api.recall(store, q, all_projects=True)
    totals.clear()
    calls.clear()
    lat = []
    for i, q in enumerate(queries[5:]):
        start = time.perf_counter()
        api.recall(store, q, project=PROJECTS[i % len(PROJECTS)])
        lat.append((time.perf_counter() - start) * 1000)
    lat.sort()
    print(f"recall p50 {lat[len(lat) // 2]:.1f} ms, p95 {lat[int(len(lat) * 0.95)]:.1f} ms over {n} queries")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {name:24s} {seconds / n * 1000:6.2f} ms/recall  ({calls[name] / n:.1f} calls)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60)
