"""memsafe: persistent, local, offline memory for AI coding agents.

One SQLite file holds memories, their full-text index, their vectors, a knowledge graph
and the history of every change. The CLI (`memsafe.cli`) and the MCP server
(`memsafe.server`) are thin adapters over the handlers in `memsafe.api`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
