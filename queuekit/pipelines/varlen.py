"""Variable-length outputs of a ``parse_fn``: captions, token ids, a SequenceExample's
feature lists. What ``batch(..., dynamic_pad=True)`` did for im2txt.

A dense output whose shape is not fully known is padded per batch to the
longest element (zeros, or ``b""`` for strings), and for one record per read
``<name>_length`` (int32) says how long each element was along its first
dimension. ``shuffle_batch`` cannot pad (its queue needs fixed shapes), so a
shuffled pipeline shuffles whole elements first, their variable parts carried
as serialized tensors, and pads as they leave the shuffle queue.
SparseTensors (``VarLenFeature``) are batched as SparseTensors, as
``tf.train.batch`` does; ``tf.sparse.to_dense`` in the ``parse_fn`` pads them
instead.
"""

from __future__ import annotations

import tensorflow as tf

_v1 = tf.compat.v1
def with_lengths(tensors: dict, variable: list[str]) -> dict:
    """``tensors`` and ``<name>_length`` (its first dimension) of each variable output; a
    name the parse_fn already gives is kept as it is."""
    if any(tensors[k].shape.rank == 0 for k in variable):
        raise ValueError("a scalar cannot vary in length")
    out = dict(tensors)
    for key in variable:
        out.setdefault(f"{key}_length", tf.shape(tensors[key])[0])
    return out


def never_empty(tensors: dict, variable: list[str]) -> dict:
    """A read of many records whose variable outputs are padded to at least 1 along each
    unknown dimension (zeros, as the batch pads them).

    A ``PaddingFIFOQueue.enqueue_many`` of an empty tensor (4 SequenceExamples whose
    sequences are all empty: shape [4, 0]) kills the process in TensorFlow (SIGSEGV in a
    pool thread; #44): so an all-empty read gets one column of padding, which the batch's
    padding would give it beside any longer element anyway.
    """
    out = dict(tensors)
    for key in variable:
        value = tensors[key]
        dims = value.shape.as_list()
        paddings = [[0, 0] if d is not None or i == 0 else
                    [0, tf.maximum(1 - tf.shape(value)[i], 0)] for i, d in enumerate(dims)]
        padded = tf.pad(value, paddings)
        padded.set_shape(value.shape)
        out[key] = padded
    return out


def shuffled_elements(readers: list[dict], variable: list[str], *, capacity: int,
                      min_after_dequeue: int, seed, many: bool) -> dict:
    """One element at a time from a RandomShuffleQueue that the readers fill, variable
    outputs restored to their dtype and rank (ready for a padding batch)."""
    first = readers[0]
    if any(isinstance(v, tf.SparseTensor) for v in first.values()):
        raise ValueError("shuffle with variable-length outputs and a SparseTensor: return "
                         "tf.sparse.to_dense(...) from parse_fn (padded per batch)")
    names = sorted(first)

    def encoded(tensors):
        out = []
        for k in names:
            v = tensors[k]
            if k in variable:  # a scalar string: fixed shape, whatever its length
                v = (tf.map_fn(tf.io.serialize_tensor, v, fn_output_signature=tf.string)
                     if many else tf.io.serialize_tensor(v))
            out.append(v)
        return out

    lists = [encoded(r) for r in readers]
    queue = tf.queue.RandomShuffleQueue(
        capacity, min_after_dequeue, [t.dtype for t in lists[0]],
        shapes=[t.shape[1:] if many else t.shape for t in lists[0]], seed=seed,
        name="shuffled_elements")
    enqueue = queue.enqueue_many if many else queue.enqueue
    _v1.train.add_queue_runner(_v1.train.QueueRunner(queue, [enqueue(t) for t in lists]))
    element = dict(zip(names, queue.dequeue(), strict=True))
    for k in variable:
        shape = first[k].shape[1:] if many else first[k].shape
        element[k] = tf.ensure_shape(tf.io.parse_tensor(element[k], first[k].dtype), shape)
    return element
