"""Every batch of a static size: the last, smaller batch padded, with a mask of the real rows.

Models that need the batch size in the graph (an LSTM's state, a reshape to
``[batch_size, -1]``) cannot take ``allow_smaller_final_batch``'s unknown batch
dimension, and without it the final partial batch is dropped: an evaluation
over "every record" silently misses up to ``batch_size - 1`` of them. This pads
instead, by composition over any batch (a builder's dict, or a hand-built
``tf.train.batch``'s list), and says which rows are real.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def pad_last_batch(batch: Any, batch_size: int, *, mask_key: str = "valid") -> Any:
    """``batch`` with every tensor padded along its first dimension to ``batch_size``.

    Build the batch with ``allow_smaller_final_batch=True`` (the builders'
    default with ``num_epochs``); every batch then has the static shape
    ``[batch_size, ...]``, the last one padded with zeros (empty strings; a ``SparseTensor``, such
    as a var-len feature, gets the larger dense shape and no new values), and a
    boolean mask of ``[batch_size]`` says which rows are records. A metric over
    every record of an epoch weighs by it::

        batch = qk.pad_last_batch(qk.tfrecord_batches(files, batch_size=100, num_epochs=1), 100)
        hits = tf.compat.v1.nn.in_top_k(logits, batch["label"], 1) & batch["valid"]

    Returns:
        A dict batch gets the mask as ``batch[mask_key]``; any other structure
        (a tensor, a list or tuple of them) comes back as ``(padded, mask)``.

    Raises:
        ValueError: ``batch_size`` is not positive, or ``batch`` has no tensor.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    flat = tf.nest.flatten(batch)
    if not flat:
        raise ValueError("pad_last_batch needs a batch with at least one tensor")
    if isinstance(batch, dict) and mask_key in batch:
        raise ValueError(f"the batch already has a {mask_key!r} entry: pass another mask_key")
    first = flat[0]
    rows = (tf.cast(first.dense_shape[0], tf.int32) if isinstance(first, tf.SparseTensor)
            else tf.shape(first, out_type=tf.int32)[0])
    checks = [tf.debugging.assert_less_equal(
        rows, batch_size, message=f"pad_last_batch: a batch is larger than {batch_size}")]
    with tf.control_dependencies(checks):
        missing = batch_size - rows

    def pad(tensor):
        if isinstance(tensor, tf.SparseTensor):
            # Padding rows of a sparse batch adds no value: only its dense shape grows.
            shape = tf.concat([[tf.constant(batch_size, tf.int64)], tensor.dense_shape[1:]], 0)
            return tf.SparseTensor(tensor.indices, tensor.values, shape)
        tensor = tf.convert_to_tensor(tensor)
        rank = tensor.shape.rank
        if rank is None or rank == 0:
            raise ValueError(f"pad_last_batch: {tensor.name} has no batch dimension")
        # A concat with zeros, not tf.pad: oneDNN's rewrite of a Pad before a VALID Conv2D
        # (TF's default CPU build) was seen to drop the padded rows (#43); concat is kept.
        zeros = tf.zeros(tf.concat([[missing], tf.shape(tensor)[1:]], 0), tensor.dtype)
        out = tf.concat([tensor, zeros], 0)
        out.set_shape([batch_size, *tensor.shape.as_list()[1:]])
        return out

    padded = tf.nest.map_structure(pad, batch)
    mask = tf.range(batch_size) < rows
    mask.set_shape([batch_size])
    if isinstance(batch, dict):
        return {**padded, mask_key: mask}
    return padded, mask
