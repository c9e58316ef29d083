"""A started session: its threads, started and stopped together, and its run policy.

One :class:`SessionThreads` holds the Coordinator, the runner threads, the
stall watchdog, the session's registration with the SIGINT router, the
session's features (:mod:`queuekit.features`: their threads are
stopped with the runners) and the :class:`RunPolicy` that raises what they
find. Its
:meth:`~SessionThreads.stop` follows ``_CoordinatedSession.close``: request
stop; make room in full queues so blocked runners finish their step (no
cancellation noise); close every queue with ``cancel_pending_enqueues=True`` so
nothing stays blocked; join them all by one deadline. Only then may the session
be closed, because closing it under a running step would block.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from queuekit.features import Feature, load, overrides
from queuekit.session.interrupt import ROUTER, SessionSignals
from queuekit.session.policy import RunPolicy, RunState
from queuekit.session.queue_ops import queue_ops, sync_tokens
from queuekit.session.reads import ReadsCache
from queuekit.session.runners import RunnerSet
from queuekit.session.stall import StallWatch

log = logging.getLogger(__name__)


class SessionThreads:
    """Coordinator, runner threads, watchdog, signal routing and features of one session.

    ``features``: the "module:name" of each feature's factory
    (:mod:`queuekit.features`), made here once the session exists;
    ``options``: the session's settings features read (``resume_input``...).
    """

    def __init__(self, graph: tf.Graph, sess, reads: ReadsCache, stall_timeout: float | None,
                 grace: float, *, task: str = "", chief: bool = True,
                 features: Sequence[str] = (), options: dict[str, Any] | None = None):
        self.graph = graph
        self.sess = sess
        self.reads = reads
        self.task = task or "local"
        self.chief = chief
        self.options = options or {}
        # Shared with the watchdog and the SIGINT router, which run in other threads.
        self.state = RunState()
        self.coord = tf.compat.v1.train.Coordinator()
        self.runners = RunnerSet(sess, self.coord, queue_ops(graph), chief=chief,
                                 enqueue_for=self._enqueue_for)
        self.signals = SessionSignals(self.state, self.wake, grace)
        self.policy = RunPolicy(self.state, self.coord, self.runners, self.signals)
        self._routed = False
        self._watch = None
        if stall_timeout is not None:
            self._watch = StallWatch(self.state, self.runners, queue_ops(graph), stall_timeout,
                                     self.wake, self._describe_stall)
        self._n_runners = 0
        # Hooks the features add (a work queue's acks), run after the program's.
        self.hooks: list = []
        made = (load(spec)(self) for spec in features)
        self.features: list[Feature] = [f for f in made if f is not None]
        # Per run, only the features that do something then (a step pays for nothing else).
        self.observers = [f for f in self.features if overrides(f, "observe")]
        self.steppers = [f for f in self.features
                         if overrides(f, "before_step") or overrides(f, "after_step")]

    def feature(self, name: str) -> Any:
        """The feature called ``name``, or None: how features find each other."""
        return next((f for f in self.features if f.name == name), None)

    def created(self, restored: str | None) -> None:
        """The session is restored (from ``restored``) or initialised: tell the features."""
        for f in self.features:
            f.created(restored)

    def _enqueue_for(self, op, make_callable):
        enqueue = make_callable(op)
        for f in self.features:
            enqueue = f.enqueue_for(op, enqueue, make_callable)
        return enqueue

    def start(self) -> None:
        """Route signals to this session and start the watchdog and every runner."""
        self._routed = ROUTER.register(self.signals)
        if self._watch is not None:
            self._watch.start()
        self.start_new_runners()

    def start_new_runners(self) -> bool:
        """Start the graph's queue runners not started yet; True if there were any."""
        runners = self.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        new = runners[self._n_runners:]
        if new:  # their helper ops first: a tuner reads its queue's capacity from them
            queue_ops(self.graph).update(runners)
        gates: dict[str, Any] = {}
        for f in self.features:  # also with no new runner: a work queue added since
            gates.update(f.starting(new))
        if not new:
            return False
        self.runners.start(new, gates)
        self._n_runners = len(runners)
        return True

    def has_new_runners(self) -> bool:
        runners = self.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        return len(runners) != self._n_runners

    def wake(self) -> None:
        """Stop the runners and close every queue, so a blocked run returns (any thread)."""
        self.coord.request_stop()
        self.runners.cancel()

    def _describe_stall(self, reads) -> str:
        ops = [self.graph.get_operation_by_name(name) for name in reads]
        for f in self.features:
            said = f.describe_stall(ops)
            if said:
                return said
        if any(sync_tokens(op) for op in ops):
            # SyncReplicasOptimizer (TF's, not a builder's): the token comes once enough
            # workers sent gradients. Only a cluster has one, so its module loads only here.
            from queuekit.cluster.tasks import local_task, task_of, unreachable_tasks
            task = task_of(getattr(self.sess, "sess_str", "")) or local_task()
            gone = unreachable_tasks(task) if task is not None else []
            if gone:
                return (f"; SyncReplicasOptimizer waits for gradients, and these tasks "
                        f"take no connection: {', '.join(gone)}")
            return ("; SyncReplicasOptimizer waits for the gradients of other workers (one that "
                    "died holding a token, or too few workers for replicas_to_aggregate)")
        return ""

    def _others(self):
        return [t for f in self.features for t in f.threads()]

    def still_alive(self, deadline: float) -> list[str]:
        """After the session was closed: names of the threads still alive at ``deadline``
        (``time.monotonic()``)."""
        stuck = self.runners.join(_left(deadline))
        for thread in self._others():
            thread.join(_left(deadline))
        return stuck + [t.name for t in self._others() if t.is_alive()]

    def abandon(self) -> None:
        """Stop every thread without waiting for any: what a finalizer may do, in whatever
        thread the collector runs (joining there could be joining itself). Each thread
        ends once it sees the stop or its closed queue."""
        self.coord.request_stop()
        self.runners.cancel()
        if self._watch is not None:
            self._watch.stop(0.0)
        if self._routed:
            ROUTER.unregister(self.signals)

    def stop(self, deadline: float) -> list[str]:
        """Stop every thread and join them all by ``deadline`` (``time.monotonic()``); the
        names of those still alive then."""
        self.coord.request_stop()
        self.runners.open_gates()  # paused threads see the stop
        if not self.runners.cancelled:
            self.runners.drain(min(0.5, _left(deadline) / 2))
        self.runners.cancel()
        stuck = self.runners.join(_left(deadline))
        # A work relay blocked taking from the ps (the chief has no file for it yet) is not
        # woken by our stop: closing a remote session cancels that step (still_alive).
        for thread in self._others():
            thread.join(_left(deadline))
        stuck += [t.name for t in self._others() if t.is_alive()]
        if self._watch is not None:
            self._watch.stop(_left(deadline))
        if self._routed:
            ROUTER.unregister(self.signals)
        return stuck


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def close_session(sess, target: str, deadline: float) -> None:
    """``sess.close()``, by ``deadline`` for a remote one: TF's close of a session whose
    master or ps died blocks for ever (the job would hang at its end)."""
    if not target:
        sess.close()
        return
    closing = threading.Thread(target=sess.close, name="queuekit-close", daemon=True)
    closing.start()
    closing.join(max(0.1, deadline - time.monotonic()))
    if closing.is_alive():
        log.warning("closing the session on %s did not finish in time (its master or a "
                    "ps is gone?): left to a daemon thread", target)


def abandoned(threads: SessionThreads, pid: int) -> None:
    """The finalizer of a QueueSession that was started and never closed."""
    if os.getpid() != pid:
        return
    warnings.warn(f"a QueueSession was dropped without close(): its {len(threads.runners.threads)} "
                  f"runner threads are stopped now; use `with qk.QueueSession() as qs:` or call "
                  f"qs.close()", ResourceWarning, stacklevel=2)
    threads.abandon()
