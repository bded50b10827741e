"""Responsibility: the decay policy and the pure planning of a decay run (no database, no clock:
`now` is always passed in). `api.lifecycle.decay` reads rows, calls `plan`, and writes.

The model, in one place:

* Policy table (`DEFAULT_POLICY`, overridable with config key `decay_policy`): per kind a
  half-life H (days) and a floor F (the lowest strength decay can push a memory to). Memories
  tagged `pinned`, `core` or `identity` are never decayed.
* Initial strength  S0 = clamp(0.25 + 0.5·importance + 0.25·confidence, 0, 1)
  (defaults importance 0.5, confidence 0.8 give 0.7).
* Effective half-life  H_eff = H × (1 + ln(1 + access_count)) × (1 + 0.25·min(links, 4)) × review,
  with links = the memory's connected graph entities (in a relation, or shared with another
  memory) and review = 1 + log2(1 + stability / S1)
  after `confirm` (stability from the FSRS model, S1 = 2.3065 d, FSRS-6's stability after a first
  "Good"; review = 1 for a never-confirmed memory).
* The bank B counts elapsed half-lives of idleness since the last real access, a use
  (`last_accessed_at`: `get` or MCP `get_memory`, `confirm`, or an edit; being returned by
  recall is not one, docs/recall.md). Each run adds (now − last check) / H_eff to B, so time
  spent at one rate is never re-priced at another, and nothing but a use resets it: any other
  read (list, history, time travel, recall, the web page) forgives nothing. Strength  S = max(F, S0 · 2^(−B)): it halves
  after each half-life of idleness.
* Levels by strength: 0 full text; S < 0.35 → 1 extractive summary; S < 0.2 → 2 first sentence
  plus entity names; S < 0.1 → 3 archived. Levels only rise (restore brings a memory back), a
  run applies every owed level in order, and a floor at or above a threshold caps the level.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memsafe.errors import InvalidInput

PROTECTED_TAGS = frozenset({"pinned", "core", "identity"})
LEVEL_THRESHOLDS = (0.35, 0.20, 0.10)  # strength below [k-1] → level k
LEVEL_NAMES = {0: "full", 1: "summary", 2: "brief", 3: "archived"}
FSRS_FIRST_STABILITY = 2.3065  # days; FSRS-6 default w[2] (stability after a first "Good")


@dataclass(frozen=True)
class PolicyRow:
    """Decay policy for one kind: half-life (days) and floor (minimum strength, 0–1)."""

    kind: str
    half_life_days: float
    floor: float


DEFAULT_POLICY: dict[str, PolicyRow] = {
    row.kind: row
    for row in (
        #         kind            half-life  floor   → deepest level the floor allows
        PolicyRow("ephemeral",       10.0,   0.00),  # archived
        PolicyRow("task",            30.0,   0.00),  # archived
        PolicyRow("conversation",    45.0,   0.00),  # archived
        PolicyRow("general",         60.0,   0.05),  # archived
        PolicyRow("preference",      90.0,   0.20),  # summary at most
        PolicyRow("decision",       105.0,   0.20),  # summary at most
        PolicyRow("fact",           120.0,   0.12),  # brief at most
    )
}


def parse_policy(text: str | None) -> dict[str, PolicyRow]:
    """The effective policy: defaults with overrides from config `decay_policy`.

    Format: comma-separated `KIND.half_life=DAYS` / `KIND.floor=STRENGTH`, e.g.
    `fact.half_life=150, task.floor=0.1`. Empty means the defaults.

    Raises:
        InvalidInput: unknown kind or field, or a value out of range (half-life 0.1–36500 days,
            floor 0–0.99).
    """
    policy = dict(DEFAULT_POLICY)
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, raw = part.partition("=")
        kind, dot, what = name.strip().partition(".")
        if not sep or not dot or kind not in policy or what not in ("half_life", "floor"):
            raise InvalidInput(
                f"bad decay_policy entry {part!r}; use KIND.half_life=DAYS or KIND.floor=STRENGTH "
                f"with KIND one of {', '.join(DEFAULT_POLICY)}"
            )
        try:
            value = float(raw)
        except ValueError:
            raise InvalidInput(f"bad number in decay_policy entry {part!r}") from None
        row = policy[kind]
        if what == "half_life":
            if not 0.1 <= value <= 36500:
                raise InvalidInput(f"{kind}.half_life must be between 0.1 and 36500 days, got {raw.strip()}")
            policy[kind] = PolicyRow(kind, value, row.floor)
        else:
            if not 0.0 <= value <= 0.99:
                raise InvalidInput(f"{kind}.floor must be between 0 and 0.99, got {raw.strip()}")
            policy[kind] = PolicyRow(kind, row.half_life_days, value)
    return policy


def check_policy(text: str) -> str:
    """Validate a `decay_policy` config value (for settings). Returns it unchanged."""
    parse_policy(text)
    return text


def initial_strength(importance: float, confidence: float) -> float:
    """S0 = clamp(0.25 + 0.5·importance + 0.25·confidence, 0, 1)."""
    return min(1.0, max(0.0, 0.25 + 0.5 * importance + 0.25 * confidence))


def review_factor(stability: float | None) -> float:
    """Half-life multiplier from review stability (days, FSRS): 1 + log2(1 + stability / S1);
    1 when never reviewed."""
    if not stability or stability <= 0:
        return 1.0
    return 1.0 + math.log2(1.0 + stability / FSRS_FIRST_STABILITY)


def effective_half_life(half_life_days: float, access_count: int, links: int, stability: float | None) -> float:
    """H_eff (days) = H × (1 + ln(1 + access_count)) × (1 + 0.25·min(links, 4)) × review_factor."""
    return (
        half_life_days
        * (1.0 + math.log1p(max(0, access_count)))
        * (1.0 + 0.25 * min(max(0, links), 4))
        * review_factor(stability)
    )


def strength(s0: float, bank: float, floor: float) -> float:
    """S = max(floor, S0 · 2^(−bank)), bank in elapsed half-lives."""
    return max(floor, s0 * 0.5 ** max(0.0, bank))


def level_for(s: float) -> int:
    """The decay level a strength calls for (0–3)."""
    level = 0
    for k, threshold in enumerate(LEVEL_THRESHOLDS, start=1):
        if s < threshold:
            level = k
    return level


def _days(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 86400.0


@dataclass
class MemoryPlan:
    """What decay does to one memory at one instant.

    Attributes:
        bank: elapsed half-lives after this run; strength: S after this run (0–1).
        idle_days: days since the last real access (else creation).
        half_life_days: H_eff in days; to_level > from_level means compress/archive.
        write_bank: the bank or check time changes (bookkeeping only, no content change).
    """

    id: int
    kind: str
    from_level: int
    to_level: int
    strength: float
    bank: float
    idle_days: float
    half_life_days: float
    floor: float
    protected: bool = False
    write_bank: bool = False
    reason: str = ""

    @property
    def changes_level(self) -> bool:
        return self.to_level > self.from_level


def plan_memory(row: dict, policy: dict[str, PolicyRow], now: datetime, parse) -> MemoryPlan:
    """Plan one memory. `row` has the keys of `Store.decay_rows`; `parse` turns a stored time
    into an aware datetime (clock.parse_iso). Pure: same inputs, same plan."""
    pol = policy.get(row["kind"]) or policy["general"]
    if PROTECTED_TAGS.intersection(row.get("tags") or ()):
        return MemoryPlan(row["id"], row["kind"], row["decay_level"], row["decay_level"], 1.0,
                          row["decay_bank"], 0.0, math.inf, pol.floor, protected=True,
                          reason="protected tag: never decayed")
    anchor = parse(row["last_accessed_at"] or row.get("happened_at") or row["created_at"])  # event time
    checked = parse(row["decay_checked_at"]) if row["decay_checked_at"] else None
    if checked is None or checked < anchor:
        start, base = anchor, 0.0  # a real access since the last run: the bank restarts there
    else:
        start, base = checked, float(row["decay_bank"])
    h_eff = effective_half_life(pol.half_life_days, row["access_count"], row.get("degree", 0), row["stability"])
    bank = base + max(0.0, _days(start, now)) / h_eff
    s0 = initial_strength(row["importance"], row["confidence"])
    s = strength(s0, bank, pol.floor)
    to_level = max(row["decay_level"], level_for(s))
    idle = max(0.0, _days(anchor, now))
    plan = MemoryPlan(
        row["id"], row["kind"], row["decay_level"], to_level, s, bank, idle, h_eff, pol.floor,
        write_bank=(bank != row["decay_bank"] or checked != now),
    )
    if plan.changes_level:
        plan.reason = (
            f"idle {idle:.0f} d; strength {s:.3f} < {LEVEL_THRESHOLDS[to_level - 1]:.2f} "
            f"({row['kind']}: half-life {h_eff:.0f} d, floor {pol.floor:.2f})"
        )
    return plan


@dataclass
class PolicyView:
    """The policy as users see it (`memsafe decay --policy`)."""

    rows: list[PolicyRow]
    protected_tags: list[str]
    thresholds: dict[str, float]
    formula: list[str] = field(default_factory=list)


def policy_view(policy: dict[str, PolicyRow]) -> PolicyView:
    """The effective policy with its thresholds and formulas, for display."""
    return PolicyView(
        rows=list(policy.values()),
        protected_tags=sorted(PROTECTED_TAGS),
        thresholds={LEVEL_NAMES[k]: t for k, t in enumerate(LEVEL_THRESHOLDS, start=1)},
        formula=[
            "S0 = 0.25 + 0.5*importance + 0.25*confidence",
            "H_eff = half_life * (1 + ln(1 + accesses)) * (1 + 0.25*min(links, 4)) * (1 + log2(1 + stability/2.3065))",
            "strength = max(floor, S0 * 2^(-idle/H_eff)); idle since the last real access, banked between runs",
        ],
    )


# ---------------------------------------------------------------------------------------------
# Compression (levels 1 and 2). Pure text functions.

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
_ENTITY = re.compile(
    r"(?<![\w/.:-])(?:[A-Za-z][\w+.-]*://[^\s,;)]+"  # URLs
    r"|[\w.-]*/[\w./-]+"  # paths
    r"|[A-Z][\w+#.-]*[\w+#]"  # capitalised names
    r"|[A-Za-z_][\w-]*\d[\w.-]*"  # identifiers with digits (versions, hosts)
    r"|\w+\.\w{1,5})(?![\w/-])"  # file names
)
_STOP = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with we "
    "our you your i they them not but if so do does did can could should would".split()
)
MAX_BRIEF_WORDS = 40


def sentences(text: str) -> list[str]:
    """Split text into sentences (after . ! ? followed by space, or at line breaks)."""
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def _clip_words(text: str, n: int) -> str:
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n]) + " …"


def summarize(text: str) -> str:
    """Level 1: an extractive summary keeping the top ⌈40 %⌉ of sentences, in their original order.

    Score of a sentence (Luhn 1958, "The automatic creation of literature abstracts", with length
    normalisation): Σ over its content words of that word's frequency in the whole text, divided
    by √(number of content words in the sentence); the first sentence gets +∞ (always kept,
    it usually says what the memory is about). A single sentence is clipped to 40 words.
    """
    parts = sentences(text)
    if len(parts) <= 1:
        return _clip_words(text.strip(), MAX_BRIEF_WORDS)
    tf: dict[str, int] = {}
    words_of = []
    for p in parts:
        ws = [w for w in _WORD.findall(p.lower()) if w not in _STOP]
        words_of.append(ws)
        for w in ws:
            tf[w] = tf.get(w, 0) + 1
    scores = []
    for i, ws in enumerate(words_of):
        s = sum(tf[w] for w in ws) / math.sqrt(len(ws)) if ws else 0.0
        scores.append(math.inf if i == 0 else s)
    keep = max(1, math.ceil(len(parts) * 0.4))
    chosen = sorted(sorted(range(len(parts)), key=lambda i: (-scores[i], i))[:keep])
    return " ".join(parts[i] for i in chosen)


def entity_names(text: str) -> list[str]:
    """Names worth keeping from a text (heuristic, used when the graph knows none): capitalised
    words not at a sentence start, identifiers with digits (versions, ids), paths and file names."""
    found: dict[str, None] = {}
    for part in sentences(text):
        first = True
        for m in _ENTITY.finditer(part):
            name = m.group(0).rstrip(".")
            if first and m.start() == 0 and name[:1].isupper() and not any(c.isdigit() for c in name):
                first = False
                continue
            first = False
            if name.lower() not in _STOP and len(name) > 1:
                found.setdefault(name, None)
    return list(found)


def brief(text: str, names: Sequence[str] = ()) -> str:
    """Level 2: the first sentence (at most 40 words) plus the entity names the rest mentions:
    `First sentence. [entities: A, B]`. `names` (from the graph) win over the heuristic."""
    parts = sentences(text) or [text.strip()]
    head = _clip_words(parts[0], MAX_BRIEF_WORDS)
    pool = list(names) or entity_names(text)
    extra = [n for n in dict.fromkeys(pool) if n not in head][:12]
    return head + (f" [entities: {', '.join(extra)}]" if extra else "")


def compress(original: str, level: int, names: Sequence[str] = ()) -> str:
    """The text a memory holds at `level` (0 and 3 keep the previous text), from its original."""
    if level == 1:
        return summarize(original)
    if level == 2:
        return brief(original, names)
    return original
