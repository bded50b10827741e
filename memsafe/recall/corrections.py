"""Responsibility: whether a new memory corrects an earlier one (same subject, a changed value),
pure: no database, no model, no LLM.

A text is read as a *subject* (its content words) and its *values*: commands and code in
backticks or quotes, versions, numbers, clock times, dates, identifiers (`deploy.yml`,
`--flag`, `PAYMENTS_URL`), capitalised names after the first word, and whether it is negated
(`not`, `no longer`, `never`, `n't`). Words that only announce a change (`now`, `instead`,
`moved`, `switched`, `anymore`) belong to neither. A new text replaces an old one when their
subjects are nearly the same and something differs: a value, the negation, or (when neither
holds a value) one or two plain words in an otherwise equal sentence ("deploy with make ship" →
"deploy with make release"). Two facts about one thing ("the API server listens on 8080" /
"the API server logs to /var/log/api") differ in subject words and are not a correction.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from memsafe import textform
from memsafe.recall.terms import STOP_WORDS

# Words that announce a change rather than state the fact; neither subject nor value.
CHANGE_WORDS = frozenset(
    """now instead actually anymore longer moved move changed change switched switch replaced replace
    updated update correction corrected new newly since today currently rather than no-longer going
    forward henceforth please note""".split()
)
NEGATIONS = frozenset("not no never none nothing nobody neither cannot can't won't don't doesn't didn't isn't "
                      "aren't wasn't weren't shouldn't mustn't stopped dropped removed".split())

NUMBER_WORDS = frozenset("one two three four five six seven eight nine ten eleven twelve".split())
SUBJECT_MIN_OVERLAP = 0.6  # containment of the subject words when a value or the negation changed
PLAIN_MIN_OVERLAP = 0.5  # ... when only plain words changed (no value on either side)
PLAIN_MAX_CHANGED = 2  # at most this many plain words changed on each side
MAX_WORDS = 60  # a longer text is a note, not one fact: never read as a correction

_QUOTED = re.compile(r"`([^`]{1,200})`|\"([^\"]{1,200})\"|'([^'\s][^']{0,198}[^'\s])'")
_VALUE = re.compile(
    r"(?<![\w.])(?:v?\d+(?:[.:/-]\d+)+[a-z]*|\d+(?:[.,]\d+)?[a-z%]{0,3}"  # versions, times, dates, numbers
    r"|--?[a-z][\w-]*"  # command-line flags
    r"|[\w-]*[_./@][\w./@-]*\w"  # identifiers, paths, files, hosts
    r")(?![\w])",
    re.IGNORECASE,
)
_WORD = re.compile(r"[\w']+")
# A run of CJK characters has no spaces: read as its overlapping character pairs, as the word index
# does (`store.common.tokenizer`), so a clause of its own is many words, not one.
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def _words(text: str) -> list[str]:
    """The words of folded `text`: `_WORD` runs, each CJK run as its character bigrams."""
    out: list[str] = []
    for w in _WORD.findall(text):
        if _CJK_RUN.search(w):
            for part in re.split(f"({_CJK_RUN.pattern})", w):
                if _CJK_RUN.fullmatch(part):
                    out += [part] if len(part) == 1 else [part[i:i + 2] for i in range(len(part) - 1)]
                elif part:
                    out.append(part)
        else:
            out.append(w)
    return out
# A text that says it corrects something: "Correction: ...", "..., not 8", "no longer", "instead of".
_HEADED = re.compile(r"^\W*(?:correction|corrected|actually)\b", re.IGNORECASE)  # "Correction: ..."
_ANNOUNCED = re.compile(r"\bno longer\b|\binstead of\b|\bnot any ?more\b|\bwas wrong\b|,\s*not\s", re.IGNORECASE)
# A text that tells of the same thing happening once more is a new event: when only plain words
# differ it does not correct the old one ("rotated the keys again for the new vendor").
_REPEATED = re.compile(r"\bagain\b|\bonce more\b|\b(?:another|a second|a third) time\b|\bas well\b",
                       re.IGNORECASE)
ANNOUNCED_MIN_OVERLAP = 0.25  # containment of the subject words when the new text announces a correction
ANNOUNCED_MIN_SHARED = 2  # ... and at least this many subject words in common
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z0-9]+\b")


@dataclass(frozen=True)
class Reading:
    """A text read for comparison: `subject` content words (case-folded), `values` (case-folded),
    `shapes` {value: its shape, `shape_of`}, `negated`, `words` (how many words it has), `head`
    the values in its head (`HEAD_WORDS`): what the text is about, not a value it states."""

    subject: frozenset[str]
    values: frozenset[str]
    negated: bool
    words: int
    shapes: dict[str, str]
    head: frozenset[str] = frozenset()


HEAD_WORDS = 4  # a text's head: its words before a first ':' among these many ("rich Console.export_svg: ...")


def shape_of(value: str, quoted: bool = False, name: bool = False) -> str:
    """The kind of a value, so only like replaces like (a path does not correct a number):
    'code' (in backticks or quotes), 'name', 'number' (digits, maybe a unit), 'time'
    (digits with separators: versions, clock times, dates) or 'identifier'."""
    if quoted:
        return "code"
    if name:
        return "name"
    if re.fullmatch(r"\d+(?:[.,]\d+)?[a-z%]{0,3}", value):
        return "number"
    if re.fullmatch(r"v?\d+(?:[.:/-]\d+)+[a-z]*", value):
        return "time"
    return "identifier"


@functools.lru_cache(maxsize=2048)
def read(text: str) -> Reading:
    """Read `text` into subject words, values and negation (see the module docstring). Kept for
    the texts read last: a remember compares its text with each of its best matches, and the
    same memories are the best matches of many remembers in a row. The result is shared: do not
    change its `shapes`."""
    shapes: dict[str, str] = {}
    for m in _QUOTED.finditer(text):
        shapes[" ".join(textform.fold(next(g for g in m.groups() if g)).split())] = "code"
    rest = _QUOTED.sub(" ", text)
    for m in _VALUE.finditer(rest):
        value = textform.fold(m.group(0)).rstrip(".:")
        shapes.setdefault(value, shape_of(value))
    plain = _VALUE.sub(" ", rest)
    names = {textform.fold(m.group(0)) for m in _NAME.finditer(plain)} - STOP_WORDS
    for n in names:
        shapes.setdefault(n, "name")
    for w in _WORD.findall(textform.fold(plain)):
        if w in NUMBER_WORDS:  # "one approval" / "two approvals"
            shapes.setdefault(w, "number")
    values = set(shapes)
    first = text.split(":", 1)[0] if ":" in " ".join(text.split()[:HEAD_WORDS]) else ""
    head = frozenset(v for v in values if first and v in textform.fold(first))
    words = [w.removesuffix("'s") for w in _words(textform.fold(text))]
    negated = any(w in NEGATIONS or w.endswith("n't") for w in words) or "no longer" in " ".join(words)
    subject = frozenset(w for w in (w.removesuffix("'s") for w in _words(textform.fold(plain)))
                        if w not in STOP_WORDS and w not in NUMBER_WORDS
                        and w not in CHANGE_WORDS and w not in NEGATIONS and not w.endswith("n't")
                        and w not in names and not w.isdigit())
    return Reading(subject, frozenset(values), negated, len(words), shapes, head)


@dataclass(frozen=True)
class Verdict:
    """Why a new text replaces an old one: `why` in a few words (`"`make ship` → `make release`"`,
    `"now negated"`), `overlap` the share of the smaller subject the other holds, in [0, 1]."""

    why: str
    overlap: float


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _containment(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of the smaller word set that the other holds (a correction often drops or adds a
    clause: "from the repo root")."""
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def replaces(new: str, old: str) -> Verdict | None:
    """Whether `new` updates `old`: the same subject with a changed value, negation or (neither
    holding a value) one or two changed plain words. None when not (or when either is longer than
    MAX_WORDS words, or they say the same)."""
    a, b = read(old), read(new)
    if a.words > MAX_WORDS or b.words > MAX_WORDS or not a.subject or not b.subject:
        return None
    if a.head != b.head:  # two texts about two things (`Console.export_html:` / `Console.export_svg:`)
        return None
    overlap = _containment(a.subject, b.subject)
    gone, came = sorted(a.values - b.values), sorted(b.values - a.values)
    alike = {a.shapes[v] for v in gone} & {b.shapes[v] for v in came}
    if alike:  # name the changed values of one kind (a number for a number), not every difference
        gone, came = [v for v in gone if a.shapes[v] in alike], [v for v in came if b.shapes[v] in alike]
    # one side may add or drop a clause ("since the upgrade"), not both change their words
    one_sided = not (a.subject - b.subject and b.subject - a.subject) \
        or max(len(a.subject - b.subject), len(b.subject - a.subject)) <= 1
    if overlap >= SUBJECT_MIN_OVERLAP and one_sided:
        if gone and came and alike:
            return Verdict(f"{_shown(gone)} → {_shown(came)}", round(overlap, 3))
        if came and b.negated and not a.negated:  # "use `make release` now; `make ship` was removed"
            return Verdict(f"{_shown(sorted(a.values & b.values))} → {_shown(came)}", round(overlap, 3))
        if a.negated != b.negated:
            return Verdict("now negated" if b.negated else "no longer negated", round(overlap, 3))
    shared = a.subject & b.subject
    # announced: headed "Correction: ...", or a phrase of change naming a value the old text holds
    announced = _HEADED.search(new) or (_ANNOUNCED.search(new) and a.values & b.values)
    if announced and overlap >= ANNOUNCED_MIN_OVERLAP and len(shared) >= ANNOUNCED_MIN_SHARED:
        if came:
            return Verdict(f"{_shown(sorted(a.values & b.values) or gone)} → {_shown(came)}", round(overlap, 3))
        if a.negated != b.negated:
            return Verdict("now negated" if b.negated else "no longer negated", round(overlap, 3))
    said_change = bool(set(_WORD.findall(textform.fold(new))) & CHANGE_WORDS) or announced
    if said_change and not _REPEATED.search(new) and not a.values and not b.values and a.negated == b.negated \
            and _jaccard(a.subject, b.subject) >= PLAIN_MIN_OVERLAP:
        lost, gained = a.subject - b.subject, b.subject - a.subject
        if lost and gained and len(lost) <= PLAIN_MAX_CHANGED and len(gained) <= PLAIN_MAX_CHANGED \
                and len(a.subject & b.subject) >= 2:
            return Verdict(f"{_shown(sorted(lost))} → {_shown(sorted(gained))}", round(overlap, 3))
    return None


