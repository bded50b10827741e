"""Responsibility: the scale benchmark — how memsafe behaves at 1,000 / 10,000 / 100,000 memories.

For each size it builds a fresh store of realistic synthetic memories (decisions, facts, error
notes, preferences, tasks and session summaries, written from templates and a developer
vocabulary, 1 to ~12 sentences long, spread over projects, kinds and tags), then measures:

- bulk import throughput (memories/s, embeddings included): `api.remember(embed_now=False)` in
  transactions of 500, then `api.backfill` (what an import does), wall time and CPU time;
- restore throughput: the store exported with its vectors (`export --vectors`) and imported
  into a new store (`import_file`, which keeps the file's vectors when the model is the same):
  memories/s for the import, in its own process;
- database bytes per memory (main file + WAL after a checkpoint);
- recall latency, in process with a warm model (server mode: one process answering queries,
  access bookkeeping included): p50 / p95 over `queries` varied queries;
- recall latency as a whole CLI process (`python -m memsafe recall ... --json`): p50 / p95;
- remember latency as a whole CLI process (with its embedding): p50 / p95;
- the full-text indexes alone, in a second store built without the model (every 50th memory
  with a Chinese or Japanese sentence): remember time per memory, bytes per memory of the word
  (porter) and trigram indexes, lexical recall p50 for plain words, exact identifiers and CJK
  words (the trigram index's cost and use);
- the same for a corpus of Chinese and Japanese memories written from templates
  (`CJK_TEMPLATES`): remember time, word and trigram index bytes per memory, lexical recall p50
  of CJK words and how often the first hit holds the word (the word index's CJK bigrams);
- peak RSS of the import process, of the in-process recall ("serve-like") process, and of CLI runs.

Each phase runs in its own child process so peak RSS is per phase and per size, not cumulative.
At sizes above `full_embed_limit`, only the first `full_embed_limit` memories are embedded by the
model (their rate is the reported throughput); the remaining vectors are synthesised from the
embedding of the template each memory was written from plus noise (flagged in the result as
`vectors_synthesized`), so a 100k store can be built in minutes on a small machine. Latencies
are wall-clock on whatever else the machine is doing: compare runs on the same machine only.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from memsafe.bench import python_m
from memsafe.bench.timing import percentile

__all__ = ["run_scale", "synthetic_cjk_memories", "synthetic_memories", "synthetic_queries"]

SERVICES = ["auth", "billing", "search", "ingest", "notifications", "gateway", "scheduler", "reporting",
            "payments", "profile", "inventory", "checkout", "analytics", "mailer", "storage", "webhooks"]
TOOLS = ["docker compose", "kubectl", "terraform", "helm", "make", "poetry", "pnpm", "cargo", "uv", "pytest",
         "ruff", "mypy", "eslint", "vite", "gradle", "alembic", "flyway", "nginx", "systemd", "cron"]
LANGS = ["Python", "TypeScript", "Go", "Rust", "Java", "Kotlin", "SQL", "Bash"]
ERRORS = ["ERR_SSL_PROTOCOL_ERROR", "ECONNRESET", "ETIMEDOUT", "OOMKilled", "E11000 duplicate key",
          "deadlock detected", "HTTP 502", "HTTP 429", "ModuleNotFoundError", "segfault in libpq",
          "CrashLoopBackOff", "ENOSPC", "certificate verify failed", "database is locked"]
STORES = ["Postgres 16", "Redis 7", "SQLite", "Kafka", "RabbitMQ", "S3", "Elasticsearch", "ClickHouse"]
PEOPLE = ["Ana", "Bo", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hiro", "Ines", "Jonas", "Kemi", "Lars"]
PATHS = ["src/{s}/handlers.py", "services/{s}/main.go", "infra/{s}.tf", "docs/{s}/setup.md",
         "packages/{s}/index.ts", "config/{s}.yaml", "scripts/{s}_migrate.sh", "tests/{s}/test_api.py"]
REASONS = ["it halves cold-start time", "the old way lost writes under load", "reviewers asked for it",
           "it keeps the on-call runbook short", "costs dropped by a third", "it avoids a vendor lock-in",
           "the flaky test suite became stable", "latency p95 went from 800 ms to 120 ms"]
TEMPLATES = {
    "decision": [
        "We decided to move {s} to {db} because {why}.",
        "Decision: {s} deploys go through {tool} only; manual deploys are not allowed since {why}.",
        "After the incident review we chose to retry {s} calls at most 3 times with jitter, because {why}.",
    ],
    "fact": [
        "The {s} service logs errors to {path}; rotate them with {tool}.",
        "{s} reads its settings from {path} and falls back to environment variables.",
        "The staging {s} database is {db}; migrations live in {path} and run with {tool}.",
    ],
    "preference": [
        "{p} prefers small pull requests in {lang} with tests next to the code.",
        "For {lang} code we use {tool} for formatting; {p} wants it run before every commit.",
        "{p} likes review comments phrased as questions, and squash merges on {s}.",
    ],
    "task": [
        "TODO: upgrade {db} for {s} before the end of the sprint; owner {p}.",
        "Follow up with {p} about the {err} alerts on {s}.",
        "Write a runbook for restarting {s} when {err} shows up.",
    ],
    "general": [
        "{err} when calling {s} from the gateway: fixed by raising the pool size in {path}.",
        "Debugging {s}: {err} came from a stale connection; {tool} restart cleared it.",
        "Hit {err} in CI for {s}; the cause was a missing fixture in {path}.",
    ],
    "conversation": [
        "Session summary: worked on {s} with {p}. We traced {err} to {path}, agreed to switch to {db}, "
        "and left the migration script half done.",
        "Pairing notes: {p} showed how {tool} caches layers; {s} builds now take 40 seconds instead of 6 minutes.",
    ],
}
FILLER = [
    "The change is behind a feature flag for now.",
    "See the ticket for the full discussion.",
    "Rollback is a single revert commit.",
    "Metrics are on the team dashboard.",
    "This only affects the EU region.",
    "Nobody has touched this code path since last spring.",
    "The same pattern applies to the other services.",
    "Keep an eye on memory use after the change.",
]
QUERIES = [
    "how do we deploy {s}?", "where does {s} log errors", "{err}", "{err} {s}", "why did we choose {db}",
    "what does {p} prefer in code review", "{tool} setup for {s}", "retry policy for {s}",
    "migrations for {s}", "{lang} formatting rules", "runbook for restarting {s}", "{path}",
]


def _fill(template: str, rng: random.Random) -> str:
    s = rng.choice(SERVICES)
    return template.format(
        s=s, tool=rng.choice(TOOLS), lang=rng.choice(LANGS), err=rng.choice(ERRORS), db=rng.choice(STORES),
        p=rng.choice(PEOPLE), path=rng.choice(PATHS).format(s=s), why=rng.choice(REASONS),
    )


def synthetic_memories(n: int, seed: int = 7) -> list[dict]:
    """n distinct memories: {content, kind, project, tags, template} (template = index into a
    flat template list, used to synthesise vectors). Lengths vary from one sentence to ~12."""
    rng = random.Random(seed)
    projects = [None, "web", "api", "mobile", "infra", "data", "cli", "docs"]
    flat = [(kind, t) for kind, ts in TEMPLATES.items() for t in ts]
    out = []
    for i in range(n):
        t_index = rng.randrange(len(flat))
        kind, template = flat[t_index]
        parts = [_fill(template, rng)]
        extra = rng.choice([0, 0, 1, 1, 2, 3, 5, 10])
        parts += [rng.choice(FILLER) if rng.random() < 0.6 else _fill(rng.choice(flat)[1], rng) for _ in range(extra)]
        parts.append(f"(ref OC-{10000 + i})")
        out.append({
            "content": " ".join(parts),
            "kind": kind,
            "project": rng.choice(projects),
            "tags": rng.sample(["ops", "ci", "db", "perf", "security", "ux", "infra"], rng.choice([0, 1, 1, 2, 3])),
            "template": t_index,
        })
    return out


def synthetic_queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [_fill(rng.choice(QUERIES), rng) for _ in range(n)]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# -- child phases (each runs in its own process) ---------------------------------------------------------


def _phase_import(db: str, n: int, full_embed_limit: int, batch_size: int) -> dict:
    import numpy as np

    from memsafe import api, embed
    from memsafe.recall.vectors import ensure_table

    items = synthetic_memories(n)
    opened = api.open_store(db)
    store = opened.store
    embedder = embed.get_embedder()
    if embedder is None:
        raise embed.ModelUnavailable(embed.load_error() or "the embedding model is unavailable")
    embedder.embed(["warm up"])
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, n, 500):
        with store.write():
            for item in items[start : start + 500]:
                api.remember(store, item["content"], kind=item["kind"], project=item["project"], tags=item["tags"],
                             source="import", embed_now=False)
    t_insert = time.perf_counter() - t0
    embedded = api.backfill(store, limit=min(n, full_embed_limit), batch_size=batch_size)
    t_total = time.perf_counter() - t0
    cpu = time.process_time() - c0
    synthesized = 0
    if n > full_embed_limit:
        flat = [t for ts in TEMPLATES.values() for t in ts]
        base = embedder.embed([t.format(s="service", tool="tool", lang="code", err="error", db="database",
                                        p="someone", path="a file", why="a reason") for t in flat])
        rng = np.random.default_rng(3)
        template_of = {item["content"]: item["template"] for item in items}  # the store may hold others
        with store.write():
            ensure_table(store, embedder)
        for start in range(full_embed_limit, n, 2000):
            rows = store.pending_embeddings(2000)
            if not rows:
                break
            with store.write():
                for memory_id, content in rows:
                    template = template_of.get(content, 0)
                    v = base[template] + rng.normal(0, 0.05, embedder.dim).astype(np.float32)
                    v /= np.linalg.norm(v)
                    store.put_vector(memory_id, v.astype(np.float32).tobytes())
                    synthesized += 1
    store.compact_word_index()  # as cron's daily decay (the store's maintenance) leaves it
    store.checkpoint()
    store.close()
    return {
        "insert_seconds": round(t_insert, 2),
        "import_seconds": round(t_total, 2),
        "embedded_by_model": embedded,
        "vectors_synthesized": synthesized,
        # above full_embed_limit: rate of the embedded part = its share of the insert time + the embedding time
        "import_per_s": round(embedded / (t_insert * embedded / n + (t_total - t_insert)), 1),
        "import_cpu_seconds": round(cpu, 2),
        "import_per_cpu_s": round(min(n, full_embed_limit) / cpu, 1) if cpu else None,
        "import_peak_rss_mb": round(_rss_mb(), 1),
    }


def _phase_recall(db: str, queries: int) -> dict:
    from memsafe import api, embed

    opened = api.open_store(db)
    store = opened.store
    embed.get_embedder()
    qs = synthetic_queries(queries + 5)
    projects = ["web", "api", "mobile", "infra", "data", "cli", "docs"]
    for q in qs[:5]:  # warm: model, page cache, statements
        api.recall(store, q, all_projects=True)
    lat, lat_all = [], []
    for i, q in enumerate(qs[5:]):
        t0 = time.perf_counter()
        api.recall(store, q, project=projects[i % len(projects)])
        lat.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        api.recall(store, q, all_projects=True)
        lat_all.append((time.perf_counter() - t0) * 1000)
    # a query naming a time also takes the memories created then (`Store.created_between`): all of them
    lat_dated = []
    for i, q in enumerate(qs[5 : 5 + max(1, queries // 5)]):
        t0 = time.perf_counter()
        api.recall(store, f"{q.rstrip('?')} today", project=projects[i % len(projects)])
        lat_dated.append((time.perf_counter() - t0) * 1000)
    store.close()
    return {
        "recall_ms_p50": round(percentile(lat, 0.5), 1),
        "recall_ms_p95": round(percentile(lat, 0.95), 1),
        "recall_dated_ms_p50": round(percentile(lat_dated, 0.5), 1),
        "recall_all_projects_ms_p50": round(percentile(lat_all, 0.5), 1),
        "recall_all_projects_ms_p95": round(percentile(lat_all, 0.95), 1),
        "serve_like_peak_rss_mb": round(_rss_mb(), 1),
    }


def _phase_restore(db: str, target: str) -> dict:
    from memsafe import api

    source = api.open_store(db).store
    path = Path(target + ".jsonl")
    t0 = time.perf_counter()
    exported = api.export_to_path(source, path, vectors=True, include_forgotten=True, all_projects=True)
    t_export = time.perf_counter() - t0
    source.close()
    for suffix in ("", "-wal", "-shm"):
        Path(target + suffix).unlink(missing_ok=True)
    store = api.open_store(target).store
    t0 = time.perf_counter()
    report = api.import_file(store, path)
    t_import = time.perf_counter() - t0
    pending = store.pending_count()
    store.close()
    n = exported.counts["memory"]
    file_bytes = path.stat().st_size
    path.unlink()
    for suffix in ("", "-wal", "-shm"):
        Path(target + suffix).unlink(missing_ok=True)
    return {
        "export_with_vectors_per_s": round(n / t_export, 1),
        "export_file_bytes_per_memory": round(file_bytes / n),
        "restore_per_s": round(n / t_import, 1),
        "restore_vectors_kept": report.vectors_imported,
        "restore_pending_after": pending,
        "restore_peak_rss_mb": round(_rss_mb(), 1),
    }


# Chinese and Japanese sentences appended to every 50th memory of the lexical phase.
CJK_NOTES = [
    "我们在项目里使用引用计数来管理内存。", "悬空指针会导致程序崩溃，释放后要置空。",
    "数据库连接池的大小设置为二十。", "日本語のドキュメントは来週までに翻訳する予定です。",
]
LEXICAL_QUERIES = {
    "words": None,  # synthetic_queries
    "exact": ["OC-10042", "ref OC-17777 retry policy", "deploy.yml", "v2.4.7 rollback"],
    "cjk": ["引用", "悬空", "连接池", "翻訳", "引用计数", "悬空指针"],
}


def _phase_lexical(db: str, n: int, queries: int) -> dict:
    """The full-text indexes alone (no model): remember cost, bytes per memory of the word (porter)
    and trigram indexes (dbstat), and lexical recall latency for plain words, exact identifiers
    and CJK words (the trigram index's jobs)."""
    os.environ["MEMSAFE_NO_MODEL"] = "1"
    from memsafe import api, settings

    settings.reload()

    store = api.open_store(db).store
    items = synthetic_memories(n)
    t0 = time.perf_counter()
    for start in range(0, n, 500):
        with store.write():
            for i, item in enumerate(items[start : start + 500], start=start):
                text = item["content"] + (" " + CJK_NOTES[i // 50 % len(CJK_NOTES)] if i % 50 == 0 else "")
                api.remember(store, text, kind=item["kind"], project=item["project"], tags=item["tags"],
                             source="import", embed_now=False)
    remember_ms = (time.perf_counter() - t0) * 1000 / n
    store.checkpoint()
    sizes = dict(store.conn.execute(
        "SELECT CASE WHEN name LIKE 'memories_tri%' THEN 'tri' WHEN name LIKE 'memories_fts%' THEN 'fts' "
        "ELSE 'other' END, sum(pgsize) FROM dbstat GROUP BY 1"
    ))
    out = {
        "lexical_remember_ms_mean": round(remember_ms, 2),
        "word_index_bytes_per_memory": round(sizes.get("fts", 0) / n),
        "trigram_index_bytes_per_memory": round(sizes.get("tri", 0) / n),
    }
    for kind, qs in LEXICAL_QUERIES.items():
        qs = qs or synthetic_queries(queries, seed=13)
        lat = []
        for q in qs * max(1, queries // len(qs)):
            t = time.perf_counter()
            api.recall(store, q, mode="lexical", all_projects=True)
            lat.append((time.perf_counter() - t) * 1000)
        out[f"lexical_recall_{kind}_ms_p50"] = round(percentile(lat, 0.5), 2)
    store.close()
    return out


# A corpus of Chinese and Japanese memories written for this benchmark from templates:
# what the word index (CJK bigrams) and the trigram index cost when every memory is CJK,
# and whether a lexical recall of a word puts a memory holding it first.
CJK_SLOTS = {
    "svc": ["认证服务", "计费服务", "搜索服务", "通知服务", "网关", "调度器", "报表服务", "支付服务",
            "認証サービス", "決済サービス", "検索サービス", "通知サービス"],
    "db": ["数据库", "缓存集群", "消息队列", "对象存储", "データベース", "キャッシュ", "メッセージキュー"],
    "err": ["连接超时", "内存泄漏", "死锁", "证书校验失败", "磁盘已满", "悬空指针", "タイムアウト",
            "メモリリーク", "デッドロック", "接続エラー"],
    "who": ["张伟", "李娜", "王芳", "刘洋", "陈静", "佐藤", "鈴木", "高橋", "田中", "山本"],
    "why": ["冷启动时间减半", "旧方案在高负载下会丢失写入", "评审要求这样做", "值班手册可以更短",
            "成本下降了三分之一", "起動時間が半分になる", "障害対応が簡単になる"],
    "tool": ["容器编排", "持续集成流水线", "监控面板", "配置中心", "デプロイツール", "ジョブスケジューラ"],
}
CJK_TEMPLATES = [
    "我们决定把{svc}迁移到新的{db}，因为{why}。",
    "{svc}的错误日志由{tool}收集，出现{err}时要先看日志。",
    "{who}希望合并请求尽量小，测试和代码放在一起。",
    "待办：在本周五之前升级{svc}的{db}，负责人是{who}。",
    "调试{svc}时发现{err}来自过期的连接，重启{tool}以后恢复正常。",
    "引用计数归零时对象会被立即释放，{svc}曾因此出现{err}。",
    "{svc}のデプロイは{tool}だけで行う。手動デプロイは禁止、理由は{why}。",
    "{svc}で{err}が発生したら、ログを確認してから再実行する。担当は{who}。",
    "{db}の接続数は{svc}ごとに二十までに制限する。",
    "来週までに{svc}の設計ドキュメントを日本語に翻訳する予定です。{who}がレビューする。",
]
CJK_QUERIES = ["引用", "悬空", "死锁", "迁移", "合并请求", "连接超时", "内存泄漏", "冷启动", "翻訳", "デプロイ",
               "タイムアウト", "再実行", "接続数", "設計ドキュメント", "消息队列", "监控面板", "值班"]


def synthetic_cjk_memories(n: int, seed: int = 17) -> list[str]:
    """n distinct Chinese and Japanese memories (1-3 sentences from `CJK_TEMPLATES`)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        parts = [rng.choice(CJK_TEMPLATES).format(**{k: rng.choice(v) for k, v in CJK_SLOTS.items()})
                 for _ in range(rng.choice([1, 1, 2, 3]))]
        out.append("".join(parts) + f"（编号 {i}）")
    return out


def _phase_cjk(db: str, n: int, queries: int) -> dict:
    """The CJK corpus alone (no model): remember cost, bytes per memory of the word and trigram
    indexes (dbstat), lexical recall p50 of `CJK_QUERIES`, and the share of those recalls whose
    first hit holds the query word (those that have any holder)."""
    os.environ["MEMSAFE_NO_MODEL"] = "1"
    from memsafe import api, settings

    settings.reload()

    store = api.open_store(db).store
    texts = synthetic_cjk_memories(n)
    t0 = time.perf_counter()
    for start in range(0, n, 500):
        with store.write():
            for text in texts[start : start + 500]:
                api.remember(store, text, project="web", source="import", embed_now=False)
    remember_ms = (time.perf_counter() - t0) * 1000 / n
    store.checkpoint()
    sizes = dict(store.conn.execute(
        "SELECT CASE WHEN name LIKE 'memories_tri%' THEN 'tri' WHEN name LIKE 'memories_fts%' THEN 'fts' "
        "ELSE 'other' END, sum(pgsize) FROM dbstat GROUP BY 1"
    ))
    lat, first, answerable = [], 0, 0
    for q in CJK_QUERIES * max(1, queries // len(CJK_QUERIES)):
        t = time.perf_counter()
        hits = api.recall(store, q, mode="lexical", all_projects=True).hits
        lat.append((time.perf_counter() - t) * 1000)
        if any(q in text for text in texts):
            answerable += 1
            first += bool(hits) and q in hits[0].memory.content
    store.close()
    return {
        "cjk_remember_ms_mean": round(remember_ms, 2),
        "cjk_word_index_bytes_per_memory": round(sizes.get("fts", 0) / n),
        "cjk_trigram_index_bytes_per_memory": round(sizes.get("tri", 0) / n),
        "cjk_lexical_recall_ms_p50": round(percentile(lat, 0.5), 2),
        "cjk_first_hit_holds_word_pct": round(100 * first / answerable, 1) if answerable else None,
    }


def _child(phase: str, *args: str) -> dict:
    r = subprocess.run([*python_m("memsafe.bench.scale"), phase, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"bench phase {phase} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _timed_process(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one whole `python -m memsafe ...` process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([*python_m("memsafe"), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, proc.returncode


def run_scale(
    sizes: Sequence[int] = (1000, 10000, 100000),
    *,
    work_dir: str | None = None,
    queries: int = 40,
    cli_samples: int = 5,
    full_embed_limit: int = 20000,
    batch_size: int = 32,
    progress=None,
) -> dict:
    """Build a store of each size and measure it (see module docstring).

    Returns {"sizes": {n: {metric: value}}, "machine": {...}}; times in seconds or ms as named,
    sizes in bytes or MB as named. Raises RuntimeError if a phase fails.
    """
    say = progress or (lambda msg: None)
    base = Path(work_dir or tempfile.mkdtemp(prefix="memsafe-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]},
        "sizes": {},
    }
    for n in sizes:
        db = base / f"scale-{n}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        say(f"[{n}] import")
        row: dict = {"memories": n}
        row.update(_child("import", str(db), str(n), str(full_embed_limit), str(batch_size)))
        size = sum(Path(str(db) + s).stat().st_size for s in ("", "-wal") if Path(str(db) + s).exists())
        row["db_bytes"] = size
        row["db_bytes_per_memory"] = round(size / n)
        say(f"[{n}] recall in process")
        row.update(_child("recall", str(db), str(queries)))
        say(f"[{n}] full-text indexes alone (no model)")
        lexical_db = base / f"lexical-{n}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(lexical_db) + suffix).unlink(missing_ok=True)
        row.update(_child("lexical", str(lexical_db), str(n), str(queries)))
        say(f"[{n}] CJK corpus, full-text indexes alone (no model)")
        cjk_db = base / f"cjk-{n}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(cjk_db) + suffix).unlink(missing_ok=True)
        row.update(_child("cjk", str(cjk_db), str(n), str(queries)))
        say(f"[{n}] export with vectors, restore into a new store")
        row.update(_child("restore", str(db), str(base / f"restore-{n}.db")))
        say(f"[{n}] CLI recall / remember")
        qs = synthetic_queries(cli_samples, seed=23)
        walls, rss = [], []
        for q in qs:
            wall, peak, code = _timed_process(["--db", str(db), "recall", q, "--all-projects", "--json"])
            if code != 0:
                raise RuntimeError(f"CLI recall exited {code}")
            walls.append(wall * 1000)
            rss.append(peak)
        row["cli_recall_ms_p50"] = round(percentile(walls, 0.5))
        row["cli_recall_ms_p95"] = round(percentile(walls, 0.95))
        row["cli_recall_peak_rss_mb"] = round(max(rss), 1)
        walls = []
        for i in range(cli_samples):
            text = f"bench remember {i}: the {SERVICES[i % len(SERVICES)]} cache is warmed at boot (size {n})"
            wall, _peak, code = _timed_process(["--db", str(db), "remember", text, "--project", "web", "--json"])
            if code != 0:
                raise RuntimeError(f"CLI remember exited {code}")
            walls.append(wall * 1000)
        row["cli_remember_ms_p50"] = round(percentile(walls, 0.5))
        row["cli_remember_ms_p95"] = round(percentile(walls, 0.95))
        results["sizes"][n] = row
        say(f"[{n}] " + json.dumps(row))
    results["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["work_dir"] = str(base)
    return results


def main(argv: list[str]) -> int:
    phase, args = argv[0], argv[1:]
    if phase == "import":
        out = _phase_import(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif phase == "recall":
        out = _phase_recall(args[0], int(args[1]))
    elif phase == "lexical":
        out = _phase_lexical(args[0], int(args[1]), int(args[2]))
    elif phase == "cjk":
        out = _phase_cjk(args[0], int(args[1]), int(args[2]))
    elif phase == "restore":
        out = _phase_restore(args[0], args[1])
    else:
        raise SystemExit(f"unknown phase {phase}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


_ROWS = [
    ("import (memories/s, with embeddings)", "import_per_s"),
    ("import (memories per CPU-second)", "import_per_cpu_s"),
    ("restore: import of an export with vectors (memories/s)", "restore_per_s"),
    ("DB bytes per memory", "db_bytes_per_memory"),
    ("recall p50 / p95 in process, project (ms)", ("recall_ms_p50", "recall_ms_p95")),
    ("recall p50 / p95 in process, all projects (ms)", ("recall_all_projects_ms_p50", "recall_all_projects_ms_p95")),
    ("recall p50 in process, a query naming a time, \"<query> today\" (ms)", "recall_dated_ms_p50"),
    ("recall p50 / p95 CLI process (ms)", ("cli_recall_ms_p50", "cli_recall_ms_p95")),
    ("remember p50 / p95 CLI process (ms)", ("cli_remember_ms_p50", "cli_remember_ms_p95")),
    ("full-text indexes: word / trigram bytes per memory",
     ("word_index_bytes_per_memory", "trigram_index_bytes_per_memory")),
    ("remember without model, mean (ms)", "lexical_remember_ms_mean"),
    ("lexical recall p50: words / identifiers / CJK (ms)",
     ("lexical_recall_words_ms_p50", "lexical_recall_exact_ms_p50", "lexical_recall_cjk_ms_p50")),
    ("CJK corpus: remember without model, mean (ms)", "cjk_remember_ms_mean"),
    ("CJK corpus: word / trigram index bytes per memory",
     ("cjk_word_index_bytes_per_memory", "cjk_trigram_index_bytes_per_memory")),
    ("CJK corpus: lexical recall p50 (ms) / first hit holds the word (%)",
     ("cjk_lexical_recall_ms_p50", "cjk_first_hit_holds_word_pct")),
    ("peak RSS import / serve-like / CLI recall (MB)",
     ("import_peak_rss_mb", "serve_like_peak_rss_mb", "cli_recall_peak_rss_mb")),
    ("vectors synthesised (not model-embedded)", "vectors_synthesized"),
]


def parse_sizes(text: str) -> list[int]:
    """`"1000,10000"` → [1000, 10000]. Raises ValueError with a message fit for the user."""
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--scale must be comma-separated whole numbers, got {text!r}") from None
    if not sizes or any(n < 10 for n in sizes):
        raise ValueError("--scale needs at least one size of 10 or more")
    return sizes


def scale_table(result: dict, sizes: list[int]):
    """Rich table of a `run_scale` result: one row per metric, one column per size."""
    from rich.table import Table

    from memsafe.render import keep_figures

    table = Table(title=f"memsafe scale benchmark (load avg {result['machine']['load_avg_at_start']})")
    table.add_column("metric")
    for n in sizes:
        table.add_column(f"{n:,}", justify="right")
    for label, key in _ROWS:
        cells = []
        for n in sizes:
            row = result["sizes"][n]
            cells.append(" / ".join(str(row.get(k)) for k in key) if isinstance(key, tuple) else str(row.get(key)))
        table.add_row(label, *cells)
    return keep_figures(table)
