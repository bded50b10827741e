"""Responsibility: the handlers. The CLI and the MCP server call these and nothing below them.

Each handler takes an open `Store` first and keyword-only options after it, returns a
dataclass from `memsafe.models`, raises only `MemsafeError` subclasses, and never prints.
Handlers are grouped by module (core: memories and recall); this package re-exports them all.
"""

from memsafe.api.core import *  # noqa: F401,F403
from memsafe.api.core import __all__ as _core_all
from memsafe.api.graph import *  # noqa: F401,F403
from memsafe.api.graph import __all__ as _graph_all

__all__ = [*_core_all, *_graph_all]
