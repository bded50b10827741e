"""Choose recall's ranking defaults by cross-validation over several corpora together.

    .venv/bin/python scripts/tune_recall.py collect [--locomo FILE] [--out /tmp/recall-cands.pkl] [--keep DIR]
    .venv/bin/python scripts/tune_recall.py cv [--cands /tmp/recall-cands.pkl]
    .venv/bin/python scripts/tune_recall.py worst [--cands /tmp/recall-cands.pkl] [--grid JSON]

`collect` builds one store per corpus (the shipped template corpus, the developer-prose corpus,
and, when given, every conversation of a LoCoMo-format file) and records, per query, the
candidates of recall's `candidates` step (BM25 and vector lists with their raw features) and the
relevant ids. Nothing of a corpus's text is written, only ids and numbers.

`worst` chooses by the worst shipped corpus (`worst_figures`, `worst`): the rules `memsafe bench`
reports (lexical ≥ plain BM25, hybrid ≥ the better half − 0.01, hybrid R@5 ≥ BM25 + 3 points) as
a shortfall taken off each corpus's score, LoCoMo held at least at the defaults.

`cv` replays the pure ranking steps (`scoring.score_candidates`: `scoring.fuse`, `scoring.rank`)
on those candidates for every point of GRID. Each corpus gets one score (`corpus_scores`). It
prints leave-one-corpus-out figures (the point best on the other corpora, scored on the held-out
one), then the chosen point: among the points that keep the shipped corpus's floors (semantic
R@1 ≥ 0.95, keyword R@1 ≥ 0.95, graph R@3 ≥ 0.90) and on LoCoMo never lose to their lexical
half, the best mean over corpora of score / best score on the grid, so no corpus dominates by
its scale. Nothing here is fitted per conversation. `--keep DIR` keeps the built stores, so a
second `collect` after a change to the candidates step embeds nothing again.
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

from memsafe import api, clock
from memsafe.api import config, core
from memsafe.bench import locomo, quality
from memsafe.recall import candidates, scoring, terms

DEPTH = config.default_config()["candidate_depth"]  # as recall takes them


def _query_candidates(store, text: str, project: str | None, now) -> dict:
    """The `candidates` step's output for one query, as plain numbers."""
    scope = core.make_scope(project=project)
    query = terms.parse_query(text, now)
    cfg = {**config.default_config(), "weight_hop": 1.0}
    cands, _memories, _mode = candidates.gather(store, query, scope, DEPTH, "hybrid", cfg, [])
    return {"query": query, "cands": cands}


def _built(folder: Path, name: str, build) -> tuple[object, object]:
    """(opened store, what `build` returned) for the store `name` in `folder`: built once by
    `build(db path)` and kept (with its result in `<name>.ids.pkl`), so a second `collect` after a
    change to the candidates step re-embeds nothing. A copy is opened, the kept store stays clean."""
    import shutil

    db, meta = folder / f"{name}.db", folder / f"{name}.ids.pkl"
    if not meta.exists():
        for stale in folder.glob(f"{name}.db*"):
            stale.unlink()
        result = build(str(db))
        meta.write_bytes(pickle.dumps(result))
    work = folder / f"{name}.work.db"
    for stale in folder.glob(f"{name}.work.db*"):
        stale.unlink()
    shutil.copyfile(db, work)
    return api.open_store(str(work)), pickle.loads(meta.read_bytes())


def _build_corpus(corpus: dict):
    def build(db: str) -> dict:
        opened = api.open_store(db)
        try:
            return quality.build_store(opened.store, corpus)
        finally:
            opened.store.close()
    return build


