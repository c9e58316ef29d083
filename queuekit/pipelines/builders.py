"""Builders: TFRecords or an image folder -> batches, as ordinary TF1 queue runners.

The graphs are what a careful hand-written pipeline would be
(``string_input_producer`` -> ``TFRecordReader`` -> parse -> decode ->
``tf.train.batch``), with the defaults fixed: no record lost at the end of an
epoch, a bounded memory footprint, queues that carry uint8 (normalisation
happens after batching, 4x less memory traffic), and a clear error for a record
that does not match its declared shape.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import tensorflow as tf

from queuekit.errors import DatasetError
from queuekit.graph_keys import FILE_KEY
from queuekit.graph_walk import rows_where
from queuekit.pipelines.batching import (
    Batching,
    auto_max_readers,
    default_readers,
    file_batches,
    mark_decoding,
    one_tuned_reader,
    quiet_deprecations,
    read_count,
    records_per_read,
    resolve_count,
)
from queuekit.pipelines.delivery import normalized
from queuekit.pipelines.layout import parse_records, record_layout
from queuekit.pipelines.options import Decode, spelled
from queuekit.pipelines.placement import input_device
from queuekit.records.files import check_files, compression_of_all, expand_files
from queuekit.records.tfrecord import first_record

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queuekit.cluster.inputs import Shard, WorkQueueInput
    from queuekit.pipelines.options import EarlierKeywords

__all__ = ["normalized", "quiet_deprecations", "tfrecord_batches"]

_v1 = tf.compat.v1
# What tf.io.decode_image reads (first frame of animations).
_COMPRESSIONS = ("auto", "", "GZIP", "ZLIB")


def _reader(compression: str):
    options = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    return _v1.TFRecordReader(options=options)


def _compression(files, compression, *, walked: bool) -> str:
    """The compression the files' reader uses: detected, and checked against one given."""
    if compression is None:
        compression = ""
    if compression not in _COMPRESSIONS:
        raise ValueError(f"compression must be one of {_COMPRESSIONS}, not {compression!r}")
    found = compression_of_all(files, walked=walked)
    if compression != "auto" and compression != found:
        raise DatasetError(f"{files[0]} is {found or 'not'} compressed, but compression="
                           f"{compression!r} was given; pass compression='auto'")
    return found


