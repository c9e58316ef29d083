"""What a builder adds so that a restarted job resumes its input at the next unconsumed record.

Every ``tfrecord_batches``, ``fixed_length_batches`` and ``image_folder_batches``
pipeline (not a work queue's: its chief keeps books of its own) is built with

- its own filename producer (:func:`epoch_files`): a local ``epoch`` counter,
  and with ``shuffle`` each epoch's file order drawn by a stateless shuffle
  of ``(seed, epoch)``, so epoch k has the same order in every run and after
  a restart;
- after each read, a filter (:func:`keep_unconsumed`) that drops the records
  a restored checkpoint says were consumed already: a skip table the session
  fills before the runners start, looked up and counted down inside one
  ``tf.CriticalSection`` (two readers can read the same record at once, one
  pass of it in each of two epochs; the count must go down once per read);
- two hidden batch components naming each record: its file (a 64-bit
  fingerprint of the name the reader was given) and its place in the file
  (the byte offset a ``TFRecordReader`` reports, a fixed-length record's
  index, 0 for an image file). The session fetches them with every run that takes a batch: that is
  consumption, and what a checkpoint saves.

The pipeline's :class:`InputPosition` is in the graph collection
``graph_objects(graph, GraphKeys.INPUT_POSITIONS)``; ``queuekit.session.position`` reads it (the
two parts never import each other). In a session that is not queuekit's
nothing fills the skip table and the pipeline reads every record, as before.
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import tensorflow as tf

from queuekit.graph_keys import GraphKeys, graph_objects

_v1 = tf.compat.v1
POSITION_FILE = "queuekit_position_file"  # batch components, taken out of the user's dict
POSITION_RECORD = "queuekit_position_record"
FINGERPRINT_BUCKETS = 2**63 - 1
_PRODUCER_CAPACITY = 32  # string_input_producer's


@dataclasses.dataclass
class InputPosition:
    """The ops of one resumable pipeline (tensors and ops of the graph that holds them)."""

    name: str  # the pipeline's name scope: how a checkpoint's state finds it again
    files: tuple[str, ...]
    # "offset" (TFRecord byte offsets), "index" (fixed-length records), "file" (one a file)
    record_kind: str
    fixed: tuple[int, int, int] | None  # record_bytes, header_bytes, footer_bytes for "index"
    num_epochs: int | None
    shuffle: bool
    seed: int
    epoch: Any  # local int64 variable: how many epochs the producer started
    set_epoch: Any  # op: epoch = epoch_value
    epoch_value: Any
    fill_skip: Any  # op: skip[skip_keys] = skip_counts
    skip_keys: Any  # placeholder [None] string: "<file>:<offset or index>", as the reader says
    skip_counts: Any  # placeholder [None] int64: reads of that record to drop
    file_ids: Any  # int64 [len(files)]: each file's fingerprint, as the batch carries it
    table: Any = None  # the skip table (keep_unconsumed's)
    guard: Any = None  # the CriticalSection its count-down runs in
    producer_queue: str = ""  # the filename queue
    batch_queue: str = ""  # the queue whose dequeue consumes records
    consumed: tuple[Any, Any] | None = None  # (file ids, places) of a dequeued batch


def epoch_files(files, num_epochs: int | None, shuffle: bool, seed: int | None, *,
                position_name: str, fixed: tuple[int, int, int] | None = None,
                items=None):
    """(filename queue, :class:`InputPosition`): ``string_input_producer`` with an epoch
    counter the session can set and each epoch's order a function of ``(seed, epoch)``.

    ``items``: what the queue carries for each file, when not its name (an image
    folder's: the file's index, for its label)."""
    files = tuple(files)
    seed = random.getrandbits(31) if seed is None else int(seed)
    # As bytes: a name that is not UTF-8 is kept, not a UnicodeEncodeError.
    names = tf.constant([os.fsencode(f) for f in files], tf.string)
    content = names if items is None else tf.constant(list(items), tf.string)
    with tf.name_scope("input_producer"):
        epoch = _v1.Variable(0, dtype=tf.int64, trainable=False, name="epoch",
                             collections=[_v1.GraphKeys.LOCAL_VARIABLES])
        # count_up_to raises OutOfRange at the limit: the runner then closes the queue,
        # as string_input_producer's limit_epochs does.
        started = (epoch.count_up_to(num_epochs) if num_epochs is not None
                   else epoch.assign_add(1) - 1)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(
                content, seed=tf.stack([tf.constant(seed, tf.int64), started]))
        else:
            with tf.control_dependencies([started]):
                order = tf.identity(content)
        queue = tf.queue.FIFOQueue(_PRODUCER_CAPACITY, [tf.string], shapes=[[]])
        _v1.train.add_queue_runner(_v1.train.QueueRunner(queue, [queue.enqueue_many([order])]))
        epoch_value = _v1.placeholder(tf.int64, [], name="epoch_value")
        skip_keys = _v1.placeholder(tf.string, [None], name="skip_keys")
        skip_counts = _v1.placeholder(tf.int64, [None], name="skip_counts")
        table = _skip_table()
        position = InputPosition(
            position_name, files, "file" if items is not None else "index" if fixed else "offset",
            fixed, num_epochs, shuffle,
            seed, epoch,
            epoch.assign(epoch_value), epoch_value, table.insert(skip_keys, skip_counts),
            skip_keys, skip_counts, tf.strings.to_hash_bucket_fast(names, FINGERPRINT_BUCKETS),
            table, tf.CriticalSection(name="skip_guard"), queue.queue_ref.op.name)
    graph_objects(_v1.get_default_graph(), GraphKeys.INPUT_POSITIONS).append(position)
    return queue, position


def _skip_table():
    graph = _v1.get_default_graph()
    saveables = graph.get_collection_ref(_v1.GraphKeys.SAVEABLE_OBJECTS)
    before = list(saveables)
    table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, 0, name="skip")
    # The table registers itself for every Saver(); it is this session's scratch, filled
    # from the input position the checkpoint carries, never a part of the model.
    saveables[:] = before
    return table


def keep_unconsumed(position: InputPosition, keys, tensors: dict, *, many: bool) -> dict:
    """``tensors`` of one read with the records the skip table names dropped, and the two
    position components added; always with a leading dimension (enqueued many)."""
    if not many:
        keys = tf.expand_dims(keys, 0)
        tensors = {k: _expand(v) for k, v in tensors.items()}
    table = position.table

    def count_down():
        n = table.lookup(keys)
        skip = n > 0
        done = table.insert(tf.boolean_mask(keys, skip), tf.boolean_mask(n, skip) - 1)
        with tf.control_dependencies([done]):
            return tf.logical_not(skip)

    keep = position.guard.execute(count_down)
    # TF notes each execution in a collection that a Saver's meta graph cannot serialize
    # (a warning on every save); the note only guards nested executions, which this is not.
    executions = _v1.get_collection_ref("critical_section_executions")
    executions[:] = [e for e in executions if e.handle is not position.guard._handle]
    # Byte-wise, not a regex: RE2 does not match across a name's bytes that are not UTF-8.
    parts = tf.strings.split(keys, ":")
    places = tf.gather(parts.flat_values, parts.row_limits() - 1)  # each key's last part
    lengths = tf.strings.length(keys) - tf.strings.length(places) - 1
    names = tf.strings.substr(keys, tf.zeros_like(lengths), lengths)
    out = {k: _rows(v, keep) for k, v in tensors.items()}
    out[POSITION_FILE] = tf.boolean_mask(tf.strings.to_hash_bucket_fast(
        names, FINGERPRINT_BUCKETS), keep)
    out[POSITION_RECORD] = tf.boolean_mask(tf.strings.to_number(places, tf.int64), keep)
    return out


def _expand(value):
    if isinstance(value, tf.SparseTensor):
        return tf.sparse.expand_dims(value, 0)
    return tf.expand_dims(value, 0)


def _rows(value, keep):
    """The rows of ``value`` (a tensor or a SparseTensor, first dimension = records) kept."""
    if not isinstance(value, tf.SparseTensor):
        return tf.boolean_mask(value, keep)
    kept_rows = tf.cast(tf.gather(keep, value.indices[:, 0]), tf.bool)
    new_row = tf.cumsum(tf.cast(keep, tf.int64)) - 1  # old row -> its row among the kept
    retained = tf.sparse.retain(value, kept_rows)
    indices = tf.concat([tf.gather(new_row, retained.indices[:, :1])[:, :1],
                         retained.indices[:, 1:]], axis=1)
    shape = tf.concat([tf.reduce_sum(tf.cast(keep, tf.int64), keepdims=True),
                       retained.dense_shape[1:]], axis=0)
    return tf.SparseTensor(indices, retained.values, shape)


def take_consumed(position: InputPosition, batch: dict, batch_queue: str) -> dict:
    """Take the position components out of the batch the user gets; the session fetches
    them with every run that dequeues ``batch_queue``."""
    position.consumed = (batch.pop(POSITION_FILE), batch.pop(POSITION_RECORD))
    position.batch_queue = batch_queue
    return batch
