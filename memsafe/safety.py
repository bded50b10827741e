"""Responsibility: finding credentials in text before it is stored, and redacting them.

Detection is done by Yelp's `detect-secrets` library (its regex plugins for cloud keys, private
key blocks, GitHub/GitLab/Slack/Stripe/OpenAI/... tokens, JWTs, credentials in URLs, and its
quoted `keyword = "value"` detector, with its false-positive filters), run in process on the
text line by line (no files). Its high-entropy-string plugins are NOT used: in developer prose
they flag commit hashes, digests and ordinary words. Instead, four narrow rules here cover what
the library misses in free text, each gated by the library's own filters and a Shannon-entropy
check:

- unquoted secret assignments (`DB_PASSWORD=S3cr3t...`, `api_key: a8f5f1...`),
- secrets written as prose (`the db password is Xk9#mP2q...`, `aws secret access key wJalr...`),
- bearer tokens (`Authorization: Bearer <token>`),
- a few newer token formats (GitHub fine-grained `github_pat_...`, Google `AIza...`,
  Anthropic `sk-ant-...`).

`scan(text)` returns `Finding`s (type, offsets, line; never the secret itself, so a finding may
be logged); `redact(text)` replaces each finding with `[REDACTED:<type>]`. A whole private key
block (BEGIN ... END) is redacted, not just its header line.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Finding", "scan", "redact", "describe"]

# detect-secrets plugins used (its entropy plugins and the public-IP plugin are left out: noise in prose).
_PLUGINS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
    "CloudantDetector", "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector",
    "IbmCloudIamDetector", "IbmCosHmacDetector", "JwtTokenDetector", "KeywordDetector",
    "MailchimpDetector", "NpmDetector", "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector",
    "SendGridDetector", "SlackDetector", "SoftlayerDetector", "SquareOAuthDetector", "StripeDetector",
    "TelegramBotTokenDetector", "TwilioKeyDetector",
)
_FILTERS = tuple(
    "detect_secrets.filters.heuristic." + name
    for name in (
        "is_indirect_reference", "is_likely_id_string", "is_not_alphanumeric_string", "is_potential_uuid",
        "is_prefixed_with_dollar_sign", "is_sequential_string", "is_templated_secret",
    )
)
_SETTINGS = {
    "plugins_used": [{"name": p} for p in _PLUGINS],
    "filters_used": [{"path": f} for f in _FILTERS],
}
_lock = threading.Lock()  # detect-secrets keeps its settings in a module global

# Characters a token is made of: a finding is widened to the whole token around it (backwards it
# stops at "=", so `KEY=value` keeps its name).
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-+/=.~]*")
_TOKEN_CHARS_BACK = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~"
# Lines longer than WINDOW characters are scanned in windows of WINDOW characters that overlap by
# OVERLAP: detect-secrets' keyword regex backtracks over a long unbroken run (a 100,000-letter line
# took 0.9 s, 1,000,000 letters 75 s), and windows keep each pass short. Every text of at most
# OVERLAP characters lies whole inside one window, so a secret up to 512 characters long (keys,
# tokens, JWTs, `password = value` with its 256-character value) is found wherever it sits.
WINDOW = 2048
OVERLAP = 512
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
_KEYWORD = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|"
    r"private[_-]?key|client[_-]?secret|credentials?"
)
_ASSIGNMENT = re.compile(
    rf"(?i)(?:{_KEYWORD})[\"']?[ \t]*(?:=|:=|:|=>)[ \t]*[\"']?([^\s\"'`,;()\[\]{{}}<>]{{8,256}})"
)
# A secret written as prose: "the db password is Xk9#mP2q", "aws secret access key wJalr...".
# Zero-width (lookahead) so a keyword inside a longer phrase still gets its own chance; the value
# must look random (see `_looks_random`) and be longer without a linking verb.
_PROSE_KEYWORD = (
    r"password|passwd|passphrase|secret|token|api[ _-]?key|access[ _-]?key|auth[ _-]?key|"
    r"private[ _-]?key|client[ _-]?secret|credentials?"
)
_PROSE = re.compile(
    rf"(?i)(?=\b(?:{_PROSE_KEYWORD})[ \t]+(?:(is|was|are|were)[ \t]+)?([^\s\"'`,;()\[\]{{}}<>]{{8,256}}))"
)
_PROSE_MIN_BARE = 16  # without "is"/"was": an AWS secret key (40), not "token OAuth2Client"
_BEARER = re.compile(r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{20,}=*)")
_EXTRA_TOKENS = (
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}")),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z\-_]{35}")),
    ("anthropic-api-key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
)
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+(?:[-+.][0-9A-Za-z.\-]+)?$")
_GENERIC = frozenset({"secret-keyword", "bearer-token", "basic-auth-credentials"})
_MIN_ENTROPY = 3.0  # bits per character; ordinary words stay below, keys and passwords above


@dataclass(frozen=True)
class Finding:
    """Something in a text that looks like a credential.

    Attributes:
        type: short kind, e.g. 'aws-access-key', 'private-key', 'secret-keyword', 'bearer-token'.
        start, end: character offsets of the secret in the scanned text (`text[start:end]`).
        line: 1-based line number of `start`.
        detector: which rule found it ('detect-secrets:<Plugin>' or 'memsafe:<rule>').
    The secret itself is not held, so a Finding is safe to log or show.
    """

    type: str
    start: int
    end: int
    line: int
    detector: str


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character (Shannon 1948), over the characters of `value`."""
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def _widen(line: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) grown to the whole token around it; linear in the token's length."""
    end = _TOKEN_RUN.match(line, end).end()
    while start > 0:
        piece = line[max(0, start - 256) : start]
        kept = piece.rstrip(_TOKEN_CHARS_BACK)
        start -= len(piece) - len(kept)
        if kept:
            break
    return start, end


