"""``queuekit bench --program``: a program's own pipeline at other thread counts.

Each configuration is the program itself, run by ``queuekit run --threads N`` in a
process of its own, for a window of seconds after a warmup; the child measures its
steps with the input report's counting and ends the program when the window closes
(``session/program_report.BenchWindow``). The first row is the program as written.
Rounds interleave the rows; each figure is the median of the rounds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

AS_WRITTEN = 0  # the row of the program's own thread counts


@dataclasses.dataclass
class ProgramRow:
    threads: int  # AS_WRITTEN: the program's own
    steps_per_sec: float | None
    records_per_sec: float | None
    wait_fraction: float | None
    bound: str
    ended_early: bool


@dataclasses.dataclass
class ProgramBench:
    program: str
    rows: list[ProgramRow]
    varied: dict[str, int]  # queue -> the program's own thread count
    fixed: dict[str, str]  # queue -> why its count cannot be varied
    interrupted: bool = False

    @property
    def best(self) -> ProgramRow | None:
        ran = [r for r in self.rows if r.steps_per_sec]
        return max(ran, key=lambda r: r.steps_per_sec or 0.0) if ran else None

    def table(self) -> str:
        own = ", ".join(f"{q}: {n}" for q, n in self.varied.items()) or "none"
        lines = [f"program: {self.program}",
                 f"{'threads':>10}  {'steps/s':>9}  {'records/s':>10}  {'waited':>6}  verdict"]
        for r in self.rows:
            label = "as written" if r.threads == AS_WRITTEN else str(r.threads)
            lines.append(
                f"{label:>10}  {_num(r.steps_per_sec, 1):>9}  {_num(r.records_per_sec, 0):>10}"
                f"  {_pct(r.wait_fraction):>6}  {r.bound}"
                + ("  (the program ended within the window)" if r.ended_early else ""))
        lines.append(f"varied: the runners batch/shuffle_batch made, as written: {own}")
        for queue, why in self.fixed.items():
            lines.append(f"not varied: {queue}: {why}")
        lines.append(self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        best = self.best
        if best is None:
            return "verdict: no configuration ran a step"
        written = next((r for r in self.rows if r.threads == AS_WRITTEN and r.steps_per_sec),
                       None)
        label = "as written" if best.threads == AS_WRITTEN else f"{best.threads} threads"
        gain = ""
        if written is not None and written is not best and written.steps_per_sec:
            gain = (f", {(best.steps_per_sec or 0.0) / written.steps_per_sec:.2f}x the "
                    "program as written")
        tail = {"input-bound": "; still input-bound there: the readers are short even then "
                               "(more threads, records cheaper to read, or prefetch)",
                "partly input-bound": "; partly input-bound there",
                "step-bound": "; step-bound there: more input threads would not help"}.get(
            best.bound, "")
        return f"verdict: best {label}, {_num(best.steps_per_sec, 1)} steps/s{gain}{tail}"


def _num(value, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def bench_program(program: str, threads: list[int], *, seconds: float = 5.0,
                  warmup: float = 2.0, repeat: int = 1, timeout: float = 600.0,
                  progress: bool = False) -> ProgramBench:
    """Run ``program`` ("SCRIPT ARGS...", or "-m MODULE ARGS...") as written and with each
    count of ``threads``; see the module."""
    argv = shlex.split(program)
    configs = [AS_WRITTEN, *threads]
    results: dict[int, list[dict]] = {c: [] for c in configs}
    about: dict = {}
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="queuekit-bench-program-") as tmp:
        try:
            for r in range(repeat):
                for config in configs if r % 2 == 0 else configs[::-1]:
                    out = _child(argv, config, seconds, warmup, tmp, timeout)
                    results[config].append(out)
                    if config != AS_WRITTEN:  # what the runners were, as --threads saw them
                        about = {k: out.get(k) for k in ("varied", "fixed")}
                    if progress:
                        print(f"  {'as written' if config == AS_WRITTEN else config}: "
                              f"round {r + 1}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            interrupted = True
    rows = [_row(config, runs) for config, runs in results.items() if runs]
    return ProgramBench(program, rows, about.get("varied") or {}, about.get("fixed") or {},
                        interrupted)


def _child(argv, config: int, seconds: float, warmup: float, tmp: str, timeout: float) -> dict:
    path = os.path.join(tmp, f"window-{config}.json")
    command = [sys.executable, "-m", "queuekit", "run", "--stall-timeout", "0",
               "--bench-window", str(warmup), str(seconds), path,
               *(["--threads", str(config)] if config != AS_WRITTEN else []), *argv]
    with open(os.path.join(tmp, "child.log"), "w+", encoding="utf-8") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            status = child.wait(timeout=timeout)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if status != 0 or not os.path.exists(path):
            log.seek(0)
            tail = log.read()[-3000:]
            raise RuntimeError(f"the program exited {status} under `queuekit run` "
                               f"({shlex.join(command)}):\n{tail}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _row(config: int, runs: list[dict]) -> ProgramRow:
    """The medians of one configuration's rounds, over the queue its steps took most from."""
    steps, records, waits = [], [], []
    for run in runs:
        queues = sorted(run["queues"], key=lambda q: q["steps"], reverse=True)
        if not queues or not queues[0]["seconds"]:
            continue
        q = queues[0]
        steps.append(q["intervals"] / q["seconds"])
        if q["records_per_sec"] is not None:
            records.append(q["records_per_sec"])
        if q["wait_fraction"] is not None:
            waits.append(q["wait_fraction"])
    wait = statistics.median(waits) if waits else None
    from queuekit.session.report import INPUT_BOUND, PARTLY

    bound = ("unknown" if wait is None else "input-bound" if wait >= INPUT_BOUND
             else "partly input-bound" if wait >= PARTLY else "step-bound")
    return ProgramRow(config, statistics.median(steps) if steps else None,
                      statistics.median(records) if records else None, wait, bound,
                      any(run.get("ended_early") for run in runs))
