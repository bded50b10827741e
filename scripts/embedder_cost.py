"""What each embedding model of `memsafe.embed.MODELS` costs on this machine: load time, resident
memory, and CPU per text, each model in a fresh process (so RSS is the model's own).

    .venv/bin/python scripts/embedder_cost.py [--json] [--models minilm,e5-small] [--threads 1]

Per model: CPU and wall ms to load it; RSS (MB) after the load and the peak (ru_maxrss) after
embedding; CPU ms per stored text for the developer-prose corpus's memories embedded in batches
(`Embedder.embed`, as `memsafe embed` does); CPU ms of one query (p50 of the corpus's queries,
each its own call, as a recall embeds it); and, on the Chinese and Japanese corpus of `memsafe
bench --scale`, the share of its query words whose nearest memory by vector alone holds the word.
CPU time is user + system of the process, so a busy machine inflates wall-clock figures but much
less these. A model whose package is not installed is reported as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, statistics, sys, time
from importlib import resources

name, threads = sys.argv[1], int(sys.argv[2]) or None

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def rss_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")

corpus = json.loads(resources.files("memsafe.data").joinpath("devprose_corpus.json").read_text("utf-8"))
texts = [m["content"] for m in corpus["memories"]]
queries = [q["query"] for q in corpus["queries"]]
import numpy  # the process's baseline: numpy is loaded before any model
base = rss_mb()
from memsafe import embed
c0, w0 = cpu(), time.perf_counter()
try:
    model = embed.Embedder(*embed.model_files(name), threads, spec=embed.model_spec(name))
except embed.ModelUnavailable as exc:
    print(json.dumps({"model": name, "error": str(exc)}))
    sys.exit(0)
load_cpu, load_wall = cpu() - c0, time.perf_counter() - w0
loaded = rss_mb()
model.embed(texts[:8])  # warm
c0, w0 = cpu(), time.perf_counter()
for _ in range(1):
    model.embed(texts)
doc_cpu = (cpu() - c0) / len(texts)
doc_wall = (time.perf_counter() - w0) / len(texts)
one, first, five = [], 0, 0
matrix = model.embed(texts)
ids = [m["id"] for m in corpus["memories"]]
for item in corpus["queries"]:
    c0 = cpu()
    vector = model.embed_one(item["query"], query=True)
    one.append(cpu() - c0)
    order = (matrix @ vector).argsort()[::-1]  # the model alone: cosine, no recall pipeline
    first += ids[order[0]] in item["relevant"]
    five += any(ids[i] in item["relevant"] for i in order[:5])
# Chinese and Japanese memories (the CJK corpus of `memsafe bench --scale`): the share of its query
# words whose nearest memory by vector alone (and any of the 5 nearest) holds the word
from memsafe.bench import scale
cjk = scale.synthetic_cjk_memories(int(sys.argv[3]))
cjk_first = cjk_five = answerable = 0
if cjk:
    matrix = model.embed(cjk)
    for q in scale.CJK_QUERIES:
        if not any(q in t for t in cjk):
            continue
        answerable += 1
        order = (matrix @ model.embed_one(q, query=True)).argsort()[::-1]
        cjk_first += q in cjk[order[0]]
        cjk_five += any(q in cjk[i] for i in order[:5])
print(json.dumps({
    "model": name, "dim": model.dim, "model_id": model.model_id,
    "load_cpu_ms": round(load_cpu * 1000), "load_wall_ms": round(load_wall * 1000),
    "rss_model_mb": round(loaded - base),
    "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "doc_cpu_ms": round(doc_cpu * 1000, 2), "doc_wall_ms": round(doc_wall * 1000, 2), "texts": len(texts),
    "query_cpu_ms_p50": round(statistics.median(one) * 1000, 2), "queries": len(one),
    "devprose_cosine_r1": round(first / len(one), 3), "devprose_cosine_r5": round(five / len(one), 3),
    "cjk_vector_first_pct": round(100 * cjk_first / max(1, answerable), 1),
    "cjk_vector_top5_pct": round(100 * cjk_five / max(1, answerable), 1), "cjk_queries": answerable,
}))
"""


def main() -> None:
    from memsafe import embed

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(embed.MODELS))
    parser.add_argument("--threads", type=int, default=0, help="model threads (0: memsafe's default)")
    parser.add_argument("--cjk", type=int, default=200, help="CJK memories for the vector-only CJK check (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        out = subprocess.run([sys.executable, "-c", CHILD, name, str(args.threads), str(args.cjk)], capture_output=True,
                             text=True, check=False)
        rows.append(json.loads(out.stdout) if out.returncode == 0 else {"model": name, "error": out.stderr[-300:]})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        if "error" in row:
            print(f"{row['model']:10} unavailable: {row['error']}")
            continue
        print(f"{row['model']:10} load {row['load_cpu_ms']:5} ms CPU  RSS +{row['rss_model_mb']:4} MB "
              f"(peak {row['rss_peak_mb']} MB)  {row['doc_cpu_ms']:6.2f} ms CPU/text  "
              f"query {row['query_cpu_ms_p50']:6.2f} ms CPU  CJK by vector: first {row['cjk_vector_first_pct']}%, "
              f"top 5 {row['cjk_vector_top5_pct']}%")


if __name__ == "__main__":
    main()
