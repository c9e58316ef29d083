"""What the main thread is doing right now, shared with the threads that watch it.

The stall watchdog and the signal router run in other threads; they read this
state and leave their findings here (a stall, an interrupt) for the main
thread, which turns them into exceptions once its run returns.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class RunState:
    """``in_run`` while the main thread is inside ``Session.run``, and what came meanwhile."""

    def __init__(self) -> None:
        # RLock: the SIGINT handler runs in the main thread, which may hold the lock.
        self.lock = threading.RLock()
        self.in_run = False
        self.run_started = 0.0
        self.reads: tuple[str, ...] = ()  # the queues the current run dequeues from
        self.deferred: list[tuple[int, Any]] = []  # (signum, frame) for the main thread to dispatch
        self.woken_by: int | None = None  # the signal that made us wake the run
        self.stall: Any = None  # a PipelineStalled left by the watchdog
        self.closing = False  # shutdown is under way

    def enter_run(self, reads: tuple[str, ...] = ()) -> None:
        with self.lock:
            self.run_started = time.monotonic()
            self.reads = reads
            self.in_run = True

    def leave_run(self) -> None:
        with self.lock:
            self.in_run = False
