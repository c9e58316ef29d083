"""Where a loop's time goes: how long its steps wait for their input.

For each queue a runner fills and a step takes from (a pipeline's batch
queue), :class:`InputProfile` counts the steps and the time between their
starts (a loop's iteration, the program's Python included) and, now and then,
asks TensorFlow for a run's step statistics (``RunOptions.SOFTWARE_TRACE``,
what TF's ``ProfilerHook`` and the profiler read): the dequeue op's end,
counted from the run's first op, is how long that step waited for its batch.
Nothing is added to the graph.

A traced run costs what TensorFlow takes to record every op, and Python to
read the records: nothing on a step of a few ops, half a second on a
``dynamic_rnn`` step of a million op executions (#43: 10x slower steps when
one run in 0.5 s was traced). So each traced run's cost is measured (its time
less an untraced run's) and the next is chosen so that traced runs cost at
most :data:`TRACE_BUDGET` of the loop's time, and never more often than
:data:`SAMPLE_SECS`; the first waits until the loop can pay for the most it
may cost (:meth:`InputProfile._first_due`). The traced run is drawn by counting runs, not by the
clock: a run chosen when a sample falls due would be the one after the
longest wait (the inspection paradox), which is the instant one of a bursty
input. ``QueueSession(input_report=False)`` counts and traces nothing.

:class:`~queuekit.session.report.InputReport` turns the counts into figures and
a one-line verdict (``report.py``, loaded when a report is asked for);
:class:`InputReportHook` logs it every N seconds or steps and writes the
figures as TensorBoard scalars.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import tensorflow as tf

from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys
from queuekit.session.reads import DEQUEUE_OPS, queue_op, queues_read

if TYPE_CHECKING:
    from queuekit.session.report import InputReport

log = logging.getLogger("queuekit")
_v1 = tf.compat.v1

SAMPLE_SECS = 0.5  # one traced run at most this often, per session; 0: every run (tests)
TRACE_BUDGET = 0.01  # the most of a loop's time that traced runs may cost beyond untraced ones
# Before any run was traced, what the first may cost: about this many untraced runs where the
# graph has a while loop (its op executions are unknown: a 300-step RNN's traced run cost 4x an
# untraced one, a 3,000-step one 5x, a GRU's 20x), else this long per op of the graph.
LOOP_TRACE_RUNS = 20
OP_TRACE_SECS = 10e-6


# The started sessions' profiles, by their Coordinator (what a hook is given with the session),
# each by a weak reference: the profile reaches the Coordinator (through its session), and a
# value that holds its own key would keep the session, its graph and its threads forever.
_PROFILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def profile_of(coord) -> InputProfile | None:
    """The profile of the queuekit session whose Coordinator is ``coord`` (None for another
    session, e.g. TensorFlow's own ``MonitoredSession``)."""
    found = _PROFILES.get(coord)
    return found() if found is not None else None


@dataclasses.dataclass
class _Counts:
    """What the profile counted for one queue (a difference of two is a window)."""

    steps: int = 0  # runs that took from the queue
    seconds: float = 0.0  # from each such run's start to the next one's
    intervals: int = 0  # ... how many of those
    samples: int = 0  # traced runs
    waited: float = 0.0  # seconds the traced runs waited in the dequeue
    records: int = 0  # records the traced runs took
    filled: float = 0.0  # sum of the queue's fill at the samples that read it
    fills: int = 0

    def __sub__(self, other: _Counts) -> _Counts:
        return _Counts(*(a - b for a, b in zip(dataclasses.astuple(self),
                                               dataclasses.astuple(other), strict=True)))


def for_session(running) -> InputProfile | None:
    """The input report's feature of a started session, unless its ``input_report`` is off."""
    if running.options.get("input_report") is False:
        return None
    return InputProfile(running)


class InputProfile(Feature):
    """The counts of one session's runs, per queue its steps take from."""

    name = "profile"

    def __init__(self, running):
        super().__init__(running)
        self._graph = running.graph
        self._fill: Callable[[str], float | None] = running.runners.fill
        self._counts: dict[str, _Counts] = {}
        self._last_start: dict[str, float] = {}
        # dequeue op -> (queue, records it takes; None: up to n, read from its output)
        self._dequeues: dict[str, tuple[str, int | None]] = {}
        self._fed: set[str] = set()  # the queues runners fill
        self._tuned: set[str] = set()
        self._many: set[str] = set()  # queues whose readers read many records a run
        self._ready: set[str] = set()
        self._runners_seen = -1
        # Counted runs to the next traced one; before the first, the loop's time decides
        # (:meth:`_first_due`), so that even the first traced run stays within the budget.
        self._countdown = 1
        self._traced_yet = SAMPLE_SECS <= 0
        self._loop_started = 0.0
        self._loops = False  # a counted run's graph had a while loop
        self._step_ops = 0  # the most ops a counted run's graph had
        self._started = 0.0  # perf_counter() at the counted run's start (0: not counted)
        # Means since the start, never recent averages: a draw that followed the last few
        # runs would follow a bursty input's phase (drawn short after each long wait).
        self._run_secs = _Mean()  # an untraced counted run's duration
        self._loop_secs = _Mean()  # from a counted run's start to the next one's
        self._random = random.Random(0)  # draws the next traced run; fixed: the same each run
        self.traced_runs = 0
        self.trace_secs = 0.0  # what traced runs cost beyond untraced ones, measured
        _PROFILES[running.coord] = weakref.ref(self)

    def before_step(self, reads, options, run_metadata):
        """Count a run about to start; ``(options, run_metadata, traced)`` for it: traced
        when a sample is due (then :meth:`after_step` reads its step statistics)."""
        self._started = 0.0
        now = time.perf_counter()
        counted = False
        for queue in reads:
            if queue not in self._fed and (not self._refresh() or queue not in self._fed):
                continue
            counts = self._counts.get(queue)
            if counts is None:
                counts = self._counts[queue] = _Counts()
            counts.steps += 1
            last = self._last_start.get(queue)
            if last is not None:
                counts.seconds += now - last
                counts.intervals += 1
                self._loop_secs.add(now - last)
            self._last_start[queue] = now
            counted = True
        if not counted:
            return options, run_metadata, False
        self._started = now
        if not self._traced_yet and not self._first_due(now, reads):
            return options, run_metadata, False
        self._countdown -= 1
        if self._countdown > 0:
            return options, run_metadata, False
        traced = _v1.RunOptions()
        if options is not None:
            traced.CopyFrom(options)
        traced.trace_level = max(traced.trace_level, _v1.RunOptions.SOFTWARE_TRACE)
        return traced, run_metadata if run_metadata is not None else _v1.RunMetadata(), True

    def after_step(self, run_metadata, traced) -> None:
        """After every run: time it; read a traced run's step statistics (each dequeue's
        wait, the queue's fill) and draw when the next traced run comes."""
        if not self._started:
            return
        if not traced:
            self._run_secs.add(time.perf_counter() - self._started)
            return
        self._read_trace(run_metadata)
        cost = max(0.0, time.perf_counter() - self._started - self._run_secs.value(0.0))
        self._traced_yet = True
        self.traced_runs += 1
        self.trace_secs += cost
        self._countdown = self._runs_to_next(cost)

    def _first_due(self, now: float, reads) -> bool:
        """Whether the loop ran long enough that the first traced run, at the most it may
        cost (:data:`LOOP_TRACE_RUNS`, :data:`OP_TRACE_SECS`), is within the budget of it.
        Nothing is known of that cost before: a 3,000-step while-loop RNN's first traced
        run took 29 s against 5 s untraced. ``reads``: the run's, with its graph's size."""
        self._loop_started = self._loop_started or now
        self._loops = self._loops or getattr(reads, "loops", False)
        self._step_ops = max(self._step_ops, getattr(reads, "ops", 0))
        if self._run_secs.n < 3:  # the first runs teach what an untraced run costs
            return False
        worst = (LOOP_TRACE_RUNS * self._run_secs.value(0.0) if self._loops
                 else OP_TRACE_SECS * self._step_ops)
        return (now - self._loop_started) * TRACE_BUDGET >= worst

    def _runs_to_next(self, cost: float) -> int:
        """Counted runs until the next traced one: on average enough of the loop's time that
        ``cost`` is :data:`TRACE_BUDGET` of it (at least :data:`SAMPLE_SECS`), drawn
        uniformly around that so that no period of the input can alias with it."""
        if SAMPLE_SECS <= 0:
            return 1
        seconds = max(SAMPLE_SECS, cost / TRACE_BUDGET)
        runs = max(1, round(seconds / max(self._loop_secs.value(SAMPLE_SECS), 1e-6)))
        return self._random.randint(1, 2 * runs - 1)

    def _read_trace(self, run_metadata) -> None:
        """A traced run's step statistics: each dequeue's wait, and the queue's fill."""
        nodes = [n for d in run_metadata.step_stats.dev_stats for n in d.node_stats]
        if not nodes:
            return
        start = min(n.all_start_micros for n in nodes)
        for node in nodes:
            found = self._dequeues.get(node.node_name)
            if found is None:
                continue
            queue, n = found
            counts = self._counts.get(queue)
            if counts is None:
                continue
            counts.samples += 1
            counts.waited += (node.all_start_micros + node.all_end_rel_micros - start) / 1e6
            counts.records += n if n is not None else _rows(node)
            fill = self._fill(queue)
            if fill is not None:
                counts.filled += fill
                counts.fills += 1

    def counts(self) -> dict[str, _Counts]:
        """A copy of the counts so far, per queue."""
        return {q: dataclasses.replace(c) for q, c in self._counts.items()}

    def reports(self, since: dict[str, _Counts] | None = None) -> list[InputReport]:
        """One :class:`InputReport` per queue the steps took from, since the session started
        or, with ``since`` (an earlier :meth:`counts`), since then."""
        from queuekit.session.report import InputReport

        reports = []
        for queue, counts in sorted(self._counts.items()):
            c = counts - since[queue] if since and queue in since else counts
            wait = None
            if c.samples and c.intervals and c.seconds > 0:
                wait = min(1.0, (c.waited / c.samples) / (c.seconds / c.intervals))
            reports.append(InputReport(
                queue=queue, steps=c.steps, seconds=c.seconds, intervals=c.intervals,
                wait_fraction=wait,
                fill=c.filled / c.fills if c.fills else None,
                records_per_step=c.records / c.samples if c.samples else None,
                tuned=queue in self._tuned, ready=queue in self._ready,
                reads_many=queue in self._many))
        return reports

    def _refresh(self) -> bool:
        """Learn the graph's runner queues and their dequeue ops (again after new runners);
        False if nothing changed."""
        runners = self._graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)
        if len(runners) == self._runners_seen:
            return False
        self._runners_seen = len(runners)
        self._fed = {qr.queue.queue_ref.op.name for qr in runners}
        self._tuned = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.AUTOTUNE)}
        self._ready = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.READY_BATCHES)}
        whole_reads = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.WHOLE_BATCHES)}
        self._many = whole_reads | {qr.queue.queue_ref.op.name for qr in runners
                                    if qr.enqueue_ops[0].type.startswith("QueueEnqueueMany")}
        # A ready queue's batches come from the batch queue its runner takes from.
        for qr in runners:
            name = qr.queue.queue_ref.op.name
            if name in self._ready:
                above = set(queues_read(qr.enqueue_ops))
                self._tuned |= {name} if self._tuned & above else set()
                self._many |= {name} if self._many & above else set()
        whole = self._ready | whole_reads
        for op in self._graph.get_operations():
            if op.type in DEQUEUE_OPS:
                queue = queue_op(op.inputs[0]).name
                if queue in self._fed:
                    # A whole-batch or ready queue's single dequeue takes a batch: read its rows.
                    n = (None if queue in whole else
                         tf.get_static_value(op.inputs[1]) if len(op.inputs) > 1 else 1)
                    self._dequeues[op.name] = (queue, None if "UpTo" in op.type or n is None
                                               else int(n))
        return True


