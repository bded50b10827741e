"""Responsibility: telling a restatement from a change of fact. Two texts that read alike (a high
cosine) may still say opposite things: "use Node 18" and "do not use Node 18", "pin lib to v1.8"
and "... v1.9", a job at 02:00 and at 14:00, a commit and its revert, two commits with one
subject. `differences` names what sets two texts apart in those terms, so nothing that merges
near-duplicates joins them. Pure: no database, no model.

The rules are lexical and conservative: any difference in a negation (or an opposite verb such
as enable/disable), a number, a version, a date or time, an identifier (a hash, a path or file, a
ticket, a flag, code in backticks, a URL, a CamelCase or snake_case name), a changed capitalised
name or a one-word value swapped in the same sentence frame counts. A restatement (other word
order, inflection, case, punctuation, added or dropped filler words) has none.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

__all__ = ["Difference", "differences", "is_commit_text"]


@dataclass(frozen=True)
class Difference:
    """One way two texts differ. `kind` is one of negation, number, version, time, identifier,
    revert, commits, value; `detail` shows the two sides (`v1.8 / v1.9`), at most ~80 characters."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.detail})" if self.detail else self.kind


# -- what a text holds -----------------------------------------------------------------------------

_COMMIT = re.compile(r"^\s*git commit ([0-9a-f]{7,40})\b", re.IGNORECASE)
_REVERT = re.compile(r"^\s*(?:git commit [0-9a-f]{7,40}\b[^:\n]*:\s*)?(?:revert\b|reverts?:)"
                     r"|\bthis reverts commit\b", re.IGNORECASE)
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]{0,31}://\S+", re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\n]{1,120})`")
_MONTHS = ("jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|"
           "august|september|october|november|december")
_DAYS = "mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_TIME = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}(?:[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+\-]\d{2}:?\d{2})?)?\b"
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?(?![\w:])"
    r"|\b\d{1,2}\s?[ap]\.?m\.?(?!\w)"
    rf"|\b(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b(?:\.?,?\s+\d{{4}})?"
    rf"|\b(?:{_DAYS})s?\b|\b(?:{_MONTHS})\b(?:\s+\d{{4}})?"
    r"|\b(?:q[1-4]|h[12])\s?\d{4}\b|\b(?:19|20)\d{2}\b"
    r"|\b(?:today|tomorrow|yesterday|tonight|noon|midnight|weekly|daily|hourly|nightly|monthly|yearly|weekend)\b",
    re.IGNORECASE,
)
_HASH = re.compile(r"(?<![\w\-.])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}(?![\w\-])", re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+){1,3}(?:[\-+]?[a-z][a-z0-9.]*)?(?![\w.])|(?<![\w.])v\d+(?![\w.])",
                      re.IGNORECASE)