def collect(locomo_file: str | None, out: str, keep: str | None = None) -> None:
    data: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("own", *quality.EXTRA_CORPORA):
            corpus = quality.load_corpus(None) if name == "own" else quality.shipped_corpus(name)
            opened, ids = _built(folder, name, _build_corpus(corpus))
            rows = []
            with quality._clock_at(corpus.get("now")):  # as the bench asks: in its project, at its `now`
                for q in corpus["queries"]:
                    c = _query_candidates(opened.store, q["query"], q.get("project", corpus.get("project")),
                                          clock.now())
                    rows.append({**c, "relevant": {ids[r] for r in q["relevant"]}, "type": q["type"]})
            data[name] = rows
            bm25 = quality.bm25_reference(opened.store, corpus, ids)["all"]
            data.setdefault("bm25", {})[name] = {"s@1": bm25["recall_at_1"], "s@5": bm25["recall_at_5"]}
            opened.store.close()
            print(name, len(rows), file=sys.stderr)
        if locomo_file:
            rows = []
            for n, item in enumerate(locomo.load(locomo_file)):
                opened, (ids, last) = _built(folder, f"locomo{n}", lambda db, item=item: locomo.build_store(db, item))
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
    cfg = {**config.default_config(), **params}
    return [c.id for _, c in scoring.score_candidates(row["cands"], row["query"], cfg)]


def metrics(rows: list[dict], params: dict) -> dict[str, float]:
    r1 = r3 = r5 = r10 = rr = s5 = 0.0
    for row in rows:
        ranked = rank(row, params)
        rel = row["relevant"]
        first = next((n for n, m in enumerate(ranked[:10], 1) if m in rel), None)
        r1 += first == 1
        r3 += first is not None and first <= 3
        s5 += first is not None and first <= 5
        rr += 1.0 / first if first else 0.0
        r5 += len(rel & set(ranked[:5])) / len(rel)
        r10 += len(rel & set(ranked[:10])) / len(rel)
    n = len(rows) or 1
    return {"s@1": r1 / n, "s@3": r3 / n, "s@5": s5 / n, "r@5": r5 / n, "r@10": r10 / n, "mrr": rr / n}


def corpus_scores(data: dict, params: dict) -> dict[str, float]:
    """Per corpus: own = mean of semantic R@1, keyword R@1, graph R@3 (the bench's floors);
    devprose = mean of R@1 and R@5; locomo = R@5 over categories 1–4. Plus three constraints
    (`fits`): `_floors` (the own corpus's floors, as `memsafe bench` checks them: semantic R@1 ≥
    0.95, keyword R@1 ≥ 0.95, graph R@3 ≥ 0.90, and hybrid at least each half alone on R@1, R@3
    and MRR of every query type), `_halves_ok` (the same rule on the developer-prose corpus:
    "default recall ≥ the better of lexical and vector on every corpus the bench runs")
    and `_lexical_ok` (on LoCoMo, hybrid at least its lexical half, the same point with
    weight_vector 0, on R@5 and R@10 of categories 1–4, adversarial R@5 and R@5 of the questions
    naming a month or year)."""
    types = {t: [r for r in data["own"] if r["type"] == t] for t in ("semantic", "keyword", "graph")}
    own = {t: metrics(rows, params) for t, rows in types.items()}
    out = {"own": (own["semantic"]["s@1"] + own["keyword"]["s@1"] + own["graph"]["s@3"]) / 3,
           "_floors": own["semantic"]["s@1"] >= 0.95 and own["keyword"]["s@1"] >= 0.95 and own["graph"]["s@3"] >= 0.90
           and _at_least_each_half(types, params, own)}
    if "devprose" in data:
        d = metrics(data["devprose"], params)
        out["devprose"] = (d["s@1"] + d["r@5"]) / 2
        prose = {t: [r for r in data["devprose"] if r["type"] == t] for t in ("semantic", "keyword")}
        out["_halves_ok"] = _at_least_each_half(prose, params)
    if "locomo" in data:
        groups = locomo_groups(data["locomo"])
        hybrid = {g: metrics(rows, params) for g, rows in groups.items()}
        lexical = {g: metrics(rows, {**params, "weight_vector": 0.0}) for g, rows in groups.items()}
        out["locomo"] = hybrid["c1-4"]["r@5"]
        out["_lexical_ok"] = all(hybrid[g][k] >= lexical[g][k] for g, k in LEXICAL_RULE)
    return out


