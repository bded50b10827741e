"""Responsibility: `memsafe bench --dataset locomo FILE`: recall quality on labelled long
conversations in the LoCoMo format, so anyone can check memsafe on their own labelled data.

LoCoMo: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024 (github.com/snap-research/LoCoMo, licence CC BY-NC 4.0: memsafe ships none of it; the
user gives the file).

Protocol (fixed, so figures of different versions compare):

- One fresh store per conversation; one memory per dialogue turn, text `"<speaker>: <text>"`,
  created at its session's date-time. A turn whose text repeats an earlier turn of the same
  conversation maps to the memory already stored.
- Questions are the raw `question` strings, asked "now" = the last session's date-time, in
  three modes (lexical, vector, hybrid), each on its own copy of the built store. Recalls run as
  a user's do, in the dataset's order (a recall writes nothing, so no recall
  changes a later one's ranking).
- Recall@k = |evidence ∩ top k| / |evidence| per question, averaged; Hit@5 = share of
  questions with any evidence in the top 5; MRR@10 = mean 1/rank of the first evidence in the
  top 10 (0 when none). "overall" = categories 1–4 (1 multi-hop, 2 temporal, 3 open-domain,
  4 single-hop); category 5 (adversarial) is reported on its own; "dated" = questions of
  categories 1–4 that name a month or a year.
- Evidence ids are normalised: `"D8:6; D9:17"` and several ids in one string are split,
  `"D:11:26"` → `D11:26`, `"D30:05"` → `D30:5`; ids absent from the conversation are dropped
  and questions left with no evidence are skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from memsafe import api, clock, settings
from memsafe.bench.quality import MODES, RANKING_KEYS
from memsafe.bench.timing import percentile
from memsafe.errors import Duplicate

KS = (1, 3, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
LIMIT = 10
BUDGET = 100_000  # large enough that the top 10 turns always fit: the ranking is what is measured
Progress = Callable[[int, int], None]  # (questions asked, questions to ask)

_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_MONTH_OR_YEAR = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


def load(path: str | Path) -> list[dict]:
    """Read a LoCoMo-format JSON file: a list of {sample_id, conversation, qa}.

    Raises:
        ValueError: not JSON, or not in the LoCoMo format (the message names what is missing).
        OSError: the file cannot be read.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a list of conversations in the LoCoMo format")
    for n, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("conversation"), dict) or not isinstance(
            item.get("qa"), list
        ):
            raise ValueError(f"{path}: item {n} has no 'conversation' object and 'qa' list (LoCoMo format)")
    return data


def session_time(text: str) -> datetime:
    """A LoCoMo session date-time such as `"1:56 pm on 8 May, 2023"` as aware UTC.

    Raises:
        ValueError: not in that form and not readable by `dateparser` either.
    """
    raw = " ".join(text.split())
    try:
        parsed = datetime.strptime(raw, "%I:%M %p on %d %B, %Y")
    except ValueError:
        import dateparser

        read = dateparser.parse(raw)
        if read is None:
            raise ValueError(f"cannot read the session time {text!r}") from None
        parsed = read
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def sessions(conversation: Mapping) -> list[tuple[datetime, list[dict]]]:
    """[(session time, turns)] in session order."""
    out = []
    for key, turns in conversation.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and conversation.get(f"{key}_date_time"):
            out.append((int(m.group(1)), session_time(conversation[f"{key}_date_time"]), turns))
    return [(t, turns) for _, t, turns in sorted(out, key=lambda x: x[0])]


def evidence_ids(raw: Sequence[str], known: Mapping[str, int]) -> list[str]:
    """Normalised evidence ids that exist in the conversation (`known`), in order, no repeats."""
    out: dict[str, None] = {}
    for item in raw or ():
        for a, b in _ID.findall(str(item)):
            dia = f"D{int(a)}:{int(b)}"
            if dia in known:
                out.setdefault(dia, None)
    return list(out)