def _looks_random(value: str) -> bool:
    """A plausible secret value: letters and digits, not a version, not a template/reference."""
    from detect_secrets.filters import heuristic

    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if _VERSION.match(value) or value.startswith(("$", "%", "@")):
        return False
    if heuristic.is_templated_secret(value) or heuristic.is_sequential_string(value):
        return False
    if heuristic.is_potential_uuid(value):
        return False
    return _entropy(value) >= _MIN_ENTROPY


def _gate_hits(gates: list[re.Pattern], text: str, whole: bool = False) -> list[re.Pattern]:
    """The gates (prefilter patterns) that match somewhere in `text`. The keyword gate reads an
    ASCII text lower-cased, case-sensitively: the same matches as case-insensitively, far faster.
    `whole`: `text` holds many lines; each gate is searched in multi-line mode, so it matches
    wherever it matches one of the lines (a superset: a line's edges become newlines)."""
    lowered = text.lower() if _keyword_lower is not None and text.isascii() else None
    hits = []
    for gate in gates:
        if gate is _keyword_gate and lowered is not None:
            found = _keyword_lower.search(lowered)
        else:
            found = (_multiline[gate] if whole else gate).search(text)
        if found:
            hits.append(gate)
    return hits


def _library_findings(line: str, gates: list[re.Pattern] | None = ...) -> list[tuple[str, str, str]]:
    """[(type, secret value, plugin)] from detect-secrets for one line (inside `_library_settings`).
    Lines none of the plugins' own patterns can match skip the library (see `_prefilter`); `gates`:
    the patterns worth trying (default all of them; None: no shortcut)."""
    from detect_secrets.core.scan import scan_line

    gates = _prefilter if gates is ... else gates
    if gates is not None and not (gates and _gate_hits(gates, line)):
        return []
    return [(s.type, s.secret_value or "", s.type) for s in scan_line(line)]


