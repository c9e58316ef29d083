"""The stall watchdog: a thread that ends a run blocked too long without input progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from queuekit.errors import PipelineStalled
from queuekit.session.run_state import RunState
from queuekit.session.runners import RunnerSet


class StallWatch:
    """Watches one session's runs; see *Stalls* in :class:`~queuekit.QueueSession`.

    When a run has been blocked for ``timeout`` seconds with no input
    progress, it leaves a :class:`PipelineStalled` in ``state.stall`` and
    calls ``on_stall`` (which wakes the run); then it exits.
    """

    def __init__(self, state: RunState, runners: RunnerSet, timeout: float,
                 on_stall: Callable[[], None]):
        self._state = state
        self._runners = runners
        self._timeout = timeout
        self._on_stall = on_stall
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
                if not state.in_run:
                    continue
                quiet_since = max(state.run_started, runners.last_progress)
            waited = time.monotonic() - quiet_since
            if waited < limit:
                continue
            stats = runners.stats()
            starving = not stats or any(
                s.closed is not True and (s.capacity is None or s.size is None
                                          or s.size < s.capacity) for s in stats)
            with state.lock:
                if not state.in_run or not starving:
                    continue
                if runners.last_progress > quiet_since:
                    continue
                live = runners.live_count()
                listing = ", ".join(str(s) for s in stats) or "no runner queues"
                state.stall = PipelineStalled(
                    f"run blocked for {waited:.1f} s with no input progress "
                    f"(stall_timeout_secs={limit:g}); {live} live runner thread(s); "
                    f"queues: {listing}", seconds=waited, queue_stats=stats, live_threads=live)
            self._on_stall()
            return