# A text that says something changed: a verb of change, "instead", "no longer", "from X to Y", "now".
# Read on any text (a prompt that gives a new value while it asks for something, `scoring.current_first`).
_CHANGE = re.compile(
    r"\b(?:mov(?:e|ed|es|ing)|switch(?:ed|es|ing)?|chang(?:e|ed|es|ing)|instead|upgrad(?:e|ed|es|ing)|"
    r"bump(?:ed|ing|s)?|becomes?|became|leaving|replac(?:e|ed|es|ing)|no longer|any ?more|after all|"
    r"goes (?:up|down)|rais(?:e|ed|es|ing)|lower(?:ed|s|ing)|increas(?:e|ed|es|ing)|decreas(?:e|ed|es|ing)|"
    r"from \S+(?: \S+)? to|now)\b",
    re.IGNORECASE,
)
CHANGE_CHARS = 2000  # only the head of a long text is read: the change is said where the fact is


def announces_change(text: str) -> bool:
    """True if `text` says that something changed ("we moved from Postgres 14 to 16", "deploys
    are now Thursdays only", "3 days before instead of 2"), in its first CHANGE_CHARS characters."""
    return _CHANGE.search(text[:CHANGE_CHARS]) is not None


def _shown(values: list[str]) -> str:
    return ", ".join(f"`{v}`" for v in values[:3]) + (", …" if len(values) > 3 else "")
