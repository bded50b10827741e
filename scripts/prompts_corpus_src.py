"""Build memsafe/data/prompts_corpus.json: the "prompts" corpus of `memsafe bench`.

    .venv/bin/python scripts/prompts_corpus_src.py

What users type to a coding assistant while they build software: five made-up projects (a Django
shop, a Rust CLI, a React Native app, an Airflow pipeline, an embedded C firmware), 60 prompts each,
in five users' own styles: requests and questions that carry the project's facts (names, dates,
versions, limits, decisions), pasted code, tracebacks, compiler errors and config snippets (with
placeholder values such as `SECRET_KEY = 'django-insecure-change-me'`, as users paste them), typos
and terse messages, and facts that change later in the project. Each prompt has the time it was
typed (UTC), over six to eight weeks per project; the questions are asked on NOW.

Each prompt is stored as the agent-loop capture stores a prompt: CAPTURE's kind, source and tags,
in the project it was typed in; each question is asked in its project.

Prompts and questions were written by hand, before any recall, bench or ranking ran on them. Types:
fact (a fact a prompt states), request (a fact stated inside a request or question), semantic (a
paraphrase sharing no content word with its answer), update (a fact given a new value later: the
question names the current prompt as relevant and the earlier ones as stale), keyword (an exception,
error code, config key or flag), temporal (names a date, or a day relative to NOW). The rules are in
docs/corpora.md.
"""

# ruff: noqa: E501  (prompts are data: one a line, pasted output as it was pasted)

from __future__ import annotations

import json
import sys

YEAR = 2025
NOW = "2025-04-14T09:00:00+00:00"  # a Monday
# How the agent-loop capture stores a user's prompt (a source this memsafe does not know yet is
# stored as "user" by the bench, which says so).
CAPTURE = {"kind": "conversation", "source": "hook", "tags": ["prompt"]}

SHOP = [
    ("shop-01", "02-03 09:12", "I'm starting a new project: an online shop for Fernwood Coffee, a small roastery in Utrecht. Django 4.2 LTS on Python 3.11, Postgres 14, server-rendered templates + htmx, no SPA. Can you propose a project layout with apps for catalog, cart, orders and accounts?"),
    ("shop-02", "02-03 09:40", "ok looks good. for the catalog: we have about 1,200 SKUs (beans, grinders, filters), each product can have variants by weight (250g, 500g, 1kg) and by grind. how would you model the variants?"),
    ("shop-03", "02-03 10:15", "Should the price live on the variant or on the product? Prices differ per weight but not per grind."),
    ("shop-04", "02-03 14:02", """I get this when running the tests, the migrations are there:
```
django.db.utils.ProgrammingError: relation "catalog_product" does not exist
LINE 1: ...catalog_product"."slug" FROM "catalog_product" WHERE ...
```
what am I missing?"""),
    ("shop-05", "02-04 08:55", "Our product pages have to load fast: the target is LCP under 1.5 s on a mid-range phone over 4G. Which image pipeline would you use for the product photos, sorl-thumbnail or something else?"),
    ("shop-06", "02-04 09:30", """photos go to an S3 bucket, fernwood-media in eu-central-1. here's my settings snippet, does it look right?
```python
AWS_STORAGE_BUCKET_NAME = "fernwood-media"
AWS_S3_REGION_NAME = "eu-central-1"
AWS_ACCESS_KEY_ID = os.environ["AWS_ACCESS_KEY_ID"]
AWS_SECRET_ACCESS_KEY = os.environ["AWS_SECRET_ACCESS_KEY"]
STORAGES = {"default": {"BACKEND": "storages.backends.s3.S3Storage"}}
```"""),
    ("shop-07", "02-04 11:20", "Maya (she does our frontend) wants the product grid to use htmx infinite scroll instead of pagination. Is that bad for SEO?"),
    ("shop-08", "02-05 10:05", "We ship to Germany, Austria and the Netherlands only. VAT is handled through the EU OSS scheme. How should I store the tax rates per country so the checkout shows the right gross price?"),
    ("shop-09", "02-05 10:48", "Free shipping above €40 order value, otherwise a flat €4.95. Where does that logic belong, in the cart app or in orders?"),
    ("shop-10", "02-05 15:30", """wrote this, the test fails:
```
FAILED cart/tests/test_totals.py::test_free_shipping_threshold - AssertionError: assert Decimal('4.95') == Decimal('0')
```
code:
```python
def shipping_cost(subtotal):
    if subtotal > FREE_SHIPPING_THRESHOLD:
        return Decimal("0")
    return Decimal("4.95")
```"""),
    ("shop-11", "02-06 09:10", "Login: we decided on django-allauth, email + password, plus Google as the only social login. No Facebook, no Apple for now. Can you show me the settings for that?"),
    ("shop-12", "02-06 09:52", "ACCOUNT_EMAIL_VERIFICATION mandatory or optional? we dont want to lose guest checkouts"),
    ("shop-13", "02-06 13:37", """this is my dev settings:
```python
SECRET_KEY = 'django-insecure-change-me'
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "fernwood", "USER": "postgres", "PASSWORD": "postgres", "HOST": "localhost"}}
```
how do you split settings for dev/staging/prod without django-environ?"""),
    ("shop-14", "02-07 10:00", "Payments: Stripe Checkout, not Elements. The webhook endpoint is /payments/stripe/webhook/. How do I verify the signature in a Django view?"),
    ("shop-15", "02-07 11:45", """getting this locally with stripe listen --forward-to localhost:8000/payments/stripe/webhook/
```
stripe.error.SignatureVerificationError: No signatures found matching the expected signature for payload
```"""),
    ("shop-16", "02-07 12:10", "nvm, I was reading request.POST instead of request.body. thanks"),
    ("shop-17", "02-10 09:20", "order numbers should look like FW-2025-000123, sequential per year. how do I generate them safely under concurrency in Postgres?"),
    ("shop-18", "02-10 14:05", """two checkouts at the same time, boom. I used max()+1 :(
```
django.db.utils.IntegrityError: duplicate key value violates unique constraint "orders_order_number_key"
DETAIL:  Key (number)=(FW-2025-000042) already exists.
```"""),
    ("shop-19", "02-11 08:40", "we expect around 200 orders per hour at peak (the Black Friday sale on the old Shopify store did 180/h). is a single gunicorn box with 4 workers enough?"),
    ("shop-20", "02-11 10:15", "Background jobs: Celery with Redis as the broker. The first task is send_order_confirmation. Should it get the order id or the order object?"),
    ("shop-21", "02-11 16:20", "Emails go out through Postmark, the transactional message stream is called 'outbound'. how do I wire that up with django-anymail?"),
    ("shop-22", "02-12 09:05", """in docker compose the worker can't see redis:
```
kombu.exceptions.OperationalError: Error 111 connecting to localhost:6379. Connection refused.
```"""),
    ("shop-23", "02-12 09:30", "right, the service name. REDIS_URL=redis://redis:6379/0 fixed it"),
    ("shop-24", "02-13 11:00", "Hosting: we're going with Render for now, one web service, one worker, managed Postgres. Joris (ops) wants deploys only on Tuesdays and Thursdays before 3pm. How do I set up a deploy hook from GitHub Actions that respects that?"),
    ("shop-25", "02-13 15:45", "how do I make the GH action fail if coverage drops below 85%? we agreed on 85 as the floor"),
    ("shop-26", "02-14 10:10", """CSRF issue on staging:
```
Forbidden (403)
CSRF verification failed. Request aborted.
Reason given for failure: Origin checking failed - https://staging.fernwoodcoffee.nl does not match any trusted origins.
```"""),
    ("shop-27", "02-14 10:25", "added CSRF_TRUSTED_ORIGINS = ['https://staging.fernwoodcoffee.nl'] and it works. should prod list the www and the bare domain?"),
    ("shop-28", "02-17 09:00", "The launch date is set: March 15. We need checkout, accounts and the subscription box ready by then. What's a realistic plan for the next 4 weeks, just me plus Maya part time?"),
    ("shop-29", "02-17 11:30", "Subscription box: customers pick their beans every 2 or 4 weeks, billed through Stripe Billing. Do I mirror the Stripe subscriptions in my own model or just query Stripe?"),
    ("shop-30", "02-18 14:20", "the grinder category needs a different product template (specs table, no grind options). template inheritance or a flag on the category?"),
    ("shop-31", "02-19 09:45", """```
TemplateSyntaxError at /shop/grinders/
Invalid block tag on line 14: 'endblock', expected 'endif'. Did you forget to register or load this tag?
```"""),
    ("shop-32", "02-19 10:00", "found it, missing endif. ugh"),
    ("shop-33", "02-20 13:10", "Joris says the managed Postgres on Render is 14 and they offer 16 now. anything in Django 4.2 that cares?"),
    ("shop-34", "02-21 09:30", "performance: the product list page does 63 queries. select_related or prefetch_related for variants + images?"),
    ("shop-35", "02-21 15:50", "down to 7 queries with prefetch_related('variants', 'images'). the list page p95 is 180 ms now on staging. good enough?"),
    ("shop-36", "02-24 10:05", "We moved the database from Postgres 14 to 16 over the weekend (pg_upgrade on Render). Is there anything I should re-check, like collations or the ordering of search results?"),
    ("shop-37", "02-24 11:40", "search: postgres full-text with SearchVector on name + description, with German and Dutch stemming. can one SearchVector use two configs?"),
    ("shop-38", "02-25 09:15", "Maya wants dark mode. CSS variables + prefers-color-scheme, or a toggle saved in the session?"),
    ("shop-39", "02-25 16:30", """happens only when I run pytest from the repo root:
```
E       django.core.exceptions.ImproperlyConfigured: Requested setting STRIPE_WEBHOOK_SECRET, but settings are not configured.
```"""),
    ("shop-40", "02-26 10:00", "pytest.ini had DJANGO_SETTINGS_MODULE = fernwood.settings.dev but the file is settings/local.py now. fixed"),
    ("shop-41", "02-27 09:20", "Marketing decided: the free shipping threshold goes up to €50 from March 1st (green coffee prices rose). The €4.95 flat fee stays. How do I make the threshold configurable without a deploy?"),
    ("shop-42", "02-27 14:00", "django-constance or a SiteSettings singleton model? it's only 3-4 values"),
    ("shop-43", "02-28 11:15", "Joris: deploys are now Thursdays only, the Tuesday deploys caused too many weekend fixes. Update the schedule check in the GH action accordingly"),
    ("shop-44", "03-03 09:30", "Email: we're switching from Postmark to Amazon SES (cheaper at our volume, about 3k emails a month). anymail supports SES, right? what changes besides the backend?"),
    ("shop-45", "03-03 13:45", """```
botocore.exceptions.ClientError: An error occurred (MessageRejected) when calling the SendRawEmail operation: Email address is not verified. The following identities failed the check in region EU-CENTRAL-1: orders@fernwoodcoffee.nl
```"""),
    ("shop-46", "03-04 10:20", "SES is still in the sandbox, I requested production access. meanwhile, can celery retry the confirmation email with backoff instead of failing?"),
    ("shop-47", "03-05 09:00", "LCP on the product page is 1.9 s on the Moto G test device, target still 1.5. the hero image is a 480 KB webp. ideas?"),
    ("shop-48", "03-05 15:10", "got it to 1.3 s with srcset + preloading the first image + fetchpriority=high. Maya is happy"),
    ("shop-49", "03-06 11:00", "The launch moves to March 29: the subscription box isn't ready and the roastery wants to launch with it. Can you help me cut scope for the first release, what can wait?"),
    ("shop-50", "03-07 09:45", "password reset emails land in spam at gmail. SPF and DKIM are set up for SES, DMARC is p=none. what else?"),
    ("shop-51", "03-10 10:30", """this fails with allauth, login returns False. why?
```python
def test_login(client, django_user_model):
    user = django_user_model.objects.create_user(email="a@example.com", password="mysecretpassword")
    assert client.login(email="a@example.com", password="mysecretpassword")
```"""),
    ("shop-52", "03-10 11:05", "AUTHENTICATION_BACKENDS was missing allauth's backend. works now"),
    ("shop-53", "03-11 14:30", "the subscription webhooks: customer.subscription.updated sometimes arrives before invoice.paid. how do I handle the ordering of stripe events?"),
    ("shop-54", "03-12 09:10", "The LCP target got stricter: marketing wants 1.2 s now for the product page, because of the Google Ads landing pages. We're at 1.3. What's left to squeeze?"),
    ("shop-55", "03-13 16:00", "load test with locust: 250 simulated orders/hour, checkout p95 620 ms, no errors. the single Render instance with 4 gunicorn workers holds. anything I should still watch?"),
    ("shop-56", "03-17 10:15", """sentry, happens when the cart holds only a gift card:
```
ZeroDivisionError: division by zero
  File "orders/views.py", line 88, in order_summary
    discount_pct = (discount / subtotal) * 100
```"""),
    ("shop-57", "03-18 09:00", "We're leaving Render for Fly.io, machines in Amsterdam (ams), because Render has no region close enough to keep our Postgres latency low. What do I need to change in the Dockerfile and the settings?"),
    ("shop-58", "03-19 11:40", """fly deploy fails:
```
Error: failed to fetch an image or build from source: error building: failed to solve: process "/bin/sh -c python manage.py collectstatic --noinput" did not complete successfully: exit code: 1
```"""),
    ("shop-59", "03-20 10:00", "collectstatic needed the S3 env vars at build time. I set a dummy STORAGES for the build stage. ok?"),
    ("shop-60", "03-21 15:30", "final check before the launch next week: can you list everything security-related I should verify in the prod settings (HSTS, secure cookies, etc.)?"),
]

