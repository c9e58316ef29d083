"""From a filename queue to batches: the part every builder shares.

``string_input_producer`` -> N readers (each a function from the filename
queue to a dict of tensors) -> ``batch``/``shuffle_batch`` (``_join`` for
several readers) -> optional normalisation. The defaults are fixed: no record
lost at the end of an epoch, a bounded queue, uint8 in the queues.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import os
import sys
import types
import warnings
from typing import TYPE_CHECKING

import tensorflow as tf

from queuekit.errors import UnknownBatchSize
from queuekit.features import install
from queuekit.graph_keys import GraphKeys
from queuekit.pipelines.delivery import deliver, normalizes, queued_whole
from queuekit.pipelines.graph_care import summaries_kept_out
from queuekit.pipelines.placement import input_device, pinned
from queuekit.resume.graph import POSITION_KEY, epoch_files, reads

if TYPE_CHECKING:
    from queuekit.cluster.inputs import WorkQueueInput

_v1 = tf.compat.v1
# Records per read on a cluster (a worker's input, a record shard): each read is a network
# round trip, whatever it carries.
REMOTE_READ_MANY = 64
# Default queue memory: elements of the batch queue, in bytes of uint8 images.
QUEUE_BYTES = 64 * 2**20
# A guess at an unknown dimension, for the default queue capacity in bytes.
GUESSED_LENGTH = 64
# With num_readers="auto", each read takes about this many bytes of records of at most
# AUTO_READ_MAX_RECORD bytes (16 to 64 of them; docs/autotune.rst).
AUTO_READ_BYTES = 2**20
AUTO_READ_MANY_MAX = 64
AUTO_READ_MAX_RECORD = 64 * 2**10


def default_max_threads() -> int:
    """The most readers ``"auto"`` builds (threads, for ``image_folder_batches``): two per
    core, 4 to 16; the tuner starts at half of them, one per core (for raw records read
    many at a time, :func:`auto_max_readers`).

    Every reader built costs its ops at build and its callable at start, run or
    paused: on 2 cores, 8 built (4 active) took a whole run of 3 passes over 1,000
    records of 196 KB 2.0-2.6 s where 2 fixed readers took 1.2-1.4 s (0.2 s more to
    build, 0.3 s more to the first batch, and 4 active read slower than 2:
    ``docs/autotune.rst``). Two per core leaves the tuner room to climb where
    readers wait on their files or share a decode.
    """
    return max(4, min(2 * (os.cpu_count() or 1), 16))


def auto_max_readers(max_readers: int | None, *, raw_many: bool) -> int | None:
    """The most readers ``"auto"`` builds: ``max_readers`` as given; else, for raw records
    read many at a time (``raw_many``: no decode, no ``parse_fn``, local files), one per
    core, 2 to 16; else None, :func:`default_max_threads`.

    Such reads cost a run for many records and the tuner starts them at one reader;
    the fastest fixed row on 12 KB records read 64 at a time was one reader. The two
    readers per core built beside it cost every run: whole runs of 3 passes over
    2,000 records took 0.671 s with 4 built and 0.547 s with 2 (one reader: 0.481 s),
    of 20 passes 2.126 s and 1.859 s (1.703 s); each a median of 5-6 alternating
    processes (``docs/autotune.rst``).
    """
    if max_readers is not None or not raw_many:
        return max_readers
    return max(2, min(os.cpu_count() or 1, 16))


def resolve_count(name: str, value, maximum: int | None) -> tuple[int, bool]:
    """(threads to build, tuned?) for a count that is an int or ``"auto"``."""
    if value == "auto":
        n = default_max_threads() if maximum is None else int(maximum)
        if n < 1:
            raise ValueError(f"max_readers must be at least 1, not {maximum}")
        return n, n > 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int or 'auto', not {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, not {value}")
    return value, False


def default_readers(num_readers, parse_fn, work_queue=None, num_epochs=None):
    """``num_readers`` as given; by default ``"auto"`` for a ``parse_fn`` read for one epoch
    (the user's per-record preprocessing: TF1 programs ran it in ``num_preprocess_threads``
    threads, one reader runs it in one), else 1.

    Not for more epochs or an endless input: readers then read different passes at
    once, so "the first n records" are not one pass (an evaluation of n batches of an
    endless input saw 19 distinct records of 48; #43). One reader reads the input in
    order, as the program's own ``TFRecordReader`` did; ``"auto"`` given explicitly is
    still the caller's choice.
    """
    if num_readers is not None:
        return num_readers
    return "auto" if parse_fn is not None and not work_queue and num_epochs == 1 else 1


AUTO_PREFETCH = 2  # batches made ready ahead of the step by a tuned pipeline


def ready_count(prefetch: int | None, num_readers, *, normalizes: bool = True) -> int:
    """``prefetch`` as given; by default :data:`AUTO_PREFETCH` with ``"auto"`` readers
    (or threads) where the batch is normalised after the batch queue, as ``tf.data``'s
    AUTOTUNE pipelines end in a prefetch, else none.

    On this machine a ready stage of 2 raised the rate by 5-17% where a 30 ms step
    is the slow side, and on 12 KB records by -1% to 13%; with no step on 196 KB
    records it measured from -6% to +4% (``docs/benchmarks-history.rst``). Its cost is one
    more runner thread and two normalised batches in memory. A batch with nothing to
    normalise (a ``parse_fn``'s) gets no ready stage by default: it would only copy the
    batch once more: on ``SequenceExample`` records with dynamic padding the whole
    run (build to end of data) took 1.13x as long with it, and after the first 20
    batches it was no faster (0.985x; 6 alternating in-process runs).
    """
    if prefetch is None:
        return AUTO_PREFETCH if num_readers == "auto" and normalizes else 0
    return int(prefetch)


WHOLE = "batch"  # read_many: each read is a whole batch (:func:`whole_batches`)


def records_per_read(read_many: int | str | None, num_readers, *, remote: bool = False,
                     raw_bytes: int | None = None, encoded: bool = False) -> int | str:
    """How many records each read takes; every builder decides it here, and only here.

    0 is one record per read (``read``, not ``read_up_to``). ``read_many`` as
    given (``"batch"``: a batch, :func:`whole_batches`); else on a cluster
    (``remote``: no ``parse_fn``, a worker's input or a record shard)
    :data:`REMOTE_READ_MANY`, each read being a
    network round trip; else for ``"auto"`` readers of ``encoded`` images
    :data:`AUTO_READ_MANY_MAX`, and of raw records of ``raw_bytes`` about
    :data:`AUTO_READ_BYTES` (none for records over :data:`AUTO_READ_MAX_RECORD`);
    else one.

    Each read is a session step, and a step costs about the same whatever it
    carries: for the demo's 27 KB records, reading 8 per step made the tuned
    pipeline faster with less CPU, and 64 faster again than 9
    (``docs/autotune.rst``). Large records lose by it: 2 per step of 196 KB
    records ran slower (likely ``enqueue_many``, which copies each record under
    the queue's lock while the dequeue waits). Encoded images gain by it since a
    run is made in its reader's thread: four readers of 64 JPEGs decoded 3-23% faster
    than four of one, in four runs (``docs/benchmarks-history.rst``).
    """
    if read_many == WHOLE:
        return WHOLE
    if read_many is not None:
        if isinstance(read_many, bool) or not isinstance(read_many, int) or read_many < 0:
            raise ValueError(f"read_many must be at least 1 (0 or None: one record per "
                             f"read; 'batch': a batch per read), not {read_many!r}")
        return read_many
    if remote:
        return REMOTE_READ_MANY
    if num_readers == "auto" and encoded:
        return AUTO_READ_MANY_MAX
    if raw_bytes is not None and num_readers == "auto" and raw_bytes <= AUTO_READ_MAX_RECORD:
        return min(AUTO_READ_MANY_MAX, AUTO_READ_BYTES // max(1, raw_bytes))
    return 0


def read_count(read_many: int | str, batch_size: int) -> int:
    """The records one read takes (0: one, with ``read`` rather than ``read_up_to``)."""
    return batch_size if read_many == WHOLE else int(read_many)


def one_tuned_reader(parse_fn, read_many) -> bool:
    """Whether ``"auto"`` tunes the threads of one reader rather than readers: for a
    ``parse_fn`` given one record a read, the parse is the work (TF1 programs ran it in
    ``num_preprocess_threads`` threads of one reader). Reads of a file are microseconds
    beside it, and every reader built costs its ops and start: SequenceExamples parsed and
    padded (``benchmarks/bench_sequence.py``'s data) ran 1 reader x 4 threads 1.1-1.4x
    faster than 4 readers, whole runs of 2 passes over 2,000 (two runs each)."""
    return parse_fn is not None and not read_many


def tuned_order(readers: list, num_threads: int) -> list:
    """The join list of a tuned runner: each reader's threads next to each other, so the
    tuner's threads 0..k-1 are whole readers.

    One thread per reader by default: a thread that is its read op's only one makes its
    runs in its own thread, faster than runs handed to the session's pool
    (``queuekit.session.runners.in_own_thread``). (With runs handed to the pool, two
    threads per reader had read the demo's small records fastest.)
    """
    return [r for r in readers for _ in range(num_threads)]


def mark_tuned() -> None:
    """Name the batch queue just built (the last runner added) for the session's tuner."""
    runner = tf.compat.v1.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)[-1]
    tf.compat.v1.add_to_collection(GraphKeys.AUTOTUNE, runner.queue.queue_ref.op.name)
    install(_v1.get_default_graph(), "queuekit.session.tuner:Tuners")


def mark_decoding() -> None:
    """Name the tuned queue just built as one whose readers decode each record they read."""
    tuned = tf.compat.v1.get_collection(GraphKeys.AUTOTUNE)
    tf.compat.v1.add_to_collection(GraphKeys.DECODING, tuned[-1])


@contextlib.contextmanager
def quiet_deprecations():
    """Silence TF's deprecation warnings for the queue API, inside our builders only."""
    try:
        from tensorflow.python.util import deprecation
    except ImportError:  # pragma: no cover - a TF without the private module
        yield
        return
    with deprecation.silence():
        yield


@dataclasses.dataclass(frozen=True)
class Batching:
    """The queue and batch arguments the builders share (see ``tfrecord_batches``)."""

    batch_size: int = 32
    num_epochs: int | None = None
    shuffle: bool = False
    seed: int | None = None
    num_readers: int | str = 1
    num_threads: int = 1
    capacity: int | None = None
    min_after_dequeue: int | None = None
    allow_smaller_final_batch: bool | None = None
    normalize: bool = True
    max_readers: int | None = None  # with num_readers="auto"
    work_queue: WorkQueueInput | None = None  # files from a work queue on a ps
    prefetch: int | None = None  # batches made ready ahead of the step (ready_count)
    # "auto" tunes the threads of one reader, not readers (a parse_fn's records: the
    # parse is the work, as TF1's num_preprocess_threads; see one_tuned_reader)
    one_reader: bool = False

    def __post_init__(self):
        for name in ("batch_size", "num_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.prefetch is not None and (isinstance(self.prefetch, bool) or not isinstance(
                self.prefetch, numbers.Integral) or self.prefetch < 0):
            raise ValueError(f"prefetch must be 0 or more batches (None: {AUTO_PREFETCH} with "
                             f"'auto' readers, else 0), not {self.prefetch!r}")
        resolve_count("num_readers", self.num_readers, self.max_readers)
        if self.work_queue and self.num_readers == "auto":
            # A paused reader would keep its file unfinished, and the work queue ends
            # only when every file is finished: the two would wait for each other.
            raise ValueError("work_queue needs a fixed num_readers, not 'auto'")


def keeps_last_batch(allow_smaller_final_batch: bool | None, num_epochs) -> bool:
    """Whether the last, smaller batch of an epoch is kept (by default, with ``num_epochs``:
    no record lost); when that default makes the batch dimension unknown, say so.

    A model that needs the batch size in the graph (an LSTM's state, a reshape
    to ``[batch_size, -1]``) then fails at build time with an error about a
    ``None`` dimension, far from its cause (im2txt, CIFAR-10's model).
    """
    if allow_smaller_final_batch is not None:
        return bool(allow_smaller_final_batch)
    if num_epochs is None:
        return False
    warnings.warn(
        "num_epochs keeps the last, smaller batch of the epoch (no record is lost), so the "
        "batch dimension is None in the graph. A model that needs it static: "
        "qk.pad_last_batch(batch, batch_size) (a 'valid' mask marks the real rows); to drop "
        "the last batch: allow_smaller_final_batch=False; to silence this: "
        "allow_smaller_final_batch=True", UnknownBatchSize, stacklevel=find_caller())
    return True


def find_caller() -> int:
    """The stack level of the first frame outside queuekit (for a warning's location)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("queuekit."):
        frame, level = frame.f_back, level + 1
    return level


def element_shapes(tensors, *, many: bool) -> tuple[int, list[str]]:
    """(about the bytes of one element, the names of outputs of variable shape)."""
    if not isinstance(tensors, dict) or not tensors:
        raise TypeError(f"a reader must give a non-empty dict of tensors, not {tensors!r}")
    size, variable = 0, []
    for key, value in tensors.items():
        if isinstance(value, tf.SparseTensor):
            continue
        if not isinstance(value, tf.Tensor):
            raise TypeError(f"reader output {key!r} is not a tensor: {value!r}")
        shape = value.shape[1:] if many else value.shape
        if shape.rank is None:
            raise ValueError(f"reader output {key!r} has an unknown rank: batching needs at "
                             f"least the rank (tf.ensure_shape in parse_fn)")
        if not shape.is_fully_defined():
            variable.append(key)
        known = [d if d is not None else GUESSED_LENGTH for d in shape.as_list()]
        n = 1
        for d in known:
            n *= d
        size += n * (value.dtype.size if value.dtype != tf.string else 64)
    return size, variable


def capacity_for(capacity, batch_size, element_bytes, read_many=None) -> int:
    """``capacity``, or about :data:`QUEUE_BYTES` of elements, at least two batches."""
    if capacity is not None:
        return int(capacity)
    by_bytes = QUEUE_BYTES // max(1, element_bytes)
    return int(max(2 * batch_size + (read_many or 0), min(by_bytes, 20_000)))


def shuffle_sizes(capacity, min_after_dequeue, batch_size):
    if min_after_dequeue is None:
        min_after_dequeue = capacity // 2
    capacity = max(capacity, min_after_dequeue + batch_size)
    return capacity, int(min_after_dequeue)


def file_batches(files, read, opts: Batching, *, read_many: int | str, name: str,
                 device: str | None = None, fixed: tuple[int, int, int] | None = None):
    """Batches from ``files``.

    ``read(filename_queue)`` makes one reader and returns ``(next_read, parse)``:
    ``next_read()`` builds a read on it, ``(keys, raw)`` (``next_read(up_to=n)``, a
    ``read_up_to`` of ``n`` on it: a resumed runner's skipping read), and ``parse(keys, raw)``
    the dict of tensors of those records. A pipeline that is not a work queue's
    skips what a restored checkpoint consumed between the two
    (:mod:`~queuekit.resume.graph`) and carries each record's key.
    ``fixed``: (record_bytes, header_bytes, footer_bytes) of fixed-length
    records, whose keys number records rather than bytes.

    ``device``: this worker's (``cluster.inputs.worker_device``), found here when None.

    With ``read_many`` (:func:`records_per_read`) each reader's tensors have a
    leading batch dimension (``enqueue_many``); with ``"batch"`` each read is a
    batch, queued whole (:func:`whole_batches`).
    """
    whole = read_many == WHOLE
    if whole:
        check_whole(opts)
    # Whole batches vary in size whatever num_epochs says: no warning about the last one.
    allow_smaller = whole or keeps_last_batch(opts.allow_smaller_final_batch, opts.num_epochs)
    device = input_device(device)
    with quiet_deprecations(), pinned(device), tf.name_scope(name):
        n_readers, tuned = resolve_count("num_readers", opts.num_readers, opts.max_readers)
        threads = opts.num_threads
        if tuned and opts.one_reader:
            n_readers, threads = 1, n_readers * opts.num_threads
        work = position = None
        many = bool(read_many)
        scope = _v1.get_default_graph().get_name_scope()
        if opts.work_queue:
            from queuekit.cluster.inputs import work_queue_inputs
            queues, work = work_queue_inputs(
                opts.work_queue, files, n_readers, name=scope,
                num_epochs=opts.num_epochs, shuffle=opts.shuffle, seed=opts.seed)
            readers = []
            with summaries_kept_out(scope):
                for q in queues:
                    next_read, parse = read(q)
                    readers.append(parse(*next_read()))
        else:
            filename_queue, position = epoch_files(
                files, opts.num_epochs, opts.shuffle, opts.seed, position_name=scope,
                fixed=fixed)
            readers = []
            with summaries_kept_out(scope):
                for _ in range(n_readers):
                    next_read, parse = read(filename_queue)
                    keys, raw = reads(position, next_read, many=many, up_to=True)
                    readers.append(dict(parse(keys, raw), **{POSITION_KEY: keys}))
        element_bytes, variable = element_shapes(readers[0], many=many)
        if whole and variable:
            raise ValueError("read_many='batch' needs outputs of one shape; these vary: "
                             f"{sorted(variable)} (give read_many an int)")
        if variable:  # only such a pipeline loads what pads them
            from queuekit.pipelines import varlen

            mend = varlen.never_empty if many else varlen.with_lengths
            readers = [mend(r, variable) for r in readers]
        capacity = capacity_for(opts.capacity, opts.batch_size, element_bytes,
                                read_count(read_many or 0, opts.batch_size))
        min_after = None
        if opts.shuffle:
            capacity, min_after = shuffle_sizes(capacity, opts.min_after_dequeue,
                                                opts.batch_size)
        if tuned:
            readers = tuned_order(readers, threads)
        elif len(readers) > 1:
            readers = readers * opts.num_threads  # join: one thread per list entry
        if whole:
            batch = whole_batches(readers, capacity=max(2, capacity // opts.batch_size))
            if tuned:
                mark_tuned()
        elif variable and opts.shuffle:  # shuffle whole elements, then pad them in batches
            element = varlen.shuffled_elements(
                readers, variable, capacity=capacity, min_after_dequeue=int(min_after or 0),
                seed=opts.seed, many=many)
            if tuned:
                mark_tuned()  # the readers' runner: the shuffle queue's
            batch = make_batch([element], batch_size=opts.batch_size, shuffle=False,
                               seed=None, capacity=capacity, min_after_dequeue=None,
                               allow_smaller=allow_smaller, enqueue_many=False,
                               num_threads=opts.num_threads, dynamic_pad=True)
        else:
            batch = make_batch(readers, batch_size=opts.batch_size, shuffle=opts.shuffle,
                               seed=opts.seed, capacity=capacity, min_after_dequeue=min_after,
                               allow_smaller=allow_smaller, enqueue_many=many,
                               num_threads=opts.num_threads, dynamic_pad=bool(variable))
            if tuned:
                mark_tuned()
        return deliver(batch, normalize=opts.normalize,
                       prefetch=ready_count(opts.prefetch, opts.num_readers,
                                            normalizes=normalizes(batch, opts.normalize)),
                       position=position, work=work)


def check_whole(opts: Batching) -> None:
    """What ``read_many="batch"`` cannot do: each batch is one reader's read, in order."""
    if opts.shuffle:
        raise ValueError("read_many='batch' queues each read whole, so records are never "
                         "mixed: shuffle needs read_many as an int")
    if opts.work_queue:
        raise ValueError("read_many='batch' does not read from a work_queue")
    if opts.allow_smaller_final_batch is False:
        raise ValueError("with read_many='batch' each file's last batch is smaller (a read "
                         "stops at the end of a file): allow_smaller_final_batch=False "
                         "needs read_many as an int")


def whole_batches(readers: list[dict], *, capacity: int) -> dict:
    """``read_many="batch"``: a queue whose element is one read of ``batch_size`` records,
    dequeued as the batch. The queue holds each read by reference; ``batch_join`` copies
    each record into its queue and again into the batch, under the queue's lock, which
    made it the slowest part of a reader's path (``docs/benchmarks-history.rst``).

    A batch is one reader's records of one file, in order: ``read_up_to`` stops at the
    end of a file, so a file's last batch is smaller (and so are the first reads after a
    resume); the batch dimension is None (:func:`~queuekit.pad_last_batch` makes it
    static).
    """
    return queued_whole(readers, capacity, "whole_batches", GraphKeys.WHOLE_BATCHES)


def make_batch(tensors_list, *, batch_size, shuffle, seed, capacity, min_after_dequeue,
               allow_smaller, enqueue_many, num_threads, dynamic_pad=False):
    """``dynamic_pad``: outputs of variable shape padded per batch (never with shuffle:
    :func:`~queuekit.pipelines.varlen.shuffled_elements` shuffles those first)."""
    if len(tensors_list) == 1 and num_threads >= 1:
        (tensors,) = tensors_list
        if shuffle:
            return _v1.train.shuffle_batch(
                tensors, batch_size, capacity, min_after_dequeue, num_threads=num_threads,
                seed=seed, enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)
        return _v1.train.batch(tensors, batch_size, num_threads=num_threads, capacity=capacity,
                               enqueue_many=enqueue_many, dynamic_pad=dynamic_pad,
                               allow_smaller_final_batch=allow_smaller)
    if shuffle:
        return _v1.train.shuffle_batch_join(
            tensors_list, batch_size, capacity, min_after_dequeue, seed=seed,
            enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)
    return _v1.train.batch_join(tensors_list, batch_size, capacity=capacity,
                                enqueue_many=enqueue_many, dynamic_pad=dynamic_pad,
                                allow_smaller_final_batch=allow_smaller)
