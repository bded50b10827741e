"""Responsibility: the handlers. The CLI and the MCP server call these and nothing below them.

Each handler takes an open `Store` first and keyword-only options after it, returns a
dataclass from `memsafe.models`, raises only `MemsafeError` subclasses, and never prints.
Handlers are grouped by module (core: memories and recall; graph; lifecycle: update, history,
time travel, decay; transfer: export/import; hooks; checkup: doctor; encryption; init; browsing:
the UI's pages); this package re-exports them all.

The re-export is lazy (PEP 562 `__getattr__`): `api.recall` imports `memsafe.api.core` on first
use, and nothing else, so a command pays only for the handlers it runs (a lexical
`recall` must not import the handlers of import, doctor or the UI). No submodule has a function
of its own name, so an import of a submodule never hides a handler.
"""

from __future__ import annotations

import importlib

# searched in this order; the first module whose __all__ holds a name provides it
_MODULES = ("core", "retrieval", "config", "graph", "lifecycle", "transfer", "hooks", "checkup", "encryption", "init",
            "browsing", "agent")


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__all__":
        everything = [n for m in _MODULES for n in importlib.import_module(f"{__name__}.{m}").__all__]
        globals()["__all__"] = everything
        return everything
    if name.startswith("__"):
        raise AttributeError(name)
    for module in _MODULES:
        handlers = importlib.import_module(f"{__name__}.{module}")
        if name in handlers.__all__:
            value = getattr(handlers, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
