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

__all__ = ["__version__"]