SHOP_Q = [
    ("fact", "which countries does the shop ship to?", ["shop-08"], []),
    ("fact", "how many SKUs are in the catalog?", ["shop-02"], []),
    ("fact", "which social login did we allow?", ["shop-11"], []),
    ("fact", "what format do order numbers have?", ["shop-17"], []),
    ("fact", "what's the coverage floor we agreed on?", ["shop-25"], []),
    ("fact", "what is the Postmark message stream called?", ["shop-21"], []),
    ("fact", "how many orders per hour do we expect at peak?", ["shop-19"], []),
    ("fact", "what's the name of the S3 bucket for product photos and its region?", ["shop-06"], []),
    ("request", "which Django and Python versions is the shop built on?", ["shop-01"], []),
    ("request", "what's the path of the Stripe webhook endpoint?", ["shop-14", "shop-15"], []),
    ("request", "how often do subscription customers get beans and how is it billed?", ["shop-29"], []),
    ("request", "what did the locust load test show?", ["shop-55"], []),
    ("request", "how fast is the product list page after the prefetch change?", ["shop-35"], []),
    ("request", "how many emails do we send per month?", ["shop-44"], []),
    ("request", "who does the frontend work?", ["shop-07"], []),
    ("semantic", "which company processes the money when shoppers check out?", ["shop-14"], []),
    ("semantic", "a pair of simultaneous purchases got an identical reference", ["shop-18"], []),
    ("semantic", "why were the outgoing messages refused?", ["shop-45"], []),
    ("semantic", "the overview page crashed for someone buying just a voucher", ["shop-56"], []),
    ("semantic", "how did we get the hero picture to show up quicker on phones?", ["shop-48"], []),
    ("update", "which Postgres version does the shop run on?", ["shop-36"], ["shop-01"]),
    ("update", "what's the free shipping threshold?", ["shop-41"], ["shop-09"]),
    ("update", "on which days are we allowed to deploy?", ["shop-43"], ["shop-24"]),
    ("update", "which provider sends our transactional emails?", ["shop-44"], ["shop-21"]),
    ("update", "when is the shop launching?", ["shop-49"], ["shop-28"]),
    ("update", "what's the LCP target for the product page?", ["shop-54"], ["shop-05", "shop-47"]),
    ("update", "where is the shop hosted?", ["shop-57"], ["shop-24"]),
    ("keyword", "SignatureVerificationError", ["shop-15"], []),
    ("keyword", "CSRF_TRUSTED_ORIGINS", ["shop-27", "shop-26"], []),
    ("keyword", "kombu OperationalError Error 111", ["shop-22"], []),
    ("keyword", "TemplateSyntaxError endblock", ["shop-31"], []),
    ("keyword", "ImproperlyConfigured STRIPE_WEBHOOK_SECRET", ["shop-39"], []),
    ("keyword", "ACCOUNT_EMAIL_VERIFICATION", ["shop-12"], []),
    ("temporal", "what error did I paste on 12 February?", ["shop-22"], []),
    ("temporal", "what did I ask about on March 11?", ["shop-53"], []),
    ("temporal", "what was I working on on 24 February?", ["shop-36", "shop-37"], []),
]

