"""``qk.prefetched``: a batch made ready ahead of the step, a wrapper over any batch as
``tf.data``'s ``prefetch`` is (a builder's batch has its end built again, its ready
stage replaced)."""

from __future__ import annotations

import numbers

import tensorflow as tf

from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.pipelines.delivery import ready_batches

_v1 = tf.compat.v1


def prefetched(batch, buffer_size: int = 2):
    """``batch`` made ready ``buffer_size`` batches ahead of the step, as ``tf.data``'s
    ``prefetch`` (and Slim's ``prefetch_queue``): one more runner thread takes each batch
    out of the batch queue (its copy of every record into the batch, the normalisation)
    and queues it whole; the step's run only takes it, by reference::

        batch = qk.prefetched(qk.tfrecord_batches(files, batch_size=32), 4)

    Where the step is the slow side, that work was on its critical path: 5 ms of a
    38 ms step on workload (c) (``docs/benchmarks-history.rst``). A builder's batch is built again
    with its ready stage replaced (run the batch this returns, not the one given); a
    record is consumed, for resume, when the step takes its batch from here. The builders
    make 2 batches ready with ``num_readers="auto"``; ``buffer_size=0`` removes that stage.
    Any other dict, list or tuple of tensors gets a stage of its own.

    Raises:
        ValueError: ``buffer_size`` is negative, ``batch`` is part of a builder's batch
            (prefetch the builder's batch whole, then take what you need from it), or a
            session started the builder's own ready stage already.
    """
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, numbers.Integral) or (
            buffer_size < 0):
        raise ValueError(f"buffer_size must be 0 or more batches, not {buffer_size!r}")
    graph = _v1.get_default_graph()
    deliveries = graph_objects(graph, GraphKeys.DELIVERIES)
    for delivery in deliveries:
        if delivery.batch is batch:
            if delivery.replaced:
                raise ValueError("this batch was replaced by an earlier qk.prefetched (its "
                                 "queue is fed no more): pass the batch that one returned")
            if delivery.runner is not None and delivery.runner.queue.queue_ref.op.name in (
                    graph_objects(graph, GraphKeys.STARTED_QUEUES)):
                raise ValueError("prefetched replaces the builder's ready stage, which a "
                                 "session has started already (its thread would keep taking "
                                 "batches no step reads): call it before the first run")
            if delivery.runner is not None:  # the old stage must not take batches any more
                runners = graph.get_collection_ref(_v1.GraphKeys.QUEUE_RUNNERS)
                runners[:] = [r for r in runners if r is not delivery.runner]
                ready = graph.get_collection_ref(GraphKeys.READY_BATCHES)
                ready[:] = [n for n in ready if n != delivery.runner.queue.queue_ref.op.name]
            delivery.replaced = True
            return delivery.again(int(buffer_size), "prefetched")
    flat = tf.nest.flatten(batch)
    delivered = {id(t) for d in deliveries for t in d.batch.values()}
    if any(id(t) in delivered for t in flat):
        raise ValueError("prefetched takes a builder's batch whole (the dict it returned): "
                         "prefetch it, then take what you need from the result")
    if not buffer_size:
        return batch
    if isinstance(batch, dict):
        return ready_batches(dict(batch), int(buffer_size), "prefetched")
    ready = ready_batches({str(i): t for i, t in enumerate(flat)}, int(buffer_size),
                          "prefetched")
    return tf.nest.pack_sequence_as(batch, [ready[str(i)] for i in range(len(flat))])
