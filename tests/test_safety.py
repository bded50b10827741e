"""Secrets: credentials are refused by default, stored redacted on request or when memsafe captures
text on its own, and ordinary developer text (placeholders in code included) is never mistaken for
one (memsafe.safety, api.remember, CLI `remember --redact`, hooks, import, MCP)."""

from __future__ import annotations

import json
import re
import string
import subprocess

import pytest

from memsafe import api, safety
from memsafe.errors import SecretDetected

# Fake credentials only: random values in each vendor's format. A documented example key (AWS's
# AKIAIOSFODNN7EXAMPLE, Stripe's docs test key) is a look-alike: the vendor publishes it, so it
# unlocks nothing.
AWS = "AKIA2DN2YBY6AWTY2O7O"
AWS_SECRET = "I3/dXRZv7qdYdk2r7xgHWPB6PRWJ1Gk8cgSCifdF"
GITHUB = "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"

# (text, the finding type it must give): every one is found, and redaction leaves none of it.
SECRETS = [
    # passwords written as prose or as short assignments
    ("the password is hunter2", "secret-keyword"),
    ("my production database password is hunter2", "secret-keyword"),
    ("NAS password: pass=Tr0ub4dor", "secret-keyword"),
    ("pass=hunter2 for the NAS", "secret-keyword"),
    ("pwd: hunter2", "secret-keyword"),
    ("login admin, password: Zx81!qq", "secret-keyword"),
    ("the root password for the staging db is s3cr3t!", "secret-keyword"),
    ("wifi passphrase was plum-tiger-88", "secret-keyword"),
    ("MYSQL_ROOT_PASSWORD: hunter2", "secret-keyword"),
    ('password = "hunter2"', "secret-keyword"),
    ("DB_PASSWORD=Vq3rT8wLz2 in the staging .env", "secret-keyword"),
    ("export API_KEY=a8f5f167f44f4964e6c998dee827110c", "secret-keyword"),
    ("client_secret: 9xQ2vT7mLp4RzK8w", "secret-keyword"),
    ("the db password is Xk9#mP2qL7vR", "secret-keyword"),
    ("our staging password is 'Summer2024!' until Friday", "secret-keyword"),
    ("pwd: `Tr0ub4dor&3`", "secret-keyword"),
    ("machine api.example.com login deploy password 9f3c1a7be2d84c60", "secret-keyword"),
    # connection strings with credentials
    ("DATABASE_URL=postgres://app:hunter2@db.internal:5432/prod", "basic-auth-credentials"),
    ("postgresql://report:Gr4nite-Owl-61@10.0.0.12/analytics", "basic-auth-credentials"),
    ("mongodb+srv://admin:k9Lm2xQ7@cluster0.ab1cd.mongodb.net/test", "basic-auth-credentials"),
    ("REDIS_URL=redis://:hunter2@cache.internal:6379/0", "basic-auth-credentials"),
    ("amqp://orders:R4bbit!mq@mq.internal:5672/", "basic-auth-credentials"),
    ("mysql://root:toor123@127.0.0.1:3306/app", "basic-auth-credentials"),
    ("jdbc:postgresql://db.internal:5432/prod?user=app&password=hunter2&ssl=true", "secret-keyword"),
    ("Server=tcp:db.example.net;Database=app;User Id=sa;Password=Hunter2!;", "secret-keyword"),
    ("db url https://admin:Bl4ckC0ffee77@db.example.com/prod", "basic-auth-credentials"),
    # token formats
    ("npm token npm_OhbVrpoiVgRV5IfLBcbfnoGMbJmTPSIAoCLr", "npm-token"),
    ("//registry.npmjs.org/:_authToken=npm_OhbVrpoiVgRV5IfLBcbfnoGMbJmTPSIAoCLr", "npm-token"),
    ("PyPI: pypi-AgEIcHlwaS5vcmcyifDLkDmWJ6UuVTAIjvFu7WICPhDeOZIiBOB_Y6sHrFH2ZUCr_lgotu2iXW7GboIRoL3u6aHwnMztVua",
     "pypi-token"),
    ("HF_TOKEN=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", "huggingface-token"),
    ("slack bot xoxb-165726284987-7694531473799-QyvbF2ulFnwZqvr4MS4rJaH8", "slack-token"),
    ("user token xoxp-313678377701-436349578856-8557444313518-566f893697b590481194f309ffea518f", "slack-token"),
    ("socket mode xapp-1-AHEZ5EDJJTF-3186999386774-d9136682575250def91799e2786d3748421599e3e9c8fe21da80270815fe85df",
     "slack-token"),
    ("alerts go to https://hooks.slack.com/services/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", "slack-token"),
    ("stripe sk_live_1ITtNZPHaQ0Jt7Qg84iqh4gV for billing", "stripe-access-key"),
    ("restricted key rk_live_JjrsMnTvnRO2qGFq562dfOB1", "stripe-access-key"),
    ("STRIPE_WEBHOOK_SECRET=whsec_rcavXiOqkVCJTBJahe84S5jIc1xLJjBi", "stripe-webhook-secret"),
    ("token: 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",
     "github-token"),
    ("export GITHUB_TOKEN=ghp_pYEZAmggQBwBAD3UdRPPgdzUvZ3gpmmICiBl", "github-token"),
    ("oauth gho_rDp37eCZ32JgdPI1af7W2pkAFEn3z5dkyayq", "github-token"),
    ("app installation token ghs_7YYDsBS9UYJQTFjmsn9dLVIdVuddLEG62Hkd", "github-token"),
    ("gitlab glpat-YqM6Ojb6mjBHqSiFVKu4 for the runner", "gitlab-token"),
    ("OPENAI_API_KEY=sk-proj-fNUfTAFnT0tEuw0dwQ0FIunWe8Cz6SNDCdyZQJiJSZQdoHwHen3SO3oXyGf3azU3", "openai-token"),
    ("OPENAI sk-proj-abcdefghijklmnopqrstT3BlbkFJabcdefghijklmnopqrst", "openai-token"),
    ("ANTHROPIC_API_KEY=sk-ant-api03-iQOpMN0PZLqy1WwMZaMKA3P744B8vkKQlENCzsdfF8j61yX_ZFsan2Cw7gFp6r7O425u85HFJ-"
     "EJ4jKEIQOkrtDXtBi10Q7AA", "anthropic-api-key"),
    ("ci user key AKIA2DN2YBY6AWTY2O7O", "aws-access-key"),
    ("aws_secret_access_key = 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", "secret-keyword"),
    ("maps key AIzazctEq8oB7GVvouNndNWYzjFnMpfS2ViRb1-", "google-api-key"),
    ("SENDGRID_API_KEY=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", "sendgrid-api-key"),
    ('{"type": "service_account", "project_id": "demo-441", '
     '"private_key_id": "4319e1b429ad564b858f9a3e247cb2c083eb8cb3", '
     '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n", '
     '"client_email": "ci@demo-441.iam.gserviceaccount.com"}', "private-key"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bqQ2x5vWWxtoYgsz\n-----END RSA PRIVATE KEY-----",
     "private-key"),
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oGRs\n-----END EC PRIVATE KEY-----",
     "private-key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n", "private-key"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF8xq0UBCAC7yZ5vWWxtoYgsz\n-----END PGP PRIVATE KEY BLOCK-----",
     "private-key"),
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTAp\n-----END ENCRYPTED PRIVATE KEY-----",
     "private-key"),
    ("session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
     "eyJzdWIiOiJ1c2VyXzg4NDEiLCJyb2xlIjoiYWRtaW4iLCJpYXQiOjE3NjcyMjU2MDAsImV4cCI6"
     "MTc2NzMxMjAwMH0.gAIqK4-pdEuNb0lCo7pt_LI198F6sXyriJ1RIaKM-t5", "json-web-token"),
    ("curl -H 'Authorization: Bearer abc123def456ghi789jkl012mno345pqr678' https://api", "bearer-token"),
    # a secret inside pasted code
    ("const stripe = require('stripe')('sk_live_1ITtNZPHaQ0Jt7Qg84iqh4gV');", "stripe-access-key"),
    ('client = OpenAI(api_key="sk-proj-fNUfTAFnT0tEuw0dwQ0FIunWe8Cz6SNDCdyZQJiJSZQdoHwHen3SO3oXyGf3azU3")',
     "openai-token"),
    ("app.config['SECRET_KEY'] = 'f3c9a1b7e2d84c60a5b1'", "secret-keyword"),
    # Unicode disguises: full-width letters, zero-width characters
    ("ＧＩＴＨＵＢ token ｇｈｐ＿ｐＹＥＺＡｍｇｇＱＢｗＢＡＤ３Ｕｄ"
     "ＲＰＰｇｄｚＵｖＺ３ｇｐｍｍＩＣｉＢｌ", "github-token"),
    ("token ghp_pYEZAmggQBw\u200bBAD3UdRPPgdzUv\u200cZ3gpmmICiBl", "github-token"),
    ("the pass\u200bword is hunter2", "secret-keyword"),
    ("ＡＫＩＡ２ＤＮ２ＹＢＹ６ＡＷＴＹ２Ｏ７Ｏ", "aws-access-key"),
    ("password = hunter2xyzQ9ab", "secret-keyword"),
    ('password = "hunter2xyzQ9!ab"', "secret-keyword"),
    ("gcp AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "google-api-key"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "json-web-token",
    ),
]

