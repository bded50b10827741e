"""Secrets: credentials are refused by default, stored redacted on request, and ordinary developer
text is never mistaken for one (memsafe.safety, api.remember, CLI `remember --redact`)."""

from __future__ import annotations

import json
import string
import subprocess

import pytest

from memsafe import api, safety
from memsafe.errors import InvalidInput, SecretDetected

# (text, expected finding type) — each must be found. Fake credentials only.
POSITIVES = [
    ("my key is AKIAIOSFODNN7EXAMPLE for the ci user", "aws-access-key"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "secret-keyword"),
    ('password = "hunter2xyzQ9!ab"', "secret-keyword"),
    ("password = hunter2xyzQ9ab", "secret-keyword"),
    ("DB_PASSWORD=S3cr3tP4ssw0rd in the staging .env", "secret-keyword"),
    ("export API_KEY=a8f5f167f44f4964e6c998dee827110c", "secret-keyword"),
    ("client_secret: 9xQ2vT7mLp4RzK8w", "secret-keyword"),
    ("export GITHUB_TOKEN=ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "github-token"),
    ("token: github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH", "github-token"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----", "private-key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n", "private-key"),
    ("curl -H 'Authorization: Bearer abc123def456ghi789jkl012mno345pqr678' https://api", "bearer-token"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc for billing", "stripe-access-key"),
    ("slack bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack-token"),
    ("db url https://admin:s3cretPassw0rd@db.example.com/prod", "basic-auth-credentials"),
    ("OPENAI sk-proj-abcdefghijklmnopqrstT3BlbkFJabcdefghijklmnopqrst", "openai-token"),
    ("gcp AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "google-api-key"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "json-web-token",
    ),
]

# Ordinary developer text: must yield no finding.
NEGATIVES = [
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the retry bug",
    "fixed in 3f2a9c1 and cherry-picked to release/2.4",
    "uuid 123e4567-e89b-12d3-a456-426614174000 is the tenant id",
    "see /usr/local/lib/python3.11/site-packages/foo/bar.py line 42",
    "C:\\Users\\First Last\\AppData\\Local\\memsafe\\memory.db",
    "upgraded to v2.0.1-rc.3+build.5 and node 18.19.0",
    "ERR_SSL_PROTOCOL_ERROR when hitting the proxy; also ECONNRESET and E11000",
    "the password field is required on the login form",
    'password = os.environ["DB_PASSWORD"]',
    "api_key = None",
    "token = get_token()",
    "password: ${DB_PASSWORD}",
    'secret = "<your-secret-here>"',
    "the session token expires after 15 minutes",
    "image digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 pinned",
    "request id dGhpcyBpcyBhIHRlc3Q is a base64 identifier in prose",
    'key = "user_id"',
    "password_reset_token_ttl = 3600",
    "We rotate secrets every Friday; the staging DB password rotates too",
    "Use Bearer token authentication for the internal API",
    "token: v2.10.3",
    "ssh-rsa public keys live in ~/.ssh/authorized_keys",
    "the build id is 20240517.3 and the pipeline is #4521",
    "max_tokens = 4096 and api_key_header = X-Api-Key",
    "https://github.com/org/repo/pull/1234#issuecomment-987654321",
    "TODO: bump to v2.0.1 (don't forget) — C++ port, O'Reilly book, 50% faster",
    "Müller → 日本語 🚀 naïve",
]


@pytest.mark.parametrize(("text", "kind"), POSITIVES)
def test_credentials_are_found_and_redacted(text, kind):
    findings = safety.scan(text)
    assert kind in {f.type for f in findings}, findings
    redacted = safety.redact(text)
    assert f"[REDACTED:{kind}]" in redacted
    for f in findings:
        secret = text[f.start : f.end]
        assert secret not in redacted
    assert safety.scan(redacted) == []


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_developer_text_is_not_a_secret(text):
    assert safety.scan(text) == []
    assert safety.redact(text) == text


def test_private_key_block_is_redacted_whole():
    text = "deploy key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nQ2x5\n-----END RSA PRIVATE KEY-----\nok"
    assert safety.redact(text) == "deploy key:\n[REDACTED:private-key]\nok"


def test_finding_offsets_and_lines():
    text = "line one\nexport API_KEY=a8f5f167f44f4964e6c998dee827110c"
    (f,) = safety.scan(text)
    assert f.line == 2
    assert text[f.start : f.end] == "a8f5f167f44f4964e6c998dee827110c"
    assert "a8f5" not in safety.describe([f])


def test_remember_refuses_secret_without_leaking_it(store):
    secret = "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"
    with pytest.raises(SecretDetected) as info:
        api.remember(store, f"CI token is {secret}")
    message = str(info.value)
    assert "--redact" in message and "github-token" in message
    assert secret not in message
    assert store.counts()["total"] == 0


def test_remember_redact_stores_redacted(store):
    m = api.remember(store, "staging: DB_PASSWORD=S3cr3tP4ssw0rd, host db1", redact=True)
    assert m.content == "staging: DB_PASSWORD=[REDACTED:secret-keyword], host db1"
    raw = store.conn.execute("SELECT group_concat(content) FROM memories").fetchone()[0]
    assert "S3cr3tP4ssw0rd" not in raw
    hits = api.recall(store, "staging DB host").hits
    assert hits and hits[0].memory.id == m.id


def test_remember_redact_without_secret_is_unchanged(store):
    m = api.remember(store, "we squash before merging", redact=True)
    assert m.content == "we squash before merging"


def test_cli_refuses_then_redacts(cli):
    text = "billing uses sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    r = cli("remember", text, "--no-embed")
    assert r.exit_code == 1
    assert "--redact" in r.stderr and "sk_live_4eC39" not in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("remember", text, "--no-embed", "--redact", "--json")
    assert r.exit_code == 0, r.stderr
    assert "[REDACTED:stripe-access-key]" in r.stdout and "sk_live_4eC39" not in r.stdout


# -- every way in: import, git hook, MCP (the CLI and api are covered above) --------------------------

AWS_NOTE = "deploy key AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY for staging"


def test_import_refuses_credentials_unless_redact(store, tmp_path):
    path = tmp_path / "memory.jsonl"
    path.write_text(
        '{"type":"entity","name":"Ops","entityType":"team","observations":["owns deploys"]}\n'
        + json.dumps({"type": "entity", "name": "Staging", "entityType": "env", "observations": [AWS_NOTE]})
        + "\n"
    )
    with pytest.raises(InvalidInput, match="credential"):
        api.import_file(store, path, fmt="server-memory")
    assert store.counts()["total"] == 0  # all or nothing
    report = api.import_file(store, path, fmt="server-memory", redact=True)
    assert report.memories_added == 2
    stored = [r[0] for r in store.conn.execute("SELECT content FROM memories")]
    assert not any("AKIAIOSFODNN7EXAMPLE" in c for c in stored) and any("[REDACTED:" in c for c in stored)


def test_commit_notes_store_credentials_redacted(store, tmp_path):

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *env, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", f"Rotate {AWS_NOTE}"],
                   check=True)
    memory = api.remember_commit(store, repo)
    assert "AKIAIOSFODNN7EXAMPLE" not in memory.content and "[REDACTED:" in memory.content


def test_prefilter_never_hides_a_library_finding(monkeypatch):
    """Lines that none of the plugins' own patterns match skip detect-secrets; on every line of the
    positives, negatives, the bench corpus and keyword/format variants, the library reports the
    same with and without that shortcut."""
    from memsafe.bench.quality import load_corpus

    safety.scan("warm up")  # configures the library and builds the prefilter
    assert safety._prefilter, "the prefilter should be in use with memsafe's plugins"
    lines = [line for text, _ in POSITIVES for line in text.split("\n")] + NEGATIVES
    lines += [m["content"] for m in load_corpus()["memories"]]
    lines += [f"{k}{sep}{v}{end}" for k in ("PASSWORD", "Api_Key", "auth-key", "db_pass", "SECRET", "private_key")
              for sep, end in (("=", ""), (": ", ""), (' = "', '"'), (": '", "'"), (' := "', '"'), ('("', '")'))
              for v in ("Xk9mQ2vpL7ab", "ab")]
    with safety._library_settings():
        fast = [safety._library_findings(line) for line in lines]
        monkeypatch.setattr(safety, "_prefilter", None)
        full = [safety._library_findings(line) for line in lines]
    assert fast == full
    assert sum(bool(f) for f in full) >= 10  # the comparison covered real library findings


AWS = "AKIAIOSFODNN7EXAMPLE"


GITHUB = "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"


@pytest.mark.parametrize("args", [
    ["--tag", GITHUB], ["--tag", AWS], ["--entity", AWS], ["--project", "password=hunter2Secret9x"],
])
def test_a_credential_in_a_tag_project_or_entity_is_refused_like_in_content(cli, args):
    result = cli("remember", "CI token rotation happens monthly", *args)
    assert result.exit_code != 0 and "credential" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert GITHUB.lower() not in cli("list", "--json").stdout.lower()
    assert cli("remember", "CI token rotation happens monthly", "--tag", "ops").exit_code == 0
    result = cli("update", "1", *(["--tag", AWS] if args[0] != "--tag" else args))
    assert result.exit_code != 0 and "credential" in result.stderr


def test_graph_names_with_a_credential_are_refused(store):
    with pytest.raises(SecretDetected, match="credential"):
        api.relate(store, "deploy bot", f"uses {GITHUB}", "GitHub", create=True)
    with pytest.raises(SecretDetected, match="credential"):
        api.add_entity(store, AWS)


@pytest.mark.parametrize(
    "text",
    [
        "the db password is Xk9#mP2qL7vR",
        "aws secret access key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws key AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "staging api key was 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    ],
)
def test_credentials_written_as_prose_are_refused_and_redacted(cli, text):
    # these were stored in clear; with --redact the AWS secret key stayed in clear next to a redacted key id
    r = cli("remember", text)
    assert r.exit_code == 1 and "looks like a credential" in r.stderr
    r = cli("remember", text, "--redact", "--json")
    assert r.exit_code == 0, r.stderr
    stored = json.loads(r.stdout)["content"]
    for secret in ("Xk9#mP2qL7vR", "wJalrXUtnFEMI", "9f8e7d6c5b4a"):
        assert secret not in stored


@pytest.mark.parametrize(
    "text",
    [
        "rotate the API key every 90 days",
        "the password reset flow lives in auth/reset.py",
        "token bucket limiter allows 100 requests per second",
        "the secret is kept in Vault under kv/prod",
        "refresh the access token before it expires",
    ],
)
def test_prose_about_credentials_is_not_a_credential(cli, text):
    r = cli("remember", text)
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("filler", ["abcdefghij" * 3, "0123456789abcdef", "word and another word "])
def test_a_secret_across_a_window_boundary_of_a_long_line_is_found(filler):
    """Long lines are scanned in overlapping windows (safety.WINDOW, safety.OVERLAP): a secret that
    straddles a window boundary, at every offset across it, is still found and redacted whole."""
    secrets = [("AKIAIOSFODNN7EXAMPLE", "aws-access-key"),
               ("ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "github-token"),
               ("password = hunter2xyzQ9ab", "secret-keyword")]
    step = safety.WINDOW - safety.OVERLAP
    for secret, kind in secrets:
        for shift in range(-len(secret) - 2, 3, 5):
            start = step + shift  # the second window starts at `step`; the first ends at WINDOW
            head = (filler * (start // len(filler) + 2))[:start]
            text = head + " " + secret + " " + filler * ((3 * safety.WINDOW) // len(filler))
            assert "\n" not in text and len(text) > 2 * safety.WINDOW
            findings = safety.scan(text)
            assert kind in {f.type for f in findings}, (secret, shift)
            assert secret.split(" = ")[-1] not in safety.redact(text, findings)


def test_a_finding_inside_a_long_token_is_widened_to_the_whole_token():
    token = "AKIAIOSFODNN7EXAMPLE" + "x" * 50_000
    text = "key " + "y" * 30_000 + "/" + token + " after"
    findings = safety.scan(text)
    assert [text[f.start : f.end] for f in findings] == ["y" * 30_000 + "/" + token]
    assert safety.redact(text, findings) == "key [REDACTED:aws-access-key] after"


def _prefilter_corpus() -> list[str]:
    """Texts for the literal-prefilter checks: every positive and negative, the bench corpus, and
    keyword/format variants in mixed case, with Unicode case folding (Kelvin sign, long s)."""
    from memsafe.bench.quality import load_corpus

    texts = [text for text, _ in POSITIVES] + NEGATIVES + [m["content"] for m in load_corpus()["memories"]]
    texts += [f"{k}{sep}{v}{end}" for k in ("PASSWORD", "Api_Key", "auth-key", "db_pass", "SECRET", "Token", "\u212aey")
              for sep, end in (("=", ""), (": ", ""), (' = "', '"'), (": '", "'"), (' := "', '"'), ('("', '")'),
                               (" is ", ""), (" ", ""))
              for v in ("Xk9mQ2vpL7abZr5tW", "ab")]
    texts += ["the db pa\u017f\u017fword is Xk9#mP2qLw8z", "BEARER abc123def456ghi789jkl012mno345"]
    return texts


def test_literal_prefilter_skips_only_patterns_that_cannot_match():
    """A pattern is skipped only when a literal that every match must contain is absent
    (safety._Literals): on every text of the corpus, each pattern memsafe searches (the library's
    gates and keyword regexes, memsafe's own rules) either may match or finds nothing."""
    safety.scan("warm up")
    patterns = [*safety._prefilter, *safety._keyword_regexes, *safety._OWN_RULES]
    checked = 0
    for text in _prefilter_corpus():
        literals = safety._Literals(text)
        for pattern in patterns:
            if pattern.search(text):
                checked += 1
                assert pattern in literals.passing(tuple(patterns)), (pattern.pattern[:60], text)
                assert literals.may_match(pattern), (pattern.pattern[:60], text)
    assert checked >= 40  # the corpus exercised real matches


def test_literal_prefilter_changes_no_finding(monkeypatch):
    """scan() finds the same with the literal prefilter as without it."""
    texts = _prefilter_corpus()
    fast = [safety.scan(t) for t in texts]
    monkeypatch.setattr(safety._Literals, "passing", lambda self, patterns: patterns)
    assert fast == [safety.scan(t) for t in texts]
    assert sum(bool(f) for f in fast) >= 20


@pytest.mark.parametrize("pattern, requirements", [
    (r"AKIA[0-9A-Z]{16}", [{"AKIA"}]),
    (r"(?:ghp|gho)_[a-z]{3}", [{"gh"}, {"p", "o"}, {"_"}]),  # the parser factors out "gh"
    (r"ab(?i:CD)ef", [{"ab"}, {"ef"}]),  # a case-folded group in a case-sensitive pattern: skipped
    (r"(?i)Bearer[ \t]+x", [{"\0bearer"}, {"\0 ", "\0\t"}, {"\0x"}]),  # \0: look in the text lower-cased
    (r"key\s*[=:]\s*['\"]", [{"key"}, {"=", ":"}, {"'", '"'}]),
    (r"(?:a|b)?c+d*", [{"c"}]),  # optional parts require nothing
    (r"x|[0-9]", []),  # a branch that requires nothing: nothing is known
])
def test_required_literals_of_a_pattern(pattern, requirements):
    import re

    found = safety._literals_of(re.compile(pattern))
    assert sorted(map(sorted, found)) == sorted(map(sorted, requirements))


@pytest.mark.parametrize("pattern, text", [
    ("(?i)\u017fecret", "secret"),  # long s folds onto s
    ("(?i)\u212aey", "KEY"),  # Kelvin sign folds onto k
    ("(?i)\u0131d", "ID"),  # dotless i folds onto i
    ("(?i)\u0130d", "id"),  # dotted capital I folds onto i
    ("(?i)[\u017fx]ecret", "Secret"),  # in a class too
    ("x|(?i:\u017f)", "s"),  # an inline case-folded group in a case-sensitive pattern
])
def test_literal_prefilter_keeps_a_pattern_whose_letters_fold_onto_ascii(pattern, text):
    """Unicode case folding maps a few letters onto ASCII (the long s, the Kelvin sign, the dotless
    and dotted i): a case-insensitive pattern naming one matches an ASCII text, and the prefilter,
    which reads ASCII texts lower-cased, must not skip it."""
    import re

    rx = re.compile(pattern)
    assert rx.search(text)
    assert safety._Literals(text).may_match(rx)


def test_literal_prefilter_plans_stay_bounded_over_many_gate_subsets():
    """scan() plans each text's own subset of the library's gates: over many different subsets the
    plans kept stay bounded and each pattern is parsed once, not once per subset."""
    safety.scan("warm up")
    gates = tuple(safety._prefilter)
    literals = safety._Literals("password = Xk9#mP2qLw AKIAIOSFODNN7EXAMPLE")
    before = safety._literals_of.cache_info().misses
    for n in range(600):
        subset = tuple(g for i, g in enumerate(gates) if (n >> (i % 10)) & 1 or i == n % len(gates))
        assert set(literals.passing(subset)) <= set(subset)
    assert len(safety._plans) <= 256
    assert safety._literals_of.cache_info().misses - before <= len(gates)


def test_literal_prefilter_reads_a_non_ascii_text_lower_cased_too():
    """One accented letter in a text used to make every case-insensitive pattern search it (1 MB of
    prose: 0.3 s -> 4 s, CJK text 3.4 s): a non-ASCII text is now read lower-cased as well, after
    mapping the four letters that fold onto ASCII ones, and findings are unchanged."""
    import re

    keyword = re.compile(r"(?i)password")
    assert not safety._Literals("naïve café text").may_match(keyword)
    for text in ("PASSWORD é", "paſſword é", "pa\u017f\u017fword", "\u0130 password"):
        assert safety._Literals(text).may_match(keyword) == bool(keyword.search(text)), text
    assert safety._Literals("token: \u212aX9mPqLwZ7vB4nR é").may_match(re.compile(r"(?i)kx9m"))
    found = safety.scan("déploiement: password = Xk9#mP2qLw7vB4 (café)")
    assert [f.type for f in found] == ["secret-keyword"]


def test_finding_lines_are_counted_once_over_many_findings():
    """scan() numbered each finding's line by counting newlines from the start of the text: 1 MB
    holding 71,000 `pwd=...` assignments took 70 s (now counted in one pass, 2.4 s). The lines
    stay right, on one line and across lines."""
    text = "\n".join(f"pwd=Xk9mP{i:05d}qLw" + ("\n" * (i % 3)) for i in range(300))
    found = safety.scan(text)
    assert len(found) >= 250
    assert [f.line for f in found] == [text.count("\n", 0, f.start) + 1 for f in found]
    assert {f.line for f in safety.scan("pwd=Xk9mPqLw1 pwd=Xk9mPqLw2 pwd=Xk9mPqLw3")} == {1}


def test_widening_a_finding_gives_the_token_around_it():
    """safety._Widener finds each finding's token by a binary search over the line's runs (walking
    the token per finding was quadratic: `AKIA` repeated, 125,000 characters, 39 s). It gives what
    walking gives: back over token characters but "=", forward over token characters."""
    import random

    def walked(line: str, start: int, end: int) -> tuple[int, int]:
        back, ahead = set("-_+/.~") | set(string.ascii_letters + string.digits), set("-_+/.~=")
        ahead |= set(string.ascii_letters + string.digits)
        while start > 0 and line[start - 1] in back:
            start -= 1
        while end < len(line) and line[end] in ahead:
            end += 1
        return start, end

    rng = random.Random(7)
    for _ in range(300):
        line = "".join(rng.choice("ab=/ .:\t9é") for _ in range(rng.randint(1, 60)))
        widener = safety._Widener(line)
        for _ in range(10):
            start = rng.randint(0, len(line))
            end = rng.randint(start, len(line))
            assert widener.widen(start, end) == walked(line, start, end), (line, start, end)


def test_a_piece_that_repeats_is_scanned_once(monkeypatch):
    """1 MB of a repeated key (`AKIA` x 250,000) took 8 s and a repeated line holding one 34 s per
    MB, the library costing ~1 ms per piece: a line or window seen before in the same text reuses
    its findings. Findings, offsets and lines stay those of scanning every piece."""
    calls = []
    real = safety._scan_piece
    monkeypatch.setattr(safety, "_scan_piece", lambda piece, *a: calls.append(piece) or real(piece, *a))
    run = "AKIA" * 50_000
    assert [(f.type, f.start, f.end) for f in safety.scan(run)] == [("aws-access-key", 0, len(run))]
    assert len(calls) == 2  # the windows of a run of period 4 are one text, and the shorter last one
    calls.clear()
    key = "AKIAIOSFODNN7EXAMPLE"
    text = "\n".join([f"aws key {key} here"] * 2_000 + [f"and {key}"])
    found = safety.scan(text)
    assert len(calls) == 2
    assert [f.line for f in found] == list(range(1, 2_002))
    assert all(text[f.start : f.end] == key for f in found)


def test_own_rules_read_lower_cased_find_what_they_find_ignoring_case():
    """safety._rules_for searches an ASCII text lower-cased with case-sensitive copies of the rules
    that ignore case (8x faster on 1 MB of key assignments): on every corpus text, in its own case,
    upper case and lower case, the same rules match as with the rules themselves."""
    texts = _prefilter_corpus() + ["Authorization: BEARER abc123def456ghi789jkl012", "API-KEY := 'Xk9mQ2vpL7abZr5tW'"]
    for text in texts:
        for variant in (text, text.upper(), text.lower()):
            expected = tuple(rx for rx in safety._OWN_RULES if rx.search(variant))
            assert safety._rules_for(variant) == expected, variant


def test_redaction_that_lengthens_a_text_within_the_limit_is_stored(store):
    """1 MB of `aws_access_key_id = AKIA…` lines, remembered with --redact, was refused: each
    20-character key becomes the 25-character `[REDACTED:aws-access-key]`, and the redacted text
    went over the 1,000,000-character limit the input was within."""
    line = "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
    text = (line * (api.MAX_CONTENT_CHARS // len(line) + 1))[: api.MAX_CONTENT_CHARS]
    memory = api.remember(store, text, redact=True, embed_now=False)
    assert len(memory.content) > api.MAX_CONTENT_CHARS and "AKIA" not in memory.content
    assert memory.content.startswith("aws_access_key_id = [REDACTED:aws-access-key]\n")