TARN = [
    ("tarn-01", "01-13 20:14", "new side project: tarn, a cli to tail + filter json logs (like jq + tail -f but faster). rust, clap 4 derive. give me a skeleton main.rs with subcommands `follow` and `grep`"),
    ("tarn-02", "01-13 20:31", "crate name tarn is taken on crates.io, ill publish as tarn-logs but keep the binary called tarn. how do i set that in Cargo.toml"),
    ("tarn-03", "01-13 21:02", """```
error[E0502]: cannot borrow `buf` as mutable because it is also borrowed as immutable
  --> src/follow.rs:42:13
   |
40 |         let line = std::str::from_utf8(&buf[start..end])?;
   |                                         --- immutable borrow occurs here
41 |         if filter.matches(line) {
42 |             buf.clear();
   |             ^^^^^^^^^^^ mutable borrow occurs here
43 |             out.write_all(line.as_bytes())?;
   |                           ---- immutable borrow later used here
```"""),
    ("tarn-04", "01-14 19:45", "msrv: i want to support rust 1.70 for debian stable users. does clap 4.4 still build on 1.70?"),
    ("tarn-05", "01-14 20:10", "no async in this project. decided. std threads + crossbeam-channel, one reader thread per file. ok?"),
    ("tarn-06", "01-15 21:30", "perf goal: grep a 1 GB log file in under 10 s on my laptop (m1 air). currently 31 s lol. where do i start"),
    ("tarn-07", "01-15 21:55", "flamegraph says 70% in serde_json::from_str. i parse every line even when the filter is a plain substring. skip parsing if the pattern has no field selector?"),
    ("tarn-08", "01-16 22:05", "down to 12.4s with a memchr prefilter. next?"),
    ("tarn-09", "01-17 20:00", "read buffer is 64 KiB right now, BufReader::with_capacity(64 * 1024, f). worth going bigger?"),
    ("tarn-10", "01-17 20:40", """when the log line has no ts field:
```
thread 'main' panicked at src/output.rs:17:31:
called `Option::unwrap()` on a `None` value
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
```"""),
    ("tarn-11", "01-18 11:10", "output formats: plain, json, logfmt. --format flag, default plain. enum with ValueEnum derive?"),
    ("tarn-12", "01-18 11:45", """```
error[E0277]: the trait bound `Format: Clone` is not satisfied
   --> src/cli.rs:12:5
    |
12  |     #[arg(long, value_enum, default_value_t = Format::Plain)]
    |     ^ the trait `Clone` is not implemented for `Format`
```"""),
    ("tarn-13", "01-20 21:15", """tarn grep foo big.log | head -n 5 gives
```
Error: Broken pipe (os error 32)
```
how do other clis handle SIGPIPE in rust"""),
    ("tarn-14", "01-20 21:40", "ok reset SIGPIPE to default with libc at the start of main. unix only, fine for now"),
    ("tarn-15", "01-21 19:30", "timestamps: using the `time` crate not chrono, its smaller. parse rfc3339 and unix epoch millis. snippet?"),
    ("tarn-16", "01-22 20:20", "config file at ~/.config/tarn/config.toml, keys: default_format, color (auto|always|never), highlight (list of fields). serde + toml crate. how do i merge config with cli args so cli wins"),
    ("tarn-17", "01-23 22:10", """```
error: lifetime may not live long enough
  --> src/filter.rs:28:9
   |
24 | impl<'a> Filter<'a> {
   |      -- lifetime `'a` defined here
25 |     pub fn compile(expr: &str) -> Result<Filter<'a>> {
   |                          - let's call the lifetime of this reference `'1`
...
28 |         Ok(Filter { parts })
   |         ^^^^^^^^^^^^^^^^^^^^ returning this value requires that `'1` must outlive `'a`
```"""),
    ("tarn-18", "01-23 22:35", "made Filter own its Strings, no lifetime param. simpler"),
    ("tarn-19", "01-24 20:05", "release plan: cargo-dist, targets x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, aarch64-apple-darwin. no windows, i dont have a windows box to test on. github releases + a homebrew tap"),
    ("tarn-20", "01-25 10:30", "licence MIT OR Apache-2.0 like most of the ecosystem. do i need both LICENSE files in the repo"),
    ("tarn-21", "01-27 21:00", "priya (she offered to co-maintain) asked for a --since flag: only lines newer than a duration like 15m or 2h. humantime crate?"),
    ("tarn-22", "01-28 19:50", """```
warning: this `if let` can be collapsed into the outer `if let`
  --> src/follow.rs:88:13
warning: redundant clone
  --> src/output.rs:51:32
```
fix or allow? ci runs clippy with -D warnings"""),
    ("tarn-23", "01-29 20:15", "follow mode: how do i detect log rotation (file truncated or replaced)? notify crate or poll the inode every 250ms"),
    ("tarn-24", "01-29 20:50", "going with polling every 250 ms, notify was flaky on macos with rotated files"),
    ("tarn-25", "01-30 21:20", "hyperfine: tarn grep 'status=500' 1gb.log → mean 7.9 s ± 0.2. ripgrep does it in 1.1 s but whatever, i parse json. under the 10s goal 🎉"),
    ("tarn-26", "02-01 14:00", "bumped the read buffer to 256 KiB, 7.9 → 7.1 s. keeping it"),
    ("tarn-27", "02-03 20:30", "how do i write integration tests that run the binary? assert_cmd + predicates?"),
    ("tarn-28", "02-03 21:00", """```
---- tests::follow_detects_truncation stdout ----
thread 'tests::follow_detects_truncation' panicked at tests/follow.rs:34:5:
assertion `left == right` failed
  left: 2
 right: 3
```
flaky, passes 4 of 5 runs. timing issue with the 250ms poll?"""),
    ("tarn-29", "02-04 19:40", "priya wants colored output by field: level=error red, warn yellow. owo-colors or termcolor? must respect NO_COLOR"),
    ("tarn-30", "02-05 20:10", """owo-colors 4:
```
error[E0599]: no method named `if_supports_color` found for reference `&str` in the current scope
```"""),
    ("tarn-31", "02-05 20:25", "feature flag supports-colors. got it"),
    ("tarn-32", "02-06 21:45", """the msrv job fails now:
```
error: package `clap_builder v4.5.1` cannot be built because it requires rustc 1.74 or newer, while the currently active rustc version is 1.70.0
```
pin clap to 4.4 or bump msrv?"""),
    ("tarn-33", "02-06 22:00", "bumping msrv to 1.74, debian bookworm users can use rustup. update rust-version in Cargo.toml and the ci matrix"),
    ("tarn-34", "02-07 20:00", "--since 15m parsing: what timezone do i compare in? log ts are utc, my laptop is on CET"),
    ("tarn-35", "02-08 11:20", "json output must be one object per line (ndjson), never pretty printed. people pipe it into jq"),
    ("tarn-36", "02-10 20:40", "cargo-dist init asks about installers: shell + homebrew only. no npm, no msi"),
    ("tarn-37", "02-11 21:10", "new perf target: priya benchmarked against `jq -c 'select(...)'` and says we should aim for 5 s on the 1 GB file, not 10, to be worth installing. we're at 7.1. ideas beyond memchr"),
    ("tarn-38", "02-12 20:30", "simd-json or sonic-rs? only parse the lines the prefilter lets through"),
    ("tarn-39", "02-13 22:00", "sonic-rs needs nightly for some features?? i want stable only"),
    ("tarn-40", "02-14 19:55", "switched the parser to simd-json with the prefilter: 7.1 → 4.6 s. under 5 🎉🎉"),
    ("tarn-41", "02-15 10:40", """```
error[E0716]: temporary value dropped while borrowed
  --> src/parse.rs:19:25
   |
19 |     let v = simd_json::to_borrowed_value(&mut line.clone().into_bytes())?;
   |                                               ^^^^^^^^^^^^^^^^^^^^^^^^ creates a temporary value which is freed while still in use
```"""),
    ("tarn-42", "02-17 20:20", "windows: a user opened issue #14 asking for windows builds. priya has a windows laptop and will test. so we add x86_64-pc-windows-msvc to the targets after all. what breaks? the SIGPIPE thing for sure"),
    ("tarn-43", "02-17 20:45", "cfg(unix) around the libc sigpipe reset, ok. what about the inode polling for rotation on windows"),
    ("tarn-44", "02-18 21:30", """windows ci:
```
error: linking with `link.exe` failed: exit code: 1181
  = note: LINK : fatal error LNK1181: cannot open input file 'libc.lib'
```"""),
    ("tarn-45", "02-19 20:05", "timestamps: moving from `time` to `jiff`, its tz handling for --since is way nicer and it gets the CET/UTC stuff right. any gotchas with msrv 1.74? jiff needs 1.70 i think"),
    ("tarn-46", "02-20 19:30", "config: also accept $TARN_CONFIG pointing at a config file. precedence: cli > file from the env var > ~/.config/tarn/config.toml > defaults"),
    ("tarn-47", "02-21 20:10", "highlight fields: config key highlight = [\"user_id\", \"trace_id\"]. serde default empty vec?"),
    ("tarn-48", "02-22 12:00", "0.1.0 release checklist? crates.io publish + cargo-dist tag v0.1.0"),
    ("tarn-49", "02-22 12:40", """cargo publish --dry-run:
```
error: failed to verify package tarball
Caused by:
  failed to parse manifest at `/target/package/tarn-logs-0.1.0/Cargo.toml`
Caused by:
  readme `../README.md` does not appear to exist
```"""),
    ("tarn-50", "02-22 13:05", "readme path fixed. published tarn-logs 0.1.0 🚀"),
    ("tarn-51", "02-24 21:00", "bug report: `tarn follow` uses 100% cpu when the file is deleted. poll loop spins?"),
    ("tarn-52", "02-24 21:20", "yep, metadata() errors → continue without sleeping. fixed with a sleep + retry up to 40 times (10 s), then exit 1"),
    ("tarn-53", "02-25 20:30", "should exit codes be documented? 0 = matches found, 1 = no match, 2 = error, like grep"),
    ("tarn-54", "02-26 19:45", "priya asked: keep --format logfmt? only 2 people said they use it in the issue poll. i say keep, its 40 lines"),
    ("tarn-55", "02-26 20:15", "shell completions via clap_complete: generate at build time in build.rs or a hidden subcommand `tarn completions bash`?"),
    ("tarn-56", "02-27 21:00", "hidden subcommand it is. does cargo-dist install them or only the homebrew formula"),
    ("tarn-57", "02-27 21:40", """test on windows by priya, when the logger rotates the file:
```
thread 'main' panicked at src/follow.rs:61:47:
called `Result::unwrap()` on an `Err` value: Os { code: 32, kind: Uncategorized, message: "The process cannot access the file because it is being used by another process." }
```"""),
    ("tarn-58", "02-28 20:10", "open with FILE_SHARE_DELETE on windows? std OpenOptionsExt share_mode"),
    ("tarn-59", "02-28 20:45", "share_mode(7) fixed it, priya confirms. 0.2.0 will have windows"),
    ("tarn-60", "02-28 21:00", "write me a CHANGELOG entry for 0.2.0: windows support, simd-json parser (4.6 s on 1 GB), jiff for timestamps, TARN_CONFIG env var, msrv 1.74"),
]