@dataclasses.dataclass
class _Mean:
    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.total += value
        self.n += 1

    def value(self, default: float) -> float:
        return self.total / self.n if self.n else default


def _rows(node) -> int:
    """The records a ``dequeue_up_to`` took: its first output's first dimension (0 when the
    step statistics do not say)."""
    try:
        return max(0, int(node.output[0].tensor_description.shape.dim[0].size))
    except (IndexError, AttributeError):
        return 0


class InputReportHook(tf.compat.v1.train.SessionRunHook):
    """Logs where the time goes every ``every_n_secs`` or ``every_n_steps`` (one line per
    pipeline, over the window since the last) and writes the figures as TensorBoard
    scalars into ``output_dir`` (or ``summary_writer``), at the global step.

    Works on a :class:`~queuekit.QueueSession` (and so under
    :func:`~queuekit.monitored_training_session`, ``report_input_secs=``); on
    another session it warns once and does nothing.
    """

    def __init__(self, every_n_secs: float | None = 60, every_n_steps: int | None = None,
                 output_dir: str | None = None, summary_writer=None):
        if every_n_steps is not None:
            every_n_secs = None
        self._timer = _v1.train.SecondOrStepTimer(every_secs=every_n_secs,
                                                  every_steps=every_n_steps)
        self._output_dir = output_dir
        self._writer = summary_writer
        self._profile: InputProfile | None = None
        self._since: dict[str, _Counts] = {}
        self._steps = 0
        self.last: list[InputReport] = []  # the reports of the last window

    def begin(self):
        self._global_step = _v1.train.get_global_step()
        if self._writer is None and self._output_dir:
            self._writer = _v1.summary.FileWriterCache.get(self._output_dir)

    def after_create_session(self, session, coord):
        self._profile = profile_of(coord)
        if self._profile is None:
            log.warning("InputReportHook: no input report on this session (not a queuekit "
                        "session, or one with input_report=False); it reports nothing")
        self._timer.update_last_triggered_step(0)

    def after_run(self, run_context, run_values):
        self._steps += 1
        if self._profile is None or not self._timer.should_trigger_for_step(self._steps):
            return
        self._timer.update_last_triggered_step(self._steps)
        self.last = self._profile.reports(self._since)
        self._since = self._profile.counts()
        for report in self.last:
            log.info("%s", report)
        if self._writer is not None and self.last:
            step = (run_context.session.run(self._global_step)
                    if self._global_step is not None else self._steps)
            summary = _v1.Summary(value=[_v1.Summary.Value(tag=tag, simple_value=value)
                                         for r in self.last
                                         for tag, value in r.scalars().items()])
            self._writer.add_summary(summary, step)

    def end(self, session):
        if self._writer is not None:
            self._writer.flush()
