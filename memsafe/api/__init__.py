"""Responsibility: the handlers. The CLI and the MCP server call these and nothing below them.

Each handler takes an open `Store` first and keyword-only options after it, returns a
dataclass from `memsafe.models`, raises only `MemsafeError` subclasses, and never prints.
Handlers are grouped by module (core: memories and recall; lifecycle: update, history, time
travel, decay; transfer: export/import; hooks; doctor); this package re-exports them all.
"""

from memsafe.api.browse import *  # noqa: F401,F403
from memsafe.api.browse import __all__ as _browse_all
from memsafe.api.core import *  # noqa: F401,F403
from memsafe.api.core import __all__ as _core_all
from memsafe.api.doctor import *  # noqa: F401,F403
from memsafe.api.doctor import __all__ as _doctor_all
from memsafe.api.encryption import *  # noqa: F401,F403
from memsafe.api.encryption import __all__ as _encryption_all
from memsafe.api.graph import *  # noqa: F401,F403
from memsafe.api.graph import __all__ as _graph_all
from memsafe.api.hooks import *  # noqa: F401,F403
from memsafe.api.hooks import __all__ as _hooks_all
from memsafe.api.init import *  # noqa: F401,F403
from memsafe.api.init import __all__ as _init_all
from memsafe.api.lifecycle import *  # noqa: F401,F403
from memsafe.api.lifecycle import __all__ as _lifecycle_all
from memsafe.api.transfer import *  # noqa: F401,F403
from memsafe.api.transfer import __all__ as _transfer_all

__all__ = [*_core_all, *_graph_all, *_lifecycle_all, *_transfer_all, *_hooks_all, *_doctor_all, *_encryption_all,
           *_init_all, *_browse_all]
