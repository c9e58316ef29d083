"""Which queues a run waits on: the queues its fetches dequeue from, found in the graph.

Stall detection judges a blocked run by these queues alone: progress is an
enqueue into one of them. A busy upstream (a filename queue cycling over
empty files) is no progress for a batch queue that stays empty.
"""

from __future__ import annotations

import collections

import tensorflow as tf

DEQUEUE_OPS = ("QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2",
               "QueueDequeue", "QueueDequeueMany", "QueueDequeueUpTo")
READER_OPS = ("ReaderReadV2", "ReaderReadUpToV2", "ReaderRead", "ReaderReadUpTo")
_CACHE_SIZE = 64  # distinct fetch sets remembered per session


def ancestors(ops) -> list[tf.Operation]:
    """Every op that ``ops`` depend on (data and control inputs), themselves included."""
    seen: dict[str, tf.Operation] = {}
    todo = list(ops)
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return list(seen.values())


def queue_op(handle: tf.Tensor) -> tf.Operation:
    """The queue op behind a queue handle tensor (through identities)."""
    op = handle.op
    while op.type in ("Identity", "IdentityN") and op.inputs:
        op = op.inputs[0].op
    return op


def fetch_ops(graph: tf.Graph, fetches) -> list[tf.Operation]:
    """The ops of a ``Session.run`` fetch structure (tensors, ops, names, nested)."""
    ops = []
    for item in _leaves(fetches):
        try:
            element = graph.as_graph_element(item)
        except (TypeError, ValueError, KeyError):
            continue  # a fetch TF will reject with its own message
        ops.append(element if isinstance(element, tf.Operation) else element.op)
    return ops


def _leaves(fetches):
    """The leaves of a fetch structure; dict keys need not sort (hooks are keys)."""
    if isinstance(fetches, dict):
        for value in fetches.values():
            yield from _leaves(value)
    elif isinstance(fetches, (list, tuple)):
        for value in fetches:
            yield from _leaves(value)
    elif fetches is not None:
        yield fetches


# Ops of a while loop: a run that has one executes its body an unknown number of times.
LOOP_OPS = frozenset({"Enter", "RefEnter", "While", "StatelessWhile"})


class Reads(tuple):
    """The names of the queues a run's fetches read (a tuple), and what else the input
    profile wants of the run's graph: how many ops it has, and whether one is a loop."""

    ops: int = 0
    loops: bool = False


def queues_read(ops) -> Reads:
    """Names of the queues that ``ops`` dequeue from, or read file names from."""
    names = []
    found = ancestors(ops)
    for op in found:
        if op.type in DEQUEUE_OPS:
            names.append(queue_op(op.inputs[0]).name)
        elif op.type in READER_OPS:
            names.append(queue_op(op.inputs[1]).name)
    reads = Reads(sorted(set(names)))
    reads.ops = len(found)
    reads.loops = any(op.type in LOOP_OPS for op in found)
    return reads


class ReadsCache:
    """:func:`queues_read` of a run's fetches, remembered for the fetch sets seen last."""

    def __init__(self, graph: tf.Graph):
        self._graph = graph
        self._cache: collections.OrderedDict = collections.OrderedDict()

    def __call__(self, fetches) -> Reads:
        ops = fetch_ops(self._graph, fetches)
        key = frozenset(op.name for op in ops)
        reads = self._cache.get(key)
        if reads is None:
            reads = self._cache[key] = queues_read(ops)
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return reads