TARN_Q = [
    ("fact", "what name is tarn published under on crates.io?", ["tarn-02", "tarn-50"], []),
    ("fact", "what licence does tarn use?", ["tarn-20"], []),
    ("fact", "who co-maintains tarn?", ["tarn-21"], []),
    ("fact", "how often does follow mode check for log rotation?", ["tarn-24", "tarn-23"], []),
    ("fact", "what format must the json output have?", ["tarn-35"], []),
    ("fact", "what exit codes does tarn return?", ["tarn-53"], []),
    ("fact", "which installers does cargo-dist build for us?", ["tarn-36"], []),
    ("request", "which laptop do i benchmark on?", ["tarn-06"], []),
    ("request", "how long did the very first version take on the 1 GB file?", ["tarn-06"], []),
    ("request", "what did hyperfine measure for grep on 1gb.log before the parser switch?", ["tarn-25"], []),
    ("request", "where does tarn look for its config file?", ["tarn-16", "tarn-46"], []),
    ("request", "which keys does the config file have?", ["tarn-16"], []),
    ("request", "how long does follow retry when the file is gone?", ["tarn-52"], []),
    ("semantic", "why did the tool eat a whole processor core once the watched log vanished?", ["tarn-51"], []),
    ("semantic", "which faster decoder got us below the stricter goal?", ["tarn-40"], []),
    ("semantic", "how do we avoid an ugly message when output is cut short by head?", ["tarn-14", "tarn-13"], []),
    ("semantic", "who will check it on a Microsoft machine?", ["tarn-42"], []),
    ("semantic", "what library did we pick to read time spans such as a quarter hour?", ["tarn-21"], []),
    ("update", "what's the msrv?", ["tarn-33", "tarn-60"], ["tarn-04"]),
    ("update", "what's the perf target for grepping the 1 GB file?", ["tarn-37"], ["tarn-06", "tarn-25"]),
    ("update", "how big is the read buffer?", ["tarn-26"], ["tarn-09"]),
    ("update", "which crate handles timestamps?", ["tarn-45", "tarn-60"], ["tarn-15"]),
    ("update", "do we ship windows builds?", ["tarn-42", "tarn-59", "tarn-60"], ["tarn-19"]),
    ("keyword", "E0502 cannot borrow buf as mutable", ["tarn-03"], []),
    ("keyword", "E0716 temporary value dropped while borrowed", ["tarn-41"], []),
    ("keyword", "LNK1181 libc.lib", ["tarn-44"], []),
    ("keyword", "TARN_CONFIG", ["tarn-46", "tarn-60"], []),
    ("keyword", "clap_builder requires rustc 1.74", ["tarn-32"], []),
    ("keyword", "NO_COLOR", ["tarn-29"], []),
    ("temporal", "what did i publish on feb 22?", ["tarn-50", "tarn-48", "tarn-49"], []),
    ("temporal", "which rust error did i paste on 23 january?", ["tarn-17"], []),
    ("temporal", "what was i doing on the evening of February 5?", ["tarn-30", "tarn-31"], []),
]

PANTRY = [
    ("pantry-01", "02-10 10:00", "Hey! I'm building Pocket Pantry 🥫 — a shared grocery + pantry app for households. Expo SDK 50, TypeScript, Supabase for auth and data. First question: React Navigation v6 or expo-router for a tab app with 4 tabs (Lists, Pantry, Scan, Settings)?"),
    ("pantry-02", "02-10 10:30", "Going with React Navigation v6 for now, I know it better. Can you give me the tab navigator with a stack inside Lists?"),
    ("pantry-03", "02-10 14:15", """Metro error:
```
Error: Unable to resolve module @react-navigation/bottom-tabs from /Users/sam/pocket-pantry/App.tsx: @react-navigation/bottom-tabs could not be found within the project or in these directories:
  node_modules
```"""),
    ("pantry-04", "02-10 14:22", "lol forgot to npm install it"),
    ("pantry-05", "02-11 09:40", "We support iOS 16+ and Android 10+ (API 29). Does expo-camera's barcode scanning work on all of those?"),
    ("pantry-06", "02-11 11:00", "Barcodes get turned into product names through the Open Food Facts API. Any rate limits I should know about? Our beta will be ~25 people on TestFlight"),
    ("pantry-07", "02-12 16:30", """is it ok to ship the anon key in the app? and AsyncStorage vs expo-secure-store for the session?
```ts
import { createClient } from '@supabase/supabase-js'
const SUPABASE_URL = 'https://xyzcompany.supabase.co'
const SUPABASE_ANON_KEY = 'your-anon-key'
export const supabase = createClient(SUPABASE_URL, SUPABASE_ANON_KEY, {
  auth: { storage: AsyncStorage, persistSession: true },
})
```"""),
    ("pantry-08", "02-13 10:10", "State: Zustand, one store per feature (lists, pantry, auth). Persist middleware for the pantry store only?"),
    ("pantry-09", "02-13 15:45", r"""inserting as a logged in user 😩
```
{"code":"42501","message":"new row violates row-level security policy for table \"list_items\""}
```"""),
    ("pantry-10", "02-13 16:20", "the policy needed `with check (auth.uid() = created_by)` and I wasn't setting created_by. fixed 👍"),
    ("pantry-11", "02-14 11:30", "Households share lists. Tables: households, household_members, lists, list_items. The free tier gets 3 shared lists per household, Pro is unlimited. Where do I enforce the 3-list limit — RLS, a trigger or the app?"),
    ("pantry-12", "02-17 09:50", "Pricing decided with Lena (our designer): Pro costs €2.99/month or €24.99/year. RevenueCat or expo-in-app-purchases?"),
    ("pantry-13", "02-17 14:00", "Offline first is a must, people use it in supermarkets with no signal. expo-sqlite as the local cache, sync to Supabase when online. Which conflict strategy?"),
    ("pantry-14", "02-17 14:40", "last-write-wins per item with updated_at is fine for us, lists are not collaborative docs. help me write the sync queue"),
    ("pantry-15", "02-18 10:25", """after adding react-native-screens, in Expo Go:
```
Invariant Violation: requireNativeComponent: "RNSScreen" was not found in the UIManager.
```"""),
    ("pantry-16", "02-18 10:50", "needed a dev build, not Expo Go. ok switching to the EAS dev client"),
    ("pantry-17", "02-19 13:10", "Pantry items have an expiry date. Push notification 2 days before an item expires, at 9:00 local time. expo-notifications scheduled locally, or from a Supabase edge function?"),
    ("pantry-18", "02-20 17:30", """EAS build fails on iOS:
```
[!] CocoaPods could not find compatible versions for pod "ExpoModulesCore":
  In Podfile:
    ExpoModulesCore (from `../node_modules/expo-modules-core`)
```"""),
    ("pantry-19", "02-21 09:15", "Lena's design uses Inter for text and a custom icon font. expo-font with useFonts, and keep the splash screen up until they're loaded?"),
    ("pantry-20", "02-21 15:00", """pantry list with ~400 items:
```
VirtualizedList: You have a large list that is slow to update - make sure your renderItem function renders components that follow React performance best practices like PureComponent, shouldComponentUpdate, etc. {"contentLength": 18450, "dt": 1320, "prevDt": 980}
```"""),
    ("pantry-21", "02-21 16:10", "switched to FlashList with estimatedItemSize 64, the warning is gone and scrolling is smooth on my Pixel 6a"),
    ("pantry-22", "02-24 10:00", "The bundle id is com.pocketpantry.app on both platforms (same Android package name). Can I change it later if needed?"),
    ("pantry-23", "02-24 11:45", "App Store submission target is April 1. The TestFlight beta starts March 3. Are 4 weeks of beta enough to catch review issues?"),
    ("pantry-24", "02-25 14:20", "Supabase auth: magic link only, no passwords. The deep link back into the app is pocketpantry://auth/callback. how do I configure the redirect?"),
    ("pantry-25", "02-25 16:00", "magic link opens Safari instead of the app on iOS 17 😭 the scheme is in app.json"),
    ("pantry-26", "02-26 09:30", "Universal links needed an apple-app-site-association file on pocketpantry.app. done, works now"),
    ("pantry-27", "02-27 13:15", """Android build:
```
Execution failed for task ':app:mergeDebugResources'.
> A failure occurred while executing com.android.build.gradle.internal.res.ResourceCompilerRunnable
   > Resource compilation failed. Check logs for details.
   ERROR: /app/src/main/res/drawable/splash-icon.png: AAPT: error: file failed to compile.
```"""),
    ("pantry-28", "02-27 13:40", "the png was actually a jpeg renamed 🙃 re-exported"),
    ("pantry-29", "02-28 10:30", "We're upgrading to Expo SDK 51 before the beta (React Native 0.74, new architecture opt-in). What usually breaks in a 50 → 51 upgrade?"),
    ("pantry-30", "02-28 15:45", "SDK 51 done. expo-camera moved the barcode scanner to CameraView, so I had to rewrite the Scan screen. everything else ok"),
    ("pantry-31", "03-03 09:00", "The beta is live on TestFlight with 25 testers 🎉 Sentry or Bugsnag for crash reports? it must work with source maps from EAS updates"),
    ("pantry-32", "03-04 11:20", """Sentry, happens when the app comes back from the background after a day:
```
Error: JWT expired
  at SupabaseAuthClient._callRefreshToken
```"""),
    ("pantry-33", "03-04 12:00", "autoRefreshToken was on but the AppState handling was missing: supabase.auth.startAutoRefresh() when active. fixed"),
    ("pantry-34", "03-05 10:15", "Testers want the expiry reminders earlier: 3 days before instead of 2, still at 9:00. Change the scheduling, and reschedule the existing notifications on app start"),
    ("pantry-35", "03-06 14:30", "Lena asks for haptics when a list item is checked off. expo-haptics light impact ok? any android quirks"),
    ("pantry-36", "03-07 09:45", "We're moving from React Navigation to expo-router after all — deep links for shared lists (pocketpantry.app/list/<id>) are much simpler with file-based routes. How do I migrate the tabs + stacks without breaking everything?"),
    ("pantry-37", "03-07 16:20", """after moving to app/(tabs)/_layout.tsx:
```
Error: Couldn't find a navigation context. Have you wrapped your app with 'NavigationContainer'?
```"""),
    ("pantry-38", "03-10 10:00", "a leftover import from @react-navigation/native in a component using useNavigation. replaced it with useRouter. ok"),
    ("pantry-39", "03-11 13:30", "analytics: PostHog, EU cloud. what events make sense for a grocery app without being creepy? we promise no ad tracking"),
    ("pantry-40", "03-12 09:20", """Hermes crash on Android only:
```
TypeError: Cannot read property 'toLocaleDateString' of undefined
    at formatExpiry (pantry/utils.ts:12:22)
```"""),
    ("pantry-41", "03-12 09:55", "expiry was null for items scanned without a date. added a guard and a 'no date' label"),
    ("pantry-42", "03-13 15:10", "Pricing change after the beta feedback: Pro goes to €3.49/month, the yearly plan stays €24.99. Is that a RevenueCat offering update only, or an app update too?"),
    ("pantry-43", "03-14 10:40", "Sync bug: items deleted offline come back after the sync 🧟 my queue only handles insert/update"),
    ("pantry-44", "03-14 11:30", "soft delete with deleted_at + tombstones that get synced, purged after 30 days. implemented"),
    ("pantry-45", "03-17 09:30", "App review prep: Apple wants in-app account deletion (guideline 5.1.1(v)). How do I delete a Supabase auth user from the client safely? An edge function with the service role?"),
    ("pantry-46", "03-17 10:15", """is reading the service role key from Deno.env safe enough?
```ts
const supabaseAdmin = createClient(Deno.env.get('SUPABASE_URL')!, Deno.env.get('SUPABASE_SERVICE_ROLE_KEY')!)
const { error } = await supabaseAdmin.auth.admin.deleteUser(userId)
```"""),
    ("pantry-47", "03-18 14:00", "EAS update vs a new build: changing the notification timing is JS only, so eas update to the preview channel works, right?"),
    ("pantry-48", "03-19 11:10", "An Android 10 tester (Galaxy A10, API 29) says the camera preview is black. other devices fine"),
    ("pantry-49", "03-19 15:30", "does CameraView need the ratio prop on that device? or is it the old camera2 api"),
    ("pantry-50", "03-20 10:05", "fixed with `ratio=\"16:9\"` on Android only, the tester confirms"),
    ("pantry-51", "03-21 16:45", "The free tier limit changes too: households now get 5 shared lists free instead of 3, Lena thinks 3 makes people churn before they see the value. The limit check is in a Postgres trigger, can you update it?"),
    ("pantry-52", "03-24 09:50", "App Store screenshots: are 6.7\" and 5.5\" both required? Lena made 6.7 only"),
    ("pantry-53", "03-25 13:30", "Submission moves to April 8, we want the account deletion flow tested properly first. What's the usual review time right now?"),
    ("pantry-54", "03-26 11:00", "privacy nutrition label: we collect email, pantry items (user content), crash data via Sentry, product interaction via PostHog. linked to identity: email only. right?"),
    ("pantry-55", "03-27 10:20", "The Lists screen re-renders 40 times when one item is checked (why-did-you-render). zustand selector issue?"),
    ("pantry-56", "03-27 11:00", "useShallow from zustand/react/shallow fixed it, 40 → 2 renders"),
    ("pantry-57", "03-31 15:40", """EAS submit, I thought expo-camera adds that?
```
Error: ITMS-90683: Missing purpose string in Info.plist - NSCameraUsageDescription
```"""),
    ("pantry-58", "03-31 16:05", "the plugin config in app.json had no cameraPermission text. added 'Pocket Pantry uses the camera to scan barcodes on your groceries.'"),
    ("pantry-59", "04-03 09:30", "Build 1.0.0 (42) is uploaded to App Store Connect, we submit it for review on the 8th 🤞"),
    ("pantry-60", "04-10 17:20", "Rejected: guideline 3.1.2, the subscription screen doesn't show clearly what the yearly plan costs per month. What exactly do they want?"),
]

