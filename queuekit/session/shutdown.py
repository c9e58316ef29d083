"""Stopping a session's threads, in the order of ``_CoordinatedSession.close``.

Request stop; make room in full queues so blocked runners finish their step
(no cancellation noise); close every queue with ``cancel_pending_enqueues=True``
so nothing stays blocked; join within the grace period; only then may the
session be closed, because closing it under a running step would block.
"""

from __future__ import annotations

import tensorflow as tf

from queuekit.session.runners import RunnerSet
from queuekit.session.stall import StallWatch


def stop_threads(coord: tf.compat.v1.train.Coordinator, runners: RunnerSet,
                 watch: StallWatch | None, grace: float) -> list[str]:
    """Stop and join every thread within ``grace`` seconds; names of those still alive."""
    coord.request_stop()
    if not runners.cancelled:
        runners.drain(min(0.5, grace / 2))
    runners.cancel()
    stuck = runners.join(grace)
    if watch is not None:
        watch.stop(grace)
    return stuck