def _build_prefilter() -> list[re.Pattern] | None:
    """The patterns some plugin must match before it can report a line: each regex plugin's own
    `denylist`, and the keyword plugin's keyword list (every one of its regexes contains it),
    case-insensitive. A superset of what the plugins report, so skipping the library on lines none
    of them matches loses nothing; it cut the library's 0.5 ms per memory to ~0.05 ms on prose.
    None (no shortcut) if a plugin of another kind is in use."""
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.settings import get_plugins

    patterns: list[re.Pattern] = []
    for plugin in get_plugins():
        if isinstance(plugin, RegexBasedDetector):
            patterns.extend(plugin.denylist)
        elif isinstance(plugin, keyword.KeywordDetector):
            global _keyword_gate, _keyword_lower
            words = "|".join(keyword.DENYLIST)
            _keyword_gate = re.compile(words, re.IGNORECASE)
            _keyword_lower = re.compile(words) if words == words.lower() else None
            patterns.append(_keyword_gate)
        else:
            return None
    return patterns


_configured = False
_prefilter: list[re.Pattern] | None = None
_keyword_gate: re.Pattern | None = None  # the keyword plugin's gate (case-insensitive) ...
_keyword_lower: re.Pattern | None = None  # ... and the same, case-sensitive, for lower-cased ASCII lines
_multiline: dict[re.Pattern, re.Pattern] = {}  # each gate compiled with re.MULTILINE, for a whole text


@contextmanager
def _library_settings():
    """detect-secrets configured with memsafe's plugins and filters, held for one whole scan.

    The library keeps its settings in a module global; they are set once per process and kept
    (memsafe is their only user here). Its `transient_settings` would reset them around every
    scan, clearing the library's compiled-regex caches each time: that cost 0.9 ms per memory,
    about a third of an import's time before embedding.
    """
    global _configured, _prefilter
    with _lock:
        if not _configured:
            from detect_secrets.settings import cache_bust, configure_settings_from_baseline

            cache_bust()
            configure_settings_from_baseline(_SETTINGS)
            _prefilter = _build_prefilter()
            _multiline.update({p: re.compile(p.pattern, p.flags | re.MULTILINE) for p in _prefilter or ()})
            _configured = True
        yield


def _windows(line: str) -> list[tuple[int, str]]:
    """[(offset, piece)]: the line itself, or windows of WINDOW characters overlapping by OVERLAP."""
    if len(line) <= WINDOW:
        return [(0, line)]
    step = WINDOW - OVERLAP
    return [(i, line[i : i + WINDOW]) for i in range(0, len(line) - OVERLAP, step)]


_OWN_RULES = (_ASSIGNMENT, _PROSE, _BEARER, *(rx for _, rx in _EXTRA_TOKENS))


def _scan_line(line: str, gates: list[re.Pattern] | None = ..., rules: tuple = _OWN_RULES
               ) -> list[tuple[str, int, int, str]]:
    """[(type, start, end, detector)] for one line, offsets within the line (a long line is scanned
    window by window, see WINDOW; a library finding is widened to its whole token in the line)."""
    out: list[tuple[str, int, int, str]] = []
    for offset, piece in _windows(line):
        for secret_type, start, end, detector in _scan_piece(piece, gates, rules):
            if detector.startswith("detect-secrets:"):
                start, end = _widen(line, offset + start, offset + end)
            else:
                start, end = offset + start, offset + end
            out.append((secret_type, start, end, detector))
    return out


def _scan_piece(line: str, gates: list[re.Pattern] | None = ..., rules: tuple = _OWN_RULES
                ) -> list[tuple[str, int, int, str]]:
    """[(type, start, end, detector)] for one line or window, offsets within it; library findings
    are not yet widened (see `_scan_line`). `gates`, `rules`: the prefilter patterns and memsafe's
    own rules that matched somewhere in the whole text (the others cannot match here)."""
    from detect_secrets.filters import heuristic

    out: list[tuple[str, int, int, str]] = []
    if not rules and gates is not None and not gates:
        return out
    for secret_type, value, plugin in _library_findings(line, gates):
        if not value:
            continue
        pos = line.find(value)
        while pos >= 0:
            out.append((_slug(secret_type), pos, pos + len(value), f"detect-secrets:{plugin}"))
            pos = line.find(value, pos + len(value))
    if _ASSIGNMENT in rules:
        assignments = [m for m in _ASSIGNMENT.finditer(line) if _looks_random(m.group(1))]
        if assignments and not heuristic.is_indirect_reference(line):  # the filter is the costly part
            out += [("secret-keyword", m.start(1), m.end(1), "memsafe:assignment") for m in assignments]
    if _PROSE in rules:
        for m in _PROSE.finditer(line):
            value = m.group(2).rstrip(".:!?")
            if (m.group(1) or len(value) >= _PROSE_MIN_BARE) and _looks_random(value):
                if not heuristic.is_indirect_reference(line):
                    out.append(("secret-keyword", m.start(2), m.start(2) + len(value), "memsafe:prose"))
    if _BEARER in rules:
        for m in _BEARER.finditer(line):
            if _looks_random(m.group(1)):
                out.append(("bearer-token", m.start(1), m.end(1), "memsafe:bearer"))
    for name, rx in _EXTRA_TOKENS:
        if rx in rules:
            for m in rx.finditer(line):
                out.append((name, m.start(), m.end(), f"memsafe:{name}"))
    return out


