"""Responsibility: the one way `memsafe bench` times things and summarises the times.

- `percentile` / `summary`: order statistics of a list of samples (linear interpolation between
  closest ranks, numpy's default `linear` method; the median is the 0.5 percentile).
- `time_process` / `run_process`: wall-clock seconds of one whole child process (spawn to exit),
  and the CPU seconds (user + system) it used.
- `interleaved`: whole-process measures run in rounds, each round also timing the baseline
  `python -c pass`, so every figure comes with its ratio to the interpreter's own start-up
  measured under the same load. On a shared or loaded machine the seconds move; the ratios hold.

Nothing heavy is imported here (stdlib only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["BASELINE", "Measure", "interleaved", "percentile", "run_process", "summary", "time_process", "timed"]

BASELINE = "python -c pass"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of `values`, interpolated linearly between closest ranks
    (Hyndman & Fan definition 7, numpy's default). 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * min(1.0, max(0.0, q))
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: Sequence[float], scale: float = 1.0, digits: int = 4) -> dict:
    """{"n", "p50", "p90", "p95", "min", "max"} of `values` × `scale` (e.g. 1000 for s → ms), rounded."""
    def r(x: float) -> float:
        return round(x * scale, digits)

    return {"n": len(values), "p50": r(percentile(values, 0.5)), "p90": r(percentile(values, 0.9)),
            "p95": r(percentile(values, 0.95)), "min": r(min(values, default=0.0)),
            "max": r(max(values, default=0.0))}


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    """Seconds of `runs` calls of `fn` in this process (time.perf_counter)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def run_process(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                ok_codes: Sequence[int] = (0,)) -> tuple[float, float | None]:
    """(wall-clock seconds from spawning `argv` to its exit, CPU seconds it used: user + system,
    from `resource.getrusage(RUSAGE_CHILDREN)`; None where that is unavailable). Stdin is empty,
    stdout discarded. A process it leaves behind (a detached helper) is not counted.

    Raises:
        RuntimeError: the exit code is not in `ok_codes` (the stderr tail is in the message).
    """
    try:
        import resource
    except ImportError:  # Windows
        resource = None  # type: ignore[assignment]  # a module or None: an optional import mypy cannot type

    def children_cpu() -> float | None:
        if resource is None:
            return None
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cpu_before = children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, env=None if env is None else {**os.environ, **env}, cwd=cwd)
    elapsed = time.perf_counter() - started
    cpu_after = children_cpu()
    if proc.returncode not in ok_codes:
        tail = proc.stderr.decode("utf-8", "replace").strip()[-500:]
        raise RuntimeError(f"`{' '.join(argv)}` exited {proc.returncode}: {tail}")
    return elapsed, None if cpu_before is None or cpu_after is None else cpu_after - cpu_before


def time_process(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 ok_codes: Sequence[int] = (0,)) -> float:
    """Wall-clock seconds from spawning `argv` to its exit (`run_process`)."""
    return run_process(argv, env=env, cwd=cwd, ok_codes=ok_codes)[0]


class Measure:
    """One whole-process measure: a name, the command (or a timer), and its target.

    Args:
        name: shown in tables and used as the JSON key.
        argv: the command, or a callable (round number → argv) when each run needs its own input.
        timer: instead of `argv`, a callable (round number → seconds, or (seconds, CPU seconds))
            that runs and times the process itself (e.g. spawn → a protocol reply).
        env: environment overrides. cwd: working directory.
        target_s / target_ratio: the goal, in seconds or as a multiple of the baseline (either or neither).
    """

    def __init__(self, name: str, argv: Sequence[str] | Callable[[int], Sequence[str]] = (), *,
                 timer: Callable[[int], float | tuple[float, float | None]] | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None, target_s: float | None = None,
                 target_ratio: float | None = None):
        self.name, self.argv, self.timer, self.env, self.cwd = name, argv, timer, env, cwd
        self.target_s, self.target_ratio = target_s, target_ratio

    def run(self, round_no: int) -> tuple[float, float | None]:
        """(wall seconds, CPU seconds or None) of one run."""
        if self.timer is not None:
            timed = self.timer(round_no)
            return timed if isinstance(timed, tuple) else (timed, None)
        argv = self.argv(round_no) if callable(self.argv) else self.argv
        return run_process(argv, env=self.env, cwd=self.cwd)


def interleaved(measures: Sequence[Measure], runs: int, *, python: str = sys.executable,
                progress: Callable[[str], None] | None = None) -> dict:
    """Run every measure `runs` times in rounds; each round first times `python -c pass`.

    Returns:
        {"baseline": summary of the baseline (s), "baseline_cpu": summary of its CPU seconds,
         "runs": runs, "measures": {name: {"seconds": summary (s), "cpu_seconds": summary of the
         CPU seconds (user + system) or None, "ratio": median over rounds of measure / that
         round's baseline, "target_s", "target_ratio", "met": bool | None}}}
        `met` is judged on the median seconds against `target_s` and on `ratio` against
        `target_ratio` (None when the measure has no target).

    Raises:
        RuntimeError: a command failed.
    """
    base: list[float] = []
    base_cpu: list[float] = []
    times: dict[str, list[float]] = {m.name: [] for m in measures}
    cpus: dict[str, list[float]] = {m.name: [] for m in measures}
    ratios: dict[str, list[float]] = {m.name: [] for m in measures}
    for round_no in range(runs):
        if progress:
            progress(f"round {round_no + 1}/{runs}")
        b, b_cpu = run_process([python, "-c", "pass"])
        base.append(b)
        if b_cpu is not None:
            base_cpu.append(b_cpu)
        for m in measures:
            t, cpu = m.run(round_no)
            times[m.name].append(t)
            if cpu is not None:
                cpus[m.name].append(cpu)
            ratios[m.name].append(t / b if b > 0 else 0.0)
    out: dict = {"baseline": summary(base), "baseline_cpu": summary(base_cpu) if base_cpu else None,
                 "runs": runs, "measures": {}}
    for m in measures:
        secs = summary(times[m.name])
        ratio = round(percentile(ratios[m.name], 0.5), 2)
        out["measures"][m.name] = {"seconds": secs, "cpu_seconds": summary(cpus[m.name]) if cpus[m.name] else None,
                                   "ratio": ratio, "target_s": m.target_s,
                                   "target_ratio": m.target_ratio, "met": judge(secs["p50"], ratio, m)}
    return out


def judge(seconds: float, ratio: float, m) -> bool | None:
    """Whether a median meets a measure's targets (`target_s`, `target_ratio`); None without targets."""
    checks = []
    if getattr(m, "target_s", None) is not None:
        checks.append(seconds <= m.target_s)
    if getattr(m, "target_ratio", None) is not None:
        checks.append(ratio <= m.target_ratio)
    return all(checks) if checks else None
