# ruff: noqa: E501
"""Source of memsafe/data/bench_corpus.json (run: python scripts/bench_corpus_src.py).

Written for memsafe: a fictional company "Harbor" with services, people, incidents, commands
and release notes. Semantic queries share no content word with their target; keyword queries
name exact identifiers; graph queries need one hop through a relation between entities.
"""

import json
from pathlib import Path

M = {
    "m01": ("decision", "We squash commits before merging pull requests into main, so every change lands as one commit."),
    "m02": ("preference", "Alice prefers code review comments to be phrased as questions rather than commands."),
    "m03": ("fact", "The staging cluster is torn down every Friday at 18:00 UTC to save money; recreate it with `make staging-up`."),
    "m04": ("fact", "Incident 2024-03-12: billing-service returned HTTP 502 because the ledger-db connection pool was exhausted; fixed by raising POOL_MAX_SIZE from 10 to 40."),
    "m05": ("fact", "ERR_LEDGER_LOCK means two workers tried to post the same invoice at once; the second retry usually succeeds."),
    "m06": ("fact", "ERR_LEDGER_TIMEOUT appears when ledger-db takes longer than 5 seconds to answer; check slow queries first."),
    "m07": ("fact", "To run only the fast tests use `pytest -m 'not slow' -x`; the slow marker covers anything that loads the model."),
    "m08": ("preference", "Priya wants all new frontend components written in TypeScript with strict mode enabled."),
    "m09": ("decision", "We chose Postgres over MongoDB for the ledger because we need multi-row transactions."),
    "m10": ("fact", "Redis 7.2 is used as a cache only; never store anything in it that cannot be rebuilt."),
    "m11": ("fact", "Bob Okafor is the on-call lead for infrastructure this quarter; page him through PagerDuty, not Slack."),
    "m12": ("fact", "The auth-gateway signs JWTs with RS256 and rotates keys every 30 days via the `rotate-keys` cron job."),
    "m13": ("decision", "Never log full request bodies in auth-gateway: they contain passwords. Use the `redact_body()` helper."),
    "m14": ("fact", "The Elasticsearch index is rebuilt nightly; a full reindex takes about 40 minutes."),
    "m15": ("fact", "Release v2.4.0 added CSV export to the reports page and dropped support for Internet Explorer 11."),
    "m16": ("fact", "Release v2.5.0 introduced dark mode and moved settings to a new `preferences.toml` file."),
    "m17": ("fact", "Release v2.5.1 was a hotfix for a crash when preferences.toml was missing."),
    "m18": ("decision", "Use `terraform plan -out=tfplan` before every apply; applying without a saved plan is forbidden in prod."),
    "m19": ("fact", "The deploy pipeline runs on GitHub Actions; the workflow file is .github/workflows/deploy.yml."),
    "m20": ("decision", "Deploys to production need two approvals in the GitHub environment protection rules."),
    "m21": ("preference", "I like commit messages in the imperative mood, e.g. 'Add retry to uploader', with a short body."),
    "m22": ("fact", "Kafka topic invoices.v1 keeps messages for 7 days; consumers in analytics must keep up or lose data."),
    "m23": ("fact", "Diego owns the analytics pipeline and the weekly revenue dashboard in Metabase."),
    "m24": ("decision", "Mei Tanaka leads security reviews; anything touching authentication needs her sign-off."),
    "m25": ("fact", "Node 20 LTS is the only supported runtime for the frontend; Node 18 builds fail on the new bundler."),
    "m26": ("fact", "The Python services target Python 3.12; 3.13 is blocked until onnxruntime ships wheels."),
    "m27": ("decision", "Use `uv pip compile requirements.in -o requirements.txt` to pin dependencies; don't edit requirements.txt by hand."),
    "m28": ("fact", "Flaky test test_upload_resume fails on CI when the S3 mock starts slowly; it is quarantined with @pytest.mark.flaky."),
    "m29": ("fact", "The mobile app talks to the API through api.harbor.dev and must send the X-Client-Version header."),
    "m30": ("decision", "We decided to keep the monorepo; splitting it into many repositories cost more in tooling than it saved."),
    "m31": ("fact", "Office wifi network HarborGuest blocks SSH; use the VPN or tether to a phone."),
    "m32": ("decision", "Database migrations are written with Alembic and must be reversible; every upgrade() needs a downgrade()."),
    "m33": ("fact", "The `--dry-run` flag of ./scripts/backfill.py prints what would change without writing anything."),
    "m34": ("fact", "The `--force` flag of ./scripts/backfill.py skips the confirmation prompt; use with care."),
    "m35": ("decision", "Timezone bugs: store all timestamps in UTC and convert only at display time in the browser."),
    "m36": ("fact", "The search box debounces keystrokes by 300 ms to avoid hammering search-indexer."),
    "m37": ("fact", "Feature flags live in LaunchDarkly; the kill switch for new checkout is `checkout_v2_enabled`."),
    "m38": ("fact", "Error E1017 from the payment provider means the card was declined for insufficient funds; show a friendly message."),
    "m39": ("fact", "Error E1071 from the payment provider is a duplicate idempotency key; safe to ignore after the first success."),
    "m40": ("fact", "Local dev uses docker compose; `docker compose up -d db cache` starts just Postgres and Redis."),
    "m41": ("preference", "We prefer small pull requests under 400 lines; big ones get split before review."),
    "m42": ("fact", "The nightly backup of ledger-db goes to s3://harbor-backups/ledger and is kept for 35 days."),
    "m43": ("fact", "Restore drills happen every quarter; last time restoring the ledger took 2 hours 10 minutes."),
    "m44": ("fact", "CORS is configured in auth-gateway/cors.py; only *.harbor.dev origins are allowed."),
    "m45": ("decision", "The frontend uses React Query for server state and Zustand for local UI state; no Redux."),
    "m46": ("fact", "Rate limit on the public API is 100 requests per minute per token; exceeding it returns 429."),
    "m47": ("fact", "On macOS, install the pre-commit hooks with `pre-commit install`; they run ruff and mypy."),
    "m48": ("decision", "ruff replaced flake8 and isort in March; the config is in pyproject.toml under [tool.ruff]."),
    "m49": ("fact", "Memory leak in notifications-worker was caused by an unbounded lru_cache on render_template; fixed by maxsize=512."),
    "m50": ("fact", "notifications-worker sends email through SendGrid; SMS goes through Twilio."),
    "m51": ("fact", "Priya is out on parental leave until September; frontend questions go to Tom Becker meanwhile."),
    "m52": ("decision", "Our API pagination is cursor-based; offset pagination was removed because it skipped rows under concurrent inserts."),
    "m53": ("fact", "The CI cache key includes the hash of uv.lock, so changing dependencies busts the cache."),
    "m54": ("decision", "We use semantic versioning; breaking API changes bump the major version and need a migration guide."),
    "m55": ("fact", "The GPU runner gpu-01 is reserved for model training on weekends."),
    "m56": ("fact", "Standup is at 09:30 Berlin time; async updates in #team-harbor are fine if you cannot join."),
    "m57": ("decision", "Logging uses structlog with JSON output in production and pretty console output locally."),
    "m58": ("preference", "Alice Chen maintains the invoice PDF renderer and wants visual diffs attached to any change in it."),
    "m59": ("fact", "OpenTelemetry traces are exported to Honeycomb; sample rate is 10% in prod, 100% in staging."),
    "m60": ("decision", "The password hashing algorithm is argon2id with memory cost 64 MiB; bcrypt hashes are rehashed on next login."),
    "m61": ("preference", "Avoid ORM lazy loading in list endpoints; use selectinload to prevent N+1 queries."),
    "m62": ("preference", "Tom Becker prefers pairing over long written design docs for frontend work."),
    "m63": ("fact", "The billing-service exposes Prometheus metrics on port 9102 at /metrics."),
    "m64": ("decision", "Secrets are stored in Vault under secret/harbor/<service>; never commit .env files."),
    "m65": ("decision", "Image tags are the git SHA; `latest` is never deployed."),
    "m66": ("fact", "Staging database is refreshed from an anonymised prod snapshot every Monday."),
    "m67": ("fact", "Max upload size is 25 MB; larger files must use the multipart endpoint /v1/uploads/multipart."),
    "m68": ("decision", "Architecture decision records (ADRs) go in docs/adr/ using the Nygard template; number them sequentially."),
    "m69": ("fact", "The reports page timed out for big customers until we added an index on invoices(customer_id, created_at)."),
    "m70": ("decision", "Celery was replaced by Dramatiq for background jobs because of Celery's memory growth."),
    "m71": ("fact", "For local HTTPS use mkcert; the dev certificate lives in ~/.harbor/certs."),
    "m72": ("decision", "Dependabot PRs are merged on Tuesdays after CI passes; majors need a human review."),
    "m73": ("decision", "The support team reads customer-facing incident updates from statuspage; update it within 15 minutes of an outage."),
    "m74": ("decision", "Code freeze starts two days before each release; only fixes tagged release-blocker may merge."),
    "m75": ("fact", "Config precedence: CLI flags, then env vars, then harbor.toml, then built-in defaults."),
    "m76": ("fact", "The Android app minimum SDK is 26; iOS supports 15 and newer."),
    "m77": ("preference", "Use feature branches named <ticket>-<slug>, e.g. HAR-1234-fix-login."),
    "m78": ("fact", "WebSocket connections through the load balancer drop after 60 s idle; clients send a ping every 25 s."),
    "m79": ("decision", "Accessibility: every interactive element needs a visible focus ring; we test with axe in CI."),
    "m80": ("decision", "The ledger uses integer cents for money; floats are banned for currency amounts."),
    "m81": ("fact", "Old invoices older than 7 years are archived to Glacier as required by tax law."),
    "m82": ("decision", "Slack channel #incidents is for live outages only; postmortems go to Confluence."),
    "m83": ("fact", "The ledger-db replica lag alert fires above 30 seconds; usually caused by a long vacuum."),
    "m84": ("fact", "checkout-api is written in Go 1.22 and is the only Go service we run."),
    "m85": ("fact", "Tom Becker set up Storybook for the component library; run `npm run storybook` to browse it."),
    "m86": ("fact", "gpu-01 has two A100 cards and runs Ubuntu 22.04."),
    "m87": ("preference", "Alice Chen reviews on Tuesdays and Thursdays; tag @alice-chen on the PR and expect comments within a day."),
    "m88": ("fact", "Twilio trial numbers can only text verified phones; production uses the paid sender +1-555-0100."),
    "m89": ("fact", "RabbitMQ runs as a 3-node cluster; the management UI is on port 15672."),
    "m90": ("fact", "Python 3.11 is still used by the legacy reporting scripts in tools/legacy/."),
    "m91": ("fact", "ERR_LEDGER_SKEW is logged when a client clock is more than 2 minutes off; harmless unless it repeats."),
    "m92": ("preference", "Bob Okafor likes runbooks to start with the single command that fixes the common case."),
    "m93": ("fact", "The Postgres upgrade to 16 is planned for Q3; pg_upgrade was rehearsed on a copy of staging."),
    "m94": ("fact", "Grafana dashboards are provisioned from the repo folder ops/grafana/ and edited only through pull requests."),
}

