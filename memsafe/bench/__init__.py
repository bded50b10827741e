"""Responsibility: every figure `memsafe bench` prints, one module a measure.

- `quality`: retrieval quality (Recall@k, MRR, budget adherence) on a labelled corpus.
- `mcp`: the MCP server over stdio (tools/list tokens, cold start).
- `scale`: speed and size at 1k–100k memories, each phase in a fresh subprocess.

Nothing heavy is imported here, so `memsafe --help` stays light; import the module you need.
"""

import sys


def python_m(module: str) -> list[str]:
    """The argv of `python -m MODULE` for a measuring subprocess, never importing from the
    current folder: run from a folder holding a checkout's `memsafe/`, plain `-m` imported that
    copy instead of the installed one and died with ImportError. `-P` (Python
    3.11+) leaves the current folder off sys.path; on 3.10, a `-c` shim drops it and runs the
    module as `-m` would."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    shim = f"import runpy, sys; del sys.path[0]; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", shim]