PANTRY_Q = [
    ("fact", "what's the app's bundle id?", ["pantry-22"], []),
    ("fact", "who is our designer?", ["pantry-12"], []),
    ("fact", "how many beta testers do we have?", ["pantry-31", "pantry-06"], []),
    ("fact", "what conflict strategy does the sync use?", ["pantry-14"], []),
    ("fact", "how are items deleted offline synced now?", ["pantry-44"], []),
    ("fact", "which analytics tool do we use, and in which region?", ["pantry-39"], []),
    ("fact", "what are the minimum iOS and Android versions?", ["pantry-05"], []),
    ("request", "which state library do we use and how are its stores split?", ["pantry-08"], []),
    ("request", "what is the deep link for the auth callback?", ["pantry-24"], []),
    ("request", "which list component made the pantry list fast?", ["pantry-21"], []),
    ("request", "when did the TestFlight beta start?", ["pantry-23", "pantry-31"], []),
    ("request", "what does the camera permission text say?", ["pantry-58"], []),
    ("request", "how many renders did the zustand fix save?", ["pantry-56"], []),
    ("semantic", "why did the passwordless login go to a web browser and not into our program?", ["pantry-25"], []),
    ("semantic", "what was wrong with the picture used at startup on Android?", ["pantry-28"], []),
    ("semantic", "how can buyers on the road without reception still tick things off?", ["pantry-13"], []),
    ("semantic", "how did we make the warnings about spoiling food come sooner?", ["pantry-34"], []),
    ("semantic", "which gadget showed only a dark image when filming?", ["pantry-48"], []),
    ("update", "which Expo SDK is the app on?", ["pantry-30", "pantry-29"], ["pantry-01"]),
    ("update", "what does Pro cost per month?", ["pantry-42"], ["pantry-12"]),
    ("update", "how many days before expiry does the reminder go out?", ["pantry-34"], ["pantry-17"]),
    ("update", "which navigation library does the app use?", ["pantry-36"], ["pantry-02"]),
    ("update", "how many shared lists does the free tier include?", ["pantry-51"], ["pantry-11"]),
    ("update", "when do we submit to the App Store?", ["pantry-53", "pantry-59"], ["pantry-23"]),
    ("keyword", "RNSScreen requireNativeComponent", ["pantry-15"], []),
    ("keyword", "ITMS-90683 NSCameraUsageDescription", ["pantry-57"], []),
    ("keyword", "42501 row-level security list_items", ["pantry-09"], []),
    ("keyword", "mergeDebugResources AAPT", ["pantry-27"], []),
    ("keyword", "JWT expired _callRefreshToken", ["pantry-32"], []),
    ("keyword", "guideline 5.1.1(v)", ["pantry-45"], []),
    ("temporal", "what went wrong on 18 February?", ["pantry-15", "pantry-16"], []),
    ("temporal", "which error did I paste on March 12?", ["pantry-40", "pantry-41"], []),
    ("temporal", "what did I ask last Thursday?", ["pantry-60"], []),
]

