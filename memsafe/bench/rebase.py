"""Responsibility: `memsafe bench --rebase`: what memsafe's git hooks add to a `git rebase`.

For each size N (default 40 and 120 commits) and each of `runs` rounds, three real temporary
repositories are built alike (one commit on main, N on a feature branch, one more on main) and
`git rebase main` is timed on the feature branch in each, interleaved so a change in the machine's
load weighs on all three:

- without any hook (the baseline of the ratio);
- with an empty post-commit hook: what git itself pays to start a hook once per rebased commit,
  which no hook can avoid;
- with memsafe's hooks installed (their queue drained first). After the rebase it also measures
  how long until every rewritten commit's memory names its new hash (the one background run fed
  by post-rewrite), the most `hook run` processes alive at once, and whether the store holds
  exactly one active memory per commit (no duplicate).

Target: a 120-commit rebase with memsafe under 2x the time without it (a shorter
one is not held to it: there git's own start-up of a hook per commit weighs most). The figures
are medians; say the load beside them. Needs git; works in a temporary folder with its own
MEMSAFE_HOME and git config (your store and your repositories are never touched).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from memsafe import settings
from memsafe.bench import python_m

__all__ = ["SIZES", "LIMIT_RATIO", "run_rebase", "rebase_table"]

SIZES = (40, 120)
LIMIT_RATIO = 2.0  # a 120-commit rebase with memsafe under 2x the one without it
LIMIT_COMMITS = 120  # the limit holds from this size on (a short rebase is mostly git's own start-up
# of a hook per commit: the "empty hook" column, which no hook can avoid)
SETTLE_S = 180.0  # longest wait for the background run to follow a rebase


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _make_repo(path: Path, n: int, db: Path | None, env: dict) -> None:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Bench")
    _git(path, "config", "user.email", "bench@example.com")
    _git(path, "config", "commit.gpgsign", "false")
    if db is not None:
        subprocess.run([*python_m("memsafe"), "--db", str(db), "hook", "install", "--repo", str(path)], check=True,
                       capture_output=True, env=env)
    (path / "base.txt").write_text("base\n")
    _git(path, "add", ".")
    _git(path, "commit", "-q", "-m", "base")
    _git(path, "checkout", "-q", "-b", "feature")
    for i in range(n):
        (path / f"f{i}.txt").write_text(f"{i}\n")
        _git(path, "add", f"f{i}.txt")
        _git(path, "commit", "-q", "-m", f"feature change {i}")
    _git(path, "checkout", "-q", "main")
    (path / "main.txt").write_text("main\n")
    _git(path, "add", ".")
    _git(path, "commit", "-q", "-m", "main moves on")
    _git(path, "checkout", "-q", "feature")


def _hook_processes(db: Path) -> int:
    """memsafe `hook run` processes alive for this store (from /proc; 0 where there is none). A
    child forked by one (before it runs git) shows the same command line and is not counted."""
    found: dict[str, str] = {}
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if b"hook\x00run" in cmd and str(db).encode() in cmd:
                found[pid] = parent
    return sum(parent not in found for parent in found.values())


def _commit_notes(db: Path) -> list[str]:
    from memsafe import api

    if not db.exists():  # the hook's first run has not created it yet
        return []
    opened = api.open_store(str(db), create=False)
    try:
        return [r["content"] for r in opened.store.export_memory_rows(0, 1_000_000, ["active"], None)]
    finally:
        opened.store.close()


def _wait_for(predicate: Callable[[], bool], timeout: float = SETTLE_S) -> float:
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"the hook's background run did not finish within {timeout:.0f} s; see hook.log")
        time.sleep(0.05)
    return time.perf_counter() - start


def _one_run(base: Path, n: int, variant: str, env: dict) -> dict:
    """One timed rebase of n commits; variant: 'without', 'empty hook' or 'memsafe'."""
    repo = base / f"{variant.replace(' ', '-')}-{n}-{time.time_ns()}"
    db = repo.with_suffix(".db") if variant == "memsafe" else None
    _make_repo(repo, n, db, env)
    if variant == "empty hook":
        hook = repo / ".git" / "hooks" / "post-commit"
        hook.write_text("#!/bin/sh\nexit 0\n")
        hook.chmod(0o755)
    if db is None:
        start = time.perf_counter()
        _git(repo, "rebase", "-q", "main")
        return {"rebase_s": time.perf_counter() - start}
    _wait_for(lambda: len(_commit_notes(db)) >= n + 2 and _hook_processes(db) == 0)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _hook_processes(db))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        start = time.perf_counter()
        _git(repo, "rebase", "-q", "main")
        rebase_s = time.perf_counter() - start
        shorts = _git(repo, "log", "--format=%h", "main..feature").split()

        def followed() -> bool:
            notes = _commit_notes(db)
            return all(any(c.startswith(f"git commit {s} ") for c in notes) for s in shorts)

        settle_s = _wait_for(followed) + rebase_s
    finally:
        done.set()
        sampler.join()
    return {"rebase_s": rebase_s, "settle_s": settle_s, "peak_processes": peak[0],
            "extra_memories": len(_commit_notes(db)) - (n + 2)}


def run_rebase(sizes: Sequence[int] = SIZES, runs: int = 3, *,
               progress: Callable[[str], None] | None = None) -> dict:
    """Time `git rebase` of each size with and without memsafe's hooks (see the module docstring).

    Returns {"runs", "limit_ratio", "load_avg", "ok", "sizes": [{"commits", "without_s",
    "empty_hook_s", "memsafe_s", "ratio", "settled_s", "peak_processes", "extra_memories", "ok"}]}:
    seconds are medians of wall-clock times; `ratio` = memsafe_s / without_s; `ok` = no extra
    memory and, from `LIMIT_COMMITS` commits on, a ratio under `LIMIT_RATIO`.

    Raises:
        RuntimeError: git is missing or failed, or the background run did not follow a rebase.
    """
    rows = []
    with tempfile.TemporaryDirectory(prefix="memsafe-rebase-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "MEMSAFE_HOME": str(base / "home"), "GIT_CONFIG_GLOBAL": str(base / "gitconfig"),
               "GIT_CONFIG_NOSYSTEM": "1"}
        env.pop("MEMSAFE_DB", None)
        saved = {k: os.environ.get(k) for k in ("MEMSAFE_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}
        os.environ.update({k: env[k] for k in saved})  # git and the hooks it starts inherit them
        settings.reload()
        try:
            for n in sizes:
                times: dict[str, list[float]] = {"without": [], "empty hook": [], "memsafe": []}
                followed = []
                for round_ in range(runs):
                    if progress:
                        progress(f"rebase of {n} commits: round {round_ + 1} of {runs}")
                    for variant in times:
                        result = _one_run(base, n, variant, env)
                        times[variant].append(result["rebase_s"])
                        if variant == "memsafe":
                            followed.append(result)
                without, with_ = statistics.median(times["without"]), statistics.median(times["memsafe"])
                extra = max(r["extra_memories"] for r in followed)
                rows.append({
                    "commits": n, "without_s": round(without, 3),
                    "empty_hook_s": round(statistics.median(times["empty hook"]), 3), "memsafe_s": round(with_, 3),
                    "ratio": round(with_ / without, 2) if without else None,
                    "settled_s": round(statistics.median(r["settle_s"] for r in followed), 2),
                    "peak_processes": max(r["peak_processes"] for r in followed), "extra_memories": extra,
                    "ok": extra == 0 and (n < LIMIT_COMMITS or (bool(without) and with_ / without < LIMIT_RATIO)),
                })
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            raise RuntimeError(f"cannot run the rebase benchmark: {str(detail).strip()[:300]}") from None
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            settings.reload()
    return {"runs": runs, "limit_ratio": LIMIT_RATIO, "limit_commits": LIMIT_COMMITS,
            "load_avg": round(os.getloadavg()[0], 2), "ok": all(r["ok"] for r in rows), "sizes": rows}


def rebase_table(result: dict):
    """Rich table of a `run_rebase` result: one row per size."""
    from rich.table import Table

    table = Table(title=f"git rebase, medians of {result['runs']} runs (limit {result['limit_ratio']:g}x without "
                        f"memsafe from {result['limit_commits']} commits; load avg {result['load_avg']})")
    # without: no hook; empty hook: git's own cost of a hook per commit; followed: until every
    # rewritten commit's memory names its new hash; runs: most `hook run` processes at once
    for name in ("commits", "without s", "empty hook s", "memsafe s", "ratio", "followed s", "runs", "dupes",
                 "ok"):
        table.add_column(name, justify="right", overflow="fold")
    for r in result["sizes"]:
        table.add_row(str(r["commits"]), f"{r['without_s']:.2f}", f"{r['empty_hook_s']:.2f}", f"{r['memsafe_s']:.2f}",
                      f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-", f"{r['settled_s']:.2f}",
                      str(r["peak_processes"]), str(r["extra_memories"]), "yes" if r["ok"] else "NO")
    return table