# Explicit entities (the `--entity` option of remember), besides those extracted from the text.
ENTITIES = {
    "m08": ["Priya Nair"],
    "m51": ["Priya Nair"],
    "m23": ["Diego Ramirez", "analytics-pipeline"],
    "m43": ["ledger-db"],
    "m14": ["Elasticsearch"],
    "m55": ["gpu-01"],
    "m70": ["Dramatiq"],
    "m89": ["RabbitMQ"],
}

TAGS = {
    "m04": ["incident"], "m05": ["errors"], "m06": ["errors"], "m38": ["errors", "payments"],
    "m39": ["errors", "payments"], "m15": ["release"], "m16": ["release"], "m17": ["release"],
    "m49": ["incident"], "m69": ["incident"], "m91": ["errors"],
}

RELATIONS = [
    ("checkout-api", "depends_on", "ledger-db", 1.0),
    ("billing-service", "depends_on", "ledger-db", 1.0),
    ("checkout-api", "owned_by", "Alice Chen", 1.0),
    ("billing-service", "publishes_to", "invoices.v1", 1.0),
    ("invoices.v1", "consumed_by", "analytics-pipeline", 1.0),
    ("payments-team", "owns", "billing-service", 1.0),
    ("payments-team", "owns", "checkout-api", 1.0),
    ("Mei Tanaka", "reviews", "auth-gateway", 1.0),
    ("auth-gateway", "reads_secrets_from", "Vault", 1.0),
    ("search-indexer", "writes_to", "Elasticsearch", 1.0),
    ("notifications-worker", "sends_sms_via", "Twilio", 1.0),
    ("Dramatiq", "uses_broker", "RabbitMQ", 1.0),
    ("model-training", "runs_on", "gpu-01", 1.0),
    ("web-frontend", "led_by", "Priya Nair", 1.0),
    ("billing-service", "exports_traces_to", "Honeycomb", 0.8),
    ("infrastructure", "on_call", "Bob Okafor", 0.5),
]

