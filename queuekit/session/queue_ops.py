"""The small ops queuekit runs on a graph's queues (size, closed, close-and-cancel, drain).

They are made once per graph and shared by every session opened on it: an
evaluation loop that opens a session per checkpoint must not grow the graph
(a plain ``tf.compat.v1.Session`` adds no ops either). A finalized graph gets
no new ops: its runner queues are still closed through each ``QueueRunner``'s
own ``cancel_op``, but their sizes are unknown and they are not drained.
"""

from __future__ import annotations

import dataclasses
import threading

import tensorflow as tf

from queuekit.graph_keys import on_graph
from queuekit.session.reads import ancestors

QUEUE_OP_TYPES = ("FIFOQueueV2", "RandomShuffleQueueV2", "PaddingFIFOQueueV2", "PriorityQueueV2")


@dataclasses.dataclass
class QueueHandles:
    """The helper ops of one queue; the tensors are None when the graph was finalized first."""

    name: str  # the queue op's name, with its name scope: "batch/fifo_queue"
    capacity: int | None  # None: unbounded
    cancel: tf.Operation  # close(cancel_pending_enqueues=True)
    size: tf.Tensor | None = None
    closed: tf.Tensor | None = None
    min_after_dequeue: int = 0
    drain: tf.Operation | None = None  # dequeues `drain_count` elements (or one)
    drain_count: tf.Tensor | None = None  # int32 placeholder, None: dequeue one at a time
    owned: bool = True  # this task's own queue: shutdown may close and drain it
    sync_tokens: bool = False  # SyncReplicasOptimizer's token queue: the chief closes it
    give_back: tf.Operation | None = None  # a sync token queue: enqueues one token


def owned(queue_op: tf.Operation) -> bool:
    """Whether shutdown may close and drain this queue: not shared, not on a ps.

    A queue with a ``shared_name`` or on another job's device (a work queue,
    ``sync_token_q``) belongs to the cluster: closing or draining it would end
    or rob the other workers. queuekit pins a worker's input to its own task.
    """
    try:
        if queue_op.get_attr("shared_name"):
            return False
    except ValueError:
        pass
    return tf.DeviceSpec.from_string(queue_op.device or "").job != "ps"


def sync_tokens(queue_op: tf.Operation) -> bool:
    """Whether this is a ``SyncReplicasOptimizer``'s token queue (its fixed shared name)."""
    try:
        return queue_op.get_attr("shared_name") == b"sync_token_q"
    except ValueError:
        return False


class GraphQueueOps:
    """Every queue of one graph and its helper ops; see :func:`queue_ops`."""

    def __init__(self, graph: tf.Graph):
        self._graph = graph
        self._lock = threading.Lock()
        self.queues: dict[str, QueueHandles] = {}
        self._seen_ops = 0

    def update(self, runners) -> None:
        """Make the helper ops of queues not seen yet: runner queues first, then all others.

        Call from the thread that builds the graph, before the runners start.
        """
        graph = self._graph
        with self._lock:
            for qr in runners:
                name = qr.queue.queue_ref.op.name
                handles = self.queues.get(name)
                if handles is None:
                    handles = self.queues[name] = QueueHandles(
                        name, _capacity(qr.queue.queue_ref.op), qr.cancel_op,
                        owned=owned(qr.queue.queue_ref.op),
                        sync_tokens=sync_tokens(qr.queue.queue_ref.op))
                if handles.size is None and not graph.finalized:
                    _add_stats(graph, handles, qr.queue)
            if graph.finalized:
                return
            ops = graph.get_operations()
            new_ops, self._seen_ops = ops[self._seen_ops:], len(ops)
            # Queues nobody feeds block a run just as well: they are closed on stop too.
            for op in new_ops:
                if op.type in QUEUE_OP_TYPES and op.name not in self.queues:
                    with graph.as_default(), tf.name_scope("queuekit"):
                        cancel = tf.raw_ops.QueueCloseV2(handle=op.outputs[0],
                                                         cancel_pending_enqueues=True)
                    handles = self.queues[op.name] = QueueHandles(
                        op.name, _capacity(op), cancel, owned=owned(op),
                        sync_tokens=sync_tokens(op))
                    if handles.sync_tokens:
                        handles.give_back = _token_enqueue(graph, op)
            self._seen_ops = len(graph.get_operations())

    def handles(self, names=None, *, owned_only: bool = False) -> list[QueueHandles]:
        """The handles of ``names`` (every queue when None), in a stable order."""
        with self._lock:
            found = (list(self.queues.values()) if names is None
                     else [self.queues[n] for n in names if n in self.queues])
        return [h for h in found if h.owned or not owned_only]




def queue_ops(graph: tf.Graph) -> GraphQueueOps:
    """The one :class:`GraphQueueOps` of ``graph``; it lives as long as the graph."""
    return on_graph(graph, "_queuekit_queue_ops", lambda: GraphQueueOps(graph))


def _token_enqueue(graph: tf.Graph, queue_op: tf.Operation) -> tf.Operation | None:
    """An op that puts one token (the global step) in a SyncReplicasOptimizer's token queue.

    A worker holds one token after each step (the step ends by taking the token
    of its next gradient); a worker that leaves gives it back, or the update
    that waits for its gradient never comes and the chief's next step waits
    for a token forever.
    """
    step = tf.compat.v1.train.get_global_step(graph)
    if step is None:
        return None
    with graph.as_default(), tf.name_scope("queuekit"):
        return tf.raw_ops.QueueEnqueueV2(handle=queue_op.outputs[0],
                                         components=[tf.identity(step)])


def _add_stats(graph: tf.Graph, handles: QueueHandles, queue) -> None:
    with graph.as_default(), tf.name_scope("queuekit"):
        handles.size = queue.size()
        handles.closed = queue.is_closed()
        try:
            handles.min_after_dequeue = int(queue.queue_ref.op.get_attr("min_after_dequeue"))
        except ValueError:
            handles.min_after_dequeue = 0
        # A dequeue that takes `count` elements at once where the queue's shapes allow it.
        shapes = queue.shapes or []
        if shapes and all(s.is_fully_defined() for s in shapes):
            handles.drain_count = tf.compat.v1.placeholder(tf.int32, [], name="drain_count")
            out = queue.dequeue_up_to(handles.drain_count)
        else:
            out = queue.dequeue()
        handles.drain = tf.nest.flatten(out)[0].op


def _capacity(queue_op: tf.Operation) -> int | None:
    try:
        cap = queue_op.get_attr("capacity")
    except ValueError:
        return None
    return None if cap < 0 else int(cap)


def records_per_enqueue(enqueue_op: tf.Operation) -> int | None:
    """The elements one run of ``enqueue_op`` adds: 1, or for an ``enqueue_many`` the
    count of the read it carries (``ReaderReadUpToV2``); None when it cannot be told."""
    if not enqueue_op.type.startswith("QueueEnqueueMany"):
        return 1
    for op in ancestors([enqueue_op]):
        if op.type == "ReaderReadUpToV2":
            count = tf.get_static_value(op.inputs[2])
            return None if count is None else max(1, int(count))
    return None
