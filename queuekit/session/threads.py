"""A started session: its threads, started and stopped together, and its run policy.

One :class:`SessionThreads` holds the Coordinator, the runner threads, the
stall watchdog, the session's registration with the SIGINT router, the
threads and hooks of the features the graph uses (tuners, work queues) and
the :class:`RunPolicy` that raises what they find. Its
:meth:`~SessionThreads.stop` follows ``_CoordinatedSession.close``: request
stop; make room in full queues so blocked runners finish their step (no
cancellation noise); close every queue with ``cancel_pending_enqueues=True`` so
nothing stays blocked; join them all by one deadline. Only then may the session
be closed, because closing it under a running step would block.
"""

from __future__ import annotations

import os
import time

import tensorflow as tf

from queuekit.cluster.tasks import local_task, task_of, unreachable_tasks
from queuekit.cluster.work_threads import WorkThreads
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.session.diagnose import empty_files
from queuekit.session.interrupt import ROUTER, SessionSignals
from queuekit.session.policy import RunPolicy, RunState
from queuekit.session.profile import InputProfile
from queuekit.session.queue_ops import queue_ops, records_per_enqueue, sync_tokens
from queuekit.session.reads import ReadsCache, queue_op, queues_read
from queuekit.session.runners import RunnerSet
from queuekit.session.stall import StallWatch
from queuekit.session.tuner import Gate, Tuner, Tuning, first_count


class SessionThreads:
    """Coordinator, runner threads, watchdog and signal routing of one session."""

    def __init__(self, graph: tf.Graph, sess, reads: ReadsCache, stall_timeout: float | None,
                 grace: float, *, task: str = "", chief: bool = True,
                 resume_work: dict[str, tuple[int, list[str]]] | None = None,
                 enqueue_for=None, input_report: bool = True):
        self._graph = graph
        self._sess = sess
        self._reads = reads
        self._task = task or "local"
        self._chief = chief
        self._work: dict[int, WorkThreads] = {}  # id(WorkQueue) -> its threads
        self._resume_work = resume_work or {}  # work queue name -> its checkpoint's books
        # Shared with the watchdog and the SIGINT router, which run in other threads.
        self.state = RunState()
        self.coord = tf.compat.v1.train.Coordinator()
        self.runners = RunnerSet(sess, self.coord, queue_ops(graph), chief=chief,
                                 enqueue_for=enqueue_for)
        self.signals = SessionSignals(self.state, self.wake, grace)
        self.policy = RunPolicy(self.state, self.coord, self.runners, self.signals)
        self.profile = InputProfile(graph, self.runners.fill, self.coord, enabled=input_report)
        self._routed = False
        self._watch = None
        if stall_timeout is not None:
            self._watch = StallWatch(self.state, self.runners, queue_ops(graph), stall_timeout,
                                     self.wake, self._describe_stall)
        self._n_runners = 0
        self._tuners: list[Tuner] = []
        # Hooks of the features this graph uses (a work queue's acks), run after the program's.
        self.hooks: list = []

    def start(self) -> None:
        """Route signals to this session and start the watchdog and every runner."""
        self._routed = ROUTER.register(self.signals)
        if self._watch is not None:
            self._watch.start()
        self.start_new_runners()

    def start_new_runners(self) -> bool:
        """Start the graph's queue runners not started yet; True if there were any."""
        runners = self._graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        self._start_work()
        if len(runners) == self._n_runners:
            return False
        queue_ops(self._graph).update(runners)
        tuned = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.AUTOTUNE)}
        whole = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.WHOLE_BATCHES)}
        decoding = {os.fsdecode(n) for n in self._graph.get_collection(GraphKeys.DECODING)}
        tuners = []
        for qr in runners[self._n_runners:]:
            name = qr.queue.queue_ref.op.name
            if name in tuned and name not in self.runners.gates and len(qr.enqueue_ops) > 1:
                many = name in whole or qr.enqueue_ops[0].type.startswith("QueueEnqueueMany")
                gate = Gate(len(qr.enqueue_ops), first_count(
                    len(qr.enqueue_ops), many=many and name not in decoding))
                per = records_per_enqueue(qr.enqueue_ops[0])
                tuners.append(Tuner(name, gate, self.coord,
                                    lambda q=name: self.runners.enqueues.get(q, 0),
                                    lambda q=name: self.runners.fill(q),
                                    per_fill=self.runners.span(name) / per if per else 0.0))
        self.runners.start(runners, {t.queue: t.gate for t in tuners})
        for t in tuners:
            t.thread.start()
        self._tuners += tuners
        self._n_runners = len(runners)
        return True

    def _start_work(self) -> None:
        works = [w for w in graph_objects(self._graph, GraphKeys.WORK_QUEUES)
                 if id(w) not in self._work]
        if not works:
            return
        # A batch that a runner moves on (a second queue) is consumed out of our sight:
        # such files are done once read.
        runners = self._graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        moved_on = set(queues_read([op for qr in runners for op in qr.enqueue_ops]))
        for work in works:
            batch = _batch_queue(work)
            threads = self._work[id(work)] = WorkThreads(
                self._sess, self.coord, work, self._task, self._chief,
                lambda e, name, w=work.name: self.runners.fail(e, name, w),
                by_consumption=batch not in moved_on, resume=self._resume_work.get(work.name))
            if threads.by_consumption:
                self.hooks.append(threads.hook(lambda fetches, q=batch: q in self._reads(fetches)))
            threads.start()

    def chief_work(self) -> list[WorkThreads]:
        """The threads of every work queue this chief keeps the books of."""
        return [t for t in self._work.values() if t.books is not None]

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


def _batch_queue(work) -> str:
    """The name of the queue a work queue's batches come out of ("" without one)."""
    return queue_op(work.consumed.op.inputs[0]).name if work.consumed is not None else ""