# Placeholders, references and test values in code and config pasted into a prompt to an
# assistant: no credential (part of LOOK_ALIKES).
PLACEHOLDERS_IN_CODE = [
    "SECRET_KEY = 'django-insecure-change-me'",
    'app.secret_key = "super secret key"',
    'app.secret_key = "supersecretkey"',
    'JWT_SECRET=your_jwt_secret_here',
    'password: "example-password"',
    '{"username": "admin", "password": "password"}',
    'api_key = "YOUR_API_KEY"',
    'AWS_SECRET_ACCESS_KEY=<your-secret-access-key>',
    'export OPENAI_API_KEY="sk-..."',
    'token: "{{ secrets.GITHUB_TOKEN }}"',
    'password = "{{ db_password }}"',
    'POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:-postgres}',
    'client_secret = "REPLACE_ME"',
    'auth_token = "dummy-token"',
    'assert user.check_password("testpass123")',
    'SECRET_KEY = os.environ.get("SECRET_KEY", "dev")',
    'secret: !ENV ${SECRET}',
    'api_key: "<API_KEY>"',
    'token = "TODO"',
    'DB_PASS=example',
    'passwd = getpass.getpass()',
    '"apiKey": "YOUR_FIREBASE_API_KEY",',
    'password = "foobar"',
    'password=test',
    "token = 'abc123'",
    'STRIPE_SECRET_KEY=sk_test_...',
    'secret_key = settings.SECRET_KEY',
    'redis://:password@localhost:6379/0',
    'postgresql://user:pass@localhost/dbname',
    'password: "********"',
    'api_key="xxxx-xxxx-xxxx-xxxx"',
    '"password": "secret"',
    'login(user="bob", password="correct horse battery staple")',
    'fake_token = "fake-token-for-tests"',
    'PASSWORD = "test_password"',
    'mock_secret = "mock-secret"',
    'headers = {"Authorization": f"Bearer {token}"}',
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com',
    'API_KEY = "insert-your-key"',
    'GITHUB_TOKEN=ghp_your_token_here',
    'password = "pass1234"',
    "password = 'qwerty123'",
    'SECRET = "s3cret"',
    'password: admin',
    'password=root',
    'user.set_password("newpassword")',
    'mysql -u root -ppassword mydb',
    'DATABASE_URL = "postgres://postgres:postgres@localhost:5432/test"',
    'SECRET_KEY = "dev-secret-key-change-in-production"',
    'JWT_SECRET_KEY = "my-jwt-secret"',
    '    password: str = Field(..., min_length=8)',
    'def login(username: str, password: str) -> Token:',
    'token = request.headers.get("X-Auth-Token")',
    "api_key = config['api_key']",
    'secret = base64.b64encode(os.urandom(32)).decode()',
    'password = hashlib.sha256(password.encode()).hexdigest()',
    'const password = "Password1!";  // seed user',
    'apiKey: process.env.REACT_APP_API_KEY,',
    'ENV SECRET_KEY=changeme',
    'secrets.token_urlsafe(32)',
    "token = jwt.encode(payload, SECRET_KEY, algorithm='HS256')",
    '<add key="ApiKey" value="your-api-key" />',
    'password = "test1234"',
    'AUTH_TOKEN="replace-with-your-token"',
    'access_token = "ACCESS_TOKEN"',
    'private_key = "-----BEGIN PRIVATE KEY-----\\n...\\n-----END PRIVATE KEY-----"',
    'Bearer <token>',
    'export API_TOKEN=abcdef123456',
    'client = Client(api_key="test-key")',
    'password = "12345678"',
    'spring.datasource.password=secret',
    'spring.datasource.password=${DB_PASSWORD}',
    'password = "admin123"',
]