GAUGES = [
    ("gauges-01", "01-20 08:30", "I'm setting up a pipeline that ingests river water-level readings from the regional water authority's open API: 340 gauges, one reading per gauge every 15 minutes. Airflow 2.8.1 with the LocalExecutor on a single VM, BigQuery as the warehouse. How would you structure it: one DAG per gauge, or one DAG with dynamic task mapping?"),
    ("gauges-02", "01-20 09:10", "One DAG, `gauges_ingest`, with mapped tasks per batch of 20 gauges then. Raw JSON lands in GCS first (gs://hydro-landing/dt=YYYY-MM-DD/), then a load job into the BigQuery dataset hydro_raw. Does that layering make sense?"),
    ("gauges-03", "01-20 14:45", """```
Broken DAG: [/opt/airflow/dags/gauges_ingest.py] Traceback (most recent call last):
  File "/opt/airflow/dags/gauges_ingest.py", line 7, in <module>
    from airflow.providers.google.cloud.transfers.gcs_to_bigquery import GCSToBigQueryOperator
ModuleNotFoundError: No module named 'airflow.providers.google'
```"""),
    ("gauges-04", "01-20 15:00", "Installed apache-airflow-providers-google 10.13 with the constraints file. The DAG loads."),
    ("gauges-05", "01-21 09:20", "Freshness requirement from the flood-warning team: a reading must be queryable in BigQuery within 20 minutes of its measurement time. With a 15-minute schedule, is that achievable, or do I need a sensor-based design?"),
    ("gauges-06", "01-21 10:05", "How do I get the data interval in a TaskFlow task? I used {{ ds }} but that's the day, I need the 15-minute window."),
    ("gauges-07", "01-21 11:30", """context is get_current_context() inside a plain python function called from the task:
```
KeyError: 'data_interval_start'
  File "/opt/airflow/dags/gauges_ingest.py", line 41, in fetch_batch
    start = context["data_interval_start"]
```"""),
    ("gauges-08", "01-22 08:50", """this is the dev compose from the docs. what must change for the prod VM?
```yaml
environment:
  AIRFLOW__CORE__EXECUTOR: LocalExecutor
  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: postgresql+psycopg2://airflow:airflow@postgres/airflow
  AIRFLOW__CORE__FERNET_KEY: ''
  AIRFLOW__CORE__PARALLELISM: 16
```"""),
    ("gauges-09", "01-22 10:30", "Team: Ines is the analyst who owns the dbt models, Marek leads the team and signs off schema changes, I own the Airflow side. Can you draft a short CODEOWNERS for the repo?"),
    ("gauges-10", "01-23 09:00", "dbt: dbt-bigquery 1.7, models in staging → intermediate → marts. Should Airflow run dbt through a BashOperator or with cosmos?"),
    ("gauges-11", "01-23 13:20", """```
google.api_core.exceptions.Forbidden: 403 Access Denied: Table hydro-prod:hydro_raw.readings: Permission bigquery.tables.updateData denied on table hydro-prod:hydro_raw.readings (or it may not exist).
```"""),
    ("gauges-12", "01-23 13:45", "the service account lacked roles/bigquery.dataEditor on the dataset. granted at dataset level, not project"),
    ("gauges-13", "01-24 10:10", "Alerting: failed tasks should notify Slack #hydro-alerts through an on_failure_callback. SlackWebhookOperator or the notifier classes in 2.8?"),
    ("gauges-14", "01-27 08:40", """17 mapped tasks loading into the same table every 15 min:
```
google.api_core.exceptions.Forbidden: 403 Quota exceeded: Your table exceeded quota for imports or query appends per table. For more information, see https://cloud.google.com/bigquery/docs/troubleshoot-quotas
```"""),
    ("gauges-15", "01-27 09:30", "Merged the loads: one load job per DAG run with a wildcard URI over the batch files. 96 loads a day instead of 1,632."),
    ("gauges-16", "01-28 11:00", "Readings table: partitioned by DATE(measured_at), clustered by gauge_id. 340 gauges × 96 readings/day ≈ 33k rows/day. Is a partition expiration of 400 days reasonable? the flood team needs one year of history plus a margin"),
    ("gauges-17", "01-29 09:15", """fetch_batch has execution_timeout=timedelta(minutes=5), the API sometimes takes 6+ minutes for a batch:
```
airflow.exceptions.AirflowTaskTimeout: Timeout, PID: 4121
[2025-01-29, 09:02:11 UTC] {taskinstance.py:2731} ERROR - Task failed with exception
```"""),
    ("gauges-18", "01-29 10:00", "The API provider says max 10 requests/second per client, they throttle above that. How do I rate-limit across mapped tasks running in parallel? a pool with slots?"),
    ("gauges-19", "01-29 10:40", "created pool `hydro_api` with 4 slots, each task does 2 req/s. under the limit"),
    ("gauges-20", "01-30 14:00", "Late readings: the API sometimes publishes a gauge's reading 40 minutes late. Should the DAG re-fetch the previous 2 intervals on each run and dedupe in BigQuery with a MERGE?"),
    ("gauges-21", "01-30 15:30", """does this scan the whole table? it's partitioned by day
```sql
MERGE hydro_raw.readings T
USING hydro_raw.readings_stage S
ON T.gauge_id = S.gauge_id AND T.measured_at = S.measured_at
WHEN NOT MATCHED THEN INSERT ROW
```"""),
    ("gauges-22", "01-31 09:00", "added `AND T.measured_at >= TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 2 HOUR)` to the ON clause for partition pruning. bytes scanned went from 2.1 GB to 40 MB per run"),
    ("gauges-23", "02-03 10:20", "We upgraded Airflow from 2.8.1 to 2.9.2 this morning (constraints file for Python 3.11). Anything in 2.9 that changes dataset scheduling or mapped tasks?"),
    ("gauges-24", "02-03 11:05", """after the upgrade:
```
sqlalchemy.exc.OperationalError: (psycopg2.errors.UndefinedColumn) column dag.dataset_expression does not exist
```"""),
    ("gauges-25", "02-03 11:15", "forgot `airflow db migrate`. ran it, fine now"),
    ("gauges-26", "02-04 09:40", "The water authority moves to publishing every 10 minutes from February 10, so our schedule changes from */15 to */10. What else depends on the interval? the freshness check, the re-fetch window, the MERGE window..."),
    ("gauges-27", "02-05 10:00", "Data quality: readings outside -2 m to 15 m are sensor faults. Flag or drop? Ines wants them kept but flagged for the analysts"),
    ("gauges-28", "02-05 14:30", """```
Database Error in model stg_readings (models/staging/stg_readings.sql)
  No matching signature for operator = for argument types: STRING, INT64. Supported signature: ANY = ANY at [14:9]
```"""),
    ("gauges-29", "02-05 14:50", "gauge_id is a STRING in the raw table ('DE-NW-2731') and I compared it to an int column of a seed. cast in the seed"),
    ("gauges-30", "02-06 09:30", "Backfill: the flood team wants the 2024 history. The API allows date ranges of 7 days max per request. airflow dags backfill over 52 weeks, or a separate one-off DAG?"),
    ("gauges-31", "02-06 16:00", "one-off DAG `gauges_backfill_2024`, catchup=True, weekly schedule, max_active_runs=2. running, 12 of 52 done"),
    ("gauges-32", "02-07 08:50", """the VM ran out of memory overnight, it has 8 GB RAM:
```
Detected zombie job: {'full_filepath': '/opt/airflow/dags/gauges_backfill_2024.py', 'processor_subdir': '/opt/airflow/dags', 'msg': "{'DAG Id': 'gauges_backfill_2024', 'Task Id': 'fetch_week', ...}"}
```"""),
    ("gauges-33", "02-07 09:20", "the fetch_week task held a whole week of JSON in memory (~1.4 GB). streaming it to GCS in chunks now"),
    ("gauges-34", "02-10 09:05", "The 10-minute schedule is live since this morning. First runs OK."),
    ("gauges-35", "02-11 10:30", "Marek agreed: the freshness SLA becomes 15 minutes from measurement to queryable, now that readings come every 10 minutes. How should I measure it, a separate DAG that checks the max(measured_at) lag?"),
    ("gauges-36", "02-11 14:00", "freshness check DAG: every 5 min, query max(ingested_at - measured_at) over the last hour, alert if > 15 min"),
    ("gauges-37", "02-12 11:20", """the fetch task returns the readings list as XCom:
```
ValueError: XCom value is too large: 52428931 bytes > 49152 KB
```"""),
    ("gauges-38", "02-12 11:40", "return the GCS path instead of the data. obviously"),
    ("gauges-39", "02-13 15:10", "The LocalExecutor on one VM is getting tight: 42 mapped tasks every 10 minutes plus the backfill. Options: CeleryExecutor with 2 workers, or the KubernetesExecutor on our GKE cluster?"),
    ("gauges-40", "02-14 10:00", "Decision with Marek: KubernetesExecutor on the existing GKE Autopilot cluster, namespace airflow. Do the scheduler and webserver stay on the VM, or all in-cluster with the helm chart?"),
    ("gauges-41", "02-17 09:30", """Moved everything to GKE with the official helm chart 1.13, KubernetesExecutor. does the task pod template need anything for GCS access through workload identity?
```yaml
executor: KubernetesExecutor
postgresql:
  enabled: false
data:
  metadataSecretName: airflow-metadata-db
webserverSecretKeySecretName: airflow-webserver-secret
```"""),
    ("gauges-42", "02-17 13:45", """in the task pods:
```
google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found. To set up Application Default Credentials, see https://cloud.google.com/docs/authentication/external/set-up-adc for more information.
```"""),
    ("gauges-43", "02-17 14:20", "the KSA airflow-worker wasn't annotated with iam.gke.io/gcp-service-account. fixed"),
    ("gauges-44", "02-18 10:10", "A second region joins: the neighbouring authority's 72 gauges from March 1, same API format. So 412 gauges in total. Is the partition sizing still fine?"),
    ("gauges-45", "02-19 09:00", "gauge metadata (name, river, lat/lon, warning levels) changes rarely. dbt snapshot (SCD2) or just overwrite?"),
    ("gauges-46", "02-20 11:30", "Alerting moves from Slack to Opsgenie: the flood-warning team's on-call uses Opsgenie and the Slack alerts got muted. Keep Slack for non-critical stuff? how do I route by severity in the on_failure_callback"),
    ("gauges-47", "02-21 10:40", """P2 for ingest failures, P3 for dbt test failures. right syntax for 2.9?
```python
OpsgenieNotifier(opsgenie_conn_id="opsgenie_default", message="{{ dag.dag_id }} failed", priority="P2")
```"""),
    ("gauges-48", "02-24 09:15", "The 2024 backfill is complete: 52 of 52 weeks, 11.9M rows. Ines found 0.3% of the readings flagged as sensor faults"),
    ("gauges-49", "02-25 14:00", """dbt test failing:
```
Failure in test not_null_stg_readings_water_level_cm (models/staging/schema.yml)
  Got 214 results, configured to fail if != 0
```"""),
    ("gauges-50", "02-25 14:30", "the API returns a null water_level when a gauge is in maintenance. relax the test to warn, and add a maintenance flag"),
    ("gauges-51", "02-26 10:20", "cost check: BigQuery on-demand, ~1.2 TB scanned a month, mostly Ines's dashboards. Should we switch to editions with a slot reservation?"),
    ("gauges-52", "02-27 09:10", "The dashboards query the marts every 5 min from Looker Studio. Add a BI Engine reservation of 1 GB?"),
    ("gauges-53", "03-03 08:45", "Region 2 went live on Saturday: 412 gauges, no errors in the ingest. The pool hydro_api is still 4 slots, now for 21 batches of 20. Enough to finish within the 10-minute window?"),
    ("gauges-54", "03-04 11:00", "the worst batch took 7m40s yesterday at 14:10. raise the pool to 6 slots? the provider limit is 10 req/s, and 6×2 = 12 is too many"),
    ("gauges-55", "03-04 11:30", "asked the provider: our client limit is raised to 20 requests/second from today. so 8 slots × 2 req/s = 16 is fine"),
    ("gauges-56", "03-05 10:15", "Marek wants a data contract for the marts: column names, types, freshness. dbt model contracts with enforced: true?"),
    ("gauges-57", "03-06 15:40", """```
Compilation Error in model fct_daily_levels (models/marts/fct_daily_levels.sql)
  This model has an enforced contract that failed.
  Please ensure the name, data_type, and number of columns in your contract match the columns in your SQL file.
  | column_name  | definition_type | contract_type | mismatch_reason    |
  | max_level_cm | FLOAT64         | INT64         | data type mismatch |
```"""),
    ("gauges-58", "03-10 09:30", "incident on Saturday night: the ingest failed for 50 minutes (API outage), Opsgenie paged me at 02:10. The DAG retried 3 times with a 2 min delay and then gave up. Should retries be longer during outages?"),
    ("gauges-59", "03-11 10:00", "exponential backoff now: retries=6, retry_delay 2 min, max_retry_delay 20 min. covers about an hour of outage"),
    ("gauges-60", "03-14 16:30", "Writing the runbook for on-call: can you outline it — DAGs, SLA, pools, alert routing, how to backfill a day?"),
]