_TICKET = re.compile(r"(?<![\w#])#\d+\b|\b[A-Z][A-Z0-9]{1,9}-\d+\b|\b(?:gh|pr|issue)-?\d+\b", re.IGNORECASE)
_FLAG = re.compile(r"(?<![\w\-])--?[a-z][\w\-]*(?:=\S+)?", re.IGNORECASE)
_PATH = re.compile(r"(?<![\w])(?:~|\.{1,2})?(?:/[\w.\-]+)+/?|(?<![\w/])[\w.\-]+(?:/[\w.\-]+)+"
                   r"|(?<![\w/])[\w\-]+(?:\.[\w\-]+)*\.[a-z][a-z0-9]{0,5}\b", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
_HANDLE = re.compile(r"(?<![\w@])@[A-Za-z][\w\-]{1,38}")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:\s?(?:%|[kmgt]i?b|ms|s|min|h|x|px|mb|gb|kb))?(?![\w])",
                     re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_][\w'’\-]*|\d+[^\W\d_]+\w*", re.UNICODE)
# Numbers written as words read as their digits ("three times" is "3 times"); "one" is left out,
# it is as often a pronoun.
_NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero _ two three four five six seven eight nine ten eleven twelve".split()) if w != "_"}
_NUMBER_WORDS.update(twenty="20", thirty="30", forty="40", fifty="50", sixty="60", hundred="100", thousand="1000",
                     twice="2")

_NEGATIONS = frozenset(
    "not no never none nobody nothing nowhere neither nor cannot without don't doesn't didn't isn't aren't "
    "wasn't weren't won't wouldn't can't couldn't shouldn't mustn't haven't hasn't hadn't dont doesnt didnt "
    "isnt arent wasnt wont cant shouldnt avoid stop stopped".split()
)
# Words whose meaning is each other's opposite: one side holding one, the other its opposite
# (and neither both), says the opposite thing.
_OPPOSITES = [
    ("enable", "disable"), ("add", "remove"), ("allow", "deny"), ("allow", "block"), ("allow", "forbid"),
    ("accept", "reject"), ("include", "exclude"), ("start", "stop"), ("open", "close"), ("on", "off"),
    ("true", "false"), ("yes", "no"), ("increase", "decrease"), ("raise", "lower"), ("upgrade", "downgrade"),
    ("before", "after"), ("always", "never"), ("min", "max"), ("minimum", "maximum"), ("public", "private"),
    ("sync", "async"), ("synchronous", "asynchronous"), ("required", "optional"), ("install", "uninstall"),
    ("lock", "unlock"), ("pin", "unpin"), ("mount", "unmount"), ("show", "hide"), ("import", "export"),
    ("encrypt", "decrypt"), ("deprecate", "undeprecate"), ("merge", "split"), ("fast", "slow"),
    ("first", "last"), ("more", "less"), ("above", "below"), ("inside", "outside"), ("up", "down"),
    ("internal", "external"), ("success", "failure"), ("pass", "fail"), ("keep", "drop"), ("keep", "delete"),
    ("use", "avoid"), ("local", "remote"), ("server", "client"), ("left", "right"), ("old", "new"),
]
_FILLER = frozenset(
    """a an the this that these those is are was were be been being am it its it's we our us you your i my me
    they their them he she his her of to in on at by for from with as and or so then also just now here there
    please note notes should must will would can could may might do does did done has have had having
    which who what when where how why all any some each every very really please again still only""".split()
) - _NEGATIONS - {w for pair in _OPPOSITES for w in pair}
# Pairs of words that say the same thing (a swap of one for the other is a restatement).
_SAME = [
    frozenset(s.split()) for s in (
        "use run invoke call execute", "repo repository", "config configuration settings", "db database",
        "docs documentation", "dir directory folder", "deps dependencies", "pr pull-request",
        "big large", "small little", "fix fixes fixed repair", "remove delete", "begin start",
        "quick fast", "make create", "prod production", "dev development", "env environment",
        "app application", "auth authentication", "err error", "msg message", "info information",
    )
]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


def _stem(word: str) -> str:
    """A crude English stem (plural, -ing, -ed, -ly, -ion), so inflections read as one word."""
    w = word.strip("'-")
    for suffix in ("ations", "ation", "ingly", "ings", "ing", "edly", "ies", "ied", "ed", "es", "ly", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            if suffix in ("ies", "ied"):
                w += "y"
            break
    if len(w) > 4 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # running -> runn -> run
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]  # merge / merging -> merg
    return w


_OPPOSITE_STEMS = [(_stem(a), _stem(b)) for a, b in _OPPOSITES]
_SAME_STEMS = [frozenset(_stem(w) for w in group) for group in _SAME]
_FILLER_STEMS = frozenset(_stem(w) for w in _FILLER)
_NEGATION_STEMS = frozenset(_stem(w) for w in _NEGATIONS)


@dataclass
class _Facts:
    """What one text says in the terms `differences` compares."""

    commit: str | None
    revert: bool
    spans: dict[str, Counter]  # kind -> the values of that kind, folded
    words: list[str]  # the remaining words' stems, in order
    names: Counter  # capitalised words not at a sentence start (stems)
    negations: int
    spelled: dict[str, str]  # stem -> the word as first written (for the report)


def _read(text: str) -> _Facts:
    raw = unicodedata.normalize("NFKC", text)
    commit = _COMMIT.match(raw)
    revert = bool(_REVERT.search(raw))
    body = raw
    if commit:  # the hook's own header, not part of what the commit says
        body = raw[commit.end():]
    masked = body
    spans: dict[str, Counter] = {k: Counter() for k in ("time", "version", "number", "identifier")}

    def take(pattern: re.Pattern, kind: str, group: int = 0) -> None:
        nonlocal masked
        out = []
        last = 0
        for m in pattern.finditer(masked):
            value = m.group(group).strip()
            if not value:
                continue
            folded = " ".join(_fold(value).rstrip(".,;:").split())
            if kind == "time" and folded.endswith("days"):
                folded = folded[:-1]  # Tuesdays: every Tuesday
            spans[kind][folded] += 1
            out.append(masked[last:m.start()])
            out.append(" " * (m.end() - m.start()))
            last = m.end()
        out.append(masked[last:])
        masked = "".join(out)

    take(_URL, "identifier")
    take(_EMAIL, "identifier")
    take(_BACKTICK, "identifier", 1)
    take(_TIME, "time")
    take(_HASH, "identifier")
    take(_VERSION, "version")
    take(_TICKET, "identifier")
    take(_FLAG, "identifier")
    take(_PATH, "identifier")
    take(_HANDLE, "identifier")
    take(_NUMBER, "number")
    words: list[str] = []
    names: Counter = Counter()
    negations = 0
    spelled: dict[str, str] = {}
    for m in _WORD.finditer(masked):
        word = m.group(0)
        folded = _fold(word)
        if folded.endswith("n't") or folded in _NEGATIONS:
            negations += 1
            continue
        core = word.strip("'-")
        if folded in _NUMBER_WORDS:
            spans["number"][_NUMBER_WORDS[folded]] += 1
            continue
        if ("_" in core or (any(c.isupper() for c in core[1:]) and any(c.islower() for c in core))
                or any(c.isdigit() for c in core)):
            spans["identifier"][folded] += 1  # snake_case, CamelCase, node18
            continue
        stem = _stem(folded)
        spelled.setdefault(stem, folded)
        before = masked[max(0, m.start() - 3):m.start()]
        if core[:1].isupper() and not re.search(r"(?:^|[.!?:;\n\"'(\[*#>-]\s*)$", before) and len(core) > 1:
            names[stem] += 1
        words.append(stem)
    return _Facts(commit.group(1).lower() if commit else None, revert, spans, words, names, negations, spelled)


def is_commit_text(text: str) -> bool:
    """Whether `text` is a commit as the git hook stores it (`git commit <hash> ...: subject`)."""
    return bool(_COMMIT.match(text))


def _sides(a: Counter, b: Counter, limit: int = 3) -> str:
    left = ", ".join(sorted(a - b)[:limit]) or "–"
    right = ", ".join(sorted(b - a)[:limit]) or "–"
    return f"{left} / {right}"[:80]


def _same_meaning(x: str, y: str) -> bool:
    return any(x in group and y in group for group in _SAME_STEMS)


def differences(a: str, b: str, *, a_commit: bool = False, b_commit: bool = False) -> list[Difference]:
    """How texts `a` and `b` differ in fact (empty: one restates the other).

    Args:
        a, b: the two texts (any length; only their words are compared).
        a_commit, b_commit: the text is a commit (source git) even without the hook's
            `git commit <hash>` header.

    Returns:
        At most one `Difference` per kind, in the order revert, commits, negation, time, version,
        number, identifier, value.
    """
    fa, fb = _read(a), _read(b)
    out: list[Difference] = []
    if fa.revert != fb.revert:
        out.append(Difference("revert", "a commit and its revert" if (fa.commit or fb.commit) else
                              "one text reverts what the other says"))
    # two commit memories are two commits unless both name the same hash
    if (fa.commit or a_commit) and (fb.commit or b_commit) and not (fa.commit and fa.commit == fb.commit):
        detail = f"{fa.commit} / {fb.commit}" if fa.commit and fb.commit else "two commits"
        out.append(Difference("commits", detail))
    if fa.negations != fb.negations:
        out.append(Difference("negation", "one says not" if abs(fa.negations - fb.negations) == 1 else
                              f"{fa.negations} / {fb.negations} negations"))
    else:
        sa, sb = set(fa.words), set(fb.words)
        for x, y in _OPPOSITE_STEMS:
            if (x in sa and y in sb and y not in sa and x not in sb) or (y in sa and x in sb and x not in sa
                                                                        and y not in sb):
                left, right = (x, y) if x in sa else (y, x)
                out.append(Difference("negation", f"{fa.spelled[left]} / {fb.spelled[right]}"))
                break
    for kind in ("time", "version", "number", "identifier"):
        ca, cb = fa.spans[kind], fb.spans[kind]
        if set(ca) != set(cb):
            out.append(Difference(kind, _sides(ca, cb)))
    if any(d.kind == "negation" for d in out):
        return out  # an opposite verb is the value that changed
    if set(fa.names) != set(fb.names) and fa.names and fb.names:
        names_a = Counter({fa.spelled[k]: n for k, n in fa.names.items()})
        names_b = Counter({fb.spelled[k]: n for k, n in fb.names.items()})
        out.append(Difference("value", _sides(names_a, names_b)))
    else:
        swap = _swapped_word(fa.words, fb.words)
        if swap:
            out.append(Difference("value", f"{fa.spelled[swap[0]]} / {fb.spelled[swap[1]]}"))
    return out


def _swapped_word(a: list[str], b: list[str]) -> tuple[str, str] | None:
    """A content word of `a` replaced by another of `b` in the same frame ("colour is purple" /
    "colour is cyan"): the first such pair, or None."""
    ca = [w for w in a if w not in _FILLER_STEMS]
    cb = [w for w in b if w not in _FILLER_STEMS]
    matcher = difflib.SequenceMatcher(a=ca, b=cb, autojunk=False)
    shared = sum(size for _, _, size in matcher.get_matching_blocks())
    if shared < 2:
        return None
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace" or i2 - i1 != 1 or j2 - j1 != 1:
            continue
        x, y = ca[i1], cb[j1]
        if x in cb or y in ca or _same_meaning(x, y) or x.startswith(y) or y.startswith(x):
            continue  # a moved word, or one word said two ways
        return x, y
    return None