def _at_least_each_half(types: dict[str, list[dict]], params: dict, hybrid: dict | None = None) -> bool:
    """True if `params` ranks at least as well as each half alone (weight_vector 0, weight_lexical 0)
    on R@1, R@3 and MRR of every query type in `types` ({type: rows}); `hybrid`: its metrics, if known."""
    hybrid = hybrid or {t: metrics(rows, params) for t, rows in types.items()}
    for half in ("weight_vector", "weight_lexical"):
        alone = {t: metrics(rows, {**params, half: 0.0}) for t, rows in types.items()}
        if any(hybrid[t][k] < alone[t][k] for t in types for k in ("s@1", "s@3", "mrr")):
            return False
    return True


def fits(scores: dict) -> bool:
    """True if a point's `corpus_scores` keep every constraint (the keys starting with `_`)."""
    return all(v for k, v in scores.items() if k.startswith("_"))


LEXICAL_RULE = (("c1-4", "r@5"), ("c1-4", "r@10"), ("adversarial", "r@5"), ("dated", "r@5"))


def locomo_groups(rows: list[dict]) -> dict[str, list[dict]]:
    """LoCoMo questions by the groups `memsafe bench --dataset locomo` reports."""
    return {"c1-4": [r for r in rows if r["type"] != "c5"], "adversarial": [r for r in rows if r["type"] == "c5"],
            "dated": [r for r in rows if r.get("dated")]}


GRID = {
    "coverage_power": [2.0, 3.0],
    "weight_lexical": [12, 14, 16, 18],
    "weight_vector": [3, 4, 6],
    "min_similarity": [0.1, 0.15],
    "weight_context": [0.0, 0.3, 0.4, 0.5],
}


def cv(cands: str, grid: dict) -> None:
    """Leave-one-corpus-out over the grid, then the point chosen on all corpora: among the points
    that keep every constraint of `corpus_scores` (`fits`), the best mean of each corpus's score
    over its best."""
    data = pickle.load(open(cands, "rb"))
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    table = [(p, corpus_scores(data, p)) for p in points]
    names = [n for n in table[0][1] if not n.startswith("_")]
    best = {n: max(t[1][n] for t in table) for n in names}
    print(f"{len(points)} points × {len(names)} corpora", file=sys.stderr)
    for held in names:
        train = [n for n in names if n != held]
        chosen = max(table, key=lambda t: statistics.fmean(t[1][n] / best[n] for n in train))
        print(f"held out {held}: chosen {chosen[0]} → {held} {chosen[1][held]:.3f} (best on the grid {best[held]:.3f})")
    if "locomo" in data:  # the conversations one by one: chosen on the others and every other corpus
        convs = sorted({r["conv"] for r in data["locomo"]})
        for held in convs:
            train = {**data, "locomo": [r for r in data["locomo"] if r["conv"] != held]}
            scored = [(p, corpus_scores(train, p)) for p in points]
            top = {n: max(t[1][n] for t in scored) for n in names}
            kept = [t for t in scored if fits(t[1])] or scored
            chosen = max(kept, key=lambda t: statistics.fmean(t[1][n] / top[n] for n in names))
            test = [r for r in data["locomo"] if r["conv"] == held]
            print(f"held out LoCoMo conversation {held}: chosen {chosen[0]} → R@5 {metrics(test, chosen[0])['r@5']:.3f}"
                  f" (best on the grid {max(metrics(test, p)['r@5'] for p in points):.3f})")
    kept = [t for t in table if fits(t[1])] or [t for t in table if t[1]["_floors"]] or table
    print(f"{len(kept)} points keep the own floors, hybrid ≥ each half on developer prose and ≥ lexical on LoCoMo",
          file=sys.stderr)
    chosen = max(kept, key=lambda t: statistics.fmean(t[1][n] / best[n] for n in names))
    print("chosen:", chosen[0], {n: round(v, 3) for n, v in chosen[1].items() if not n.startswith("_")})
    if "devprose" in data:  # hybrid at least the better half on every corpus (reported, not a constraint)
        for t in ("semantic", "keyword"):
            rows = [r for r in data["devprose"] if r["type"] == t]
            halves = {label: metrics(rows, {**chosen[0], **zero}) for label, zero in
                      (("hybrid", {}), ("vector", {"weight_lexical": 0.0}), ("lexical", {"weight_vector": 0.0}))}
            print(f"  devprose {t} ({len(rows)}): " + "; ".join(
                f"{label} s@1 {m['s@1']:.3f} s@3 {m['s@3']:.3f} mrr {m['mrr']:.3f}" for label, m in halves.items()))
    if "locomo" in data:
        for g, rows in locomo_groups(data["locomo"]).items():
            for label, params in (("hybrid", chosen[0]), ("lexical", {**chosen[0], "weight_vector": 0.0})):
                m = metrics(rows, params)
                print(f"  LoCoMo {g} {label}: " + " ".join(f"{k} {100 * v:.1f}" for k, v in m.items()))


