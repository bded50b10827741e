"""Responsibility: finding credentials in text before it is stored, and redacting them.

Detection is done by Yelp's `detect-secrets` library (its regex plugins for cloud keys, private
key blocks, GitHub/GitLab/Slack/Stripe/OpenAI/PyPI/... tokens, JWTs, credentials in URLs, and its
quoted `keyword = "value"` detector, with its false-positive filters), run in process on the
text line by line (no files). Its high-entropy-string plugins are NOT used: in developer prose
they flag commit hashes, digests and ordinary words. (Other packages were weighed: Microsoft's
secret masker knows Azure formats almost only, ggshield needs GitGuardian's service.) memsafe adds:

- assignments in any syntax (`DB_PASSWORD=...`, `pwd: ...`, `pass=...`, `password=...&` in a
  query string or JDBC URL, `Password=...;` in a connection string),
- secrets written as prose ("the password is hunter2", "the root password for the db is ...",
  "aws secret access key wJalr..."), and bearer tokens,
- token formats the library does not know, kept as data with examples (`TOKEN_FORMATS`: npm,
  Hugging Face, GitHub fine-grained, Slack app and refresh tokens, Stripe webhook secrets, OpenAI
  project keys, Anthropic, Google, encrypted private keys, a password in a URL of any scheme).

What is no credential, whoever found it: a value after a keyword that is words, a technical term,
a placeholder, a reference or a path (`_credible_value`: `'my_secret_key'`, `"changeme"`,
`"password123"`, `"${API_KEY}"`, `os.environ[...]`, "the password is required"); a documented
example or masked value (`_example_or_masked`: AWS's AKIAIOSFODNN7EXAMPLE, `ghp_xxxx...`); a JWT
without claims; a private-key header without a key body. The text is read NFKC-normalised per
character with invisible characters removed (`_visible`), so full-width letters and zero-width
characters disguise nothing; offsets stay those of the text as written.

`scan(text)` returns `Finding`s (type, offsets, line; never the secret itself, so a finding may
be logged); `redact(text)` replaces each finding with `[REDACTED:<type>]`; `redact_for_capture`
is what text memsafe captures on its own goes through. A whole private key block (BEGIN ... END)
is redacted, not just its header line.

Importing and configuring detect-secrets costs a fresh process about 0.2 s of CPU (most of a
whole-process `remember`), so the literals the library's plugins need (the prefilter's
requirements, see `_Literals`) are kept in the cache folder once a process has configured it; a
later process scans a text that none of them can match, and that none of memsafe's own rules
matches, without importing the library at all (`_library_free`): the answer, no finding, is the
one the library would give.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import sys
import threading
import unicodedata
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from types import EllipsisType
from typing import Generic, TypeVar

__all__ = ["Finding", "TokenFormat", "TOKEN_FORMATS", "scan", "redact", "redact_for_capture", "describe"]

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
_TOKEN_RUNS = re.compile(r"[A-Za-z0-9_\-+/=.~]+")
_TOKEN_RUNS_BACK = re.compile(r"[A-Za-z0-9_\-+/.~]+")
# Lines longer than WINDOW characters are scanned in windows of WINDOW characters that overlap by
# OVERLAP: detect-secrets' keyword regex backtracks over a long unbroken run (a 100,000-letter line
# took 0.9 s, 1,000,000 letters 75 s), and windows keep each pass short. Every text of at most
# OVERLAP characters lies whole inside one window, so a secret up to 512 characters long (keys,
# tokens, JWTs, `password = value` with its 256-character value) is found wherever it sits.
WINDOW = 2048
OVERLAP = 512
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(.*?)(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# A key block's body: a base64 run with digits and both cases, near the header (a PGP block has
# header lines first). A header alone ("the file starts with -----BEGIN ... PRIVATE KEY-----") is not a key.
_KEY_BODY = re.compile(r"(?=[A-Za-z0-9+/]*[0-9])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{16,}")
_KEY_BODY_WITHIN = 400  # characters after the header
_ASSIGNMENT_KEYWORD = (
    r"password|passwd|passphrase|passcode|pass(?<![a-z]pass)|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"auth[_-]?key|private[_-]?key|client[_-]?secret|credentials?"
)
# `name = value`, `name: value`, `name=value&...` (a query string, a JDBC URL), `Name=value;` (an
# ADO.NET connection string); the value must pass `_credible_value`.
_ASSIGNMENT = re.compile(
    rf"(?i)(?:{_ASSIGNMENT_KEYWORD})[\"']?[ \t]*(?:=|:=|:|=>)[ \t]*[\"'`]?([^\s\"'`,;&()\[\]{{}}<>]{{6,256}})"
)
# A secret written as prose: "the password is hunter2", "the root password for the staging db is
# s3cr3t!", "aws secret access key wJalr...". Zero-width (lookahead) so a keyword inside a longer
# phrase still gets its own chance; after a linking verb the value must pass `_credible_value`,
# without one it must also look random (`_looks_random`) and be longer.
_PROSE_KEYWORD = (
    r"password|passwd|passphrase|passcode|secret|token|api[ _-]?key|access[ _-]?key|auth[ _-]?key|"
    r"private[ _-]?key|client[ _-]?secret|credentials?"
)
_PROSE = re.compile(
    rf"(?i)(?=\b(?:{_PROSE_KEYWORD})"
    r"(?:[ \t]+(?:for|of|on|to|at)(?:[ \t]+[^\s\"'`,;()\[\]{}<>]+){1,4}?(?=[ \t]+(?:is|was|are|were)[ \t]))?"
    rf"[ \t]+(?:(is|was|are|were)[ \t]+)?[\"'`]?([^\s\"'`,;()\[\]{{}}<>]{{6,256}}))"
)
_PROSE_MIN_BARE = 16  # without "is"/"was": an AWS secret key (40), not "token OAuth2Client"
_BEARER = re.compile(r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{20,}=*)")


@dataclass(frozen=True)
class TokenFormat:
    """A credential format of memsafe's own, for what detect-secrets' plugins do not know.

    Attributes:
        kind: the finding type it reports (`Finding.type`).
        regex: the pattern; `group` of its match is the secret (0: the whole match).
        examples: texts it must find (fake values; the tests check every one).
        password: the secret is a chosen password, not a generated token: it must pass
            `_credible_value` (not a word, a placeholder or a reference). A token only has to be
            no documented example or masked value (`_example_or_masked`).
    """

    kind: str
    regex: re.Pattern
    examples: tuple[str, ...]
    group: int = 0
    password: bool = False


# Formats from the vendors' own documentation of their token prefixes and lengths.
TOKEN_FORMATS = (
    TokenFormat("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
                ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH",)),
    TokenFormat("google-api-key", re.compile(r"\bAIza[0-9A-Za-z\-_]{35}"),
                ("AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",)),
    TokenFormat("anthropic-api-key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
                ("sk-ant-api03-Zk3vQ9wLm2Rt8YpB4nHc7JdXe1Ff6Gg0",)),
    TokenFormat("openai-token", re.compile(r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}"),
                ("sk-proj-fNUfTAFnT0tEuw0dwQ0FIunWe8Cz6SNDCdyZQJiJ",)),
    TokenFormat("npm-token", re.compile(r"\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
                ("npm_OhbVrpoiVgRV5IfLBcbfnoGMbJmTPSIAoCLr",)),
    TokenFormat("huggingface-token", re.compile(r"\b(?:hf|api_org)_[A-Za-z]{34}(?![A-Za-z0-9])"),
                ("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",)),
    TokenFormat("slack-token", re.compile(r"\bxapp-\d-[A-Z0-9]{8,}-\d{6,}-[A-Za-z0-9]{20,}"),
                ("xapp-1-AHEZ5EDJJTF-3186999386774-d9136682575250def91799e2786d3748",)),
    TokenFormat("slack-token", re.compile(r"\bxox[abeoprs](?:\.xox[bp])?-\d[0-9A-Za-z\-]{20,}"),
                ("xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAxMi0xMjM0NTY3ODkw",)),
    TokenFormat("stripe-webhook-secret", re.compile(r"\bwhsec_[A-Za-z0-9+/=]{32,}"),
                ("whsec_rcavXiOqkVCJTBJahe84S5jIc1xLJjBi",)),
    TokenFormat("private-key", re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"),
                ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0B",)),
    # A password in any URL (postgres, mongodb+srv, redis, amqp, mysql, https, ...), the user
    # possibly empty (`redis://:pw@host`); the library's own rule needs a user and a password of
    # URL-safe characters only.
    TokenFormat("basic-auth-credentials",
                re.compile(r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://[^\s:/?#@\"'<>]*:([^\s/?#\"'<>]{1,256})@(?=[a-z0-9\[])"),
                ("redis://:hunter2@cache.internal:6379/0", "amqp://orders:R4bbit!mq@mq.internal:5672/"),
                group=1, password=True),
)
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+(?:[-+.][0-9A-Za-z.\-]+)?$")
_GENERIC = frozenset({"secret-keyword", "bearer-token", "basic-auth-credentials"})
_MIN_ENTROPY = 3.0  # bits per character; ordinary words stay below, keys and passwords above


if sys.version_info >= (3, 11):
    from re import _constants as _sre
    from re import _parser as _sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_constants as _sre
    import sre_parse as _sre_parse


def _required(items, folded: bool = False) -> list[frozenset[str]]:
    """What every match of the parsed (sub)pattern `items` contains: a list of sets of literal
    strings, each set a requirement (the match holds one of its strings), all of them required.
    The prefilter of RE2 and of Russ Cox, "Regular Expression Matching with a Trigram Index"
    (2012), cut down to literals: a run of literal characters is required, and so is one of the
    characters of a class that lists them (`['"]`); a group, a positive
    lookaround or a repeat of at least once requires what its body requires; an alternation
    requires, from each branch, its most selective set (the one whose shortest string is longest),
    united (nothing, if one branch requires nothing). Empty: nothing is known. `folded`: the
    pattern ignores case (a group that turns case-folding on is skipped in one that does not)."""
    out: list[frozenset[str]] = []
    run: list[str] = []
    for op, arg in items:
        if op is _sre.LITERAL:
            run.append(chr(arg))
            continue
        if run:
            out.append(frozenset({"".join(run)}))
            run = []
        if op is _sre.SUBPATTERN:
            if folded or not arg[1] & re.IGNORECASE:
                out += _required(arg[-1], folded)
        elif op is getattr(_sre, "ATOMIC_GROUP", None):
            out += _required(arg, folded)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)) and arg[0] >= 1:
            out += _required(arg[2], folded)
        elif op is _sre.IN and all(o is _sre.LITERAL for o, _ in arg):  # a class of a few characters
            out.append(frozenset(chr(c) for _, c in arg))
        elif op is _sre.ASSERT:  # a lookahead or lookbehind that must hold: its text is there too
            out += _required(arg[1], folded)
        elif op is _sre.BRANCH:
            best = [max(_required(b, folded), key=lambda x: min(map(len, x)), default=None) for b in arg[1]]
            if all(best):
                out.append(frozenset().union(*(b for b in best if b)))
    if run:
        out.append(frozenset({"".join(run)}))
    return out


_FOLDED = "\0"  # marks a literal to be looked for in the text lower-cased
_TO_ASCII = str.maketrans({"\u017f": "s", "\u212a": "k", "\u0131": "i", "\u0130": "i"})  # ſ K ı İ


@functools.cache  # a pattern is parsed once, whatever subsets of patterns it is planned in
def _literals_of(pattern: re.Pattern) -> tuple[frozenset[str], ...]:
    """The requirements of a compiled `pattern` (see `_required`): every match holds a string of
    each set. When the pattern ignores case, its strings are lower-cased and marked with _FOLDED:
    they are looked for in the text lower-cased, and a set with a non-ASCII string is dropped (Unicode
    case folding maps some of them onto ASCII letters). Empty (or a pattern the parser does not take):
    nothing is known, always search."""
    try:
        parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    except (re.error, TypeError, ValueError):
        return ()
    folded = bool(parsed.state.flags & re.IGNORECASE)
    found = _required(parsed.data, folded)
    if folded:  # looked for in an ASCII text lower-cased, where `(?i)ſ` matches "s", `(?i)K` "k", `(?i)ı` "i"
        found = [frozenset(_FOLDED + x.lower() for x in r) for r in found if all(x.isascii() for x in r)]
    return tuple(dict.fromkeys(found))


_T = TypeVar("_T")


class _Plan(Generic[_T]):
    """For one tuple of items (patterns, or the indices of the gates read from the cache folder):
    their requirements and every literal they name, split by how it is looked for (in the text as
    is, or lower-cased)."""

    def __init__(self, requirements: list[tuple[_T, tuple[frozenset[str], ...]]]) -> None:
        self.requirements = requirements
        keys = {k for _, reqs in self.requirements for r in reqs for k in r}
        self.exact = tuple(k for k in keys if not k.startswith(_FOLDED))
        self.folded = tuple((k, k[1:]) for k in keys if k.startswith(_FOLDED))
        self.passing: dict[frozenset[str], tuple[_T, ...]] = {}  # by the literals present


_plans: dict[tuple[re.Pattern, ...], _Plan[re.Pattern]] = {}


class _Literals:
    """One text's literal prefilter: which of some patterns can match it at all.

    A pattern is skipped only when one of its requirements (`_literals_of`) has none of its
    strings in the text: it cannot match there. A substring test costs microseconds per MB, where
    Python's `re` spends 20-300 ms per MB on a pattern with no literal prefix. A pattern that
    ignores case is checked against the text lower-cased (its non-ASCII literals are not required,
    see `_literals_of`; the four non-ASCII letters that fold onto ASCII ones are mapped first), so
    one accented letter no longer makes every such pattern search the text. The answer for a
    set of literals present is kept, so a short text (a tag, an entity name) costs one sweep of
    the literals and a dictionary lookup."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lowered = text.lower() if text.isascii() else None
        # Where a case-insensitive pattern's ASCII literals are looked for: the only other letters
        # matching an ASCII one under re.IGNORECASE are these four (every code point checked),
        # mapped to it before lower-casing; `str.lower` may lengthen other letters, harmlessly.
        self.folded = self.lowered if self.lowered is not None else text.translate(_TO_ASCII).lower()

    def passing(self, patterns: tuple[re.Pattern, ...]) -> tuple[re.Pattern, ...]:
        """The patterns, of `patterns`, that may match the text (in their order)."""
        plan = _plans.get(patterns)
        if plan is None:
            if len(_plans) >= 256:  # bounded: `scan` plans each text's subset of the gates
                _plans.clear()
            plan = _plans.setdefault(patterns, _Plan([(p, _literals_of(p)) for p in patterns]))
        return self.through(plan)

    def through(self, plan: _Plan[_T]) -> tuple[_T, ...]:
        """The items of `plan` that may match the text (in their order)."""
        text, folded = self.text, self.folded
        present = [k for k in plan.exact if k in text]
        present += [k for k, x in plan.folded if x in folded]
        key = frozenset(present)
        out = plan.passing.get(key)
        if out is None:
            out = tuple(p for p, reqs in plan.requirements if all(not r.isdisjoint(key) for r in reqs))
            if len(plan.passing) >= 4096:  # bounded: texts of many shapes
                plan.passing.clear()
            plan.passing[key] = out
        return out

    def may_match(self, pattern: re.Pattern) -> bool:
        """Whether `pattern` may match the text."""
        return bool(self.passing((pattern,)))


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


