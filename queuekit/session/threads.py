"""The threads of a started session, started and stopped together.

One :class:`SessionThreads` holds the Coordinator, the runner threads, the
stall watchdog and the session's registration with the SIGINT router. Its
:meth:`~SessionThreads.stop` follows ``_CoordinatedSession.close``: request
stop; make room in full queues so blocked runners finish their step (no
cancellation noise); close every queue with ``cancel_pending_enqueues=True`` so
nothing stays blocked; join within the grace period. Only then may the session
be closed, because closing it under a running step would block.
"""

from __future__ import annotations

import os

import tensorflow as tf

from queuekit.cluster.tasks import local_task, task_of, unreachable_tasks
from queuekit.cluster.work import WORK_COLLECTION
from queuekit.session.diagnose import empty_files
from queuekit.session.interrupt import ROUTER, SessionSignals
from queuekit.session.queue_ops import queue_ops, sync_tokens
from queuekit.session.reads import queue_op, queues_read
from queuekit.session.run_state import RunState
from queuekit.session.runners import RunnerSet
from queuekit.session.stall import StallWatch
from queuekit.session.tuner import AUTOTUNE_COLLECTION, Gate, Tuner, Tuning, first_count
from queuekit.session.work import WorkThreads


class SessionThreads:
    """Coordinator, runner threads, watchdog and signal routing of one session."""

    def __init__(self, graph: tf.Graph, sess, state: RunState, stall_timeout: float | None,
                 grace: float, *, task: str = "", chief: bool = True):
        self._graph = graph
        self._sess = sess
        self._task = task or "local"
        self._chief = chief
        self._work: dict[int, WorkThreads] = {}  # id(WorkQueue) -> its threads
        self.coord = tf.compat.v1.train.Coordinator()
        self.runners = RunnerSet(sess, self.coord, queue_ops(graph), chief=chief)
        self.signals = SessionSignals(state, self.wake, grace)
        self._routed = ROUTER.register(self.signals)
        self._watch = None
        if stall_timeout is not None:
            self._watch = StallWatch(state, self.runners, queue_ops(graph), stall_timeout,
                                     self.wake, self._describe_stall)
            self._watch.start()
        self._n_runners = 0
        self._tuners: list[Tuner] = []

    def start_new_runners(self) -> bool:
        """Start the graph's queue runners not started yet; True if there were any."""
        runners = self._graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        self._start_work()
        if len(runners) == self._n_runners:
            return False
        queue_ops(self._graph).update(runners)
        tuned = {os.fsdecode(n) for n in self._graph.get_collection(AUTOTUNE_COLLECTION)}
        tuners = []
        for qr in runners[self._n_runners:]:
            name = qr.queue.queue_ref.op.name
            if name in tuned and name not in self.runners.gates and len(qr.enqueue_ops) > 1:
                gate = Gate(len(qr.enqueue_ops), first_count(len(qr.enqueue_ops)))
                tuners.append(Tuner(name, gate, self.coord,
                                    lambda q=name: self.runners.enqueues.get(q, 0),
                                    lambda q=name: self.runners.fill(q)))
        self.runners.start(runners, {t.queue: t.gate for t in tuners})
        for t in tuners:
            t.thread.start()
        self._tuners += tuners
        self._n_runners = len(runners)
        return True

    def _start_work(self) -> None:
        works = [w for w in self._graph.get_collection(WORK_COLLECTION) if id(w) not in self._work]
        if not works:
            return
        # A batch that a runner moves on (a second queue) is consumed out of our sight:
        # such files are done once read.
        runners = self._graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        moved_on = set(queues_read([op for qr in runners for op in qr.enqueue_ops]))
        for work in works:
            threads = self._work[id(work)] = WorkThreads(
                self._sess, self.coord, work, self._task, self._chief,
                lambda e, name, w=work.name: self.runners.fail(e, name, w),
                by_consumption=_batch_queue(work) not in moved_on)
            threads.start()

    def work_fetches(self, reads) -> dict[int, tf.Tensor]:
        """The file names to fetch with a run that dequeues ``reads``, by work queue."""
        return {key: w.work.consumed for key, w in self._work.items()
                if w.by_consumption and _batch_queue(w.work) in reads}

    def consumed(self, files: dict) -> None:
        """What :meth:`work_fetches` fetched."""
        for key, names in files.items():
            self._work[key].consumed(names)

    def tuning(self) -> dict[str, Tuning]:
        """Per tuned queue: the active thread count now, and the tuner's decisions."""
        return {t.queue: t.tuning() for t in self._tuners}

    def has_new_runners(self) -> bool:
        runners = self._graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        return len(runners) != self._n_runners

    def wake(self) -> None:
        """Stop the runners and close every queue, so a blocked run returns (any thread)."""
        self.coord.request_stop()
        self.runners.cancel()

    def _describe_stall(self, reads) -> str:
        ops = [self._graph.get_operation_by_name(name) for name in reads]
        empty = empty_files(self._graph, ops)
        if empty:
            return f"; its input files hold no records: {', '.join(empty)}"
        if any(sync_tokens(op) for op in ops):
            # SyncReplicasOptimizer: the token comes once enough workers sent gradients.
            task = task_of(getattr(self._sess, "sess_str", "")) or local_task()
            gone = unreachable_tasks(task) if task is not None else []
            if gone:
                return (f"; SyncReplicasOptimizer waits for gradients, and these tasks "
                        f"take no connection: {', '.join(gone)}")
            return ("; SyncReplicasOptimizer waits for the gradients of other workers (one that "
                    "died holding a token, or too few workers for replicas_to_aggregate)")
        return ""

    def _others(self):
        return [t for w in self._work.values() for t in w.threads] + [
            t.thread for t in self._tuners]

    def still_alive(self, grace: float) -> list[str]:
        """After the session was closed: names of the threads still alive ``grace`` s on."""
        stuck = self.runners.join(grace)
        for thread in self._others():
            thread.join(0.1)
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

    def stop(self, grace: float) -> list[str]:
        """Stop and join every thread within ``grace`` seconds; names of those still alive."""
        self.coord.request_stop()
        self.runners.open_gates()  # paused threads see the stop
        if not self.runners.cancelled:
            self.runners.drain(min(0.5, grace / 2))
        self.runners.cancel()
        stuck = self.runners.join(grace)
        # A work relay blocked taking from the ps (the chief has no file for it yet) is not
        # woken by our stop: closing a remote session cancels that step (still_alive).
        others = self._others()
        for thread in others:
            thread.join(max(0.1, grace / 2))
            if thread.is_alive():
                stuck.append(thread.name)
        if self._watch is not None:
            self._watch.stop(grace)
        if self._routed:
            ROUTER.unregister(self.signals)
        return stuck


def _batch_queue(work) -> str:
    """The name of the queue a work queue's batches come out of ("" without one)."""
    return queue_op(work.consumed.op.inputs[0]).name if work.consumed is not None else ""
