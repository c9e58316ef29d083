"""The reader keys of consumed records (``<file>:<place>``, a batch's joined by NUL in
the pipeline's graph, :func:`queuekit.resume.graph.take_consumed`), split for the tally."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from queuekit.graph_walk import rows_where


class KeySplitter:
    """``(names, which, places)`` of drained reader keys ``<file>:<place>`` (an element a
    batch's keys, NUL-separated): the files' names once each, each key's name as an index
    into them, and its place (int64).

    Split by TF's string kernels, outside the GIL (fetching 32,000 keys into Python and
    splitting them with numpy took the main thread 30-38 ms a drain, between two steps),
    in a graph and session of its own: in the user's graph its 33 ops were a fifth of a
    one-reader pipeline's, built by every graph. Split at the last ``:`` byte (a file's
    name may hold one), byte-wise (a name may not be UTF-8)."""

    def __init__(self):
        graph = tf.Graph()
        with graph.as_default():
            self._joined = tf.compat.v1.placeholder(tf.string, [None])
            self._split = _split_keys(self._joined)
        graph.finalize()
        self._sess = tf.compat.v1.Session(graph=graph)

    def __call__(self, joined) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._sess.run(self._split, {self._joined: joined})

    def close(self) -> None:
        self._sess.close()


def _split_keys(keys):
    # The raw kernels, a gather and segment_max: tf.strings.split's RaggedTensor and a
    # boolean_mask are 32 and 27 ops.
    keys = tf.raw_ops.StringSplitV2(input=keys, sep="\0").values  # a batch's keys, joined
    keys = rows_where(keys, tf.not_equal(keys, b""))  # an empty batch's element
    pieces = tf.raw_ops.StringSplitV2(input=keys, sep=":")
    row = pieces.indices[:, 0]  # in order: a key's pieces are consecutive
    last = tf.gather(pieces.values, tf.math.segment_max(tf.range(tf.size(row)), row))
    length = tf.strings.length(keys) - tf.strings.length(last) - 1
    names, which = tf.unique(tf.strings.substr(keys, tf.zeros_like(length), length))
    return names, which, tf.strings.to_number(last, tf.int64)
