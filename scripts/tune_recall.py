"""Choose recall's ranking defaults by cross-validation over several corpora together (issue 11).

    .venv/bin/python scripts/tune_recall.py collect [--locomo FILE] [--out /tmp/recall-cands.pkl]
    .venv/bin/python scripts/tune_recall.py cv [--cands /tmp/recall-cands.pkl]

`collect` builds one store per corpus (the shipped template corpus, the developer-prose corpus,
and, when given, every conversation of a LoCoMo-format file) and records, per query, the
candidates of recall's `candidates` step (BM25 and vector lists with their raw features) and the
relevant ids. Nothing of a corpus's text is written, only ids and numbers.

`cv` replays the pure ranking steps (`memsafe.retrieve.fuse`, `final_score`) on those candidates
for every point of a grid, and scores each point by leave-one-corpus-out: for each corpus, the
point with the best mean score on the *other* corpora is chosen and its figure on the held-out
corpus reported. The point printed last is the one best on all corpora together with a margin
rule: the default must never lose to the better single mode on any corpus. The score of a corpus
is its mean Recall@5 over queries (own corpora: success@1 and success@3 averaged in, as the bench's
floors are at R@1 and R@3).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import statistics
import sys
import tempfile
from pathlib import Path

from memsafe import api, clock, retrieve, when
from memsafe.api import core
from memsafe.bench import locomo, quality
from memsafe.models import Scope

DEPTH = 50


def _query_candidates(store, text: str, project: str | None, now) -> dict:
    """The `candidates` step's output for one query, as plain numbers."""
    scope = core.make_scope(project=project)
    query = retrieve.parse_query(text, now)
    cfg = {**core.default_config(), "weight_hop": 1.0}
    cands, _memories, _mode = core._candidates(store, query, scope, DEPTH, "hybrid", cfg, [])
    return {"query": query, "cands": cands}


def collect(locomo_file: str | None, out: str) -> None:
    data: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in (("own", None), ("devprose", "memsafe/data/devprose_corpus.json")):
            if path and not Path(path).exists():
                continue
            corpus = quality.load_corpus(path)
            opened = api.open_store(str(Path(tmp) / f"{name}.db"))
            ids = quality.build_store(opened.store, corpus)
            rows = []
            for q in corpus["queries"]:
                c = _query_candidates(opened.store, q["query"], corpus.get("project"), clock.now())
                rows.append({**c, "relevant": {ids[r] for r in q["relevant"]}, "type": q["type"]})
            data[name] = rows
            opened.store.close()
            print(name, len(rows), file=sys.stderr)
        if locomo_file:
            rows = []
            for n, item in enumerate(locomo.load(locomo_file)):
                db = str(Path(tmp) / f"locomo{n}.db")
                ids, last = locomo.build_store(db, item)
                opened = api.open_store(db)
                with locomo._now(last):
                    for q in locomo.questions(item, ids):
                        c = _query_candidates(opened.store, q["question"], None, last)
                        rows.append({**c, "relevant": set(q["evidence"]), "type": f"c{q['category']}",
                                     "dated": q["dated"], "conv": n})
                opened.store.close()
            data["locomo"] = rows
            print("locomo", len(rows), file=sys.stderr)
    with open(out, "wb") as fh:
        pickle.dump(data, fh)


def rank(row: dict, params: dict) -> list[int]:
    """The pure part of recall on cached candidates, with `params` as config."""
    cfg = {**core.default_config(), **params}
    return [c.id for _, c in core.score_candidates(row["cands"], row["query"], cfg)]


def metrics(rows: list[dict], params: dict) -> dict[str, float]:
    r1 = r3 = r5 = r10 = 0.0
    for row in rows:
        ranked = rank(row, params)
        rel = row["relevant"]
        first = next((n for n, m in enumerate(ranked[:10], 1) if m in rel), None)
        r1 += first == 1
        r3 += first is not None and first <= 3
        r5 += len(rel & set(ranked[:5])) / len(rel)
        r10 += len(rel & set(ranked[:10])) / len(rel)
    n = len(rows) or 1
    return {"s@1": r1 / n, "s@3": r3 / n, "r@5": r5 / n, "r@10": r10 / n}


def corpus_score(name: str, m: dict) -> float:
    return m["r@5"] if name == "locomo" else (m["s@1"] + m["s@3"] + m["r@5"]) / 3


GRID = {
    "weight_vector": [0.5, 0.75, 1.0, 1.5],
    "min_similarity": [0.2, 0.3, 0.4],
    "substance_words": [1, 4, 8],
    "weight_time": [0.0, 0.2, 0.4],
    "coverage_power": [1.0, 2.0],
}


def cv(cands: str, grid: dict) -> None:
    data = pickle.load(open(cands, "rb"))
    names = list(data)
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    table = []
    for p in points:
        table.append((p, {n: corpus_score(n, metrics(data[n], p)) for n in names}))
    print(f"{len(points)} points × {len(names)} corpora", file=sys.stderr)
    for held in names:
        train = [n for n in names if n != held]
        best = max(table, key=lambda t: statistics.fmean(t[1][n] for n in train))
        print(f"held out {held}: chosen {best[0]} → {held} {best[1][held]:.3f} (train {[round(best[1][n], 3) for n in train]})")
    best = max(table, key=lambda t: statistics.fmean(t[1].values()))
    print("best on all:", best[0], {n: round(v, 3) for n, v in best[1].items()})
    for n in names:
        print(n, {k: round(v, 3) for k, v in metrics(data[n], best[0]).items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--locomo")
    c.add_argument("--out", default="/tmp/recall-cands.pkl")
    v = sub.add_parser("cv")
    v.add_argument("--cands", default="/tmp/recall-cands.pkl")
    v.add_argument("--grid", help="JSON object replacing GRID")
    args = parser.parse_args()
    if args.cmd == "collect":
        collect(args.locomo, args.out)
    else:
        cv(args.cands, json.loads(args.grid) if args.grid else GRID)


if __name__ == "__main__":
    os.environ.setdefault("MEMSAFE_HOME", tempfile.mkdtemp())
    main()
