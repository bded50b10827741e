"""Time a git commit with and without the memsafe post-commit hook (median of 10 each), and the
background `hook run` process the hook starts (median of 5).

Usage: .venv/bin/python scripts/bench_hook.py   (works in a temporary folder and MEMSAFE_HOME)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMSAFE = str(Path(sys.executable).parent / "memsafe")
COMMITS = 10
SETTLE_S = 2.5  # let each background run finish, so runs do not overlap


def run(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(args, cwd=cwd, check=True, capture_output=True)


def commit_times(repo: Path) -> list[float]:
    times = []
    for i in range(COMMITS):
        (repo / "f.txt").write_text(f"{i} {time.time_ns()}")
        run("git", "add", "f.txt", cwd=repo)
        start = time.perf_counter()
        run("git", "commit", "-q", "-m", f"change {i}", cwd=repo)
        times.append(time.perf_counter() - start)
        time.sleep(SETTLE_S)
    return times


def main() -> None:
    base = Path(tempfile.mkdtemp())
    os.environ["MEMSAFE_HOME"] = str(base / "home")
    for name, install in (("without", False), ("with", True)):
        repo = base / name
        repo.mkdir()
        run("git", "init", "-q", cwd=repo)
        run("git", "config", "user.name", "Bench", cwd=repo)
        run("git", "config", "user.email", "bench@example.com", cwd=repo)
        if install:
            run(MEMSAFE, "hook", "install", "--repo", str(repo))
        t = [x * 1000 for x in commit_times(repo)]
        print(f"{name} hook: median {statistics.median(t):.1f} ms (min {min(t):.1f}, max {max(t):.1f}, n={COMMITS})")
    background = []
    for _ in range(5):
        start = time.perf_counter()
        run(sys.executable, "-m", "memsafe", "hook", "run", "--repo", str(base / "with"), "--commit", "HEAD")
        background.append((time.perf_counter() - start) * 1000)
    print(f"background `hook run` process: median {statistics.median(background):.0f} ms (n=5)")


if __name__ == "__main__":
    main()
