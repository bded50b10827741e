"""Responsibility: `memsafe bench`: a retrieval-quality benchmark on corpora shipped with the
package (memsafe/data/), driven only through `memsafe.api`.

`run_quality` builds a throw-away store from each corpus (memories with their kind, source,
project, tags, entities and creation time, plus the corpus relations), then asks every query in
three modes (lexical only, vector only, hybrid) and reports per query type:

- Recall@k (k = 1, 3, 5, 10): share of queries with at least one relevant memory among the first
  k returned (success@k; most queries have one relevant memory, where it equals recall@k).
- MRR: mean of 1 / rank of the first relevant memory (0 when none is returned).
- update-first@10 (queries that name `stale` memories: a fact given a new value later): share
  whose first relevant (current) memory is among the first 10 and above every stale one.
- Budget adherence: share of recalls whose returned text (memory texts and graph context,
  joined by newlines, counted with cl100k_base) fits the requested budget, and
  `tokens_used <= effective_budget`; utilisation = tokens_used / effective_budget.
- Latency: wall time of in-process `api.recall` calls with the model already loaded (ms).

Beside the three modes, a reference row: plain FTS5 BM25 (porter tokenizer, OR of the query's
non-stop-word terms) over the same memories in a temporary in-memory SQLite table (`_bm25`).

Other measures (MCP, scale) are meant to live in their own `run_*` functions next to this one
and be selected by flags of the same command.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from memsafe import api, settings, tokens
from memsafe.bench.timing import percentile
from memsafe.errors import Duplicate, InvalidInput, Refused
from memsafe.store import Store

MODES = ("lexical", "vector", "hybrid")
RANKING_KEYS = ("weight_", "coverage_power", "min_similarity", "substance_words", "candidate_depth", "graph_share")
# Query types, in report order. semantic: a paraphrase sharing no content word with its answer;
# keyword: names an identifier (a flag, a config key, an exception); graph: answered through a
# relation; fact: asks for a stated fact; request: the fact was stated inside a request or question;
# update: the fact was given a new value later (the query names the stale memories); temporal:
# names a date or a time span; note / commit: answered by a note, or by a commit, among a backfilled
# history.
TYPES = ("semantic", "keyword", "graph", "fact", "request", "update", "temporal", "note", "commit")
RANKS = (1, 3, 5, 10)  # Recall@k reported; quality is measured on the first `limit` (10) hits
QUICK_BUDGETS = (2000, 120)  # quality at the first; budget adherence at all (quick: hybrid only)
FULL_BUDGETS = (2000, 400, 120, 40)
FLOORS = {
    # The quality gate (tests/test_bench.py asserts these on `--quick`).
    "hybrid_r1_semantic": 0.95,
    "hybrid_r1_keyword": 0.95,
    "hybrid_r3_graph": 0.90,
    "budget_adherence": 1.0,
}


class _Memory(TypedDict):
    id: str
    content: str
    kind: NotRequired[str]
    source: NotRequired[str]
    project: NotRequired[str | None]  # default: the corpus's project
    tags: NotRequired[list[str]]
    entities: NotRequired[list[str]]
    at: NotRequired[str]  # ISO-8601: the memory is stored with the clock at this instant


class _Query(TypedDict):
    id: str
    type: Literal["semantic", "keyword", "graph", "fact", "request", "update", "temporal", "note", "commit"]
    query: str
    relevant: Annotated[list[str], Field(min_length=1)]
    stale: NotRequired[list[str]]  # memories holding a value `relevant` replaced: each should rank below it
    project: NotRequired[str | None]  # the project the query is asked in; default: the corpus's project


class _Corpus(TypedDict):
    """A corpus file's shape (other keys, such as description, are ignored); the values inside
    (kind, source, relations, texts) are checked by the api as the store is built."""

    name: NotRequired[str]
    project: NotRequired[str | None]
    now: NotRequired[str]  # ISO-8601: the clock while the queries are asked (default: the real clock)
    memories: list[_Memory]
    relations: NotRequired[list[dict]]
    queries: Annotated[list[_Query], Field(min_length=1)]


def load_corpus(path: str | Path | None = None) -> dict:
    """A benchmark corpus (JSON, or gzip-compressed JSON): {name, project, now?, memories[{id, kind,
    content, source?, project?, tags?, entities?, at?}], relations[{source, relation, target, weight}],
    queries[{id, type, query, relevant[ids], stale?[ids], project?}]}. Default: the template corpus.

    Raises:
        Refused: the file is not such a corpus (one line: the file, where, what): not JSON,
            a value of the wrong type, an unknown query type, no query, a query with no relevant
            memory or naming one the corpus does not hold, a memory both relevant and stale, two
            memories with one id, a time (`at`, `now`) that is not ISO-8601.
        OSError: the file cannot be read.
    """
    if path is None:
        data = resources.files("memsafe").joinpath("data/bench_corpus.json").read_bytes()
    else:
        data = Path(path).read_bytes()
    where = path or "data/bench_corpus.json"
    try:
        if data[:2] == b"\x1f\x8b":  # gzip's magic number
            data = gzip.decompress(data)
        corpus = json.loads(data.decode("utf-8"))
    except (OSError, EOFError) as exc:  # a damaged gzip stream
        raise Refused(f"{where} is not gzip-compressed JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8 either; RecursionError: arrays nested thousands deep
        raise Refused(f"{where} is not JSON ({str(exc) or type(exc).__name__})") from None
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(_Corpus).validate_python(corpus, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(part) for part in first["loc"]) or "top level"
        raise Refused(f"{where}: {at}: {first['msg']} (the format: memsafe bench --help)") from None
    ids = [m["id"] for m in corpus["memories"]]
    if len(set(ids)) < len(ids):
        raise Refused(f"{where}: memory id {next(i for i in ids if ids.count(i) > 1)!r} is given twice")
    held = set(ids)
    for q in corpus["queries"]:
        unknown = [r for r in (*q["relevant"], *q.get("stale", ())) if r not in held]
        if unknown:
            raise Refused(f"{where}: query {q['id']!r} names memory {unknown[0]!r}, not in the corpus")
        both = set(q["relevant"]) & set(q.get("stale", ()))
        if both:
            raise Refused(f"{where}: query {q['id']!r} names memory {min(both)!r} both relevant and stale")
    from memsafe import clock

    for what, value in [("now", corpus.get("now"))] + [(f"memory {m['id']!r} at", m.get("at"))
                                                       for m in corpus["memories"]]:
        try:
            if value is not None:
                clock.parse_iso(value)
        except ValueError:
            raise Refused(f"{where}: {what}: {value!r} is not an ISO-8601 time") from None
    return corpus


@contextmanager
def _clock_at(instant: str | None) -> Iterator[None]:
    """Within the block, memsafe's clock reads `instant` (ISO-8601; `MEMSAFE_NOW`, the clock's own
    override); None leaves the clock as it is. The former value is put back afterwards."""
    if instant is None:
        yield
        return
    former = os.environ.get("MEMSAFE_NOW")
    os.environ["MEMSAFE_NOW"] = instant
    settings.reload()
    try:
        yield
    finally:
        if former is None:
            os.environ.pop("MEMSAFE_NOW", None)
        else:
            os.environ["MEMSAFE_NOW"] = former
        settings.reload()


def build_store(store: Store, corpus: Mapping, stats: dict | None = None) -> dict[str, int]:
    """Load the corpus into an empty store through the api (vectors filled in batches), each memory
    with its kind, source, project (default the corpus's), tags and entities, at its time `at` if it
    has one. A memory is stored as memsafe stores text it captures on its own (hooks, backfill): a
    credential in it is replaced (`redact`), not refused. A source this memsafe does not know (a
    capture source named before it lands) is stored as `user`.

    Returns {corpus memory id: store memory id}. `stats`, if given, gets "redacted" (memories stored
    with a part replaced) and "sources_stored_as" ({corpus source: stored source}).

    Raises:
        InvalidInput: a memory the api refuses (bad kind, tag, ...), or one that repeats another
            memory of the same project.
    """
    from memsafe.models import Source

    known = {s.value for s in Source}
    ids: dict[str, int] = {}
    redacted, stored_as = 0, {}
    for item in corpus["memories"]:
        source = item.get("source", Source.USER.value)
        if source not in known:
            stored_as[source] = source = Source.USER.value
        try:
            with _clock_at(item.get("at")):
                memory = api.remember(
                    store, item["content"], kind=item.get("kind", "general"),
                    project=item.get("project", corpus.get("project")), source=source, tags=item.get("tags", ()),
                    entities=item.get("entities", ()), embed_now=False, redact=True,
                )
        except Duplicate as exc:
            first = next((k for k, v in ids.items() if v == exc.existing_id), exc.existing_id)
            raise Refused(f"corpus memory {item['id']!r} repeats memory {first!r}") from None
        except InvalidInput as exc:
            raise Refused(f"corpus memory {item['id']!r}: {exc}") from None
        redacted += "[REDACTED:" in memory.content and "[REDACTED:" not in item["content"]
        ids[item["id"]] = memory.id
    api.backfill(store, limit=None)
    if corpus.get("relations"):
        api.relate_many(store, corpus["relations"], create=True)
    if stats is not None:
        stats.update(redacted=redacted, sources_stored_as=stored_as)
    return ids


def _returned_tokens(result) -> int:
    parts = [h.text for h in result.hits]
    if result.graph_context:
        parts.append(result.graph_context)
    return tokens.count("\n".join(parts)) if parts else 0


def _types(queries: Iterable[Mapping]) -> list[str]:
    """The query types `queries` hold, in TYPES order."""
    held = {q["type"] for q in queries}
    return [t for t in TYPES if t in held]


class _Tally:
    """Ranking figures of a set of queries: Recall@k for k in RANKS, MRR, and update-first@10 over
    the queries that name stale memories."""

    def __init__(self) -> None:
        self.queries = 0
        self.within = dict.fromkeys(RANKS, 0)
        self.rr = 0.0
        self.updates = self.current_first = 0

    def add(self, first: int | None, stale_first: int | None = None, has_stale: bool = False) -> None:
        """`first`: rank of the first relevant memory (None: not returned); `stale_first`: rank of the
        first stale one (None: not returned)."""
        self.queries += 1
        for k in RANKS:
            self.within[k] += first is not None and first <= k
        self.rr += 1.0 / first if first else 0.0
        if has_stale:
            self.updates += 1
            self.current_first += first is not None and first <= 10 and (stale_first is None or first < stale_first)

    def figures(self) -> dict:
        count = self.queries or 1
        out = {"queries": self.queries, **{f"recall_at_{k}": round(self.within[k] / count, 4) for k in RANKS},
               "mrr": round(self.rr / count, 4)}
        if self.updates:
            out["updates"] = self.updates
            out["update_first_at_10"] = round(self.current_first / self.updates, 4)
        return out


def _first_rank(ranked: Sequence[int], wanted: set[int]) -> int | None:
    return next((i for i, m in enumerate(ranked, 1) if m in wanted), None)


def evaluate(
    store: Store,
    corpus: Mapping,
    ids: Mapping[str, int],
    *,
    modes: Iterable[str] = MODES,
    budgets: Sequence[int] = QUICK_BUDGETS,
    limit: int = 10,
    sweep_modes: Iterable[str] | None = None,
) -> dict:
    """Run every corpus query in each mode against a store built by `build_store`, each in its
    project (default the corpus's), with the clock at the corpus's `now` when it has one.

    Quality (Recall@1/3/5/10, MRR, update-first@10) is measured at budgets[0]; budget adherence and
    utilisation over every budget in `budgets` (the smaller budgets only in `sweep_modes`, default
    every mode). Returns {"modes": {mode: {...}}, "misses": [...]} (see run_quality).
    """
    with _clock_at(corpus.get("now")):
        return _evaluate(store, corpus, ids, list(modes), budgets, limit, sweep_modes)


def _evaluate(store: Store, corpus: Mapping, ids: Mapping[str, int], modes: list[str], budgets: Sequence[int],
              limit: int, sweep_modes: Iterable[str] | None) -> dict:
    queries = corpus["queries"]
    out: dict = {"modes": {}, "misses": []}
    api.recall(store, "warm up", project=corpus.get("project"))  # load the model, warm caches
    sweep = set(modes if sweep_modes is None else sweep_modes)
    back = {v: k for k, v in ids.items()}
    for mode in modes:
        per_type: dict[str, dict] = {}
        overall = _Tally()
        latencies: list[float] = []
        hits: list[int] = []
        adherent = total = 0
        utilisation: list[float] = []
        for qtype in _types(queries):
            tally = _Tally()
            for q in (q for q in queries if q["type"] == qtype):
                relevant = {ids[r] for r in q["relevant"]}
                stale = {ids[r] for r in q.get("stale", ())}
                for n, budget in enumerate(budgets):
                    if n and mode not in sweep:
                        break
                    t0 = time.perf_counter()
                    result = api.recall(store, q["query"], project=q.get("project", corpus.get("project")),
                                        budget=budget, limit=limit, mode=mode)
                    elapsed = (time.perf_counter() - t0) * 1000
                    total += 1
                    ok = _returned_tokens(result) <= budget and result.tokens_used <= result.effective_budget
                    adherent += ok
                    utilisation.append(result.tokens_used / result.effective_budget)
                    if n:
                        continue
                    latencies.append(elapsed)
                    ranked = [h.memory.id for h in result.hits]
                    hits.append(len(ranked))
                    first = _first_rank(ranked, relevant)
                    for t in (tally, overall):
                        t.add(first, _first_rank(ranked, stale), bool(stale))
                    if first != 1:
                        out["misses"].append({
                            "mode": mode, "query_id": q["id"], "type": qtype, "query": q["query"],
                            "relevant": q["relevant"], "rank": first,
                            "top3": [back.get(m, str(m)) for m in ranked[:3]],
                        })
            per_type[qtype] = tally.figures()
        out["modes"][mode] = {
            "types": per_type,
            "all": overall.figures(),
            "mean_hits": round(statistics.fmean(hits), 2) if hits else 0.0,
            "budget_adherence": round(adherent / total, 4) if total else 1.0,
            "recalls": total,
            "mean_utilisation": round(statistics.fmean(utilisation), 4) if utilisation else 0.0,
            "latency_ms_p50": round(percentile(latencies, 0.50), 2),
            "latency_ms_p95": round(percentile(latencies, 0.95), 2),
        }
    return out


_TOKEN = re.compile(r"[^\W_]+")  # FTS5 unicode61's tokens: runs of letters and digits


def bm25_reference(store: Store, corpus: Mapping, ids: Mapping[str, int], *, limit: int = 10) -> dict:
    """The plain BM25 reference: the memories as `store` holds them (`build_store`'s, redacted where
    it redacted), in a temporary in-memory FTS5 table (tokenize 'porter unicode61 remove_diacritics
    2'), each query as the OR of its non-stop-word tokens (`recall.terms.STOP_WORDS`), scoped like
    recall (its project and global memories), ranked by FTS5's bm25() (k1 1.2, b 0.75), first
    `limit`. No fusion, recency or other signal: what a plain full-text search ranks.

    Returns {"types": {type: figures}, "all": figures, "latency_ms_p50", "latency_ms_p95"}, figures
    as in `evaluate` (queries, recall_at_k, mrr, update_first_at_10).
    """
    import apsw

    from memsafe.recall import terms

    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE m USING fts5(content, project UNINDEXED, "
                 "tokenize='porter unicode61 remove_diacritics 2')")
    with conn:
        for memory_id in ids.values():
            memory = store.get_memory(memory_id)
            assert memory is not None  # stored by this run
            conn.execute("INSERT INTO m(rowid, content, project) VALUES (?, ?, ?)",
                         (memory_id, memory.content, memory.project))
    from memsafe.api.hygiene import clean_project

    per_type: dict[str, dict] = {}
    overall = _Tally()
    latencies: list[float] = []
    for qtype in _types(corpus["queries"]):
        tally = _Tally()
        for q in (q for q in corpus["queries"] if q["type"] == qtype):
            t0 = time.perf_counter()
            words = dict.fromkeys(w for w in _TOKEN.findall(q["query"].lower()) if w not in terms.STOP_WORDS)
            ranked: list[int] = []
            if words:
                project = clean_project(q.get("project", corpus.get("project")), check_secrets=False)
                ranked = [row[0] for row in conn.execute(
                    "SELECT rowid FROM m WHERE m MATCH ? AND (project IS NULL OR project IS ?) "
                    "ORDER BY bm25(m) LIMIT ?", (" OR ".join(f'"{w}"' for w in words), project, limit))]
            latencies.append((time.perf_counter() - t0) * 1000)
            first = _first_rank(ranked, {ids[r] for r in q["relevant"]})
            stale = {ids[r] for r in q.get("stale", ())}
            for t in (tally, overall):
                t.add(first, _first_rank(ranked, stale), bool(stale))
        per_type[qtype] = tally.figures()
    conn.close()
    return {"types": per_type, "all": overall.figures(), "latency_ms_p50": round(percentile(latencies, 0.50), 2),
            "latency_ms_p95": round(percentile(latencies, 0.95), 2)}


# Corpora measured beside the template corpus by default (name: resource under memsafe/). The
# floors of those in REPORT_ONLY are reported but decide neither `ok` nor the exit code.
EXTRA_CORPORA = {
    "devprose": "data/devprose_corpus.json",
    "prompts": "data/prompts_corpus.json",
    "notes": "data/notes_corpus.json.gz",
}
REPORT_ONLY = frozenset({"prompts", "notes"})


def shipped_corpus(name: str) -> dict:
    """The corpus EXTRA_CORPORA names `name`, loaded and checked as `load_corpus` does.
    Raises KeyError (no such corpus), InvalidInput, OSError."""
    resource = resources.files("memsafe").joinpath(EXTRA_CORPORA[name])
    with resources.as_file(resource) as path:
        return load_corpus(path)


def run_quality(
    *,
    quick: bool = False,
    corpus_path: str | Path | None = None,
    config: Mapping[str, str] | None = None,
    modes: Iterable[str] = MODES,
    postgres: str | None = None,
    corpora: Iterable[str] | None = None,
) -> dict:
    """The retrieval-quality benchmark: build a temporary store from the corpus and evaluate it:
    a SQLite file in a temporary folder, or with `postgres` (a URL) a temporary schema of that
    PostgreSQL database, dropped afterwards (`memsafe.store.postgres.scratch_schema`).

    Without `corpus_path`, the shipped template corpus is the main report and every corpus of
    EXTRA_CORPORA (docs/corpora.md: real developer prose; users' prompts to a coding assistant;
    notes among two real backfilled commit histories) is measured beside it, under "corpora", each
    with its own "floors" (hybrid at least the better single mode on R@1, R@3 and MRR of every type:
    "default recall ≥ the better of lexical and vector on every corpus the bench runs") and "ok".
    `ok` (and the exit code of `memsafe bench`) holds when the main corpus and every corpus not in
    REPORT_ONLY keep their floors; a report-only corpus says `"gate": false`.

    Args:
        quick: budget adherence at (2000, 120) in hybrid mode only, instead of (2000, 400, 120, 40)
            in every mode; the quality queries are the same.
        config: config overrides applied to the temporary store (e.g. {"weight_time": "0"}).
        corpora: the names of EXTRA_CORPORA to measure beside the main one (default: all).

    Returns:
        {"corpus": {name, memories, relations, queries: {type: count}, redacted, sources_stored_as},
         "config": {effective ranking config}, "budgets": [...],
         "modes": {mode: {"types": {type: figures}, "all": figures, mean_hits, budget_adherence,
                          recalls, mean_utilisation, latency_ms_p50, latency_ms_p95}},
         "reference": {"bm25": {"types", "all", latency_ms_p50, latency_ms_p95}} (`bm25_reference`),
         "floors": {name: {"floor", "value", "ok"}}, "ok": bool, "gate": bool, "misses": [...],
         "seconds": float (the whole run's; an extra corpus's: its own),
         "embed_ms_p50", "embed_ms_p95": time to embed one query alone (ms), absent without the model,
         "model": False when the embedding model could not load (vector and hybrid ran on keywords),
         "corpora": {name: the same shape, for each extra corpus}};
        figures = {queries, recall_at_1, recall_at_3, recall_at_5, recall_at_10, mrr, and with
        queries that name stale memories updates, update_first_at_10}.

    Raises:
        MemsafeError subclasses from the api (e.g. the model cannot load: vector mode then
        falls back to lexical and the figures say so through the floors).
        KeyError: a name in `corpora` that EXTRA_CORPORA does not hold.
    """
    started = time.perf_counter()
    report = _run_one(load_corpus(corpus_path), quick, config, modes, absolute=True, postgres=postgres)
    if corpus_path is None:
        report["corpora"] = {}
        for name in EXTRA_CORPORA if corpora is None else corpora:
            extra = _run_one(shipped_corpus(name), quick, config, modes, absolute=False, postgres=postgres)
            extra["gate"] = name not in REPORT_ONLY
            report["corpora"][name] = extra
    report["ok"] = all(f["ok"] for f in report["floors"].values()) and all(
        extra["ok"] for extra in report.get("corpora", {}).values() if extra["gate"])
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def _run_one(corpus: Mapping, quick: bool, config: Mapping[str, str] | None, modes: Iterable[str],
             absolute: bool, postgres: str | None = None) -> dict:
    started = time.perf_counter()
    budgets = QUICK_BUDGETS if quick else FULL_BUDGETS
    stats: dict = {}
    with _scratch_db(postgres) as db:
        opened = api.open_store(db)
        store = opened.store
        try:
            for key, value in (config or {}).items():
                api.config_set(store, key, str(value))
            ids = build_store(store, corpus, stats)
            report = evaluate(store, corpus, ids, modes=modes, budgets=budgets,
                              sweep_modes=("hybrid",) if quick else None)
            report["reference"] = {"bm25": bm25_reference(store, corpus, ids)}
            report.update(_embed_latency([q["query"] for q in corpus["queries"]]))
            report["model"] = "embed_ms_p50" in report  # False: vector and hybrid fell back to keywords
            effective_config = {
                k: v["value"] for k, v in api.config_list(store).items()
                if k.startswith(RANKING_KEYS)
            }
        finally:
            store.close()
    counts = {t: sum(q["type"] == t for q in corpus["queries"]) for t in _types(corpus["queries"])}
    report["corpus"] = {"name": corpus.get("name"), "memories": len(corpus["memories"]),
                        "relations": len(corpus.get("relations", [])), "queries": counts, **stats}
    report["config"] = effective_config
    report["budgets"] = list(budgets)
    report["floors"] = _floors(report, absolute)
    report["ok"] = all(f["ok"] for f in report["floors"].values())
    report["gate"] = True
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


@contextmanager
def _scratch_db(postgres: str | None) -> Iterator[str]:
    """Where a benchmark builds its store: a temporary SQLite file, or a temporary schema of the
    PostgreSQL database `postgres` (a URL bound to it); removed afterwards."""
    if postgres is None:
        with tempfile.TemporaryDirectory(prefix="memsafe-bench-") as tmp:
            yield str(Path(tmp) / "bench.db")
        return
    from memsafe.store.postgres import scratch_schema

    with scratch_schema(postgres) as url:
        yield url


def _embed_latency(queries: Sequence[str]) -> dict:
    """p50/p95 of embedding one query (ms), the part of vector and hybrid latency the model takes."""
    from memsafe import embed

    embedder = embed.get_embedder()
    if embedder is None:
        return {}
    times = []
    for q in queries:
        t0 = time.perf_counter()
        embedder.embed_one(q, query=True)
        times.append((time.perf_counter() - t0) * 1000)
    return {"embed_ms_p50": round(percentile(times, 0.5), 2), "embed_ms_p95": round(percentile(times, 0.95), 2)}


def _floors(report: dict, absolute: bool = True) -> dict:
    modes = report["modes"]
    floors: dict[str, dict] = {}
    if "hybrid" not in modes:
        return floors
    hybrid = modes["hybrid"]["types"]
    for name, qtype, metric in () if not absolute else (
        ("hybrid_r1_semantic", "semantic", "recall_at_1"),
        ("hybrid_r1_keyword", "keyword", "recall_at_1"),
        ("hybrid_r3_graph", "graph", "recall_at_3"),
    ):
        if qtype in hybrid:  # a corpus of your own may hold no query of a type: no floor for it
            value = hybrid[qtype][metric]
            floors[name] = {"floor": FLOORS[name], "value": value, "ok": value >= FLOORS[name]}
    adherence = min(m["budget_adherence"] for m in modes.values())
    floors["budget_adherence"] = {"floor": 1.0, "value": adherence, "ok": adherence >= 1.0}
    for qtype in hybrid:
        singles = [modes[m]["types"][qtype] for m in ("lexical", "vector") if m in modes]
        if not singles:
            continue
        for metric in ("recall_at_1", "recall_at_3", "mrr"):
            best = max(s[metric] for s in singles)
            value = hybrid[qtype][metric]
            floors[f"hybrid_ge_best_single_{qtype}_{metric}"] = {"floor": best, "value": value, "ok": value >= best}
    return floors


def quality_table(report: dict):
    """Rich table: one row per mode × query type and one for all its queries, the plain BM25
    reference below the modes, per-mode latency; budget adherence and utilisation per mode in the
    caption. upd@10: update-first@10 of the queries that name stale memories (blank without)."""
    from rich.table import Table

    from memsafe.render import keep_figures

    c = report["corpus"]
    q = c["queries"]
    kinds = ", ".join(f"{n} {t}" for t, n in q.items())
    budget = ", ".join(f"{mode} {data['budget_adherence'] * 100:.1f}% / {data['mean_utilisation'] * 100:.1f}%"
                       for mode, data in report["modes"].items())
    table = Table(
        title=f"memsafe bench · {c.get('name') or 'corpus'} · {c['memories']} memories, {c['relations']} "
              f"relations · {kinds} queries",
        caption=(
            f"quality at budget {report['budgets'][0]}; budget adherence over {report['budgets']} / utilisation: "
            f"{budget}; latency (ms) in process, model warm (query embedding alone: p50 "
            f"{report.get('embed_ms_p50', 0):.1f} ms, p95 {report.get('embed_ms_p95', 0):.1f} ms); bm25: plain FTS5 "
            f"BM25 for reference (porter, OR of the query's words)"
        ),
        caption_justify="left",
        title_justify="left",
    )
    for name in ("mode", "type", "R@1", "R@3", "R@5", "R@10", "MRR", "upd@10", "p50", "p95"):
        table.add_column(name, justify="left" if name in ("mode", "type") else "right", no_wrap=True)
    rows = [*report["modes"].items(), *report.get("reference", {}).items()]
    for mode, data in rows:
        types = [(t, data["types"][t]) for t in q if t in data["types"]]
        if len(types) > 1 and "all" in data:
            types.append(("all", data["all"]))
        for n, (qtype, t) in enumerate(types):
            table.add_row(
                mode if n == 0 else "", qtype,
                *(f"{t.get(f'recall_at_{k}', 0):.3f}" for k in RANKS), f"{t['mrr']:.3f}",
                f"{t['update_first_at_10']:.3f}" if "update_first_at_10" in t else "",
                f"{data['latency_ms_p50']:.1f}" if n == 0 else "",
                f"{data['latency_ms_p95']:.1f}" if n == 0 else "",
                end_section=n == len(types) - 1,
            )
    return keep_figures(table)


def quality_tables(report: dict) -> list:
    """`quality_table` of the main corpus and of each extra corpus measured beside it."""
    return [quality_table(report), *(quality_table(r) for r in report.get("corpora", {}).values())]


def floor_lines(report: dict) -> list[str]:
    """One line per quality floor: ok or FAIL, name, value and what it is held to: "best single"
    for hybrid against the better single mode, "floor" for a fixed one; the main corpus's floors,
    then each extra corpus's, named by the corpus. A report-only corpus (`"gate": false`) gets one
    line: how many of its floors hold."""
    def line(prefix: str, name: str, f: dict) -> str:
        held = "best single" if name.startswith("hybrid_ge_best_single") else "floor"
        return f"{'ok  ' if f['ok'] else 'FAIL'} {prefix}{name}: {f['value']:.3f} ({held} {f['floor']:.3f})"

    lines = [line("", name, f) for name, f in report["floors"].items()]
    for corpus, extra in report.get("corpora", {}).items():
        if extra.get("gate", True):
            lines += [line(f"{corpus} ", name, f) for name, f in extra["floors"].items()]
        else:
            held = sum(f["ok"] for f in extra["floors"].values())
            lines.append(f"info {corpus}: report only, no gate ({held} of {len(extra['floors'])} floors held)")
    if not report.get("model", True):
        lines.append("note: the embedding model is not available (MEMSAFE_NO_MODEL, or `memsafe doctor` says why): "
                     "vector and hybrid ran on keywords alone")
    return lines
