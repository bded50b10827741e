"""A platform where a compiled dependency does not load: one line naming the platform and what
works instead (not the loader's error), and memsafe keeps working by keywords. The dependency
floors exclude the builds known to be broken."""

from __future__ import annotations

import json
import platform
import re
import struct
import sys
from pathlib import Path

import pytest
from conftest import run_memsafe
from packaging.requirements import Requirement

from memsafe import platforms

ROOT = Path(__file__).parent.parent


def shadow(tmp_path: Path, name: str, files: dict[str, bytes | str]) -> dict[str, str]:
    """An environment whose PYTHONPATH puts a package `name` made of `files` before the installed one."""
    folder = tmp_path / "shadow"
    for relative, content in files.items():
        path = folder / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return {"PYTHONPATH": str(folder)}


def elf32() -> bytes:
    """The header of a 32-bit ARM shared library (what sqlite-vec 0.1.6's arm64 wheel held)."""
    return b"\x7fELF\x01\x01\x01" + b"\0" * 9 + struct.pack("<HHI", 3, 40, 1) + b"\0" * 200


def recall_notes(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    db = str(tmp_path / "m.db")
    r = run_memsafe("--db", db, "remember", "the deploy runs on Fridays", env=env)
    assert r.returncode == 0, r.stderr
    r = run_memsafe("--db", db, "recall", "deploy", env=env)
    assert r.returncode == 0 and "the deploy runs on Fridays" in r.stdout, r.stderr
    return r.stderr, run_memsafe("--db", db, "doctor", "--no-model", "--json", env=env).stdout


@pytest.mark.skipif(not sys.platform.startswith("linux") or sys.maxsize < 2**32,
                    reason="the dynamic loader's wording for a 32-bit library is glibc's on 64-bit Linux")
def test_a_32_bit_sqlite_vec_build_is_one_line_naming_the_platform_and_the_fix(tmp_path):
    env = shadow(tmp_path, "sqlite_vec", {"__init__.py": "", "vec0.so": elf32()})
    stderr, doctor = recall_notes(tmp_path, env)
    notes = [line for line in stderr.splitlines() if "sqlite-vec" in line]
    assert len(notes) == 1 and "Traceback" not in stderr
    assert f"sqlite-vec does not load on {platform.system()} {platform.machine()}" in notes[0]
    assert "wrong ELF class: ELFCLASS32" in notes[0] and "pip install 'sqlite-vec>=0.1.7'" in notes[0]
    assert "shadow" not in notes[0]  # the library's path is not the user's concern
    check = {c["name"]: c for c in json.loads(doctor)["checks"]}["sqlite-vec"]
    assert check["level"] == "error" and "ELFCLASS32" in check["detail"]


def test_sqlite_vec_missing_is_one_line_naming_the_platform_and_where_it_works(tmp_path):
    folder = tmp_path / "shadow"
    folder.mkdir()
    (folder / "sqlite_vec.py").write_text("")  # a module, not the package: its extension is not there
    stderr, _ = recall_notes(tmp_path, {"PYTHONPATH": str(folder)})
    notes = [line for line in stderr.splitlines() if "sqlite-vec" in line]
    assert len(notes) == 1 and "sqlite-vec is not installed; it has no build for" in notes[0]
    assert platforms.SUPPORTED in notes[0] and "docs/install.md" in notes[0]


@pytest.mark.parametrize("failure", [
    "raise ImportError('DLL load failed while importing onnxruntime_pybind11_state: "
    "The specified module could not be found.')",
    "raise ModuleNotFoundError(\"No module named 'onnxruntime'\", name='onnxruntime')",
])
def test_onnxruntime_that_does_not_load_is_one_line_and_recall_goes_on_by_keywords(tmp_path, failure):
    env = shadow(tmp_path, "onnxruntime", {"__init__.py": failure})
    stderr, doctor = recall_notes(tmp_path, env)
    notes = [line for line in stderr.splitlines() if "onnxruntime" in line]
    assert len(notes) == 1 and "Traceback" not in stderr, stderr
    assert f"{platform.system()} {platform.machine()}" in notes[0] and "docs/install.md" in notes[0]
    assert ("does not load on" in notes[0] and "DLL load failed" in notes[0]) if "DLL" in failure \
        else "onnxruntime is not installed; it has no build for" in notes[0]


def test_the_dependency_floors_exclude_the_broken_builds():
    """sqlite-vec 0.1.6's manylinux aarch64 wheel holds a 32-bit ARM library ("wrong ELF class:
    ELFCLASS32"; 0.1.7, 0.1.8 and 0.1.9 hold 64-bit ones, checked with `file`)."""
    block = (ROOT / "pyproject.toml").read_text().split("dependencies = [", 1)[1].split("]", 1)[0]
    deps = {(r := Requirement(text)).name: r for text in re.findall(r'^\s*"([^"]+)"', block, re.M)}
    assert not deps["sqlite-vec"].specifier.contains("0.1.6", prereleases=True)
    assert deps["sqlite-vec"].specifier.contains("0.1.7")