# detect-secrets' type names that memsafe spells as its own rule for the same thing does
_KINDS = {"NPM tokens": "npm-token", "Private Key": "private-key"}


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


class _Widener:
    """Widens findings in one line to the whole token around each (`widen`). The line's runs of
    token characters are found once, when its first finding is widened; each widening is then a
    binary search. Widening each finding by walking its token cost the token's length per finding:
    quadratic on a long unbroken run that holds a finding every few characters (`AKIA` repeated:
    125,000 characters took 39 s)."""

    def __init__(self, line: str) -> None:
        self.line = line
        self._runs: tuple[list[int], list[int], list[int], list[int]] | None = None

    def widen(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) grown to the token around it: back over token characters but "=", forward
        over token characters."""
        if self._runs is None:
            back = [m.span() for m in _TOKEN_RUNS_BACK.finditer(self.line)]
            ahead = [m.span() for m in _TOKEN_RUNS.finditer(self.line)]
            self._runs = ([a for a, _ in back], [b for _, b in back], [a for a, _ in ahead], [b for _, b in ahead])
        back_starts, back_ends, starts, ends = self._runs
        i = bisect.bisect_right(back_starts, start - 1) - 1  # the run holding the character before start
        if i >= 0 and back_ends[i] >= start > back_starts[i]:
            start = back_starts[i]
        j = bisect.bisect_right(starts, end) - 1  # the run holding the character at end
        if j >= 0 and ends[j] > end:
            end = ends[j]
        return start, end


def _looks_random(value: str) -> bool:
    """A plausible generated secret: letters and digits, not a version, not a template/reference,
    at least _MIN_ENTROPY bits per character."""
    from detect_secrets.filters import heuristic

    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if _VERSION.match(value) or value.startswith(("$", "%", "@")):
        return False
    if heuristic.is_templated_secret(value) or heuristic.is_sequential_string(value):
        return False
    if heuristic.is_potential_uuid(value):
        return False
    return _entropy(value) >= _MIN_ENTROPY and not _example_or_masked(value)


# What a value written after a password keyword is when it is not a password. Data, not code:
# - placeholder words: a value made of these (and trivial digits, see `_trivial_digits`) is what
#   code, tests and docs put where a password goes ("password123", "admin1", "secret_v2");
# - technical terms with a number, which prose puts after "password is" ("SHA-256 hashed",
#   "base64-encoded", "stored as argon2id").
_PLACEHOLDER_WORDS = frozenset("""
    a abc admin api apikey asdf auth bar baz change changeme config db default demo dev dummy example fake
    foo guest hello here insert key letmein local me mock my mysecret our pass passwd password placeholder
    pwd qwerty replace root sample secret some super temp test testing the token user value welcome world
    xyz your
