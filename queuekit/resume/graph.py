"""What a builder adds so that a restarted job resumes its input at the next unconsumed record.

Every ``tfrecord_batches``, ``fixed_length_batches`` and ``image_folder_batches``
pipeline (not a work queue's: its chief keeps books of its own) is built with

- its own filename producer (:func:`epoch_files`): a local ``epoch`` counter,
  and with ``shuffle`` each epoch's file order drawn by a stateless shuffle
  of ``(seed, epoch)``, so epoch k has the same order in every run and after
  a restart;
- beside a reader's read of one record, a read of many on the same reader
  (:func:`reads`; 3 ops): a resumed session's runner threads
  (:mod:`queuekit.resume.skip`) run it (or a read of many alone), drop in
  Python the records a restored checkpoint says were consumed already, and
  feed the others to the enqueue op in place of the read, until nothing is
  left to skip. The graph holds no control flow for it (a ``tf.cond`` or
  ``Switch`` in a runner's step cost about 3% of workload (a): TensorFlow's
  executor takes a slower path for any graph with control flow), and no skip
  table: the in-graph skipping read (a ``while_loop`` in a
  ``CriticalSection``) was 30 of a one-reader pipeline's 164 ops and most of
  its build time, paid by every graph for what only a resumed one runs;
- each record's reader key (``<file>:<byte offset>``, ``<file>:<record
  index>`` for fixed-length records, ``<file>:0`` for an image file) as a
  hidden batch component, taken out again by :func:`take_consumed`: every
  run that takes a batch out of the batch queue puts its keys in a queue in
  the graph (consumption, and what a checkpoint saves), which the session
  drains now and then. Fetching the keys into Python with every step cost
  about 5% of workload (a) (the runner threads wait for the GIL); counting
  them behind a ``Switch`` about 1.5%; counting them in a table in the step
  more than the queue (``docs/benchmarks-history.rst``).

The pipeline's :class:`InputPosition` is in
``graph_objects(graph, GraphKeys.INPUT_POSITIONS)``; ``queuekit.resume.tally``
reads it (the two parts never import each other). In a session that is not
queuekit's nothing is ever to be skipped and the pipeline reads every record.
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import tensorflow as tf

from queuekit.features import install
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.graph_walk import rows_where

_v1 = tf.compat.v1
POSITION_KEY = "queuekit_position_key"  # a batch component, taken out of the user's dict
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
    producer_queue: str = ""  # the filename queue
    items: tuple[bytes, ...] = ()  # what the filename queue carries for each file
    consumed_whole: Any = None  # placeholder [None] string: items the resumed epoch drops
    drop_files: Any = None  # op: the resumed epoch's producer leaves consumed_whole out
    # Per reader: ((keys, values) of its read, whether it reads many records at a time,
    # (keys, values, count) of a read of up to count records on it, or None).
    reads: list = dataclasses.field(default_factory=list)
    consumed: Any = None  # a queue of the reader keys of each batch a run took out
    tally: Any = None  # op: consumed notes from now on (a queuekit session tallies)
    tallying: Any = None  # its variable (1 once tallying)
    drain: Any = None  # the keys in ``consumed`` (a string a batch), taken out


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
        # The files a restored checkpoint's epoch consumed whole are not read again in it
        # (rather than read and every record skipped: a restart late in a long epoch). The
        # resumed epoch is the first the producer starts after the restore: its order takes
        # them out of the table, so the epochs after it read them.
        consumed_files = _scratch_table("consumed_files")
        again = tf.equal(consumed_files.lookup(order), 0)
        with tf.control_dependencies([again]):
            forget = consumed_files.remove(content)
        with tf.control_dependencies([forget]):
            order = rows_where(order, again)
        queue = tf.queue.FIFOQueue(_PRODUCER_CAPACITY, [tf.string], shapes=[[]])
        _v1.train.add_queue_runner(_v1.train.QueueRunner(queue, [queue.enqueue_many([order])]))
        epoch_value = _v1.placeholder(tf.int64, [], name="epoch_value")
        whole = _v1.placeholder(tf.string, [None], name="consumed_whole")
        position = InputPosition(
            position_name, files, "file" if items is not None else "index" if fixed else "offset",
            fixed, num_epochs, shuffle,
            seed, epoch,
            epoch.assign(epoch_value), epoch_value,
            queue.queue_ref.op.name, items=tuple(
                os.fsencode(f) for f in files) if items is None else tuple(
                i if isinstance(i, bytes) else str(i).encode() for i in items),
            consumed_whole=whole, drop_files=consumed_files.insert(
                whole, tf.ones_like(whole, dtype=tf.int64)))
    graph = _v1.get_default_graph()
    graph_objects(graph, GraphKeys.INPUT_POSITIONS).append(position)
    install(graph, "queuekit.resume.tally:for_session")
    return queue, position


def _scratch_table(name: str):
    graph = _v1.get_default_graph()
    saveables = graph.get_collection_ref(_v1.GraphKeys.SAVEABLE_OBJECTS)
    before = list(saveables)
    table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, 0, name=name)
    # The table registers itself for every Saver(); it is this session's scratch (filled
    # from the input position a checkpoint carries), never the model's.
    saveables[:] = before
    return table


def reads(position: InputPosition, next_read, *, many: bool, up_to: bool = False):
    """``next_read()``'s ``(keys, values)``, what the pipeline reads, noted in ``position``
    (a resumed session's runners skip what was consumed from it: with ``many``, vectors).

    ``up_to``: ``next_read(up_to=n)`` reads up to ``n`` records on the same reader; a read
    of one record then gets one beside it, whose count a resumed runner feeds: it skips
    many records a run (a run of one read took 150-170 us here, a record's skip 1.5 us
    in a run of many). Three ops, run only while a restore left records to skip."""
    keys, values = next_read()
    bulk = None
    if up_to and not many:
        with tf.name_scope("skipping_read"):
            count = _v1.placeholder_with_default(tf.constant(1, tf.int64), [], name="count")
            bulk = (*next_read(up_to=count), count)
    position.reads.append(((keys, values), many, bulk))
    return keys, values


def take_consumed(position: InputPosition, batch: dict) -> dict:
    """The batch the user gets: the reader keys taken out, and every component made to note
    them in ``position.consumed`` in the run that takes it (once a session ran
    ``position.tally``: a session that never drains the queue must not grow it).

    A queue, not a table counted in the step: an enqueue is one op that needs no lock
    (several runs may take batches at once, and the session drains meanwhile), where a
    look-up and an insert need a critical section around them. The table cost 12% of the
    records/s of small records read a batch at a time, the queue 4.5%
    (``docs/benchmarks-history.rst``)."""
    keys = batch.pop(POSITION_KEY)
    with tf.name_scope("consumed"):
        if position.consumed is None:  # one queue, whatever batch (qk.prefetched's) notes in it
            # An element per batch; unbounded: the session drains it every thousand runs.
            queue = position.consumed = tf.queue.FIFOQueue(-1, [tf.string], shapes=[[]],
                                                           name="consumed_keys")
            position.tallying = _v1.Variable(
                0, dtype=tf.int32, trainable=False, name="tallying",
                collections=[_v1.GraphKeys.LOCAL_VARIABLES], use_resource=True)
            position.tally = position.tallying.assign(1)
            # One run drains what is there (one drainer at a time: it never waits); the
            # session splits the keys in a graph of its own (queuekit.resume.tally).
            position.drain = queue.dequeue_many(queue.size())
        # A batch's keys joined into one string: held until a drain, 32 strings a batch
        # were small blocks scattered among the records' freed large ones, and glibc then
        # faulted in fresh pages for records (3.5 faults per 196 KB record, against 0.05
        # joined; docs/benchmarks-history.rst). NUL: the one byte no POSIX file name holds.
        joined = tf.expand_dims(tf.strings.reduce_join(keys, separator="\0"), 0)
        # Sliced, not a cond: no element at all until a session tallies.
        noted = position.consumed.enqueue_many([joined[:position.tallying.read_value()]])
    with tf.control_dependencies([noted]):
        return {k: _identity(v) for k, v in batch.items()}


def _identity(value):
    if isinstance(value, tf.SparseTensor):
        return tf.SparseTensor(tf.identity(value.indices), tf.identity(value.values),
                               tf.identity(value.dense_shape))
    return tf.identity(value)