# The grid of `worst` (its output, every point and the folds: scripts/tune_recall_worst.txt): the
# weights whose effect differs most between corpora (`memsafe bench --ablate`), around the defaults.
WORST_GRID = {
    "coverage_power": [3.0],  # a wider grid ({2, 3} x weight_vector {4, 5}) chose 3 and 4, as did 3 folds of 4
    "weight_vector": [4],
    "coverage_power_lexical": [0.0, 0.5, 1.0, 3.0],
    "weight_voice": [0.0, 0.6],
    "weight_kind": [0, 0.3],
    "weight_lexical": [12, 14],
}
OWN_CORPORA = ("own", "devprose", "prompts", "notes")


def lexical_params(params: dict) -> dict:
    """The config of a lexical-only recall at `params` (`scoring.one_half_weight`): weight_vector 0,
    coverage_power_lexical as coverage_power."""
    cfg = {**config.default_config(), **params}
    return {**params, "weight_vector": 0.0, "coverage_power": cfg["coverage_power_lexical"]}


def worst_figures(data: dict, params: dict) -> dict:
    """Per corpus of OWN_CORPORA (the shipped ones): hybrid, lexical (weight_vector 0) and vector
    (weight_lexical 0) success at 1 and 5 (`metrics` s@1, s@5: as `memsafe bench` counts Recall@k),
    the plain BM25 reference collected with them, and the rules `memsafe bench` holds them to:
    lexical ≥ BM25 (R@1, R@5), hybrid ≥ max(lexical, vector) − 0.01 (R@1, R@5), hybrid R@5 ≥ BM25 + 0.03;
    `score` = mean of hybrid R@1 and R@5 less the shortfall on every rule. LoCoMo (when collected):
    hybrid R@5 and R@10 of categories 1–4, and adversarial R@5."""
    out: dict = {}
    for name in OWN_CORPORA:
        if name not in data:
            continue
        rows = data[name]
        h = metrics(rows, params)
        lex = metrics(rows, lexical_params(params))
        vec = metrics(rows, {**params, "weight_lexical": 0.0})
        bm = data.get("bm25", {}).get(name, {"s@1": 0.0, "s@5": 0.0})
        short = sum(max(0.0, bm[k] - lex[k]) for k in ("s@1", "s@5"))
        short += sum(max(0.0, max(lex[k], vec[k]) - 0.01 - h[k]) for k in ("s@1", "s@5"))
        short += max(0.0, bm["s@5"] + 0.03 - h["s@5"])
        out[name] = {"hybrid": h, "lexical": lex, "vector": vec, "bm25": bm, "shortfall": short,
                     "score": (h["s@1"] + h["s@5"]) / 2 - short}
    if "locomo" in data:
        groups = locomo_groups(data["locomo"])
        m, adversarial = metrics(groups["c1-4"], params), metrics(groups["adversarial"], params)
        out["locomo"] = {"r@5": m["r@5"], "r@10": m["r@10"], "adversarial r@5": adversarial["r@5"], "score": m["r@5"]}
    return out


