"""AUTOTUNE for queue runners: how many of a runner's threads are active, tuned while it runs.

A builder asked for ``"auto"`` builds ``max`` reader threads and names their
queue in the graph collection :data:`AUTOTUNE_COLLECTION`. The session gives
that runner a :class:`Gate` (thread i enqueues only while i < active) and a
:class:`Tuner` thread, which hill-climbs like ``tf.data``'s AUTOTUNE:

- every window it measures the production rate (completed enqueues per
  second, counted by the runner threads) and the queue's mean fill;
- a starved queue (fill below ``LOW``) gets more active threads: twice as many
  while that raises the rate by ``MARGIN``, one more at a time after that; a
  move that lowers the rate by ``MARGIN`` is undone, one within the margin is
  kept while the queue stays starved (this machine's rates vary by 10-20%
  from one second to the next: a strict "must gain" rule undid moves that
  paid, and settled at half the best fixed row's count);
- a full queue (fill above ``HIGH``: the training step is the slow side) gives
  one thread back, kept while the queue does not starve (or the rate holds),
  so input does not take CPU from the step;
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
import os
import statistics
import threading
import time

log = logging.getLogger("queuekit.tune")

# The graph collection of queue names whose runners are tuned. The builders in
# queuekit.pipelines add to it (pipelines and session do not import each other;
# tests/test_tuner.py checks both spell it the same).
AUTOTUNE_COLLECTION = "queuekit_autotune"
LOW, HIGH = 0.25, 0.75  # queue fill below which input is starving, above which it leads
MARGIN = 0.05  # a rate change within this fraction is noise; beyond it, a gain or a loss
WINDOW_SECS = 0.75  # one measurement
SETTLE_SECS = 0.15  # after a move, before measuring: in-flight steps finish
REPROBE_SECS = 15.0


def first_count(total: int) -> int:
    """Active threads at the start: one per core, at most half of ``total``.

    Starting at one cost about 3.6 s of climbing in a 9 s measurement (the
    issue's workload a); one per core is where every fixed grid on this
    project's 2-core machine was near its best. Half of ``total`` at most
    leaves room to climb, and a full queue still gives threads back.
    """
    return max(1, min(total // 2, os.cpu_count() or 1))


class Gate:
    """Lets threads 0..active-1 of a runner enqueue; the others wait between enqueues."""

    def __init__(self, total: int, active: int):
        self.total = total
        self._active = max(1, min(active, total))
        self._open = False
        self._cond = threading.Condition()

    @property
    def active(self) -> int:
        return self.total if self._open else self._active

    @property
    def opened(self) -> bool:
        return self._open

    def wait(self, index: int) -> None:
        """Return once thread ``index`` may run its next enqueue."""
        if index < self._active or self._open:  # the common case, without the lock
            return
        with self._cond:
            while index >= self._active and not self._open:
                self._cond.wait()

    def set_active(self, n: int) -> None:
        with self._cond:
            self._active = max(1, min(n, self.total))
            self._cond.notify_all()

    def open(self) -> None:
        """Let every thread run from now on (end of input, or stop); idempotent."""
        with self._cond:
            self._open = True
            self._cond.notify_all()


@dataclasses.dataclass(frozen=True)
class Decision:
    """One move of the tuner: ``at`` seconds after it started, from -> to threads."""

    at: float
    from_count: int
    to_count: int
    rate: float  # enqueues/s measured at ``to_count`` (the undone count, for "undo")
    fill: float
    reason: str


@dataclasses.dataclass
class Tuning:
    """What ``QueueSession.tuning()`` reports for one tuned queue."""

    queue: str
    active: int
    maximum: int
    history: list[Decision]


class Tuner:
    """The thread that hill-climbs one runner's active thread count."""

    def __init__(self, queue: str, gate: Gate, coord, enqueues, fill):
        """``enqueues()`` counts completed enqueues; ``fill()`` is the queue's fill or None."""
        self.queue = queue
        self.gate = gate
        self._coord = coord
        self._enqueues = enqueues
        self._fill = fill
        self.history: list[Decision] = []
        self._blocked: dict[tuple[int, int], float] = {}  # (from, to) -> when it was undone
        self._doubling = True  # grow by doubling until a growth is undone, then by one
        self._start = time.monotonic()
        self.thread = threading.Thread(target=self._loop, name=f"queuekit-tuner-{queue}",
                                       daemon=True)

    def tuning(self) -> Tuning:
        return Tuning(self.queue, self.gate.active, self.gate.total, list(self.history))

    def _loop(self) -> None:
        try:
            base = self._measure()
            while base is not None and not self.gate.opened:
                base = self._step(*base)
        except Exception:  # noqa: BLE001 - a tuner fault must not stop training: run all
            log.warning("the tuner of %s failed; all its threads run from now on",
                        self.queue, exc_info=True)
        finally:
            self.gate.open()

    def _measure(self) -> tuple[float, float] | None:
        """(enqueues/s, mean fill) over one window; None when stopping."""
        if self._coord.wait_for_stop(SETTLE_SECS):
            return None
        count0, t0 = self._enqueues(), time.monotonic()
        fills = []
        while time.monotonic() - t0 < WINDOW_SECS:
            if self._coord.wait_for_stop(WINDOW_SECS / 5) or self.gate.opened:
                return None
            fill = self._fill()
            if fill is not None:
                fills.append(fill)
        rate = (self._enqueues() - count0) / (time.monotonic() - t0)
        return rate, statistics.mean(fills) if fills else 0.0

    def _step(self, rate: float, fill: float) -> tuple[float, float] | None:
        k = self.gate.active
        up = min(self.gate.total, 2 * k if self._doubling else k + 1)
        if fill < LOW and k < self.gate.total and not self._may(k, up):
            up = k + 1  # the doubling was undone: try the next count alone
        if fill < LOW and k < self.gate.total and self._may(k, up):
            return self._try(k, up, rate, fill, keep=lambda r, f: r >= rate * (1 - MARGIN))
        if fill > HIGH and k > 1 and self._may(k, k - 1):
            # Still not starving with one fewer: the step is still the slow side, and a
            # rate within noise of a consumer-bound window says nothing (30 ms steps: the
            # rate moved by more than MARGIN between equal windows and undid give-backs).
            return self._try(k, k - 1, rate, fill,
                             keep=lambda r, f: f > LOW or r >= rate * (1 - MARGIN))
        return self._measure()

    def _may(self, k: int, to: int) -> bool:
        undone = self._blocked.get((k, to))
        return undone is None or time.monotonic() - undone > REPROBE_SECS

    def _try(self, k: int, to: int, rate: float, fill: float, keep):
        self.gate.set_active(to)
        after = self._measure()
        if after is None:
            return None
        if keep(*after):
            pays = after[0] > rate * (1 + MARGIN)
            if to > k and not pays:
                self._doubling = False  # no clear gain: from here on, one at a time
            reason = ("queue full" if to < k else "more input needed" if pays
                      else "starved, no worse")
            self._record(k, to, after, reason)
            return after
        self.gate.set_active(k)
        self._blocked[(k, to)] = time.monotonic()
        if to > k:
            self._doubling = False
        self._record(to, k, after, f"undo: {after[0]:.0f}/s at {to} vs {rate:.0f}/s at {k}")
        return self._measure()

    def _record(self, k: int, to: int, measured: tuple[float, float], reason: str) -> None:
        d = Decision(round(time.monotonic() - self._start, 3), k, to, measured[0],
                     measured[1], reason)
        self.history.append(d)
        log.info("%s: %d -> %d active threads (%.0f enqueues/s, fill %.2f: %s)",
                 self.queue, k, to, d.rate, d.fill, reason)
