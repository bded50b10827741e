"""Responsibility: where memsafe's compiled dependencies have working builds, and the one line
said when one of them does not load here, in place of a loader error.

The table in docs/install.md is the record: it was made by resolving memsafe's dependencies,
wheels only, for each platform and Python (`pip install --dry-run --only-binary=:all:
--platform ... --python-version ...`). The two that fail where the others work are sqlite-vec
(no musl, 32-bit ARM or Windows-on-ARM build; its 0.1.6 "aarch64" wheel held a 32-bit library:
asg017/sqlite-vec#159, #251) and onnxruntime (no musl or 32-bit ARM build; newer releases
without Intel-macOS wheels). Without either, memsafe still stores and recalls, by keywords.
"""

from __future__ import annotations

import glob
import platform
import re
import sys

SUPPORTED = ("Linux (glibc) and macOS on x86-64 and arm64, Windows on x86-64, Python 3.10-3.14 "
             "(3.13 at most on Intel macOS)")
DOCS = "docs/install.md"


def here() -> str:
    """This platform as a person names it, e.g. 'Linux aarch64 (musl), 64-bit Python 3.12'."""
    system = platform.system() or sys.platform
    machine = platform.machine() or "unknown CPU"
    detail = ""
    if system == "Linux":
        libc = platform.libc_ver()[0]
        detail = " (glibc)" if libc == "glibc" else " (musl)" if glob.glob("/lib/ld-musl-*") else ""
    bits = "64-bit" if sys.maxsize > 2**32 else "32-bit"
    return f"{system} {machine}{detail}, {bits} Python {platform.python_version()}"


def _loader_reason(exc: BaseException) -> str:
    """The loader's own reason without the library's path (`...vec0.so: wrong ELF class: ELFCLASS32`)."""
    text = re.sub(r"^\w+Error: ", "", " ".join(str(exc).split()))  # apsw repeats its class name
    return re.sub(r"\S*[/\\]\S*?: ", "", text) or type(exc).__name__


def vec_unavailable(exc: BaseException) -> str:
    """One line for a sqlite-vec that is missing (ImportError) or whose extension does not load."""
    if isinstance(exc, ImportError):
        return f"sqlite-vec is not installed; it has no build for {here()} (it has for {SUPPORTED}: {DOCS})"
    reason = _loader_reason(exc)
    if "ELFCLASS32" in reason:
        fix = "a 32-bit build in a 64-bit Python (sqlite-vec 0.1.6's arm64 wheel): pip install 'sqlite-vec>=0.1.7'"
    else:
        fix = f"builds exist for {SUPPORTED}: {DOCS}"
    return f"sqlite-vec does not load on {here()}: {reason}; {fix}"


def onnx_unavailable(exc: BaseException) -> str:
    """One line for an onnxruntime that is missing or whose native library does not load."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "onnxruntime":
        return (f"onnxruntime is not installed; it has no build for {here()} "
                f"(it has for {SUPPORTED}: {DOCS})")
    return (f"onnxruntime does not load on {here()}: {_loader_reason(exc)}; "
            f"builds exist for {SUPPORTED}: {DOCS}")