GAUGES_Q = [
    ("fact", "what's the GCS landing path for the raw JSON?", ["gauges-02"], []),
    ("fact", "who owns the dbt models?", ["gauges-09"], []),
    ("fact", "how many rows did the 2024 backfill load?", ["gauges-48"], []),
    ("fact", "how much does the MERGE scan since the partition pruning?", ["gauges-22"], []),
    ("fact", "how many load jobs a day after merging the loads?", ["gauges-15"], []),
    ("fact", "what is the retry policy since the outage?", ["gauges-59"], []),
    ("request", "who signs off schema changes?", ["gauges-09"], []),
    ("request", "which dbt adapter version and model layers do we use?", ["gauges-10"], []),
    ("request", "what range of water level counts as a sensor fault?", ["gauges-27"], []),
    ("request", "how much RAM does the Airflow VM have?", ["gauges-32"], []),
    ("request", "which helm chart version did we deploy?", ["gauges-41"], []),
    ("request", "which Opsgenie priority do ingest failures get?", ["gauges-47"], []),
    ("request", "what partition expiration did I consider for the readings table?", ["gauges-16"], []),
    ("semantic", "why did the job loading last year's history crash the machine?", ["gauges-33", "gauges-32"], []),
    ("semantic", "what fixed the permission problem when writing to the warehouse?", ["gauges-12"], []),
    ("semantic", "how did we stop blowing past the table write allowance?", ["gauges-15"], []),
    ("semantic", "what do we do when a water measurement arrives long after it was taken?", ["gauges-20"], []),
    ("semantic", "why could the task containers not authenticate to Google?", ["gauges-43", "gauges-42"], []),
    ("update", "which Airflow version do we run?", ["gauges-23"], ["gauges-01"]),
    ("update", "how often does the ingest DAG run?", ["gauges-26", "gauges-34"], ["gauges-01"]),
    ("update", "what's the freshness SLA for readings?", ["gauges-35", "gauges-36"], ["gauges-05"]),
    ("update", "which executor does Airflow use?", ["gauges-40", "gauges-41"], ["gauges-01", "gauges-08"]),
    ("update", "where do failure alerts go?", ["gauges-46", "gauges-47"], ["gauges-13"]),
    ("update", "how many gauges do we ingest?", ["gauges-44", "gauges-53"], ["gauges-01", "gauges-16"]),
    ("update", "what's the provider's rate limit for our client?", ["gauges-55"], ["gauges-18", "gauges-54"]),
    ("keyword", "ModuleNotFoundError airflow.providers.google", ["gauges-03"], []),
    ("keyword", "AirflowTaskTimeout", ["gauges-17"], []),
    ("keyword", "XCom value is too large", ["gauges-37"], []),
    ("keyword", "dataset_expression does not exist", ["gauges-24"], []),
    ("keyword", "not_null_stg_readings_water_level_cm", ["gauges-49"], []),
    ("keyword", "DefaultCredentialsError", ["gauges-42"], []),
    ("keyword", "hydro_api pool slots", ["gauges-19", "gauges-53"], []),
    ("temporal", "what went wrong on the morning of 3 February?", ["gauges-24", "gauges-23", "gauges-25"], []),
    ("temporal", "what did I work on on 5 February?", ["gauges-27", "gauges-28", "gauges-29"], []),
    ("temporal", "what did I set up on February 6?", ["gauges-30", "gauges-31"], []),
]

LOAM = [
    ("loam-01", "02-17 07:50", "fw for a soil moisture sensor, project name loam. stm32l432kc, freertos 10.5, arm-none-eabi-gcc 12.3, cmake+ninja. lorawan eu868 through an sx1262. want a task layout: sensor task, radio task, power mgr. how many tasks do you recommend & which priorities"),
    ("loam-02", "02-17 08:30", "uplink every 30 min. battery 2xAA lithium, target 3 years in the field. budget the sleep current pls"),
    ("loam-03", "02-17 09:15", """```
/usr/lib/gcc/arm-none-eabi/12.3.1/../../../arm-none-eabi/bin/ld: /usr/lib/gcc/arm-none-eabi/12.3.1/../../../arm-none-eabi/lib/thumb/v7e-m+fp/hard/libc_nano.a(libc_a-sbrkr.o): in function `_sbrk_r':
sbrkr.c:(.text._sbrk_r+0xc): undefined reference to `_sbrk'
```"""),
    ("loam-04", "02-17 09:40", "dont want malloc at all. freertos heap_4 only. so who calls sbrk? printf?"),
    ("loam-05", "02-18 08:05", "sleep current target is < 5 uA in stop2 with the rtc running. what do i need to switch off, gpio analog mode etc"),
    ("loam-06", "02-18 10:20", """precise data bus error, BFAR just past the end of sram1?
```
HardFault_Handler
CFSR  = 0x00008200
HFSR  = 0x40000000
BFAR  = 0x20010004
PC    = 0x08004a3c  (sensor_task+0x48)
```"""),
    ("loam-07", "02-18 11:00", "stack of sensor_task was 128 words, the ds18b20 driver has a 600 byte local buffer. bumped it to 512 words. configCHECK_FOR_STACK_OVERFLOW=2 is on now"),
    ("loam-08", "02-19 07:45", "temp sensor: ds18b20 on 1-wire, bit banged with a timer. soil moisture: capacitive probe into adc1 ch5. does the adc need calibration after wake from stop2?"),
    ("loam-09", "02-19 09:30", "payload. decided: fixed binary, 9 bytes: moisture u16, temp i16 (0.01 C), battery mV u16, status u8, seq u16. no cbor, every byte is airtime"),
    ("loam-10", "02-19 10:05", "port number 2 for measurements, port 3 for status/diagnostics. fine?"),
    ("loam-11", "02-20 08:10", """how do i get real keys in at production time without them in git? per-device provisioning over uart?
```c
// keys.h -- do not commit real keys
#define LORAWAN_DEV_EUI  "0000000000000000"
#define LORAWAN_JOIN_EUI "0000000000000000"
#define LORAWAN_APP_KEY  "00000000000000000000000000000000"
```"""),
    ("loam-12", "02-20 09:00", "otaa join, adr on. if the join fails, how long to retry with backoff? duty cycle is 1% in eu868"),
    ("loam-13", "02-21 07:30", "measured the sleep current with the ppk2: 11.2 uA. target 5. where does the rest go"),
    ("loam-14", "02-21 10:45", "the sx1262 wasnt in sleep mode, only standby rc. SetSleep with warm start → 3.8 uA total now 👍"),
    ("loam-15", "02-24 08:00", "tomasz (hw) says the rev B board moves the probe supply to PB4, switched by a mosfet, so i can power it off between readings. settle time of the probe is 200 ms after power on"),
    ("loam-16", "02-24 09:20", """-Werror build:
```
src/sensor.c:88:23: error: comparison of integer expressions of different signedness: 'int' and 'uint32_t' {aka 'long unsigned int'} [-Werror=sign-compare]
   88 |     for (int i = 0; i < n_samples; i++) {
```"""),
    ("loam-17", "02-25 07:40", "watchdog: iwdg with an 8 s timeout, kicked from the power mgr task only if all tasks checked in. good pattern?"),
    ("loam-18", "02-25 13:15", "i2c: the new rev B has an sht40 for air temp/humidity at 0x44. HAL_I2C_Master_Transmit returns HAL_ERROR, ErrorCode = HAL_I2C_ERROR_AF"),
    ("loam-19", "02-25 13:50", "AF = NACK. pull-ups not populated on rev B 🤦 tomasz bodged 4.7k. works"),
    ("loam-20", "02-26 08:30", "flash usage after adding the lorawan stack (lorawan 1.0.4 mac from loramac-node): 231 KB of 256 KB. -Os already. worried"),
    ("loam-21", "02-26 09:10", "the map file shows printf float support pulls in 18 KB. drop -u _printf_float and print fixed point by hand?"),
    ("loam-22", "02-27 07:55", "adc readings drift 3% over temperature. calibrate with VREFINT on each wake?"),
    ("loam-23", "02-27 10:30", "vrefint cal from the factory value at 0x1FFF75AA. works, drift under 0.5%"),
    ("loam-24", "02-28 08:20", "field trial planned: 40 units at a vineyard near Mainz from april 14, for 6 weeks. need a diag uplink once a day with reset cause, min battery, join count"),
    ("loam-25", "03-03 07:45", "battery life calc: 30 min uplinks at SF9, 3.8 uA sleep → 2.1 years on 2xAA L91. target was 3. options besides a longer interval?"),
    ("loam-26", "03-03 08:30", "talked to the agronomist: hourly readings are enough for soil moisture. uplink interval goes to 60 min. recalc?"),
    ("loam-27", "03-03 09:00", "5.3 years with 60 min at sf9 per the calc. ok new target: 5 years on 2xAA, marketing wants it on the box"),
    ("loam-28", "03-04 07:50", """after adding the diag uplink + the sht40 driver:
```
arm-none-eabi/bin/ld: loam.elf section `.text' will not fit in region `FLASH'
arm-none-eabi/bin/ld: region `FLASH' overflowed by 1832 bytes
collect2: error: ld returned 1 exit status
```"""),
    ("loam-29", "03-04 08:40", "dropped _printf_float (-18 KB) → 238 KB of 256. but we're going to run out again"),
    ("loam-30", "03-05 09:30", "decision with tomasz: rev C uses the stm32l452re (512 KB flash, 160 KB ram), pin compatible enough for our footprint? he checks. the l432 goes away"),
    ("loam-31", "03-05 10:00", "what changes in the linker script and the startup file from l432 to l452? using the st cubemx generated ones"),
    ("loam-32", "03-06 08:15", """calling xQueueSend from the exti isr:
```
ASSERT: configASSERT( ( portNVIC_INT_CTRL_REG & portVECTACTIVE_MASK ) == 0 ) in port.c line 779
```"""),
    ("loam-33", "03-06 08:40", "yes must be xQueueSendFromISR + portYIELD_FROM_ISR. fixed"),
    ("loam-34", "03-07 07:30", "1-wire timing breaks when the radio task preempts in the middle of a bit. critical section around each bit ok? its 70 us max"),
    ("loam-35", "03-10 08:10", "rev C boards arrived, l452re. blinky ok, but the lse doesn't start: RCC_FLAG_LSERDY never gets set"),
    ("loam-36", "03-10 09:45", "the lse drive capability had to be RCC_LSEDRIVE_MEDIUMHIGH for the rev C crystal. 32.768 khz runs"),
    ("loam-37", "03-11 07:50", "ci: github actions building with arm-none-eabi-gcc 12.3 in a docker image + unit tests on the host with unity. cmake presets for host vs target?"),
    ("loam-38", "03-12 08:00", """unity test fails on the host:
```
test/test_payload.c:42:test_encode_negative_temp:FAIL: Expected 0xFF38 Was 0x38FF
```"""),
    ("loam-39", "03-12 08:20", "byte order. the lorawan payload is big endian per our spec, i wrote little. fixed the encoder"),
    ("loam-40", "03-13 09:00", "the 8 s watchdog bites during join: the lora join with retries blocks the radio task for up to 12 s. iwdg to 16 s or make the join non blocking?"),
    ("loam-41", "03-13 10:30", "went with iwdg 16 s + the radio task checks in between join attempts. 8 s was too tight anyway"),
    ("loam-42", "03-14 08:00", "power on reset vs brown out: RCC_FLAG_BORRST is set after a battery swap. log it in the reset cause field of the diag uplink"),
    ("loam-43", "03-17 07:40", "field units get firmware updates only via swd with a tag-connect cable, no fuota. decided, fuota needs too much flash and the trial is 6 weeks"),
    ("loam-44", "03-18 08:30", "stack watermarks: uxTaskGetStackHighWaterMark on all tasks after 24 h: sensor 212 words free, radio 88, power 140. radio too tight?"),
    ("loam-45", "03-18 09:00", "radio task stack 384 → 512 words"),
    ("loam-46", "03-19 08:15", "downlink command to change the uplink interval remotely? port 10, 2 byte minutes. min 15 max 240"),
    ("loam-47", "03-20 07:55", """hardfault again, only on rev C, INVSTATE after jumping to the app from the bootloader:
```
CFSR  = 0x00020000
HFSR  = 0x40000000
PC    = 0x08000000
```"""),
    ("loam-48", "03-20 09:10", "vector table offset: SCB->VTOR was not set for the app at 0x08008000. set it in SystemInit. fixed"),
    ("loam-49", "03-21 08:00", "which flash page to keep config (interval, counters) in? last page of bank 1 on the l452? wear leveling needed for the seq counter, written on every uplink"),
    ("loam-50", "03-21 10:20", "writing seq to flash every hour = 8760 writes/year in one place, endurance is 10k cycles. rotate over 16 slots"),
    ("loam-51", "03-24 08:10", "the ttn console shows 'frame counter reset' warnings after every battery swap. i keep fcnt in ram only"),
    ("loam-52", "03-24 08:40", "persist fcnt up in the flash slots too, every 10 uplinks + skip 10 on boot. ok?"),
    ("loam-53", "03-25 07:50", "new cmake preset 'rev-c-release' with -Os -flto. does flto break the freertos port?"),
    ("loam-54", "03-25 09:30", """lto link error:
```
lto1: internal compiler error: in add_symbol_to_partition_1, at lto/lto-partition.cc:153
```"""),
    ("loam-55", "03-25 10:05", "-flto-partition=one works around it. binary 241 KB → 226 KB"),
    ("loam-56", "03-27 08:00", "the 40 rev C units for the trial are flashed and burned in for 48 h on the shelf. 2 failed to join, both with the antenna connector not seated"),
    ("loam-57", "03-31 07:45", "trial start moved: the vineyard wants the units in after the frost risk, so may 5th instead of april 14. 6 weeks still"),
    ("loam-58", "04-01 08:20", "ppk2 on rev C: 4.6 uA sleep. rev B was 3.8. the l452 draws more in stop2? datasheet says 1.2 uA vs 0.9"),
    ("loam-59", "04-03 07:30", "sram2 retention off in stop2 saves 0.3 uA. we dont use sram2. do it"),
    ("loam-60", "04-11 09:00", "write release notes for fw 1.0.0, the trial build: rev C l452, 60 min uplinks, 9 byte payload big endian, iwdg 16 s, fcnt persistence, swd updates only"),
]