def tfrecord_batches(files, *, batch_size: int = 32, num_epochs: int | None = None,
                     shuffle: bool = False, seed: int | None = None,
                     num_readers: int | str | None = None, num_threads: int = 1,
                     read_many: int | str | None = None, capacity: int | None = None,
                     min_after_dequeue: int | None = None,
                     allow_smaller_final_batch: bool | None = None,
                     max_readers: int | None = None, normalize: bool = True,
                     decode: Decode | None = None, parse_fn=None,
                     source: Shard | WorkQueueInput | tuple | str | None = None,
                     compression: str = "auto", check_framing: bool = True,
                     name: str | None = None,
                     **earlier: Unpack[EarlierKeywords]) -> dict[str, tf.Tensor]:
    """Batches of ``image`` and ``label`` (and the schema's extras: ``label_text``...).

    Build it inside a :class:`~queuekit.QueueSession` (or any TF1 graph) and run it.

    Args:
        files: a path, a glob, a directory, or a list of those.
        batch_size: records per batch.
        num_epochs: passes over the data; None repeats forever.
        shuffle: shuffle the file order and use a ``shuffle_batch`` queue.
        seed: seed of both shuffles (and of ``random_crop``).
        num_readers: parallel ``TFRecordReader`` ops (``batch_join``), or
            ``"auto"``: ``max_readers`` of them (default: two per core, 4 to 16;
            one per core, 2 to 16, for raw records read many at a time),
            whose threads a :class:`~queuekit.QueueSession` runs only as many
            of as raise the rate or, when the queue is full, cost the least
            CPU per record (``qs.tuning()``); over a ``parse_fn`` given one
            record a read, one reader with that many threads. Default: ``"auto"`` with a
            ``parse_fn`` (your preprocessing runs in parallel, as TF1's
            ``num_preprocess_threads`` did), else 1 (records in file order).
        num_threads: enqueue threads per reader. With one (the default) each
            reader's thread makes its runs itself rather than through TF's pool
            (faster: ``docs/benchmarks-history.rst``).
        read_many: read up to this many records per step (``read_up_to`` +
            batched ``parse_example`` + ``enqueue_many``); 0 reads one. None
            reads one, or with ``"auto"`` readers, no ``parse_fn`` and raw
            images, about 1 MiB of records (16 to 64; none for records over
            64 KiB): small records cost a session step each otherwise.
            ``"batch"``: each read is a whole batch, queued as it is (the
            fastest; no shuffle: a batch is one reader's records of one file in
            order, a file's last batch smaller; the batch dimension is None;
            ``docs/benchmarks-history.rst``).
        capacity: batch queue capacity; by default about 64 MiB of images
            (:data:`~queuekit.pipelines.batching.QUEUE_BYTES`), at least two batches.
        min_after_dequeue: with ``shuffle``; default half the capacity.
        allow_smaller_final_batch: default True when ``num_epochs`` is set, so
            no record is lost.
        normalize: float32 ``image / 255 - 0.5`` (the seed's), after batching;
            False gives uint8.
        decode: how a record becomes an image, a :class:`~queuekit.Decode`
            (its schema, resize, crop; by default the layout is recognised from
            the first record).
        parse_fn: instead of a schema, your function from a serialized record
            (a scalar string; a vector of them with ``read_many``) to a dict of
            tensors of fixed shapes; ``image`` is normalised if it is uint8.
        compression: ``"auto"`` reads GZIP/ZLIB files (``TFRecordOptions``)
            from their first bytes; ``""``, ``"GZIP"``, ``"ZLIB"`` insist.
        check_framing: walk every file's record headers first (12 bytes read per
            record), so a file cut short is an error, not a silently short epoch.
        max_readers: with ``num_readers="auto"``.
        source: where this worker's files come from on a cluster: its share, a
            :class:`~queuekit.cluster.Shard` (``(index, count)`` for every
            ``count``-th file from ``index``), or a work queue on a parameter
            server, a :class:`~queuekit.cluster.WorkQueueInput` (or its device,
            ``"/job:ps/task:0"``; a ``parse_fn`` must then give one element per
            record read).
        name: name scope.

    Batches are made ready ahead of the step (2 of them) with ``num_readers="auto"``
    where the batch is normalised (not a ``parse_fn``'s); :func:`~queuekit.prefetched`
    sets how many.

    The keywords of earlier versions still work, with a ``DeprecationWarning``:
    ``schema``, ``image_shape``, ``image_size``, ``dct_method``, ``random_crop``
    (now ``decode=Decode(...)``), ``shard``, ``work_queue``, ``shard_by``,
    ``lost_after_secs``, ``on_lost`` (now ``source=``) and ``prefetch`` (now
    :func:`~queuekit.prefetched`).

    On a cluster the input is pinned to this worker (:func:`~queuekit.worker_inputs`)
    and, unless ``read_many`` or ``parse_fn`` is given, reads
    :data:`~queuekit.cluster.inputs.REMOTE_READ_MANY` records per step
    (:func:`~queuekit.pipelines.batching.records_per_read` decides).

    Raises:
        InputNotFound: a file, glob or directory matches nothing (at build time).
        DatasetError: no records, an unknown layout, mixed compressions.
        CorruptRecordError: a file's framing is broken (``check_framing``).
    """
    given = spelled("tfrecord_batches", decode, source, earlier)
    shard, work_queue = _split_source(given.source)
    num_readers = default_readers(num_readers, parse_fn, work_queue, num_epochs)
    records_per_read(read_many, num_readers)  # a bad read_many is an error before any I/O
    opts = Batching(batch_size, num_epochs, shuffle, seed, num_readers, num_threads, capacity,
                    min_after_dequeue, allow_smaller_final_batch, normalize, max_readers,
                    work_queue, given.prefetch)
    files, record_shard = expand_files(files), None
    if shard is not None:
        from queuekit.cluster.inputs import shard_files
        files, record_shard = shard_files(files, shard)
    if record_shard and parse_fn is not None and not read_many:
        raise ValueError("Shard(..., by='record') with parse_fn needs read_many (parse_fn then "
                         "gets a vector of records, the shard's share of each read)")
    device = input_device()  # once: on a cluster each call adds a probe op to the graph
    kind = _compression(files, compression, walked=check_framing)
    if check_framing:
        check_files(files)
    raw_bytes, encoded = None, False
    if parse_fn is not None:
        if given.decode != Decode():
            raise ValueError("give decode (or schema) or parse_fn, not both")
        if not any(first_record(path) for path in files):  # as a schema's look at record 0
            raise DatasetError(f"no records in {', '.join(files)}")

        def parse(serialized, _keys):
            return parse_fn(serialized)
    else:
        layout = record_layout(files, given.decode.image_shape, given.decode.schema,
                               given.decode.options(seed))
        raw_bytes = layout.image_bytes if layout.fmt == "raw" else None
        encoded = raw_bytes is None

        def parse(serialized, keys):
            return parse_records(serialized, keys, layout, many=bool(read_many))

    remote = parse_fn is None and bool(record_shard or device)
    read_many = records_per_read(read_many, num_readers, raw_bytes=raw_bytes, encoded=encoded,
                                 remote=remote)
    raw_many = bool(read_many) and raw_bytes is not None and parse_fn is None and not remote
    opts = dataclasses.replace(opts, one_reader=one_tuned_reader(parse_fn, read_many),
                               max_readers=auto_max_readers(max_readers, raw_many=raw_many))

    def read(filename_queue):
        reader = _reader(kind)

        def parsed(keys, serialized):
            tensors = parse(serialized, keys)
            if work_queue:  # the session counts each file's records out of the batch queue
                from queuekit.cluster.inputs import file_of
                tensors = dict(tensors, **{FILE_KEY: file_of(keys)})
            return tensors

        count = read_count(read_many, batch_size)

        def next_read(up_to=None):
            if up_to is not None:  # a resumed runner's skipping read (resume.graph.reads)
                return reader.read_up_to(filename_queue, up_to)
            return _records(reader, filename_queue, count, record_shard)

        return next_read, parsed

    batch = file_batches(files, read, opts, read_many=read_many,
                         name=name or "tfrecord_batches", device=device)
    tuned = resolve_count("num_readers", num_readers, opts.max_readers)[1]
    if tuned and (encoded and read_many or opts.one_reader):
        mark_decoding()  # each record costs a decode, or a parse_fn: every thread starts
    return batch


def _split_source(source) -> tuple[Shard | None, WorkQueueInput | None]:
    """(Shard or None, WorkQueueInput or None) of a builder's source."""
    if source is None:
        return None, None
    from queuekit.cluster.inputs import Shard
    return (source, None) if isinstance(source, Shard) else (None, source)


def _records(reader, filename_queue, read_many, record_shard):
    """(keys, serialized) of one read: one record, or up to ``read_many`` of this shard's."""
    if not read_many:
        return reader.read(filename_queue)
    keys, serialized = reader.read_up_to(filename_queue, read_many)
    if record_shard:
        from queuekit.cluster.inputs import keep_shard
        mine = keep_shard(keys, record_shard)
        keys, serialized = rows_where(keys, mine), rows_where(serialized, mine)
    return keys, serialized