""".split())
_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
_TECH_TERM = re.compile(
    r"(?i:sha|md|base|utf|ucs|aes|rsa|dsa|ecdsa|ed|x|ipv|http|oauth|pbkdf|argon|tls|ssl|crc|blake|hs|rs|es|ps|p|v)"
    r"\d{1,5}(?i:id|[a-z])?|[A-Z]{2,6}\d{1,5}"
)
# A digit or sign written for a letter inside a word ("P@ssw0rd", "s3cr3t", "adm1n"): read as the
# letter for the placeholder test; digits at a word's edge stay digits ("password123").
_UNLEET = str.maketrans("013457@$", "oieastas")
_LEET = re.compile(r"(?<=[A-Za-z])[013457@$]+(?=[A-Za-z])")
_TOKENS = re.compile(r"[A-Za-z0-9]+")
_RUNS = re.compile(r"[A-Za-z]+|[0-9]+")
_HUMPS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_VOWEL = re.compile(r"[aeiouyAEIOUY]")
_MASKS = ("xxxxx", "***", "...", "####", "•••")
_PATHLIKE = ("/", "~/", "./", "../")


def _wordlike(token: str) -> bool:
    """A run of letters that reads as a word or an identifier made of words: one case or Title
    case (at most 24 letters: a longer run is more likely generated), or camelCase of at most four
    humps of two letters or more, each with a vowel ("myPassword", not "QyvbFulFnwZq")."""
    if len(token) <= 24 and (token.islower() or token.isupper() or token.istitle()):
        return True
    humps = _HUMPS.findall(token)
    return len(humps) <= 4 and all(len(h) >= 2 and _VOWEL.search(h) for h in humps)


def _trivial_digits(run: str) -> bool:
    """Digits a person adds to a placeholder: one digit, one digit repeated, a counting run
    ("123", "0123", "4321"), a year 1900-2099."""
    return (len(run) == 1 or len(set(run)) == 1 or run in "01234567890" or run in "9876543210"
            or (len(run) == 4 and run[:2] in ("19", "20")))


def _placeholder_letters(run: str) -> bool:
    """`run` (letters) splits into placeholder words ("mysecretkey" -> my|secret|key), is one
    letter, or a run of the alphabet ("abcdef")."""
    run = run.lower()
    if len(run) == 1 or (len(run) >= 3 and run in _ALPHABET):  # "abcdef" in `abcdef123456`
        return True
    ok = [True] + [False] * len(run)
    for i in range(1, len(run) + 1):
        ok[i] = any(ok[j] and run[j:i] in _PLACEHOLDER_WORDS for j in range(max(0, i - 12), i))
    return ok[-1]


def _example_or_masked(value: str) -> bool:
    """A documented example ("...EXAMPLE", as AWS's AKIAIOSFODNN7EXAMPLE), a masked or elided value
    (`ghp_xxxxxxxx`, `***`, `...`), or a template (`<token>`, `{{ key }}`). A generated token holds
    "example" or five x's in a row by chance with a probability below 1e-6."""
    lowered = value.lower()  # substring tests: C speed on a token widened over a megabyte
    return "example" in lowered or any(mark in lowered for mark in _MASKS) or any(c in value for c in "<>{}")


def _jwt_claims(token: str) -> bool:
    """Whether a JWT's payload (its second part, base64url JSON) is an object holding a claim: an
    empty `{}` (a docs example of an unsigned token) carries nothing."""
    import base64
    import json

    parts = token.split(".")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(payload, dict) and bool(payload)


def _plausible(kind: str, value: str) -> bool:
    """Whether a library finding of `kind` over `value` (widened to its token) can be real: a
    generic one (a keyword's or a URL's value) must pass `_credible_value`, a JWT must carry claims,
    and none may be a documented example or masked (`_example_or_masked`)."""
    if kind in _GENERIC:
        return _credible_value(value)
    if kind == "json-web-token" and not _jwt_claims(value):
        return False
    return not _example_or_masked(value)


def _credible_value(value: str, placeholders: bool = True) -> bool:
    """Whether `value`, written after a password keyword (`password = value`, a URL's password,
    "the password is value"), can be a real password or key: 6 to 256 characters with a letter,
    and none of
    - a reference or template (`${DB_PASSWORD}`, `%PW%`, `@secret`, `<your-token>`), a path or URL;
    - a version, a UUID, a sequence, a documented example or a masked value (`_example_or_masked`);
    - words: every alphanumeric token a word, an identifier made of words, or a technical term
      (`my_secret_key`, `your-api-key-here`, `changeme`, `X-Api-Key`, `SHA-256`, `base64-encoded`);
    - with `placeholders`, a placeholder: placeholder words, also spelt with digits for letters,
      and trivial digits only (`password123`, `admin1`, `P@ssw0rd!`). Off for a sentence that
      states a password ("my password is admin123"): code and docs hold placeholders, a person
      telling what a password is does not.
    So "hunter2", "Tr0ub4dor" and any generated key are credible."""
    from detect_secrets.filters import heuristic

    if not 6 <= len(value) <= 256 or not any("a" <= c.lower() <= "z" for c in value):
        return False
    if value.startswith(("$", "%", "@", *_PATHLIKE)) or "://" in value:
        return False
    if _VERSION.match(value) or heuristic.is_templated_secret(value) or heuristic.is_sequential_string(value):
        return False
    if heuristic.is_potential_uuid(value) or _example_or_masked(value):
        return False
    joined = re.sub(r"(?<=[A-Za-z])[-_ ](?=\d)", "", value)  # "SHA-256" reads as one term
    tokens = _TOKENS.findall(joined)
    if all((t.isalpha() and _wordlike(t)) or _TECH_TERM.fullmatch(t) for t in tokens):
        return False
    if placeholders:
        for spelling in (value, _LEET.sub(lambda m: m.group().translate(_UNLEET), value)):
            if all(_trivial_digits(r) if r.isdigit() else _placeholder_letters(r) for r in _RUNS.findall(spelling)):
                return False
    return True


def _gate_hits(gates: tuple[re.Pattern, ...], text: str, whole: bool = False) -> tuple[re.Pattern, ...]:
    """The gates (prefilter patterns) that match somewhere in `text`; each is searched only if its
    literals are there (`_Literals`). The keyword gate also needs the literals of one of the
    keyword plugin's own regexes (an `=`, `:` or quote), and reads an ASCII text lower-cased,
    case-sensitively: the same matches as case-insensitively, far faster. `whole`: `text` holds
    many lines; each gate is searched in multi-line mode, so it matches wherever it matches one of
    the lines (a superset: a line's edges become newlines)."""
    literals = _Literals(text)
    hits = []
    for gate in literals.passing(gates):
        if gate is _keyword_gate:
            if not literals.passing(_keyword_regexes):
                continue
            if _keyword_lower is not None and literals.lowered is not None:
                if _keyword_lower.search(literals.lowered):
                    hits.append(gate)
                continue
        if (_multiline[gate] if whole else gate).search(text):
            hits.append(gate)
    return tuple(hits)


def _library_findings(line: str, gates: tuple[re.Pattern, ...] | EllipsisType | None = ...
                      ) -> list[tuple[str, str, str]]:
    """[(type, secret value, plugin)] from detect-secrets for one line (inside `_library_settings`).
    Lines none of the plugins' own patterns can match skip the library (see `_prefilter`); `gates`:
    the patterns worth trying (default all of them; None: no shortcut)."""
    from detect_secrets.core.scan import scan_line

    gates = _prefilter if gates is ... else gates
    if gates is not None and not (gates and _gate_hits(gates, line)):
        return []
    return [(s.type, s.secret_value or "", s.type) for s in scan_line(line)]


def _build_prefilter() -> tuple[re.Pattern, ...] | None:
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
            global _keyword_gate, _keyword_lower, _keyword_regexes
            # the regexes its analyze_line uses for scan_line's file name (no extension)
            used = keyword.REGEX_BY_FILETYPE.get(keyword.determine_file_type("adhoc-string-scan"),
                                                 keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
            _keyword_regexes = tuple(used)
            words = "|".join(keyword.DENYLIST)
            _keyword_gate = re.compile(words, re.IGNORECASE)
            _keyword_lower = re.compile(words) if words == words.lower() else None
            patterns.append(_keyword_gate)
        else:
            return None
    return tuple(patterns)


_configured = False
_prefilter: tuple[re.Pattern, ...] | None = None
_keyword_gate: re.Pattern | None = None  # the keyword plugin's gate (case-insensitive) ...
_keyword_lower: re.Pattern | None = None  # ... and the same, case-sensitive, for lower-cased ASCII lines
_keyword_regexes: tuple[re.Pattern, ...] = ()  # the keyword plugin's own regexes (their literals gate it too)
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
            _save_gates()
        yield


def _gates_file():
    """Where the prefilter's requirements are kept: `<settings.cache_dir()>/secret-gates-<key>.json`,
    the key a hash of what they depend on (this file, detect-secrets' files, the plugins and
    filters used, the Python version), so any change makes a process rebuild them."""
    import hashlib
    import importlib.util
    import os

    from memsafe import settings

    spec = importlib.util.find_spec("detect_secrets")  # finds the package without importing it
    if spec is None or not spec.origin:
        return None
    parts = [repr(_SETTINGS), sys.version]
    for path in (__file__, *(os.path.join(os.path.dirname(spec.origin), f) for f in ("__version__.py", "settings.py"))):
        stat = os.stat(path)
        parts.append(f"{path}|{stat.st_size}|{stat.st_mtime_ns}")
    return settings.cache_dir() / f"secret-gates-{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:20]}.json"


def _save_gates() -> None:
    """Keep the prefilter's requirements for later processes (written atomically; none when the
    prefilter is not in use, so `_library_free` never answers then)."""
    import json
    import os

    if _prefilter is None:
        return
    try:
        path = _gates_file()
        if path is None or path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({
            "gates": [[[sorted(r) for r in _literals_of(p)], p.pattern, p.flags] for p in _prefilter],
            "keyword": _prefilter.index(_keyword_gate) if _keyword_gate in _prefilter else -1,
            "keyword_regexes": [[sorted(r) for r in _literals_of(p)] for p in _keyword_regexes],
        }))
        os.replace(tmp, path)
    except OSError:
        pass


@functools.cache
def _cached_gates() -> tuple[_Plan[int], list[tuple[str, int]], int, _Plan[int]] | None:
    """(plan of the gates' requirements, their (pattern, flags), the keyword gate's index, plan of
    the keyword regexes' requirements) as `_save_gates` kept them, or None."""
    import json

    def plan(items) -> _Plan[int]:
        requirements = [(i, tuple(frozenset(r) for r in reqs)) for i, reqs in enumerate(items)]
        if not all(isinstance(x, str) for _, reqs in requirements for r in reqs for x in r):
            raise TypeError("not a list of strings")
        return _Plan(requirements)

    try:
        path = _gates_file()
        if path is None:
            return None
        data = json.loads(path.read_text())
        gates = plan([g[0] for g in data["gates"]])
        sources = [(str(g[1]), int(g[2])) for g in data["gates"]]
        return (gates, sources, int(data["keyword"]), plan(data["keyword_regexes"])) if sources else None
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None


def _library_free(text: str) -> bool:
    """True when no finding is possible in `text` (a text as the scan reads it, see `_visible`)
    without asking detect-secrets: none of memsafe's own rules matches, and no gate of the
    prefilter matches (`_gate_hits` on the whole text, read from what an earlier process kept: a
    gate is compiled only if its literals are present). False whenever unsure (nothing kept yet,
    or the library is loaded already)."""
    if _configured or _rules_for(text):
        return False
    cached = _cached_gates()
    if cached is None:
        return False
    gates, sources, keyword, keyword_regexes = cached
    literals = _Literals(text)
    for i in literals.through(gates):
        if i == keyword and not literals.through(keyword_regexes):
            continue
        pattern, flags = sources[i]
        if re.compile(pattern, flags | re.MULTILINE).search(text):
            return False
    return True


def _windows(line: str) -> list[tuple[int, str]]:
    """[(offset, piece)]: the line itself, or windows of WINDOW characters overlapping by OVERLAP."""
    if len(line) <= WINDOW:
        return [(0, line)]
    step = WINDOW - OVERLAP
    return [(i, line[i : i + WINDOW]) for i in range(0, len(line) - OVERLAP, step)]


_OWN_RULES = (_ASSIGNMENT, _PROSE, _BEARER, *dict.fromkeys(f.regex for f in TOKEN_FORMATS))


class _Seen:
    """What one `scan` found in lines and windows it scanned before (same gates and rules), by
    their text, so a line or window that repeats is scanned once: the library costs ~1 ms per
    piece with a gate hit (1 MB of a repeated key took 8 s, of a repeated line holding one 34 s).
    `lines`: a short line's findings, widened in it; `pieces`: a window's, not yet widened."""

    def __init__(self) -> None:
        self.lines: dict[str, list[tuple[str, int, int, str]]] = {}
        self.pieces: dict[str, list[tuple[str, int, int, str]]] = {}


def _scan_line(line: str, gates: tuple[re.Pattern, ...] | EllipsisType | None = ..., rules: tuple = _OWN_RULES,
               seen: _Seen | None = None) -> list[tuple[str, int, int, str]]:
    """[(type, start, end, detector)] for one line, offsets within the line (a long line is scanned
    window by window, see WINDOW; a library finding is widened to its whole token in the line).
    `seen`: what this scan found before (`_Seen`)."""
    if seen is not None and len(line) <= WINDOW:
        found = seen.lines.get(line)
        if found is None:
            found = seen.lines[line] = _scan_line(line, gates, rules)
        return found
    out: list[tuple[str, int, int, str]] = []
    widener = _Widener(line)
    judged: dict[tuple[str, int, int], bool] = {}  # the findings of one run widen to one token: judged once
    for offset, piece in _windows(line):
        found = None if seen is None else seen.pieces.get(piece)
        if found is None:
            found = _scan_piece(piece, gates, rules)
            if seen is not None:
                seen.pieces[piece] = found
        for secret_type, start, end, detector in found:
            if detector.startswith("detect-secrets:"):
                start, end = widener.widen(offset + start, offset + end)
                # judged whole: a plugin may report only a token's prefix (`ghp` of `ghp_xxxx…`)
                key = (secret_type, start, end)
                ok = judged.get(key)
                if ok is None:
                    ok = judged[key] = _plausible(secret_type, line[start:end])
                if not ok:
                    continue
            else:
                start, end = offset + start, offset + end
            out.append((secret_type, start, end, detector))
    return out


def _quoted(line: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) of a value, grown to its closing quote when a quote opens it: a quoted
    password may hold `&`, `;` or a space (`pwd: "Tr0ub4dor&3"`), which end an unquoted one."""
    if start and line[start - 1] in "'\"`":
        close = line.find(line[start - 1], end, start + 257)
        if close >= 0:
            return start, close
    return start, end


def _scan_piece(line: str, gates: tuple[re.Pattern, ...] | EllipsisType | None = ..., rules: tuple = _OWN_RULES
                ) -> list[tuple[str, int, int, str]]:
    """[(type, start, end, detector)] for one line or window, offsets within it; library findings
    are not yet widened (see `_scan_line`). `gates`, `rules`: the prefilter patterns and memsafe's
    own rules that matched somewhere in the whole text (the others cannot match here)."""
    from detect_secrets.filters import heuristic

    out: list[tuple[str, int, int, str]] = []
    if not rules and gates is not None and not gates:
        return out
    for secret_type, value, plugin in _library_findings(line, gates):
        kind = _KINDS.get(secret_type) or _slug(secret_type)
        if not value:
            continue
        pos = line.find(value)
        while pos >= 0:
            out.append((kind, pos, pos + len(value), f"detect-secrets:{plugin}"))
            pos = line.find(value, pos + len(value))
    if _ASSIGNMENT in rules:
        assignments = [(start, end) for m in _ASSIGNMENT.finditer(line)
                       for start, end in [_quoted(line, m.start(1), m.end(1))] if _credible_value(line[start:end])]
        if assignments and not heuristic.is_indirect_reference(line):  # the filter is the costly part
            out += [("secret-keyword", start, end, "memsafe:assignment") for start, end in assignments]
    if _PROSE in rules:
        for m in _PROSE.finditer(line):
            start, end = _quoted(line, m.start(2), m.start(2) + len(m.group(2).rstrip(".:!?")))
            value = line[start:end]
            if (_credible_value(value, placeholders=False) if m.group(1)
                    else len(value) >= _PROSE_MIN_BARE and _looks_random(value)):
                if not heuristic.is_indirect_reference(line):
                    out.append(("secret-keyword", start, end, "memsafe:prose"))
    if _BEARER in rules:
        for m in _BEARER.finditer(line):
            if _looks_random(m.group(1)):
                out.append(("bearer-token", m.start(1), m.end(1), "memsafe:bearer"))
    for token in TOKEN_FORMATS:
        if token.regex in rules:
            for m in token.regex.finditer(line):
                value = m.group(token.group)
                if _credible_value(value) if token.password else not _example_or_masked(value):
                    out.append((token.kind, m.start(token.group), m.end(token.group), f"memsafe:{token.kind}"))
    return out


# memsafe's rules that ignore case, compiled to match case-sensitively in an ASCII text read
# lower-cased: the same matches (their literal letters are lower case, their classes take both
# cases), and Python's re is up to 8x faster so (1 MB of `key = AKIA…` lines: 1.3 s -> 0.15 s).
_LOWERED_RULES = {rx: re.compile(rx.pattern.removeprefix("(?i)")) for rx in _OWN_RULES if rx.pattern.startswith("(?i)")}


def _rules_for(text: str) -> tuple:
    """memsafe's own rules that match somewhere in `text` (each searched only where its required
    literals occur, see `_Literals`; an ASCII text lower-cased, see `_LOWERED_RULES`)."""
    literals = _Literals(text)
    lowered = literals.lowered
    return tuple(rx for rx in literals.passing(_OWN_RULES)
                 if (_LOWERED_RULES[rx].search(lowered) if lowered is not None and rx in _LOWERED_RULES
                     else rx.search(text)))


# Characters that show nothing (zero-width spaces and joiners, direction marks, the soft hyphen,
# variation selectors, the BOM): removed before scanning, so they cannot split a secret.
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
                        "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")


@functools.lru_cache(maxsize=8192)
def _folded(char: str) -> str:
    """One character as the scan reads it: NFKC (full-width `ｇｈｐ＿` is `ghp_`, `①` is `1`), or
    nothing for an invisible one."""
    return "" if _INVISIBLE.match(char) else unicodedata.normalize("NFKC", char)


def _visible(text: str) -> tuple[str, list[int] | None]:
    """(the text the scan reads, `origin`): each character NFKC-normalised on its own and the
    invisible ones removed (`_folded`), so a secret in full-width letters or split by zero-width
    characters reads as itself. `origin[i]` is the index in `text` of the character that view
    character i came from; None when the view has `text`'s offsets (an ASCII text, or one whose
    changed characters each became one character). Per character, not NFKC of the whole text:
    composing accents changes no ASCII secret, and offsets stay exact. Cost: C-speed passes
    (`set`, `str.translate`) plus one Python step per character whose length changes."""
    if text.isascii():
        return text, None
    table = {ord(c): f for c in set(text) if not c.isascii() and (f := _folded(c)) != c}
    if not table:
        return text, None
    view = text.translate(table)
    resized = "".join(chr(k) for k, f in table.items() if len(f) != 1)
    if not resized:
        return view, None
    origin: list[int] = []
    done = 0
    for m in re.finditer("[" + re.escape(resized) + "]", text):
        origin.extend(range(done, m.start()))
        origin.extend([m.start()] * len(table[ord(m.group())]))
        done = m.end()
    origin.extend(range(done, len(text)))
    return view, origin


def scan(text: str) -> list[Finding]:
    """Credentials found in `text`, in order of position, overlapping findings merged; offsets
    and lines are `text`'s own.

    The text is read through `_visible` (NFKC per character, invisible characters removed).
    Private key findings cover the whole BEGIN ... END block (or to the end of the text when the
    END line is missing), and need a key body (`_KEY_BODY`) within `_KEY_BODY_WITHIN` characters
    of the header. Cost: linear; a pattern is searched only where the literals every match
    of it must contain are present (`_Literals`), so 1 MB of letters, hex, base64 or prose takes
    0.1-0.3 s on a 2-core machine (`memsafe bench --inputs`), where searching every pattern took
    1.2-1.7 s; typical memories take well under a millisecond.
    """
    view, origin = _visible(text)
    if _library_free(view):
        return []
    raw: list[tuple[str, int, int, str]] = []
    offset = 0
    with _library_settings():
        # Which checks can match at all, decided once for the whole text (none, for most texts):
        # every line then tries only those. None of these patterns crosses a newline.
        gates = None if _prefilter is None else _gate_hits(_prefilter, view, whole=True)
        rules = _rules_for(view)
        seen = _Seen()
        for view_line in view.split("\n"):
            for secret_type, start, end, detector in _scan_line(view_line, gates, rules, seen):
                raw.append((secret_type, offset + start, offset + end, detector))
            offset += len(view_line) + 1
    if any(t == "private-key" for t, *_ in raw):
        raw = [f for f in raw if f[0] != "private-key" or "PuTTY" in view[f[1] : f[2]]]
        for m in _PRIVATE_KEY_BLOCK.finditer(view):
            if _KEY_BODY.search(view, m.start(1), min(m.end(1), m.start(1) + _KEY_BODY_WITHIN)):
                raw.append(("private-key", m.start(), m.end(), "memsafe:private-key"))
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
    found, line, counted = [], 1, 0
    for secret_type, start, end, detector in merged:  # in order of start: lines counted once, not per finding
        if origin is not None:
            start, end = origin[start], origin[end - 1] + 1
        line += text.count("\n", counted, start)
        counted = start
        found.append(Finding(secret_type, start, end, line, detector))
    return found


def redact_for_capture(text: str) -> tuple[str, tuple[str, ...]]:
    """(`text` with each credential replaced by `[REDACTED:<type>]`, the types replaced, in order
    of position): what memsafe stores of text it captures on its own (git hooks, `hook backfill`,
    `import`, agent-loop hooks), which nobody is there to ask about. Never refuses: the rest of
    the text is kept. (An explicit `remember` refuses instead, with the hint to use --redact.)"""
    found = scan(text)
    return (redact(text, found), tuple(f.type for f in found)) if found else (text, ())


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