# Ordinary developer text that resembles a credential: none may give a finding.
LOOK_ALIKES = [
    # hashes, ids, digests
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the retry bug",
    "fixed in 3f2a9c1 and cherry-picked to release/2.4",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "image digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 pinned",
    "uuid 123e4567-e89b-12d3-a456-426614174000 is the tenant id",
    "request_id: 550E8400-E29B-41D4-A716-446655440000",
    "the integrity hash is sha512-9Jq0+2OG1P0mJRtp7y3sRbBz0d0LCmw+4QmWk6Y4Ts8=",
    # public keys and certificates
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7yZ5vWWxtoYgsz+Cek6iJxom6lpS83MtDFaZq4QOKNj ana@laptop",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3eGbU7kZlzJmN0H5sP6m2j8x9Lr4TqWvYhQ0c1bN2 deploy@ci",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEpFZ8xq0UBCAC7yZ5v\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa\n-----END CERTIFICATE-----",
    "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQENBF8xq0UBCAC7yZ5vWWxtoYgsz+Cek6iJ\n-----END PGP PUBLIC KEY BLOCK-----",
    "the key file must start with -----BEGIN OPENSSH PRIVATE KEY----- and be mode 600",
    # documented example keys and masked or placeholder tokens
    "AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key id",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Stripe's docs show sk_test_4eC39HqLyjWDarjtT1zdp7dc in every curl example",
    "export GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "set HF_TOKEN=hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx before running",
    "OPENAI_API_KEY=sk-proj-XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "token prefixes: ghp_ for GitHub, npm_ for npm, hf_ for Hugging Face, sk-ant- for Anthropic",
    "call hf_hub_download(repo_id, filename) and cache it",
    "set npm_config_cache=/tmp/npm-cache in CI",
    # versions and numbers
    "upgraded to v2.0.1-rc.3+build.5 and node 18.19.0",
    "token: v2.10.3",
    "the build id is 20240517.3 and the pipeline is #4521",
    "password_reset_token_ttl = 3600",
    # base64 of ordinary text, and ordinary words that sit next to keywords
    "the header is dGhpcyBpcyBhIHRlc3Qgb2YgYmFzZTY0 (base64 of plain text)",
    "aGVsbG8gd29ybGQsIHRoaXMgaXMganVzdCBhIG5vdGU=",
    "the password field is required",
    "reset your password at https://accounts.example.com/reset",
    "password: ******",
    "pass the test suite before merging: make test",
    "the password is required and must be at least 12 characters",
    "the password is stored in 1Password under 'prod db'",
    "the password is SHA-256 hashed with a per-user salt",
    "the API key is 32 characters long",
    "the secret is kept in Vault under kv/prod",
    "the session token is valid for 15 minutes",
    "We rotate secrets every Friday; the staging DB password rotates too",
    "Use Bearer token authentication for the internal API",
    # URLs without credentials
    "see https://github.com/org/repo/pull/1234#issuecomment-987654321",
    "DATABASE_URL=postgres://localhost/db",
    "postgres://db.internal:5432/app?sslmode=require",
    "connect with psql postgres://report@analytics.internal/analytics",
    "redis://localhost:6379/0",
    "DATABASE_URL=postgres://${DB_USER}:${DB_PASSWORD}@db:5432/app",
    "mongodb://user:password@localhost:27017/test",
    # placeholders in pasted code and config
    "app.config['SECRET_KEY'] = 'my_secret_key'",
    'password = "mysecretpassword"',
    'DB_PASSWORD: "changeme"',
    'self.client.login(username="admin", password="password123")',
    'token = "<your-token>"',
    "API_KEY=${API_KEY}",
    'password = os.environ["DB_PASSWORD"]',
    "api_key = os.getenv('OPENAI_API_KEY')",
    "const key = process.env.STRIPE_SECRET_KEY;",
    'secret = "xxx"',
    'test_password = "P@ssw0rd!"',
    "DB_PASSWORD=S3cr3tP4ssw0rd in .env.example",
    "mongodb://admin:pa55word@localhost:27017/dev",
    "password: '***'",
    'OPENAI_API_KEY = "your-api-key-here"',
    "api_key = None",
    "token = get_token()",
    "docker run -e POSTGRES_PASSWORD=postgres -p 5432:5432 postgres:16",
    *PLACEHOLDERS_IN_CODE,
    # other prose
    "C:\\Users\\First Last\\AppData\\Local\\memsafe\\memory.db",
    "Müller → 日本語 🚀 naïve, ＡＢＣ１２３ full-width",
    "see /usr/local/lib/python3.11/site-packages/foo/bar.py line 42",
    "ERR_SSL_PROTOCOL_ERROR when hitting the proxy; also ECONNRESET and E11000",
    "password: ${DB_PASSWORD}",
    'secret = "<your-secret-here>"',
    "request id dGhpcyBpcyBhIHRlc3Q is a base64 identifier in prose",
    'key = "user_id"',
    "ssh-rsa public keys live in ~/.ssh/authorized_keys",
    "max_tokens = 4096 and api_key_header = X-Api-Key",
    "TODO: bump to v2.0.1 (don't forget) — C++ port, O'Reilly book, 50% faster",
    "an unsigned token with no claims: eyJhbGciOiJub25lIn0.e30.",
]


