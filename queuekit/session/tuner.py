"""AUTOTUNE for queue runners: how many of a runner's threads are active, tuned while it runs.

A builder asked for ``"auto"`` builds ``max`` reader threads and names their
queue in the graph collection :data:`queuekit.graph_keys.GraphKeys.AUTOTUNE`. The session gives
that runner a :class:`Gate` (thread i enqueues only while i < active) and a
:class:`Tuner` thread, which hill-climbs like ``tf.data``'s AUTOTUNE:

- every window it measures the rate (enqueues per second, counted by the
  runner threads, less those that went into the queue's stock), the queue's
  mean fill and the process's CPU seconds per enqueue;
- a starved queue (fill below ``LOW`` and not rising: the input is the slow
  side) gets one more active thread. A low fill that rises by ``RISE`` in a
  window is a queue its readers are filling faster than the step drains it
  (every queue starts so): more threads cannot help the step there. A growth
  that lowers the rate is undone (between two windows of one count the rate
  varies by about 3% here, so a rule of "must gain 5%" undid moves that paid,
  and one of "may lose 5%" kept moves that cost, up to the maximum); one that
  lowers it by twice ``MARGIN`` after half its window, as a failed probe costs
  what its window lost. Not while
  the process already keeps its cores ``BUSY`` (as ``tf.data``'s AUTOTUNE keeps
  within a CPU budget of the cores): on 2 cores four readers of 196 KB records
  or of JPEGs ran at 186-199% CPU, and counts above four ran no faster than
  four fixed readers (``docs/autotune.rst``).
  One at a time, not doubling: from half the threads a doubling is a jump to all of
  them, a probe that cost up to 40% of a window's records on the demo's data
  when it did not pay;
- a full queue (fill above ``HIGH``: the training step is the slow side) has
  its records' rate set by the step, so what input can still save is CPU for
  the step: the tuner tries one thread fewer, then one more. It keeps one
  fewer if the queue stayed fed and the CPU per enqueue stayed within
  ``MARGIN`` of the least it measured with the queue full (threads blocked on
  a full queue slow its dequeue: 12 KB records read 64 at a time ran 0.92x to
  0.98x one reader at 8 threads, 0.97x to 0.99x at the 1 it reached this way;
  docs/autotune.rst), one more only if the CPU per enqueue fell by ``MARGIN``.
  One fewer is not always cheaper: TF's thread pools spin between the steps of
  a single reader thread, and on 2 cores one reader cost 37% CPU where four
  cost 25-28% for the same records (README, Benchmarks, workload c). A queue
  that nobody drains gives threads back outright;
- a move that was undone is not retried from the same count until
  ``REPROBE_SECS`` have passed, as the load may have changed.

A paused thread waits on the gate between two enqueues, never inside a TF
op, so a reader paused mid-file keeps its place. When one thread of the
runner finds its input exhausted the gate opens for all, so every paused
reader finishes its file before the epoch can end; stopping opens it too.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import statistics
import threading
import time

from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys
from queuekit.session.queue_ops import records_per_enqueue
from queuekit.session.runners import Gate

log = logging.getLogger("queuekit.tune")

# The graph collection of queue names whose runners are tuned. The builders in
# queuekit.pipelines add to it (pipelines and session do not import each other;
# tests/test_tuner.py checks both spell it the same).
LOW, HIGH = 0.25, 0.75  # queue fill below which input is starving, above which it leads
RISE = 0.05  # a window's rise in fill (of capacity) that says the readers are ahead
BUSY = 0.9  # the fraction of the cores' time in use above which more threads cannot help
MARGIN = 0.05  # a rate or CPU change within this fraction is noise; beyond it, a gain or a loss
WINDOW_SECS = 0.75  # one measurement
SETTLE_SECS = 0.15  # after a move, before measuring: in-flight steps finish
REPROBE_SECS = 15.0


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the platform says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def first_count(total: int, *, many: bool = False, decoding: bool = False) -> int:
    """Active threads at the start: half of ``total`` (the builders build two per core:
    one per core); one with ``many`` (each enqueue carries many records); all of them
    with ``decoding``.

    On this project's 2-core machine every fixed grid of one record per read was
    near its best from two reader threads up, and each step up from below costs
    a window at a slower count (``docs/autotune.rst``). Half leaves room to climb;
    a full queue still tries fewer. A read of many records pays its per-read
    costs once for all of them, and the fastest fixed row on 12 KB records read
    64 at a time was one reader with one thread: started at half (8 threads),
    ``auto`` needed about 7 windows to come down; started at one per core (2:
    one reader's two threads) it stayed there, at 0.92x. From one it climbs
    while the queue starves. Reads of images that are decoded
    (``GraphKeys.DECODING``) start at all of them: each record costs a decode,
    four readers of JPEGs ran fastest on 2 cores, and a read of 64 JPEGs is a few
    enqueues a window, too few to judge a climb by: started at half, ``auto``
    whole runs of 3 passes over 600 JPEGs ran at 0.66 of four fixed readers in one
    run of 3 rounds (a later A/B of 5 rounds: 0.90 from half of 8, 0.94 from all 4). So
    do the threads of one reader under a ``parse_fn`` (its parse is the work): on
    ``SequenceExample`` records they read 2 passes over 2,000 in 0.36-0.41 s after
    the first batch, against 0.47-0.50 s started at half (3 runs each).
    """
    if decoding:
        return total
    return 1 if many else max(1, total // 2)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One window's measurement."""

    rate: float  # enqueues/s the queue gave out (what was enqueued less what it kept)
    fill: float  # the queue's mean fill, 0 to 1
    cpu: float  # process CPU seconds per enqueue given out (inf when none was)
    rise: float = 0.0  # the fill's change over the window (its last readings against its first)
    busy: float = 0.0  # process CPU seconds per second of the window


@dataclasses.dataclass(frozen=True)
class Decision:
    """One move of the tuner: ``at`` seconds after it started, from -> to threads."""

    at: float
    from_count: int
    to_count: int
    rate: float  # enqueues/s measured at ``to_count`` (the undone count, for "undo")
    fill: float
    reason: str
    cpu_ms: float  # process CPU milliseconds per enqueue (inf: none), measured with ``rate``


@dataclasses.dataclass
class Tuning:
    """What ``QueueSession.tuning()`` reports for one tuned queue."""

    queue: str
    active: int
    maximum: int
    history: list[Decision]


class Tuner:
    """The thread that hill-climbs one runner's active thread count.

    ``enqueues()`` counts completed enqueues, ``fill()`` is the queue's fill
    (or None when unknown), ``cpu()`` the process's CPU seconds so far
    (:func:`time.process_time`; injectable for tests), ``cores`` the cores the process
    may run on. ``per_fill``: the enqueues that fill the queue from empty (0: not
    known). A window's rate is what the queue gave out: the enqueues less what
    went into its stock. Without it, a second reader added to a starved queue of
    12 KB records, 64 a read, was credited with the enqueues that filled the
    queue in the window after the move (666/s counted, where one reader gave out
    about 600) and kept; taken away again, the queue's stock was drained and one
    reader looked slower and costlier per record than it was.
    """

    def __init__(self, queue: str, gate: Gate, coord, enqueues, fill, cpu=time.process_time,
                 cores: int | None = None, per_fill: float = 0.0):
        self.queue = queue
        self.gate = gate
        self._coord = coord
        self._enqueues = enqueues
        self._fill = fill
        self._cpu = cpu
        self._cores = cores or usable_cores()
        self._per_fill = per_fill
        self.history: list[Decision] = []
        self._blocked: dict[tuple[int, int], float] = {}  # (from, to) -> when it was undone
        self._least_cpu = math.inf  # the least CPU per enqueue measured with the queue full
        self._start = time.monotonic()
        self.thread = threading.Thread(target=self._loop, name=f"queuekit-tuner-{queue}",
                                       daemon=True)

    def tuning(self) -> Tuning:
        return Tuning(self.queue, self.gate.active, self.gate.total, list(self.history))

    def _loop(self) -> None:
        try:
            sample = self._measure()
            while sample is not None and not self.gate.opened:
                sample = self._step(sample)
        except Exception:  # noqa: BLE001 - a tuner fault must not stop training: run all
            log.warning("the tuner of %s failed; all its threads run from now on",
                        self.queue, exc_info=True)
        finally:
            self.gate.open()

    def _measure(self, early=None) -> Sample | None:
        """One window's :class:`Sample`; None when stopping. ``early(half)``: whether the
        first half of the window already decides (then that half's sample is returned)."""
        if self._coord.wait_for_stop(SETTLE_SECS):
            return None
        first = self._fill()
        count0, cpu0, t0 = self._enqueues(), self._cpu(), time.monotonic()
        fills: list[float] = []
        judged = early is None
        while time.monotonic() - t0 < WINDOW_SECS:
            if self._coord.wait_for_stop(WINDOW_SECS / 5) or self.gate.opened:
                return None
            fill = self._fill()
            if fill is not None:
                fills.append(fill)
            if not judged and time.monotonic() - t0 >= WINDOW_SECS / 2:
                judged = True
                half = self._sample(first, fills, count0, cpu0, t0)
                if early(half):
                    return half
        return self._sample(first, fills, count0, cpu0, t0)

    def _sample(self, first, fills, count0, cpu0, t0) -> Sample:
        count, used, wall = self._enqueues() - count0, self._cpu() - cpu0, time.monotonic() - t0
        if first is not None and fills:  # the stock's change, from the window's two ends
            count = max(0.0, count - (fills[-1] - first) * self._per_fill)
        # Two readings at each end: one reading of a nearly empty queue is noise.
        rise = statistics.mean(fills[-2:]) - statistics.mean(fills[:2]) if fills else 0.0
        return Sample(count / wall, statistics.mean(fills) if fills else 0.0,
                      used / count if count else math.inf, rise, used / wall)

    def _step(self, s: Sample) -> Sample | None:
        k = self.gate.active
        if (s.fill < LOW and s.rise < RISE and k < self.gate.total
                and s.busy < BUSY * self._cores and self._may(k, k + 1)):
            # A thread that plainly lowers the rate is undone after half a window: on 12 KB
            # records read 64 at a time a second reader gave out 20-40% fewer, and each
            # such probe costs its window (docs/autotune.rst).
            return self._try(k, k + 1, s, lambda a: a.rate >= s.rate,
                             early=lambda a: a.rate < s.rate * (1 - 2 * MARGIN))
        if s.fill > HIGH and s.rate == 0 and k > 1:
            # Nobody drains the queue: the paused threads are not needed until it does.
            return self._try(k, k - 1, s, lambda a: True)
        if s.fill > HIGH:
            # The step sets the rate: keep a thread fewer that costs no more CPU per record
            # (idle threads blocked on a full queue slow its dequeue), a thread more only if
            # it saves the step CPU. Against the least seen, not the last: 4% more a step
            # would add up.
            self._least_cpu = min(self._least_cpu, s.cpu)
            for to in (k - 1, k + 1):
                if 1 <= to <= self.gate.total and self._may(k, to):
                    most = (self._least_cpu * (1 + MARGIN) if to < k
                            else s.cpu * (1 - MARGIN))
                    return self._try(k, to, s, lambda a, most=most: a.fill > LOW
                                     and a.cpu < most)
        return self._measure()

    def _may(self, k: int, to: int) -> bool:
        undone = self._blocked.get((k, to))
        return undone is None or time.monotonic() - undone > REPROBE_SECS

    def _try(self, k: int, to: int, before: Sample, keep, early=None) -> Sample | None:
        self.gate.set_active(to)
        after = self._measure(early)
        if after is None:
            return None
        if keep(after):
            if before.fill > HIGH:
                reason = "queue full" if to < k else "queue full, less CPU per record"
            elif after.rate > before.rate * (1 + MARGIN):
                reason = "more input needed"
            else:
                reason = "starved, no worse"
            self._record(k, to, after, reason)
            return after
        self.gate.set_active(k)
        self._blocked[(k, to)] = time.monotonic()
        self._record(to, k, after, f"undo: {after.rate:.0f}/s, {after.cpu * 1e3:.2f} ms CPU per "
                     f"enqueue at {to} vs {before.rate:.0f}/s, {before.cpu * 1e3:.2f} ms at {k}")
        return self._measure()

    def _record(self, k: int, to: int, measured: Sample, reason: str) -> None:
        d = Decision(round(time.monotonic() - self._start, 3), k, to, measured.rate,
                     measured.fill, reason, measured.cpu * 1e3)
        self.history.append(d)
        log.info("%s: %d -> %d active threads (%.0f enqueues/s, fill %.2f, %.2f ms CPU per "
                 "enqueue: %s)", self.queue, k, to, d.rate, d.fill, d.cpu_ms, reason)


class Tuners(Feature):
    """The session feature of ``"auto"`` runners (installed by the builders that make them):
    a :class:`Gate` and a :class:`Tuner` thread for each."""

    name = "tuner"

    def __init__(self, running) -> None:
        super().__init__(running)
        self._tuners: list[Tuner] = []

    def starting(self, runners) -> dict[str, Gate]:
        graph, counts = self.running.graph, self.running.runners
        tuned = {os.fsdecode(n) for n in graph.get_collection(GraphKeys.AUTOTUNE)}
        whole = {os.fsdecode(n) for n in graph.get_collection(GraphKeys.WHOLE_BATCHES)}
        decoding = {os.fsdecode(n) for n in graph.get_collection(GraphKeys.DECODING)}
        tuners = []
        for qr in runners:
            name = qr.queue.queue_ref.op.name
            if name in tuned and name not in counts.gates and len(qr.enqueue_ops) > 1:
                many = name in whole or qr.enqueue_ops[0].type.startswith("QueueEnqueueMany")
                gate = Gate(len(qr.enqueue_ops), first_count(
                    len(qr.enqueue_ops), many=many, decoding=name in decoding))
                per = records_per_enqueue(qr.enqueue_ops[0])
                tuners.append(Tuner(name, gate, self.running.coord,
                                    lambda q=name: counts.enqueues.get(q, 0),
                                    lambda q=name: counts.fill(q),
                                    per_fill=counts.span(name) / per if per else 0.0))
        for t in tuners:  # they wait a window before their first move: the runners start
            t.thread.start()
        self._tuners += tuners
        return {t.queue: t.gate for t in tuners}

    def threads(self) -> list[threading.Thread]:
        return [t.thread for t in self._tuners]

    def tuning(self) -> dict[str, Tuning]:
        """Per tuned queue: the active thread count now, and the tuner's decisions."""
        return {t.queue: t.tuning() for t in self._tuners}
