"""``queuekit run --report``: where an unmodified program's steps spend their time.

The counting is the input profile's (:class:`~queuekit.session.profile.InputProfile`:
steps timed in Python, a run now and then traced for its dequeue's wait, within 1% of
the loop); here it reads the program's own queues, whoever built them. A queue's fill
is read only through a size op the graph has (``tf.train.batch`` makes one for its
summary); none is added. Loaded only when a report is asked for.

The advice names the stage to widen. The queue the steps wait on is fed by one runner;
when that runner itself takes from a queue another runner fills (im2txt's values queue,
a ``*_join`` of reader copies) and that queue is nearly empty, the readers upstream are
what is short, not the batching threads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import tensorflow as tf

from queuekit.session.profile import InputProfile
from queuekit.session.reads import DEQUEUE_OPS, ReadsCache, ancestors, queue_op

_STARVED = 0.1  # an upstream queue this empty (or less) is the short stage


class _Anchor:
    """Stands for the Coordinator of runners started without one (the profile keys by it)."""


class _Fills:
    """Queue fills through the graph's own size ops."""

    def __init__(self, watched):
        self._watched = watched

    def fill(self, queue: str) -> float | None:
        try:
            capacity = self._watched.graph.get_operation_by_name(queue).get_attr("capacity")
        except (KeyError, ValueError):
            return None
        size = self._watched.queue_sizes([queue]).get(queue)
        return None if size is None or capacity <= 0 else size / capacity


class _Running:
    """What the input profile reads of a started session."""

    def __init__(self, watched):
        self.graph = watched.graph
        self.runners = _Fills(watched)
        self.coord = next((c for c in watched.coords if c is not None), None) or _Anchor()


class ProgramReport:
    """The input report of one watched session; printed on stderr every ``every_secs``
    (None: only when the session stops)."""

    def __init__(self, watched, every_secs: float | None):
        self._running = _Running(watched)
        self.profile = self._profile = InputProfile(self._running)
        self._reads = ReadsCache(watched.graph)
        self._every = every_secs
        self._due = time.monotonic() + every_secs if every_secs else None
        self._fills: dict[str, list[float]] = {}  # upstream queue -> its sampled fills
        self._runners: dict[str, Any] = {}  # queue -> the QueueRunner feeding it

    def before(self, fetches, options, run_metadata):
        """(options, run_metadata, traced) for the run about to start."""
        try:
            reads = self._reads(fetches)
        except Exception:  # noqa: BLE001 - a fetch TF will reject with its own message
            return options, run_metadata, False
        return self._profile.before_step(reads, options, run_metadata)

    def after(self, run_metadata, traced: bool) -> None:
        self._profile.after_step(run_metadata, traced)
        if traced:  # the queues upstream, sampled as the profile samples the one read
            for queue in self._profile.counts():
                for name in self._upstream(queue):
                    fill = self._running.runners.fill(name)
                    if fill is not None:
                        self._fills.setdefault(name, []).append(fill)
        if self._due is not None and time.monotonic() >= self._due:
            self.print()
            self._due = time.monotonic() + (self._every or 0.0)

    def lines(self) -> list[str]:
        out = []
        for report in self._profile.reports():
            text = report.figures()
            if report.wait_fraction is not None and report.bound != "step-bound":
                text += "; " + self._advice(report.queue)
            out.append(text)
        return out

    def print(self) -> None:
        lines = self.lines() or ["no step took from a queue a runner fills"]
        print("queuekit: input report:\n" + "\n".join(f"  {line}" for line in lines),
              file=sys.stderr, flush=True)

    def _upstream(self, queue: str) -> list[str]:
        """The runner-fed queues that the runner feeding ``queue`` takes from."""
        runners = self._runners = {
            qr.queue.queue_ref.op.name: qr
            for qr in self._running.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)}
        feeding = runners.get(queue)
        if feeding is None:
            return []
        return sorted({queue_op(op.inputs[0]).name for op in ancestors(feeding.enqueue_ops)
                       if op.type in DEQUEUE_OPS} & set(runners))

    def _advice(self, queue: str) -> str:
        """Which stage to widen for steps that wait on ``queue``."""
        upstream = self._upstream(queue)
        feeding = self._runners.get(queue)
        if feeding is None:
            return "no runner of the graph feeds it"
        for name in upstream:
            fills = self._fills.get(name)
            fill = sum(fills) / len(fills) if fills else None
            if fill is not None and fill <= _STARVED:
                return (f"its feeder waits on {name!r} ({fill:.0%} full): widen the stage "
                        f"that fills that one ({_threads(self._runners[name])})")
        return f"widen the stage that fills it ({_threads(feeding)})"


def _threads(qr) -> str:
    ops = qr.enqueue_ops
    if len({op.name for op in ops}) == 1:
        return (f"{len(ops)} thread(s): num_threads of tf.train.batch / shuffle_batch, "
                "or the QueueRunner's enqueue ops")
    return f"{len(ops)} enqueue ops, one thread each: more reader copies (a *_join's list)"


class BenchDone(BaseException):
    """The window of ``queuekit bench --program`` is over: ends the program (``queuekit
    run`` exits 0). A BaseException, so that the program's ``except Exception`` lets it
    through and its ``finally`` blocks run."""


class BenchWindow:
    """A child of ``queuekit bench --program``: the rates over ``seconds`` after
    ``warmup`` seconds of steps, written to ``path`` as JSON; then the program ends."""

    def __init__(self, warmup: float, seconds: float, path: str):
        self._warmup, self._seconds, self._path = warmup, seconds, path
        self.about: dict = {}  # written with the figures: the runners varied and fixed
        self._first: float | None = None
        self._since: dict | None = None
        self._opened = 0.0
        self.written = False

    def tick(self, report: ProgramReport) -> None:
        """After a run: start the window after the warmup, end it after its seconds."""
        now = time.monotonic()
        if not report.profile.counts():
            return  # no step took from a runner's queue yet
        if self._first is None:
            self._first = now
        elif self._since is None and now - self._first >= self._warmup:
            self._since, self._opened = report.profile.counts(), now
        elif self._since is not None and now - self._opened >= self._seconds:
            self.write(report, ended=False)
            raise BenchDone

    def write(self, report: ProgramReport, *, ended: bool) -> None:
        """The window's figures (``ended``: the program ended first, the figures are of what
        ran), written once, atomically."""
        if self.written:
            return
        self.written = True
        rows = [{"queue": r.queue, "steps": r.steps, "intervals": r.intervals,
                 "seconds": r.seconds, "records_per_sec": r.records_per_sec,
                 "wait_fraction": r.wait_fraction, "bound": r.bound}
                for r in report.profile.reports(self._since)]
        temp = f"{self._path}.tmp"
        with open(temp, "w", encoding="utf-8") as f:
            json.dump({"queues": rows, "ended_early": ended, "window_opened": bool(self._since),
                       **self.about}, f)
        os.replace(temp, self._path)