def worst(cands: str, grid: dict) -> None:
    """Choose by the worst corpus: for each point of `grid` (over the defaults), each shipped
    corpus's `worst_figures` score over the best score on the grid for that corpus; the chosen
    point maximises the lowest of these ratios over the corpora (then the mean score),
    among the points that keep LoCoMo categories 1–4 R@5 and R@10 and adversarial R@5 at least the
    defaults' (when
    LoCoMo was collected). Folds: leave one corpus out (chosen on the others, scored on it).
    Prints every point as one JSON line (to keep beside the script), then the folds and the choice."""
    data = pickle.load(open(cands, "rb"))
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    base = worst_figures(data, {})
    table = []
    for p in points:
        figures = worst_figures(data, p)
        ok = "locomo" not in figures or all(figures["locomo"][k] >= base["locomo"][k] - 1e-9
                                            for k in ("r@5", "r@10", "adversarial r@5"))
        table.append((p, figures, ok))
        print(json.dumps({"point": p, "ok": ok, "scores": {n: round(f["score"], 4) for n, f in figures.items()}}))
    names = [n for n in OWN_CORPORA if n in base]
    kept = [t for t in table if t[2]] or table
    best = {n: max(t[1][n]["score"] for t in table) for n in names}

    def worst_of(figures: dict, among: list[str]) -> float:  # the corpus furthest below its best on the grid
        return min(figures[n]["score"] / best[n] for n in among)

    for held in names:
        train = [n for n in names if n != held]
        chosen = max(kept, key=lambda t: worst_of(t[1], train))
        print(f"fold: held out {held}: chosen {chosen[0]} → {held} {chosen[1][held]['score']:.3f} "
              f"(defaults {base[held]['score']:.3f}, best on the grid {max(t[1][held]['score'] for t in table):.3f})")
    chosen = max(kept, key=lambda t: (worst_of(t[1], names), statistics.fmean(t[1][n]["score"] for n in names)))
    print("chosen:", json.dumps(chosen[0]))
    for label, figures in (("defaults", base), ("chosen", chosen[1])):
        for n in names:
            f = figures[n]
            print(f"  {label} {n}: " + "; ".join(f"{m} R@1 {f[m]['s@1']:.3f} R@5 {f[m]['s@5']:.3f}"
                                              for m in ("hybrid", "lexical", "vector", "bm25"))
                  + f"; shortfall {f['shortfall']:.3f}")
        if "locomo" in figures:
            print(f"  {label} locomo c1-4: R@5 {100 * figures['locomo']['r@5']:.1f} R@10 "
                  f"{100 * figures['locomo']['r@10']:.1f}, adversarial R@5 "
                  f"{100 * figures['locomo']['adversarial r@5']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--locomo")
    c.add_argument("--out", default="/tmp/recall-cands.pkl")
    c.add_argument("--keep", help="folder keeping the built stores between runs (nothing is re-embedded)")
    v = sub.add_parser("cv")
    v.add_argument("--cands", default="/tmp/recall-cands.pkl")
    v.add_argument("--grid", help="JSON object replacing GRID")
    w = sub.add_parser("worst")
    w.add_argument("--cands", default="/tmp/recall-cands.pkl")
    w.add_argument("--grid", help="JSON object replacing WORST_GRID")
    args = parser.parse_args()
    if args.cmd == "collect":
        collect(args.locomo, args.out, args.keep)
    elif args.cmd == "worst":
        worst(args.cands, json.loads(args.grid) if args.grid else WORST_GRID)
    else:
        cv(args.cands, json.loads(args.grid) if args.grid else GRID)


if __name__ == "__main__":
    os.environ.setdefault("MEMSAFE_HOME", tempfile.mkdtemp())
    main()
