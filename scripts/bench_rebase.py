"""Time `git rebase` of N commits with and without memsafe's hooks, on real temporary repositories.

For each N (default 40 and 120) and each of `--runs` runs, it builds a repository with one commit
on main, N commits on a feature branch and one more on main, then times `git rebase main` on the
feature branch; also with an empty post-commit hook (git's own cost of starting a hook for each
rebased commit, which no hook can avoid). With memsafe, the hooks are installed first and their
queue is drained before the rebase; after it, the script also measures how long until every
rewritten commit's memory shows the new hash (the background run), the most hook processes alive
at once, and checks that the store holds exactly one active memory per commit (no duplicates).

Usage: .venv/bin/python scripts/bench_rebase.py [N ...] [--runs R]
(works in a temporary folder, with its own MEMSAFE_HOME and git config)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MEMSAFE = [sys.executable, "-m", "memsafe"]
SETTLE_S = 120


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(path: Path, n: int, db: Path | None) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Bench")
    git(path, "config", "user.email", "bench@example.com")
    if db is not None:
        subprocess.run([*MEMSAFE, "--db", str(db), "hook", "install", "--repo", str(path)], check=True,
                       capture_output=True)
    (path / "base.txt").write_text("base\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")
    git(path, "checkout", "-q", "-b", "feature")
    for i in range(n):
        (path / f"f{i}.txt").write_text(f"{i}\n")
        git(path, "add", f"f{i}.txt")
        git(path, "commit", "-q", "-m", f"feature change {i}")
    git(path, "checkout", "-q", "main")
    (path / "main.txt").write_text("main\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "main moves on")
    git(path, "checkout", "-q", "feature")


def hook_processes(db: Path) -> int:
    """memsafe `hook run` processes alive for this store (read from /proc; 0 where there is none)."""
    count = 0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"hook\x00run" in cmd and str(db).encode() in cmd:
                count += 1
    return count


def commit_memories(db: Path) -> list[str]:
    from memsafe import api

    opened = api.open_store(str(db))
    try:
        return [r["content"] for r in opened.store.export_memory_rows(0, 100_000, ["active"], None)]
    finally:
        opened.store.close()


def wait_for(predicate, timeout: float = SETTLE_S) -> float:
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > timeout:
            raise SystemExit("the hook's background run did not finish in time; see hook.log")
        time.sleep(0.05)
    return time.perf_counter() - start


def one_run(base: Path, n: int, with_memsafe: bool, empty_hook: bool = False) -> dict:
    repo = base / f"{'with' if with_memsafe else 'without'}-{n}-{time.time_ns()}"
    db = repo.with_suffix(".db") if with_memsafe else None
    make_repo(repo, n, db)
    if empty_hook:  # what git itself pays to start any post-commit hook once per rebased commit
        hook = repo / ".git" / "hooks" / "post-commit"
        hook.write_text("#!/bin/sh\nexit 0\n")
        hook.chmod(0o755)
    expected = n + 2
    if with_memsafe:
        wait_for(lambda: len(commit_memories(db)) >= expected and hook_processes(db) == 0)
    peak = [0]
    done = threading.Event()

    def sample() -> None:  # runs in every variant, so its own cost weighs on all of them alike
        while not done.is_set():
            peak[0] = max(peak[0], hook_processes(db or repo))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    git(repo, "rebase", "-q", "main")
    rebase_s = time.perf_counter() - start
    result = {"rebase_s": rebase_s}
    if not with_memsafe:
        done.set()
        sampler.join()
    else:
        shorts = git(repo, "log", "--format=%h", "main..feature").split()

        def settled() -> bool:
            contents = commit_memories(db)
            return all(any(c.startswith(f"git commit {s} ") for c in contents) for s in shorts)

        result["settle_s"] = wait_for(settled) + rebase_s
        done.set()
        sampler.join()
        contents = commit_memories(db)
        result["peak_processes"] = peak[0]
        result["active_memories"] = len(contents)
        result["expected"] = expected
    done.set()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[40, 120])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="memsafe-rebase-"))
    os.environ["MEMSAFE_HOME"] = str(base / "home")
    os.environ["GIT_CONFIG_GLOBAL"] = str(base / "gitconfig")
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs each; medians")
    for n in args.sizes:
        without, empty, runs = [], [], []
        for _ in range(args.runs):  # interleaved, so a change in the machine's load hits all three
            without.append(one_run(base, n, False)["rebase_s"])
            empty.append(one_run(base, n, False, empty_hook=True)["rebase_s"])
            runs.append(one_run(base, n, True))
        with_s = [r["rebase_s"] for r in runs]
        ratio = statistics.median(with_s) / statistics.median(without)
        dupes = [r["active_memories"] - r["expected"] for r in runs]
        print(
            f"rebase of {n:>3} commits: without memsafe {statistics.median(without):.2f} s, "
            f"with an empty post-commit hook {statistics.median(empty):.2f} s, "
            f"with memsafe {statistics.median(with_s):.2f} s ({ratio:.2f}x); memories updated after "
            f"{statistics.median(r['settle_s'] for r in runs):.2f} s; at most "
            f"{max(r['peak_processes'] for r in runs)} hook process(es) at once; "
            f"extra memories {max(dupes)} (active {runs[-1]['active_memories']}, commits {runs[-1]['expected']})"
        )


if __name__ == "__main__":
    main()