LOAM_Q = [
    ("fact", "what is the layout of the uplink payload?", ["loam-09"], []),
    ("fact", "which lorawan ports carry measurements and diagnostics?", ["loam-10"], []),
    ("fact", "how long does the soil probe need to settle after power on?", ["loam-15"], []),
    ("fact", "what i2c address does the sht40 have?", ["loam-18"], []),
    ("fact", "how do field units get new firmware?", ["loam-43", "loam-60"], []),
    ("fact", "how many units go into the field trial and where?", ["loam-24", "loam-56"], []),
    ("fact", "how is wear on the flash spread for the seq counter?", ["loam-50"], []),
    ("request", "which toolchain and freertos version does loam use?", ["loam-01"], []),
    ("request", "which lora radio chip is on the board?", ["loam-01", "loam-14"], []),
    ("request", "what sleep current did the first ppk2 measurement show?", ["loam-13"], []),
    ("request", "how much flash does printf float support cost?", ["loam-21", "loam-29"], []),
    ("request", "which lse drive setting does rev C need?", ["loam-36"], []),
    ("request", "what range is allowed for the remote interval command?", ["loam-46"], []),
    ("semantic", "why did the board not answer on the two-wire bus?", ["loam-19", "loam-18"], []),
    ("semantic", "how did we keep analog readings stable when it gets hot or cold?", ["loam-23", "loam-22"], []),
    ("semantic", "what made the transceiver eat power while idle?", ["loam-14"], []),
    ("semantic", "why did the unit test show the two halves of a number swapped?", ["loam-39", "loam-38"], []),
    ("semantic", "what caused the network server to complain whenever the cells were replaced?", ["loam-51", "loam-52"], []),
    ("update", "which mcu does the sensor use?", ["loam-30", "loam-35", "loam-60"], ["loam-01"]),
    ("update", "how often does the sensor send an uplink?", ["loam-26", "loam-60"], ["loam-02", "loam-25"]),
    ("update", "what's the battery life target?", ["loam-27"], ["loam-02"]),
    ("update", "what's the watchdog timeout?", ["loam-41", "loam-60"], ["loam-17"]),
    ("update", "when does the vineyard field trial start?", ["loam-57"], ["loam-24"]),
    ("update", "what's the sleep current of the current board?", ["loam-58", "loam-59"], ["loam-14"]),
    ("keyword", "undefined reference to _sbrk", ["loam-03"], []),
    ("keyword", "region FLASH overflowed", ["loam-28"], []),
    ("keyword", "CFSR 0x00020000 INVSTATE", ["loam-47"], []),
    ("keyword", "portVECTACTIVE_MASK configASSERT", ["loam-32"], []),
    ("keyword", "add_symbol_to_partition_1", ["loam-54"], []),
    ("keyword", "RCC_FLAG_BORRST", ["loam-42"], []),
    ("keyword", "-Werror=sign-compare", ["loam-16"], []),
    ("temporal", "what did I measure with the ppk2 on 21 February?", ["loam-13", "loam-14"], []),
    ("temporal", "what was the problem on March 20?", ["loam-47", "loam-48"], []),
    ("temporal", "what did I change on 3 March?", ["loam-26", "loam-27", "loam-25"], []),
    ("temporal", "what did I ask for last Friday?", ["loam-60"], []),
]

# (project key, prompts, questions)
PROJECTS = [
    ("fernwood-shop", SHOP, SHOP_Q),
    ("tarn", TARN, TARN_Q),
    ("pocket-pantry", PANTRY, PANTRY_Q),
    ("river-gauges", GAUGES, GAUGES_Q),
    ("loam-firmware", LOAM, LOAM_Q),
]


def main() -> None:
    memories, queries = [], []
    for project, prompts, questions in PROJECTS:
        ids = {pid for pid, _, _ in prompts}
        for pid, when, text in prompts:
            month_day, clock = when.split()
            memories.append({"id": pid, "kind": CAPTURE["kind"], "source": CAPTURE["source"],
                             "tags": list(CAPTURE["tags"]), "project": project,
                             "at": f"{YEAR}-{month_day}T{clock}:00+00:00", "content": text})
        prefix = prompts[0][0].split("-")[0]
        for n, (qtype, text, relevant, stale) in enumerate(questions, start=1):
            missing = set(relevant + stale) - ids
            if missing:
                raise SystemExit(f"{prefix} question {n} names unknown prompts {sorted(missing)}")
            query = {"id": f"{prefix}-q{n:02d}", "type": qtype, "query": text, "relevant": relevant,
                     "project": project}
            if stale:
                query["stale"] = stale
            queries.append(query)
    corpus = {
        "name": "prompts to a coding assistant",
        "version": 1,
        "description": "Five made-up projects, 60 prompts each as users type them to a coding assistant "
                       "(facts inside requests, pasted code and errors, facts that change later), stored as "
                       "the agent-loop capture stores them; hand-written questions "
                       "(scripts/prompts_corpus_src.py, docs/corpora.md).",
        "project": None,
        "now": NOW,
        "memories": memories,
        "queries": queries,
    }
    json.dump(corpus, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