SEMANTIC = [
    ("m01", "how should my branch history be tidied when it gets combined?"),
    ("m02", "how should feedback on a teammate's PR be worded: asking or instructing?"),
    ("m03", "why does the pre-production environment vanish at the end of the week?"),
    ("m08", "what language with tight type checking should web UI widgets use?"),
    ("m09", "why did we pick a relational store instead of a document database for accounting?"),
    ("m11", "who do I wake up for infra emergencies these days, and using which pager app?"),
    ("m14", "how much time is needed to regenerate the lookup catalogue from scratch?"),
    ("m20", "how many people must okay a release to live servers?"),
    ("m21", "what grammatical form should change descriptions follow?"),
    ("m23", "who maintains the charts showing earnings over time?"),
    ("m24", "who has to okay changes affecting user login from a safety standpoint?"),
    ("m30", "why haven't we broken the codebase apart into separate projects?"),
    ("m31", "why can't I reach remote machines from the visitor internet?"),
    ("m35", "how should dates and hours be kept to avoid regional offset mistakes?"),
    ("m36", "how long do we wait after typing before querying?"),
    ("m41", "what is the size limit for a patch someone is asked to look over?"),
    ("m43", "how long did recovering the accounting data take in the latest rehearsal?"),
    ("m45", "which libraries hold fetched and client-only data in the browser?"),
    ("m50", "which vendor delivers our text messages to phones?"),
    ("m51", "who is the interim contact for browser-side topics during her absence?"),
    ("m52", "why don't list endpoints use page numbers with a numeric start position?"),
    ("m54", "when compatibility is lost, which release digit goes up?"),
    ("m55", "when is the graphics card box booked for ML jobs?"),
    ("m56", "when is the daily morning meeting?"),
    ("m65", "which identifier marks each docker build, and is the newest one shipped?"),
    ("m66", "how does the test environment get realistic records, and how often?"),
    ("m68", "where are write-ups of past design choices stored, and in what format?"),
    ("m70", "which distributed task framework took over after the old one kept leaking RAM?"),
    ("m73", "how quickly must users be told when the product breaks?"),
    ("m74", "when do we stop landing new work ahead of shipping a version?"),
    ("m78", "why do realtime sockets disconnect when quiet, and how is it prevented?"),
    ("m79", "what keyboard navigation requirement applies to clickable controls?"),
    ("m80", "how are monetary values represented to avoid rounding errors?"),
    ("m81", "what happens to billing records after the legal retention period?"),
    ("m82", "where do we discuss a site failure while it is happening?"),
]

