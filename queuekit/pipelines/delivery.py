"""The end of every builder's pipeline: the batch queue's output as the user gets it
(normalised, made ready ahead of the step, the reader keys taken out), and how to build
that end again (``Delivery.again``, which :mod:`queuekit.pipelines.prefetch` calls).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from queuekit.graph_keys import FILE_KEY, GraphKeys, graph_objects
from queuekit.pipelines.graph_care import report_for_finalize
from queuekit.resume.graph import take_consumed

_v1 = tf.compat.v1


@dataclasses.dataclass(eq=False)
class Delivery:
    """A builder's batch and how to build its end again (``again(count)``)."""

    batch: dict
    again: Callable[[int, str], dict]
    runner: Any  # the ready stage's QueueRunner, or None
    replaced: bool = False  # by qk.prefetched: its batch is never fed again


def deliver(batch: dict, *, normalize: bool, prefetch: int, position=None, work=None) -> dict:
    """The batch queue's output as the user gets it: normalised, made ready ahead of the
    step with ``prefetch``, then a work queue's files and the reader keys taken out, so a
    batch is consumed when the step takes it, not when the ready stage does.

    Also made now, for a graph the program finalizes before its session starts: the op
    that says which variables have no value yet (:func:`report_for_finalize`)."""
    report_for_finalize()
    batch = finish(batch, normalize)
    graph = _v1.get_default_graph()
    scope, device = graph.get_name_scope(), _device_of(batch)

    def again(count: int, name: str) -> dict:
        runners = graph.get_collection_ref(_v1.GraphKeys.QUEUE_RUNNERS)
        before = len(runners)
        # In the builder's name scope and on its device, wherever qk.prefetched is called.
        with graph.name_scope(scope + "/" if scope else ""), _v1.device(device):
            out = ready_batches(batch, count, name) if count else dict(batch)
            if work is not None:
                work.consumed = out.pop(FILE_KEY, None)  # None: acks when read
            if position is not None:
                out = take_consumed(position, out)
        runner = runners[before] if len(runners) > before else None
        graph_objects(graph, GraphKeys.DELIVERIES).append(Delivery(out, again, runner))
        return out

    return again(prefetch, "ready_batches")


def _device_of(batch: dict) -> str:
    first = next(iter(batch.values()), None)
    return "" if first is None else (first.values if isinstance(
        first, tf.SparseTensor) else first).device


_SPARSE_PARTS = ("indices", "values", "dense_shape")


def ready_batches(batch: dict, capacity: int, name: str = "ready_batches") -> dict:
    """Batches made ready ahead of the step, as ``tf.data``'s ``prefetch`` (and Slim's
    ``prefetch_queue``) do: one runner thread takes each batch out of the batch queue
    (the dequeue's copy of every record into the batch, and the normalisation) and
    queues it whole; the step's run only takes it, by reference.

    Where the step is the slow side, that work was on its critical path: 5 ms of a
    38 ms step on workload (c) (``docs/benchmarks-history.rst``). The reader keys and a work
    queue's files travel with the batch, so a batch is consumed when the step takes it
    from here, not before.
    """
    return queued_whole([batch], capacity, name, GraphKeys.READY_BATCHES)


def queued_whole(sources: list[dict], capacity: int, name: str, collection: str) -> dict:
    """A FIFO queue whose element is a whole dict of tensors (one enqueue op, so one runner
    thread, per source), named in ``collection`` (its single dequeue takes a batch); what
    it dequeues, with the sources' static shapes and SparseTensors rebuilt."""
    first = _dense_parts(sources[0])
    names = sorted(first)
    queue = tf.queue.FIFOQueue(capacity, [first[k].dtype for k in names], names=names,
                               name=name)
    _v1.train.add_queue_runner(_v1.train.QueueRunner(queue, [queue.enqueue(_dense_parts(t))
                                                             for t in sources]))
    _v1.add_to_collection(collection, queue.queue_ref.op.name)
    parts = queue.dequeue()
    for k in names:
        parts[k].set_shape(first[k].shape)
    return {k: (tf.SparseTensor(*(parts[f"{k}/{p}"] for p in _SPARSE_PARTS))
                if isinstance(v, tf.SparseTensor) else parts[k]) for k, v in sources[0].items()}


def _dense_parts(tensors: dict) -> dict:
    """A queue holds dense tensors: a SparseTensor (Inception's boxes) as its three parts."""
    out = {}
    for k, v in tensors.items():
        if isinstance(v, tf.SparseTensor):
            out.update({f"{k}/{p}": getattr(v, p) for p in _SPARSE_PARTS})
        else:
            out[k] = v
    return out


def normalizes(batch, normalize) -> bool:
    """Whether :func:`finish` normalises ``batch``'s images (its work after the batch queue)."""
    image = batch.get("image")
    return bool(normalize) and isinstance(image, tf.Tensor) and image.dtype == tf.uint8


def finish(batch, normalize):
    if normalizes(batch, normalize):
        batch["image"] = normalized(batch["image"])
    return batch


def normalized(image_uint8: tf.Tensor) -> tf.Tensor:
    """The seed's ``image * (1 / 255) - 0.5`` as float32, in one pass over the batch.

    ``Dequantize`` of the same bytes seen as quint8 computes ``min + x * (max
    - min) / 255``, which for min=-0.5, max=0.5 is the seed's formula bit for
    bit. Cast, multiply and subtract are three passes over a 25 MB float
    batch (32 x 256x256x3) on the step's critical path; this is one, which
    made the fastest configurations faster (``docs/benchmarks-history.rst``).
    """
    as_quint8 = tf.bitcast(image_uint8, tf.quint8)  # a view: same bytes, no copy
    return tf.quantization.dequantize(as_quint8, -0.5, 0.5, mode="MIN_COMBINED")
