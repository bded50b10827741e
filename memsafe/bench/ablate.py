"""Responsibility: `memsafe bench --ablate`: each ranking signal turned off in turn (its config key
set to the value that disables it), on each corpus the quality bench measures, in lexical and
hybrid mode, beside the defaults and the plain BM25 reference; one table of the changes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from memsafe import api
from memsafe.bench import quality

# Each signal of the ranking (memsafe.recall.scoring) and the config that turns it off: a weight
# at 0, coverage_power 0 (coverage^0 = 1: BM25 alone; coverage_power_lexical for a keyword-only
# recall), min_similarity 0 (no floor on a vector-only match), substance_words 0 (no guard on
# short memories).
SIGNALS: dict[str, dict[str, float]] = {
    "IDF coverage": {"coverage_power": 0.0},
    "lexical-only coverage": {"coverage_power_lexical": 0.0},
    "question damping": {"weight_question": 0.0},
    "turn context": {"weight_context": 0.0},
    "kind/source asked": {"weight_kind": 0.0},
    "first-person voice": {"weight_voice": 0.0},
    "vector floor": {"min_similarity": 0.0},
    "substance words": {"substance_words": 0.0},
    "time named": {"weight_time": 0.0},
    "graph hop": {"weight_hop": 0.0},
    "current first": {"current_depth": 0},
    "recency": {"weight_recency": 0.0},
    "access": {"weight_access": 0.0},
    "graph degree": {"weight_graph": 0.0},
    "confidence": {"weight_confidence": 0.0},
    "decay": {"weight_decay": 0.0},
}
MODES = ("lexical", "hybrid")
METRICS = ("recall_at_1", "recall_at_5")


def _figures(report: Mapping) -> dict[str, dict[str, float]]:
    """{mode: {metric: value}} of one `quality.evaluate` report, over all its queries."""
    return {mode: {k: data["all"][k] for k in METRICS} for mode, data in report["modes"].items()}


def run_ablation(corpora: Iterable[str] | None = None, *, corpus_path: str | None = None,
                 signals: Mapping[str, Mapping[str, float]] = SIGNALS,
                 progress: Callable[[str], None] | None = None) -> dict:
    """Build one temporary store per corpus (the template corpus and each of `quality.EXTRA_CORPORA`,
    or only `corpus_path`), then ask its queries in lexical and hybrid mode (budget 2000, 10 hits)
    with the defaults and with each signal of `signals` turned off in turn.

    Args:
        corpora: names of EXTRA_CORPORA to measure beside the template corpus (default: all).
        signals: {signal name: {config key: value that turns it off}}.

    Returns:
        {"signals": {name: {key: value}}, "corpora": {corpus: {"default": {mode: {metric: v}},
         "bm25": {metric: v}, "off": {signal: {mode: {metric: v}}}}}}; metrics recall_at_1 and
        recall_at_5 over all the corpus's queries (figures as in `quality.evaluate`).

    Raises:
        KeyError: a name in `corpora` that EXTRA_CORPORA does not hold; MemsafeError from the api
        (a config key or value it refuses).
    """
    if corpus_path is not None:
        named = {"corpus": quality.load_corpus(corpus_path)}
    else:
        named = {"template": quality.load_corpus(None)}
        named |= {n: quality.shipped_corpus(n) for n in (quality.EXTRA_CORPORA if corpora is None else corpora)}
    out: dict = {"signals": {k: dict(v) for k, v in signals.items()}, "corpora": {}}
    for name, corpus in named.items():
        if progress:
            progress(f"{name}: building the store")
        with quality._scratch_db(None) as db:
            store = api.open_store(db).store
            try:
                ids = quality.build_store(store, corpus)
                bm25 = quality.bm25_reference(store, corpus, ids)["all"]
                row: dict = {"default": _figures(quality.evaluate(store, corpus, ids, modes=MODES, budgets=(2000,))),
                             "bm25": {k: bm25[k] for k in METRICS}, "off": {}}
                for signal, off in signals.items():
                    if progress:
                        progress(f"{name}: {signal} off")
                    for key, value in off.items():
                        api.config_set(store, key, str(value))
                    try:
                        report = quality.evaluate(store, corpus, ids, modes=MODES, budgets=(2000,))
                    finally:
                        for key in off:
                            api.config_reset(store, key)
                    row["off"][signal] = _figures(report)
            finally:
                store.close()
        out["corpora"][name] = row
    return out


def ablation_table(report: Mapping):
    """Rich table: one row per signal and mode, one column per corpus; each cell the change of
    R@1 / R@5 (points) when the signal is off (negative: the signal helps there), with the
    defaults and plain BM25 as the first rows."""
    from rich.table import Table

    from memsafe.render import keep_figures

    names = list(report["corpora"])
    table = Table(title="memsafe bench --ablate · R@1 / R@5 with each signal off, change in points",
                  caption="− : turning it off costs (the signal helps); + : the signal hurts there",
                  caption_justify="left", title_justify="left")
    table.add_column("signal", no_wrap=True)
    table.add_column("mode", no_wrap=True)
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)

    def pair(values: Mapping[str, float]) -> str:
        return f"{100 * values['recall_at_1']:.1f}/{100 * values['recall_at_5']:.1f}"

    def delta(off: Mapping[str, float], base: Mapping[str, float]) -> str:
        return "/".join(f"{100 * (off[k] - base[k]):+.1f}" for k in METRICS)

    table.add_row("bm25", "", *(pair(report["corpora"][n]["bm25"]) for n in names))
    for mode in MODES:
        table.add_row("defaults", mode, *(pair(report["corpora"][n]["default"][mode]) for n in names),
                      end_section=mode == MODES[-1])
    for signal in report["signals"]:
        for mode in MODES:
            table.add_row(signal if mode == MODES[0] else "", mode, *(
                delta(report["corpora"][n]["off"][signal][mode], report["corpora"][n]["default"][mode])
                for n in names))
    return keep_figures(table)