def test_the_tables_hold_at_least_forty_secrets_and_forty_look_alikes():
    assert len(SECRETS) >= 40 and len(LOOK_ALIKES) >= 40 and len(PLACEHOLDERS_IN_CODE) >= 40
    assert len({t for t, _ in SECRETS}) == len(SECRETS) and len(set(LOOK_ALIKES)) == len(LOOK_ALIKES)


@pytest.mark.parametrize(("text", "kind"), SECRETS)
def test_every_secret_in_the_table_is_found_and_redacted(text, kind):
    findings = safety.scan(text)
    assert kind in {f.type for f in findings}, findings
    redacted = safety.redact(text, findings)
    assert f"[REDACTED:{kind}]" in redacted
    for f in findings:
        assert text[f.start : f.end] not in redacted
    assert safety.scan(redacted) == []


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_no_look_alike_in_the_table_is_a_secret(text):
    assert safety.scan(text) == []
    assert safety.redact(text) == text


@pytest.mark.parametrize("token", safety.TOKEN_FORMATS, ids=lambda t: t.kind)
def test_each_token_format_finds_its_examples(token):
    for example in token.examples:
        assert token.kind in {f.type for f in safety.scan(f"value: {example} ok")}, example


def test_a_disguised_secret_is_redacted_in_the_text_as_written():
    """The scan reads full-width letters as ASCII and skips invisible characters; the finding's
    offsets are the original text's, also after characters that NFKC lengthens (ﬁ -> fi, ① -> 1)."""
    wide = "".join(chr(ord(c) + 0xFEE0) for c in GITHUB)
    split = GITHUB[:10] + "\u200b\u2060" + GITHUB[10:20] + "\ufeff" + GITHUB[20:]
    for secret in (wide, split):
        text = "ﬁle ① ﬃ\nsee\u00ad: " + secret + " — done ﬁ"
        (f,) = safety.scan(text)
        assert (f.type, text[f.start : f.end], f.line) == ("github-token", secret, 2)
        assert safety.redact(text, [f]) == "ﬁle ① ﬃ\nsee\u00ad: [REDACTED:github-token] — done ﬁ"


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
    m = api.remember(store, "staging: DB_PASSWORD=Vq3rT8wLz2, host db1", redact=True)
    assert m.content == "staging: DB_PASSWORD=[REDACTED:secret-keyword], host db1"
    raw = store.conn.execute("SELECT group_concat(content) FROM memories").fetchone()[0]
    assert "Vq3rT8wLz2" not in raw
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


