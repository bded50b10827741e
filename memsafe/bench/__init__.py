"""Responsibility: every figure `memsafe bench` prints, one module a measure.

- `quality`: retrieval quality (Recall@k, MRR, budget adherence) on a labelled corpus.
- `mcp`: the MCP server over stdio (tools/list tokens, cold start).
- `scale`: speed and size at 1k–100k memories, each phase in a fresh subprocess.

Nothing is imported here, so `memsafe --help` stays light; import the module you need.
"""
