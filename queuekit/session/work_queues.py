"""The session feature of work queues (:mod:`queuekit.cluster.work`), installed by the
work-queue builder and loaded only then: a local session never imports the cluster's threads."""

from __future__ import annotations

import threading

import tensorflow as tf

from queuekit.cluster.work_threads import WorkThreads
from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.session.reads import queue_op, queues_read


class WorkQueues(Feature):
    """The session feature of work queues (installed by the work-queue builder): each one's
    threads, its acks' hook, and on the chief its books, resumed from the checkpoint's."""

    name = "work_queues"

    def __init__(self, running) -> None:
        super().__init__(running)
        self._work: dict[int, WorkThreads] = {}  # id(WorkQueue) -> its threads

    def starting(self, runners) -> dict:
        running = self.running
        works = [w for w in graph_objects(running.graph, GraphKeys.WORK_QUEUES)
                 if id(w) not in self._work]
        if not works:
            return {}
        # A batch that a runner moves on (a second queue) is consumed out of our sight:
        # such files are done once read.
        every = running.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        moved_on = set(queues_read([op for qr in every for op in qr.enqueue_ops]))
        position = running.feature("input_position")
        resume = position.work_resume if position is not None else {}
        for work in works:
            batch = _batch_queue(work)
            threads = self._work[id(work)] = WorkThreads(
                running.sess, running.coord, work, running.task, running.chief,
                lambda e, name, w=work.name: running.runners.fail(e, name, w),
                by_consumption=batch not in moved_on, resume=resume.get(work.name))
            if threads.by_consumption:
                running.hooks.append(threads.hook(
                    lambda fetches, q=batch: q in running.reads(fetches)))
            threads.start()
        return {}

    def chief_work(self) -> list[WorkThreads]:
        """The threads of every work queue this chief keeps the books of."""
        return [t for t in self._work.values() if t.books is not None]

    def threads(self) -> list[threading.Thread]:
        return [t for w in self._work.values() for t in w.threads]


def _batch_queue(work) -> str:
    """The name of the queue a work queue's batches come out of ("" without one)."""
    return queue_op(work.consumed.op.inputs[0]).name if work.consumed is not None else ""