# -- placeholders in pasted code, and text memsafe captures on its own --------------------------------

AWS_NOTE = f"deploy key {AWS} secret {AWS_SECRET} for staging"
PASTED_CODE = '''Why does login fail in the test client? Here is the setup:

```python
app.config['SECRET_KEY'] = 'my_secret_key'
app.config['DATABASE_URL'] = os.environ["DATABASE_URL"]
password = "mysecretpassword"
API_KEY = os.getenv("API_KEY", "your-api-key-here")
client.login(username="admin", password="password123")
STRIPE_KEY = "<your-token>"  # or ${STRIPE_KEY} in the compose file, "changeme" in .env.example
token = "xxx"; secret = "***"
```
const key = process.env.OPENAI_API_KEY;'''


def _db_bytes(db_path) -> bytes:
    """Every byte memsafe wrote for the store: the database file, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))


def _indexed(store, secret: str) -> bool:
    """Whether `secret` reached the word index (its longest alphanumeric run is a term) or the
    substring index (every trigram of that run is a term: a random run shares not all of them
    with other text)."""
    run = max(re.findall(r"[A-Za-z0-9]+", secret), key=len).lower()
    store.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.words USING fts5vocab(main, memories_fts, row)")
    if store.conn.execute("SELECT count(*) FROM temp.words WHERE term = ?", (run,)).fetchone()[0]:
        return True
    trigrams = {run[i : i + 3] for i in range(len(run) - 2)}
    found = {r[0] for r in store.conn.execute(
        f"SELECT term FROM memories_tri_vocab WHERE term IN ({','.join('?' * len(trigrams))})", tuple(trigrams))}
    return found == trigrams


def _commit(repo, message: str) -> None:
    if not (repo / ".git").exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *env, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", message], check=True)


def test_placeholders_in_pasted_code_are_remembered_verbatim(store, cli):
    memory = api.remember(store, PASTED_CODE, embed_now=False)
    assert memory.content == PASTED_CODE
    store.close()
    r = cli("remember", PASTED_CODE.replace("login fail", "signup fail"), "--no-embed", "--json")
    assert r.exit_code == 0, r.stderr
    assert "[REDACTED" not in r.stdout


@pytest.mark.parametrize("key, kind", [
    ('app.config["SECRET_KEY"] = "f3c9a1b7e2d84c60a5b1"', "secret-keyword"),
    (f'os.environ.setdefault("GITHUB_TOKEN", "{GITHUB}")', "github-token"),
    ('password = "hunter2"', "secret-keyword"),
])
def test_a_real_key_inside_pasted_code_is_refused_with_the_redact_hint(store, key, kind):
    text = PASTED_CODE.replace("token = \"xxx\"", key)
    with pytest.raises(SecretDetected) as info:
        api.remember(store, text, embed_now=False)
    assert kind in str(info.value) and "--redact" in str(info.value)
    assert store.counts()["total"] == 0
    memory = api.remember(store, text, redact=True, embed_now=False)
    assert f"[REDACTED:{kind}]" in memory.content and "my_secret_key" in memory.content


def test_mcp_remember_refuses_a_key_with_the_hint_and_keeps_placeholders(db_path):
    from test_server import call, inproc, is_error, text_of

    srv = inproc(db_path)
    result = call(srv, "remember", {"content": f"CI uses {GITHUB}"})
    assert is_error(result) and "github-token" in text_of(result) and "redact" in text_of(result)
    assert GITHUB not in text_of(result)
    assert not is_error(call(srv, "remember", {"content": PASTED_CODE}))
    assert not is_error(call(srv, "remember", {"content": f"CI uses {GITHUB}", "redact": True}))
    assert GITHUB.encode() not in _db_bytes(db_path)


def test_redact_for_capture_replaces_each_secret_and_keeps_the_rest():
    text = f"deploy with {GITHUB}\nthe NAS password is hunter2\n" + PASTED_CODE
    redacted, kinds = safety.redact_for_capture(text)
    assert kinds == ("github-token", "secret-keyword")
    assert redacted == text.replace(GITHUB, "[REDACTED:github-token]").replace("hunter2", "[REDACTED:secret-keyword]")
    assert safety.redact_for_capture(PASTED_CODE) == (PASTED_CODE, ())


def test_a_commit_with_a_real_key_is_stored_redacted_and_never_reaches_the_file(store, db_path, tmp_path):
    repo = tmp_path / "repo"
    _commit(repo, f"Rotate CI token\n\nnew token {GITHUB}; the NAS password is hunter2")
    memory = api.remember_commit(store, repo)
    assert "[REDACTED:github-token]" in memory.content and "[REDACTED:secret-keyword]" in memory.content
    assert "Rotate CI token" in memory.content
    _commit(repo, f"Move the deploy key\n\n{AWS_NOTE}")  # and through `hook backfill`
    report = api.backfill_commits(store, repo)
    assert report.remembered == 1
    for secret in (GITHUB, "hunter2", AWS, AWS_SECRET):
        assert not _indexed(store, secret), secret
    store.close()
    raw = _db_bytes(db_path)
    for secret in (GITHUB, "hunter2", AWS, AWS_SECRET):
        assert secret.encode() not in raw, secret


def test_a_key_in_pasted_code_is_redacted_through_a_rewrite_and_never_reaches_the_history(store, db_path, tmp_path):
    """A commit whose message pastes code holding placeholders and a real key, then amended to hold
    another real key: the memory, the earlier version the rewrite kept (memory_versions) and every
    byte of the file hold neither key, and the placeholders stay as written."""
    repo = tmp_path / "repo"
    code = PASTED_CODE.replace('token = "xxx"', f'GITHUB_TOKEN = "{GITHUB}"')
    _commit(repo, "Login test client setup\n\n" + code)
    first = api.remember_commit(store, repo)
    assert "[REDACTED:github-token]" in first.content and "my_secret_key" in first.content
    old = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    message = "Login test client setup\n\n" + code.replace(GITHUB, AWS) + f"\naws secret {AWS_SECRET}"
    subprocess.run(["git", *env, "-C", str(repo), "commit", "-q", "--amend", "--allow-empty", "-m", message],
                   check=True)
    new = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    queue = tmp_path / "queue"
    queue.mkdir()
    (queue / "1-rewrite").write_text(f"rewrite amend main\n{old} {new}\n")
    assert api.drain_queue(store, repo, queue).updated == 1
    (memory,) = api.list_memories(store, all_projects=True)
    assert memory.id == first.id and "[REDACTED:aws-access-key]" in memory.content
    assert "mysecretpassword" in memory.content and "<your-token>" in memory.content
    versions = [r[0] for r in store.conn.execute("SELECT content FROM memory_versions WHERE memory_id = ?",
                                                 (memory.id,))]
    assert versions == [first.content]
    shown = api.history(store, memory.id)
    assert GITHUB not in repr(shown) and AWS not in repr(shown) and AWS_SECRET not in repr(shown)
    for secret in (GITHUB, AWS, AWS_SECRET):
        assert not _indexed(store, secret), secret
    store.close()
    raw = _db_bytes(db_path)
    for secret in (GITHUB, AWS, AWS_SECRET):
        assert secret.encode() not in raw, secret
    assert b"my_secret_key" in raw


def test_capture_keeps_every_placeholder_and_replaces_only_the_real_keys():
    """`safety.redact_for_capture`, what text memsafe captures on its own goes through: in pasted
    code with a real key among placeholders, only the key is replaced; the placeholders of the
    look-alike table come back as they were."""
    code = PASTED_CODE.replace('token = "xxx"', f'token = "{GITHUB}"; aws_key = "{AWS}"')
    redacted, kinds = safety.redact_for_capture(code)
    assert kinds == ("github-token", "aws-access-key")
    assert redacted == code.replace(GITHUB, "[REDACTED:github-token]").replace(AWS, "[REDACTED:aws-access-key]")
    text = "\n".join(PLACEHOLDERS_IN_CODE)
    assert safety.redact_for_capture(text) == (text, ())


def test_a_commit_with_placeholders_is_stored_verbatim(store, tmp_path):
    repo = tmp_path / "repo"
    message = "Test settings for the login client\n\n" + PASTED_CODE
    _commit(repo, message)
    memory = api.remember_commit(store, repo)
    body = "\n".join(f"    {line}" if line.strip() else "" for line in PASTED_CODE.splitlines())
    assert body in memory.content and "[REDACTED" not in memory.content  # indented as git log shows it


def _server_memory_file(path, observations):
    path.write_text("".join(json.dumps({"type": "entity", "name": f"Note {i}", "entityType": "note",
                                        "observations": [o]}) + "\n" for i, o in enumerate(observations)))
    return path


def test_an_imported_record_with_a_real_key_is_stored_redacted_and_never_reaches_the_file(store, db_path, tmp_path):
    path = _server_memory_file(tmp_path / "memory.jsonl", [AWS_NOTE, PASTED_CODE, "owns deploys"])
    report = api.import_file(store, path, fmt="server-memory")
    assert report.memories_added == 3 and not report.skipped
    assert any("redacted" in n for n in report.notes)
    stored = [r[0] for r in store.conn.execute("SELECT content FROM memories ORDER BY id")]
    assert stored[0] == "Note 0: deploy key [REDACTED:aws-access-key] secret [REDACTED:secret-keyword] for staging"
    assert stored[1] == f"Note 1: {PASTED_CODE}"
    # a memsafe export holding the key (in the text and in its history) is redacted too
    export = tmp_path / "export.jsonl"
    api.export_to_path(store, export, all_projects=True)
    records = [json.loads(line) for line in export.read_text().splitlines()]
    memory = next(r for r in records if r.get("type") == "memory" and r["content"].endswith("owns deploys"))
    memory["content"] = f"owns deploys with {GITHUB}"
    memory["versions"] = [{**{k: memory[k] for k in ("kind", "project", "tags", "importance", "confidence",
                                                      "status")}, "content": f"old token {GITHUB}",
                           "valid_from": memory["created_at"], "valid_to": memory["created_at"], "cause": "update"}]
    export.write_text("".join(json.dumps(r) + "\n" for r in records))
    other_path = tmp_path / "other" / "memory.db"
    other = api.open_store(str(other_path)).store
    report = api.import_file(other, export)
    assert report.memories_added == 3 and sum("redacted" in n for n in report.notes) == 2, report
    assert other.conn.execute("SELECT count(*) FROM memory_versions").fetchone()[0] == 1
    for opened in (store, other):
        for secret in (GITHUB, AWS, AWS_SECRET):
            assert not _indexed(opened, secret), secret
        opened.close()
    raw = _db_bytes(db_path) + _db_bytes(other_path)
    for secret in (GITHUB, AWS, AWS_SECRET):
        assert secret.encode() not in raw, secret


@pytest.mark.backends("sqlite", "postgres")
def test_an_import_is_redacted_on_either_backend(store, tmp_path):
    path = _server_memory_file(tmp_path / "memory.jsonl", [AWS_NOTE, PASTED_CODE])
    api.import_file(store, path, fmt="server-memory")
    stored = sorted(m.content for m in api.list_memories(store, all_projects=True))
    assert stored == ["Note 0: deploy key [REDACTED:aws-access-key] secret [REDACTED:secret-keyword] for staging",
                      f"Note 1: {PASTED_CODE}"]
    assert not api.recall(store, AWS, all_projects=True, mode="lexical").hits


def test_import_refuses_a_credential_with_no_redact_and_keeps_nothing(cli, db_path, tmp_path):
    path = _server_memory_file(tmp_path / "memory.jsonl", [AWS_NOTE, "owns deploys"])
    r = cli("import", str(path), "--format", "server-memory", "--no-redact", "--no-embed")
    assert r.exit_code == 1 and "credential" in r.stderr and AWS not in r.stderr
    r = cli("import", str(path), "--format", "server-memory", "--no-embed", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["memories_added"] == 2 and AWS.encode() not in _db_bytes(db_path)


def test_mcp_transfer_import_stores_a_key_redacted(db_path, tmp_path):
    from test_server import call, inproc, is_error, text_of

    path = _server_memory_file(tmp_path / "memory.jsonl", [AWS_NOTE, PASTED_CODE])
    srv = inproc(db_path)
    srv.memsafe.start_warmup = lambda **_: None  # an import asks for vectors again: none in this test
    result = call(srv, "transfer", {"path": str(path), "direction": "import"})
    assert not is_error(result), text_of(result)
    assert AWS.encode() not in _db_bytes(db_path) and b"my_secret_key" in _db_bytes(db_path)


def test_prefilter_never_hides_a_library_finding(monkeypatch):
    """Lines that none of the plugins' own patterns match skip detect-secrets; on every line of the
    positives, negatives, the bench corpus and keyword/format variants, the library reports the
    same with and without that shortcut."""
    from memsafe.bench.quality import load_corpus

    safety.scan("warm up")  # configures the library and builds the prefilter
    assert safety._prefilter, "the prefilter should be in use with memsafe's plugins"
    lines = [line for text, _ in SECRETS for line in text.split("\n")] + LOOK_ALIKES
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
        f"aws secret access key {AWS_SECRET}",
        f"aws key {AWS} secret {AWS_SECRET}",
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
    for secret in ("Xk9#mP2qL7vR", AWS_SECRET, "9f8e7d6c5b4a"):
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
    secrets = [(AWS, "aws-access-key"),
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
    token = AWS + "q" * 50_000
    text = "key " + "y" * 30_000 + "/" + token + " after"
    findings = safety.scan(text)
    assert [text[f.start : f.end] for f in findings] == ["y" * 30_000 + "/" + token]
    assert safety.redact(text, findings) == "key [REDACTED:aws-access-key] after"


def _prefilter_corpus() -> list[str]:
    """Texts for the literal-prefilter checks: every positive and negative, the bench corpus, and
    keyword/format variants in mixed case, with Unicode case folding (Kelvin sign, long s)."""
    from memsafe.bench.quality import load_corpus

    texts = [text for text, _ in SECRETS] + LOOK_ALIKES + [m["content"] for m in load_corpus()["memories"]]
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
    literals = safety._Literals(f"password = Xk9#mP2qLw {AWS}")
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
    key = AWS
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
    line = f"aws_access_key_id = {AWS}\n"
    text = (line * (api.MAX_CONTENT_CHARS // len(line) + 1))[: api.MAX_CONTENT_CHARS]
    memory = api.remember(store, text, redact=True, embed_now=False)
    assert len(memory.content) > api.MAX_CONTENT_CHARS and "AKIA" not in memory.content
    assert memory.content.startswith("aws_access_key_id = [REDACTED:aws-access-key]\n")