# What each of memsafe's own rules needs somewhere in a lower-cased ASCII text before it can match
# (its keywords), searched case-sensitively: far faster than the rules' case-insensitive search.
_RULE_NEEDS = {_ASSIGNMENT: re.compile(_KEYWORD), _PROSE: re.compile(_PROSE_KEYWORD), _BEARER: re.compile("bearer")}


def _rules_for(text: str) -> tuple:
    """memsafe's own rules that match somewhere in `text`."""
    lowered = text.lower() if text.isascii() else None
    return tuple(
        rx for rx in _OWN_RULES
        if (lowered is None or rx not in _RULE_NEEDS or _RULE_NEEDS[rx].search(lowered)) and rx.search(text)
    )


def scan(text: str) -> list[Finding]:
    """Credentials found in `text`, in order of position, overlapping findings merged.

    Private key findings cover the whole BEGIN ... END block (or to the end of the text when the
    END line is missing). Cost: linear, about 1 s per MB of text on this machine (detect-secrets'
    regexes; long lines in overlapping windows, see WINDOW); typical memories take well under a
    millisecond.
    """
    raw: list[tuple[str, int, int, str]] = []
    offset = 0
    with _library_settings():
        # Which checks can match at all, decided once for the whole text (none, for most texts):
        # every line then tries only those. None of these patterns crosses a newline.
        gates = None if _prefilter is None else _gate_hits(_prefilter, text, whole=True)
        rules = _rules_for(text)
        for line in text.split("\n"):
            for secret_type, start, end, detector in _scan_line(line, gates, rules):
                raw.append((secret_type, offset + start, offset + end, detector))
            offset += len(line) + 1
    if any(t == "private-key" for t, *_ in raw):
        for m in _PRIVATE_KEY_BLOCK.finditer(text):
            raw.append(("private-key", m.start(), m.end(), "detect-secrets:Private Key"))
    raw.sort(key=lambda f: (f[1], -(f[2] - f[1])))
    merged: list[list] = []
    for secret_type, start, end, detector in raw:
        if merged and start < merged[-1][2]:
            last = merged[-1]
            if last[0] in _GENERIC and secret_type not in _GENERIC:  # name the specific kind
                last[0], last[3] = secret_type, detector
            last[2] = max(last[2], end)
            continue
        merged.append([secret_type, start, end, detector])
    return [Finding(t, s, e, text.count("\n", 0, s) + 1, d) for t, s, e, d in merged]


def redact(text: str, findings: list[Finding] | None = None) -> str:
    """`text` with every finding replaced by `[REDACTED:<type>]` (findings from `scan` if not given)."""
    found = scan(text) if findings is None else findings
    pieces: list[str] = []
    cursor = 0
    for f in sorted(found, key=lambda f: f.start):
        if f.start < cursor:
            continue
        pieces.append(text[cursor : f.start])
        pieces.append(f"[REDACTED:{f.type}]")
        cursor = f.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def describe(findings: list[Finding]) -> str:
    """A short, secret-free summary: 'aws-access-key (line 1), secret-keyword (line 3)'."""
    parts = [f"{f.type} (line {f.line})" for f in findings[:5]]
    more = len(findings) - len(parts)
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")
