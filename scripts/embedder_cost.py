"""What each embedding model of `memsafe.embed.MODELS` costs on this machine: load time, resident
memory, and CPU per text, each model in a fresh process (so RSS is the model's own).

    .venv/bin/python scripts/embedder_cost.py [--json] [--models minilm,e5-small] [--threads 1]

Per model: CPU and wall ms to load it; RSS (MB) after the load and the peak (ru_maxrss) after
embedding; CPU ms per stored text for the developer-prose corpus's memories embedded in batches
(`Embedder.embed`, as `memsafe embed` does); CPU ms of one query (p50 of the corpus's queries,
each its own call, as a recall embeds it). CPU time is user + system of the process, so a busy
machine inflates wall-clock figures but much less these. A model whose package is not installed
is reported as such.
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
one = []
for q in queries:
    c0 = cpu()
    model.embed_one(q, query=True)
    one.append(cpu() - c0)
print(json.dumps({
    "model": name, "dim": model.dim, "model_id": model.model_id,
    "load_cpu_ms": round(load_cpu * 1000), "load_wall_ms": round(load_wall * 1000),
    "rss_model_mb": round(loaded - base),
    "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "doc_cpu_ms": round(doc_cpu * 1000, 2), "doc_wall_ms": round(doc_wall * 1000, 2), "texts": len(texts),
    "query_cpu_ms_p50": round(statistics.median(one) * 1000, 2), "queries": len(one),
}))
"""


def main() -> None:
    from memsafe import embed

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(embed.MODELS))
    parser.add_argument("--threads", type=int, default=0, help="model threads (0: memsafe's default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        out = subprocess.run([sys.executable, "-c", CHILD, name, str(args.threads)], capture_output=True,
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
              f"query {row['query_cpu_ms_p50']:6.2f} ms CPU")


if __name__ == "__main__":
    main()