@contextmanager
def _now(at: datetime) -> Iterator[None]:
    """Fix memsafe's clock (MEMSAFE_NOW) for the duration: stored times and "now" follow it. Local
    time is UTC meanwhile: the session times are read as UTC, and the dates a question names
    ("on 7 May 2023", read in local time) are of the same calendar, whatever this machine's TZ."""
    import time

    old = {var: os.environ.get(var) for var in ("MEMSAFE_NOW", "TZ")}
    os.environ.update(MEMSAFE_NOW=clock.to_iso(at), TZ="UTC")
    settings.reload()
    time.tzset()
    try:
        yield
    finally:
        for var, value in old.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        settings.reload()
        time.tzset()


def build_store(db: str, item: Mapping) -> tuple[dict[str, int], datetime]:
    """Build a store at `db` from one conversation: one memory per turn at its session's time.
    Returns ({dia_id: memory id}, the last session's time)."""
    opened = api.open_store(db)
    store = opened.store
    ids: dict[str, int] = {}
    last = None
    try:
        for at, turns in sessions(item["conversation"]):
            last = at
            with _now(at):
                for turn in turns:
                    text = str(turn.get("text") or "").strip()
                    if not text or not turn.get("dia_id"):
                        continue
                    content = f"{turn.get('speaker', '?')}: {text}"
                    try:
                        ids[turn["dia_id"]] = api.remember(store, content, kind="conversation", embed_now=False).id
                    except Duplicate as dup:
                        ids[turn["dia_id"]] = dup.existing_id
        api.backfill(store, limit=None)
    finally:
        store.close()
    if last is None:
        raise ValueError(f"conversation {item.get('sample_id', '?')} has no dated session")
    return ids, last