# Queries with a second memory that also answers them.
ALSO_RELEVANT = {"which vendor delivers our text messages to phones?": ["m88"]}

KEYWORD = [
    ("m04", "POOL_MAX_SIZE"),
    ("m05", "ERR_LEDGER_LOCK"),
    ("m06", "what does ERR_LEDGER_TIMEOUT mean"),
    ("m91", "ERR_LEDGER_SKEW"),
    ("m07", "pytest -m 'not slow'"),
    ("m10", "Redis 7.2"),
    ("m12", "RS256"),
    ("m13", "redact_body()"),
    ("m15", "v2.4.0"),
    ("m16", "v2.5.0"),
    ("m17", "v2.5.1 hotfix"),
    ("m18", "tfplan"),
    ("m19", ".github/workflows/deploy.yml"),
    ("m22", "invoices.v1"),
    ("m25", "Node 18"),
    ("m26", "Python 3.13"),
    ("m27", "requirements.in"),
    ("m28", "test_upload_resume"),
    ("m29", "X-Client-Version header"),
    ("m32", "downgrade()"),
    ("m33", "--dry-run"),
    ("m34", "--force"),
    ("m37", "checkout_v2_enabled"),
    ("m38", "E1017"),
    ("m39", "E1071"),
    ("m44", "cors.py"),
    ("m49", "lru_cache maxsize"),
    ("m53", "uv.lock"),
    ("m60", "argon2id"),
    ("m61", "selectinload"),
    ("m63", "port 9102"),
    ("m67", "/v1/uploads/multipart"),
    ("m69", "customer_id"),
    ("m71", "mkcert"),
    ("m77", "HAR-1234"),
    ("m84", "Go 1.22"),
    ("m89", "15672"),
    ("m90", "Python 3.11"),
]

