"""The stall watchdog: a thread that ends a run blocked too long without input progress.

A run is judged by the queues it waits on (``RunState.reads``, from
:mod:`queuekit.session.reads`): it has stalled when it has been blocked for
the timeout, no element entered any of those queues meanwhile, and one of them
is open and not full. Progress elsewhere does not count, so a filename queue
cycling over empty files does not hide an empty batch queue; a slow step does
not count either, because the queues it reads fill up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from queuekit.errors import PipelineStalled
from queuekit.session.policy import RunState
from queuekit.session.queue_ops import GraphQueueOps
from queuekit.session.runners import QueueStat, RunnerSet


class StallWatch:
    """Watches one session's runs; see *Stalls* in :class:`~queuekit.QueueSession`.

    When a run has stalled it leaves a :class:`PipelineStalled` in
    ``state.stall``, calls ``on_stall`` (which wakes the run) and exits.
    ``describe(reads)`` may add a sentence to the message (the empty files).
    """

    def __init__(self, state: RunState, runners: RunnerSet, ops: GraphQueueOps,
                 timeout: float, on_stall: Callable[[], None],
                 describe: Callable[[tuple[str, ...]], str] | None = None):
        self._state = state
        self._runners = runners
        self._ops = ops
        self._timeout = timeout
        self._on_stall = on_stall
        self._describe = describe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="queuekit-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _watch(self) -> None:
        limit, state, runners = self._timeout, self._state, self._runners
        while not self._stop.wait(min(0.5, max(0.02, limit / 10))):
            with state.lock:
                if not state.in_run or not state.reads:
                    continue  # a run that reads no queue cannot starve for input
                reads, started = state.reads, state.run_started
            quiet_since = max(started, runners.last_progress(reads))
            waited = time.monotonic() - quiet_since
            if waited < limit:
                continue
            waiting = self._sizes(reads)
            starving = [s for s in waiting if s.closed is not True and (
                s.capacity is None or s.size is None or s.size < s.capacity)]
            if not starving:
                continue  # its queues are full: the step itself is slow
            extra = self._describe(reads) if self._describe else ""
            with state.lock:
                if (not state.in_run or state.run_started != started
                        or runners.last_progress(reads) > quiet_since):
                    continue
                stats = runners.stats()
                live = runners.live_count()
                listing = ", ".join(str(s) for s in stats) or "no runner queues"
                names = ", ".join(f"{s.name!r} ({_fill(s)})" for s in starving)
                state.stall = PipelineStalled(
                    f"run blocked for {waited:.1f} s waiting on {names}, which got no element "
                    f"in that time (stall_timeout_secs={limit:g}){extra}; {live} live runner "
                    f"thread(s); runner queues: {listing}",
                    seconds=waited, queue_stats=stats, live_threads=live)
            self._on_stall()
            return

    def _sizes(self, reads) -> list[QueueStat]:
        """Size and capacity of the queues a run waits on; unknown sizes are None."""
        by_name = {s.name: s for s in self._runners.stats()}
        capacity = {h.name: h.capacity for h in self._ops.handles(reads)}
        return [by_name.get(name, QueueStat(name, None, capacity.get(name), None))
                for name in reads]


def _fill(stat: QueueStat) -> str:
    size = "?" if stat.size is None else stat.size
    cap = "unbounded" if stat.capacity is None else stat.capacity
    return f"{size}/{cap}"