def _score(ranked: Sequence[int], relevant: set[int]) -> dict[str, float]:
    out = {f"r@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}
    out["hit@5"] = float(bool(relevant & set(ranked[:5])))
    first = next((n for n, m in enumerate(ranked[:10], 1) if m in relevant), None)
    out["mrr@10"] = 1.0 / first if first else 0.0
    return out


def _category_is(category: int) -> Callable[[dict], bool]:
    """Whether a scored question row is of LoCoMo `category`."""
    return lambda r: r["_category"] == category


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {k: round(100 * sum(r[k] for r in rows) / len(rows), 1) for k in rows[0]}


def questions(item: Mapping, ids: Mapping[str, int]) -> list[dict]:
    """The conversation's answerable questions: {question, category, evidence [memory ids], dated}."""
    out = []
    for qa in item["qa"]:
        dias = evidence_ids(qa.get("evidence", ()), ids)
        text = str(qa.get("question") or "").strip()
        if not dias or not text:
            continue
        category = int(qa.get("category", 0) or 0)
        out.append({
            "question": text, "category": category, "evidence": sorted({ids[d] for d in dias}),
            "dated": category in (1, 2, 3, 4) and bool(_MONTH_OR_YEAR.search(text)),
        })
    return out


def run_locomo(path: str | Path, *, modes: Sequence[str] = MODES, config: Mapping[str, str] | None = None,
               progress: Progress | None = None, limit_conversations: int | None = None) -> dict:
    """Build one store per conversation and score every answerable question in each mode.

    Returns:
        {"dataset": {path, conversations, turns, questions: {category: n}}, "config": {...},
         "modes": {mode: {"overall": {r@1, r@3, r@5, r@10, hit@5, mrr@10}, "adversarial": {...},
         "dated": {...}, "categories": {name: {...}}, "latency_ms_p50", "latency_ms_p95"}},
         "seconds"}; figures in percent (0–100), latency in ms.

    Raises:
        ValueError / OSError: the file cannot be read or is not in the LoCoMo format.
        MemsafeError subclasses from the api.
    """
    started = time.perf_counter()
    data = load(path)[:limit_conversations]
    per_mode: dict[str, list[dict]] = {m: [] for m in modes}
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    turns = 0
    counts: dict[str, int] = {}
    effective_config: dict = {}
    with tempfile.TemporaryDirectory(prefix="memsafe-locomo-") as tmp:
        built = []
        for n, item in enumerate(data):
            base = str(Path(tmp) / f"conv{n}.db")
            ids, last = build_store(base, item)
            if config:
                opened = api.open_store(base)
                for key, value in config.items():
                    api.config_set(opened.store, key, str(value))
                opened.store.close()
            qs = questions(item, ids)
            turns += len(ids)
            built.append((base, last, qs))
        total = sum(len(qs) for _, _, qs in built) * len(modes)
        done = 0
        for base, last, qs in built:
            for q in qs:
                name = "adversarial" if q["category"] == 5 else "overall"
                counts[name] = counts.get(name, 0) + 1
            for mode in modes:
                db = f"{base}.{mode}.db"
                shutil.copyfile(base, db)
                opened = api.open_store(db)
                store = opened.store
                try:
                    effective_config = _ranking_config(store)
                    with _now(last):
                        api.recall(store, "warm up", mode=mode)
                        for q in qs:
                            t0 = time.perf_counter()
                            result = api.recall(store, q["question"], mode=mode, budget=BUDGET, limit=LIMIT)
                            latencies[mode].append((time.perf_counter() - t0) * 1000)
                            row = _score([h.memory.id for h in result.hits], set(q["evidence"]))
                            per_mode[mode].append({**row, "_category": q["category"], "_dated": q["dated"]})
                            done += 1
                            if progress:
                                progress(done, total)
                finally:
                    store.close()
    report: dict = {"dataset": {"path": str(path), "conversations": len(data), "turns": turns, "questions": counts},
                    "config": effective_config, "modes": {}}
    for mode, rows in per_mode.items():
        def pick(keep: Callable[[dict], bool], rows: list[dict] = rows) -> dict:
            return _mean([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows if keep(r)])

        report["modes"][mode] = {
            "overall": pick(lambda r: r["_category"] in (1, 2, 3, 4)),
            "adversarial": pick(lambda r: r["_category"] == 5),
            "dated": pick(lambda r: r["_dated"]),
            "categories": {CATEGORIES.get(c, str(c)): pick(_category_is(c))
                           for c in sorted({r["_category"] for r in rows})},
            "latency_ms_p50": round(percentile(latencies[mode], 0.5), 2),
            "latency_ms_p95": round(percentile(latencies[mode], 0.95), 2),
        }
    report["dataset"]["dated_questions"] = sum(r["_dated"] for r in next(iter(per_mode.values()), []))
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def _ranking_config(store) -> dict:
    return {k: v["value"] for k, v in api.config_list(store).items() if k.startswith(RANKING_KEYS)}


def locomo_table(report: dict):
    """Rich table: one row per group (overall, each category, adversarial, dated) × mode."""
    from rich.table import Table

    d = report["dataset"]
    table = Table(
        title=(f"memsafe bench --dataset locomo · {d['conversations']} conversations, {d['turns']} turns · "
               f"{d['questions'].get('overall', 0)} questions in categories 1–4, "
               f"{d['questions'].get('adversarial', 0)} adversarial, {d.get('dated_questions', 0)} dated"),
        caption="figures in %; latency: in-process recall, model warm (ms)",
        caption_justify="left", title_justify="left",
    )
    for name in ("group", "mode", "R@1", "R@3", "R@5", "R@10", "Hit@5", "MRR@10"):
        table.add_column(name, justify="left" if name in ("group", "mode") else "right", no_wrap=True)
    modes = report["modes"]
    first = next(iter(modes.values()))
    groups = ["overall", *first["categories"], "dated"]
    for group in groups:
        for n, mode in enumerate(modes):
            data = modes[mode]
            row = data.get(group) or data["categories"].get(group) or {}
            if not row:
                continue
            table.add_row(group if n == 0 else "", mode,
                          *(f"{row[k]:.1f}" for k in ("r@1", "r@3", "r@5", "r@10", "hit@5", "mrr@10")),
                          end_section=n == len(modes) - 1)
    for mode, data in modes.items():
        table.add_row("latency", mode, f"p50 {data['latency_ms_p50']:.1f}", f"p95 {data['latency_ms_p95']:.1f}",
                      "", "", "", "")
    return table