GRAPH = [
    (["m42"], "how is the storage behind checkout-api backed up?", "checkout-api -depends_on-> ledger-db"),
    (["m87"], "who reviews checkout-api pull requests, and when?", "checkout-api -owned_by-> Alice Chen"),
    (["m22"], "how long are billing-service events retained?", "billing-service -publishes_to-> invoices.v1"),
    (["m23"], "who owns the consumer of invoices.v1?", "invoices.v1 -consumed_by-> analytics-pipeline"),
    (["m63", "m04"], "where can I scrape numbers for the payments-team service?", "payments-team -owns-> billing-service"),
    (["m12"], "what signing scheme does the service Mei Tanaka reviews use?", "Mei Tanaka -reviews-> auth-gateway"),
    (["m64"], "where does auth-gateway keep its credentials?", "auth-gateway -reads_secrets_from-> Vault"),
    (["m14"], "how long does a full rebuild of the search-indexer target take?", "search-indexer -writes_to-> Elasticsearch"),
    (["m88"], "why can notifications-worker only reach some numbers in dev?", "notifications-worker -sends_sms_via-> Twilio"),
    (["m89"], "where is the admin console of the Dramatiq broker?", "Dramatiq -uses_broker-> RabbitMQ"),
    (["m86", "m55"], "what hardware does model-training get?", "model-training -runs_on-> gpu-01"),
    (["m51", "m08"], "is the person leading web-frontend available?", "web-frontend -led_by-> Priya Nair"),
    (["m59"], "what share of billing-service traces is sampled in prod?", "billing-service -exports_traces_to-> Honeycomb"),
    (["m43"], "how long would recovering the checkout-api database take?", "checkout-api -depends_on-> ledger-db"),
    (["m83", "m06"], "what alerts exist for the database under billing-service?", "billing-service -depends_on-> ledger-db"),
    (["m92", "m11"], "how does the infrastructure on-call person like runbooks written?", "infrastructure -on_call-> Bob Okafor"),
    (["m09", "m43"], "why does payments-team's ledger use Postgres?", "payments-team -owns-> checkout-api -> ledger"),
]


def build() -> dict:
    memories = []
    for mid, (kind, content) in M.items():
        item = {"id": mid, "kind": kind, "content": content}
        if mid in ENTITIES:
            item["entities"] = ENTITIES[mid]
        if mid in TAGS:
            item["tags"] = TAGS[mid]
        memories.append(item)
    queries = []
    for n, (target, q) in enumerate(SEMANTIC, 1):
        relevant = [target, *ALSO_RELEVANT.get(q, [])]
        queries.append({"id": f"s{n:02d}", "type": "semantic", "query": q, "relevant": relevant})
    for n, (target, q) in enumerate(KEYWORD, 1):
        queries.append({"id": f"k{n:02d}", "type": "keyword", "query": q, "relevant": [target]})
    for n, (targets, q, hop) in enumerate(GRAPH, 1):
        queries.append({"id": f"g{n:02d}", "type": "graph", "query": q, "relevant": targets, "hop": hop})
    return {
        "name": "memsafe-bench-harbor",
        "version": 1,
        "description": "Developer memories of a fictional company (Harbor): decisions, preferences, incidents, "
        "commands and flags, people and services, release notes; with related pairs and distractors.",
        "project": "harbor",
        "memories": memories,
        "relations": [{"source": s, "relation": r, "target": t, "weight": w} for s, r, t, w in RELATIONS],
        "queries": queries,
    }


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "memsafe" / "data" / "bench_corpus.json"
    out.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
