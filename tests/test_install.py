"""Install as a tool: build the wheel from a copy of the sources (offline, with the build backend
pyproject.toml names), install it in a fresh venv, and run `memsafe --version` and one
remember/recall from that install. The wheel must carry every package and data file.

The fresh venv gets the wheel only; its dependencies come from this test environment's
site-packages (a .pth file: no network), and `pip check` proves the wheel's declared
dependencies are all satisfied there. CI (`.ci/run`) also installs the wheel with its
dependencies from the package index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "memsafe", src / "memsafe", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    done = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist,
                src, cwd=src)
    assert "warning" not in done.stderr.lower().replace("byte-compiling is disabled", ""), done.stderr
    (found,) = dist.glob("memsafe-*.whl")
    return found


def test_wheel_carries_every_package_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "memsafe").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert source <= names, sorted(source - names)
    assert "memsafe/data/bench_corpus.json" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in names)


def test_installed_wheel_runs_version_remember_and_recall(wheel, tmp_path):
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet", wheel)
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "check")

    memsafe = target / ("Scripts/memsafe.exe" if os.name == "nt" else "bin/memsafe")
    env = {**os.environ, "MEMSAFE_DB": str(tmp_path / "memory.db")}
    version = _run(memsafe, "--version", env=env, cwd=tmp_path).stdout
    from memsafe import __version__

    assert version.strip() == f"memsafe {__version__}"
    where = _run(python, "-c", "import memsafe; print(memsafe.__file__)", env=env, cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(target)  # the installed copy, not this checkout
    _run(memsafe, "remember", "The staging database runs on port 6543", "--global", env=env, cwd=tmp_path)
    found = _run(memsafe, "recall", "which port does staging use?", "--json", env=env, cwd=tmp_path).stdout
    assert "6543" in found
