"""Builders: TFRecords or an image folder -> batches, as ordinary TF1 queue runners.

The graphs are what a careful hand-written pipeline would be
(``string_input_producer`` -> ``TFRecordReader`` -> parse -> decode ->
``tf.train.batch``), with the defaults fixed: no record lost at the end of an
epoch, a bounded memory footprint, queues that carry uint8 (normalisation
happens after batching, 4x less memory traffic), and a clear error for a record
that does not match its declared shape.
"""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from queuekit.pipelines.layout import RecordLayout, parse_records, record_layout
from queuekit.records.files import check_files, expand_files
from queuekit.records.folder import ImageFolder, scan_image_folder

_v1 = tf.compat.v1
# Default queue memory: elements of the batch queue, in bytes of uint8 images.
QUEUE_BYTES = 64 * 2**20
# What tf.io.decode_image reads (first frame of animations).
TF_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


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


def _check_counts(**counts) -> None:
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")


def _capacity(capacity, batch_size, element_bytes, read_many):
    if capacity is not None:
        return int(capacity)
    by_bytes = QUEUE_BYTES // max(1, element_bytes)
    return int(max(2 * batch_size + (read_many or 0), min(by_bytes, 20_000)))


def _read(filename_queue, layout: RecordLayout, read_many):
    """One reader: a dict of tensors for one record, or for up to ``read_many`` records."""
    reader = _v1.TFRecordReader()
    if not read_many:
        key, serialized = reader.read(filename_queue)
        return parse_records(serialized, key, layout)
    keys, serialized = reader.read_up_to(filename_queue, read_many)
    return parse_records(serialized, keys, layout, many=True)


def _batch(tensors_list, *, batch_size, shuffle, seed, capacity, min_after_dequeue,
           allow_smaller, enqueue_many, num_threads):
    if len(tensors_list) == 1 and num_threads >= 1:
        (tensors,) = tensors_list
        if shuffle:
            return _v1.train.shuffle_batch(
                tensors, batch_size, capacity, min_after_dequeue, num_threads=num_threads,
                seed=seed, enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)
        return _v1.train.batch(tensors, batch_size, num_threads=num_threads, capacity=capacity,
                               enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)
    if shuffle:
        return _v1.train.shuffle_batch_join(
            tensors_list, batch_size, capacity, min_after_dequeue, seed=seed,
            enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)
    return _v1.train.batch_join(tensors_list, batch_size, capacity=capacity,
                                enqueue_many=enqueue_many, allow_smaller_final_batch=allow_smaller)


def _finish(batch, normalize):
    if normalize:
        batch["image"] = normalized(batch["image"])
    return batch


def normalized(image_uint8: tf.Tensor) -> tf.Tensor:
    """The seed's ``image * (1 / 255) - 0.5`` as float32, in one pass over the batch.

    ``Dequantize`` of the same bytes seen as quint8 computes ``min + x * (max
    - min) / 255``, which for min=-0.5, max=0.5 is the seed's formula bit for
    bit. Cast, multiply and subtract are three passes over a 25 MB float
    batch (32 x 256x256x3) on the step's critical path; this is one, and it
    made the fastest configurations about 1.3x faster on 2 cores (README,
    Benchmarks).
    """
    as_quint8 = tf.bitcast(image_uint8, tf.quint8)  # a view: same bytes, no copy
    return tf.quantization.dequantize(as_quint8, -0.5, 0.5, mode="MIN_COMBINED")


def _shuffle_sizes(capacity, min_after_dequeue, batch_size):
    if min_after_dequeue is None:
        min_after_dequeue = capacity // 2
    capacity = max(capacity, min_after_dequeue + batch_size)
    return capacity, int(min_after_dequeue)


def tfrecord_batches(files, *, batch_size: int = 32, num_epochs: int | None = None,
                     shuffle: bool = False, seed: int | None = None, num_readers: int = 1,
                     num_threads: int = 1, read_many: int | None = None,
                     capacity: int | None = None, min_after_dequeue: int | None = None,
                     allow_smaller_final_batch: bool | None = None,
                     image_shape=None, normalize: bool = True, check_framing: bool = True,
                     name: str | None = None) -> dict[str, tf.Tensor]:
    """Batches of ``image`` and ``label`` (and ``label_text``, ``filename`` when present).

    Build it inside a :class:`~queuekit.QueueSession` (or any TF1 graph) and run it.

    Args:
        files: a path, a glob, a directory, or a list of those.
        batch_size: records per batch.
        num_epochs: passes over the data; None repeats forever.
        shuffle: shuffle the file order and use a ``shuffle_batch`` queue.
        seed: seed of both shuffles.
        num_readers: parallel ``TFRecordReader`` ops (``batch_join``).
        num_threads: enqueue threads per reader.
        read_many: read up to this many records per step (``read_up_to`` +
            batched ``parse_example`` + ``enqueue_many``); None reads one.
        capacity: batch queue capacity; by default about 64 MiB of images
            (:data:`QUEUE_BYTES`), at least two batches.
        min_after_dequeue: with ``shuffle``; default half the capacity.
        allow_smaller_final_batch: default True when ``num_epochs`` is set, so
            no record is lost.
        image_shape: (H, W, C) of seed files, which do not say (default 256x256x3).
        normalize: float32 ``image / 255 - 0.5`` (the seed's); False gives uint8.
        check_framing: walk every file's record headers first (12 bytes read per
            record), so a file cut short is an error, not a silently short epoch.
        name: name scope.

    Raises:
        InputNotFound: a file, glob or directory matches nothing (at build time).
        DatasetError: the files hold no records, or no ``img_raw`` feature.
        CorruptRecordError: a file's framing is broken (``check_framing``).
    """
    _check_counts(batch_size=batch_size, num_readers=num_readers, num_threads=num_threads)
    files = expand_files(files)
    if check_framing:
        check_files(files)
    layout = record_layout(files, image_shape)
    if allow_smaller_final_batch is None:
        allow_smaller_final_batch = num_epochs is not None
    capacity = _capacity(capacity, batch_size, layout.image_bytes, read_many)
    if shuffle:
        capacity, min_after_dequeue = _shuffle_sizes(capacity, min_after_dequeue, batch_size)
    with quiet_deprecations(), tf.name_scope(name or "tfrecord_batches"):
        filename_queue = _v1.train.string_input_producer(
            files, num_epochs=num_epochs, shuffle=shuffle, seed=seed)
        readers = [_read(filename_queue, layout, read_many)
                   for _ in range(num_readers)]
        if len(readers) > 1:
            readers = readers * num_threads  # join: one thread per list entry
        batch = _batch(readers, batch_size=batch_size, shuffle=shuffle, seed=seed,
                       capacity=capacity, min_after_dequeue=min_after_dequeue,
                       allow_smaller=allow_smaller_final_batch, enqueue_many=bool(read_many),
                       num_threads=num_threads)
        return _finish(batch, normalize)


def image_folder_batches(source, *, image_size=(256, 256), batch_size: int = 32,
                         num_epochs: int | None = None, shuffle: bool = False,
                         seed: int | None = None, num_threads: int = 1,
                         capacity: int | None = None, normalize: bool = True,
                         name: str | None = None) -> dict[str, tf.Tensor]:
    """Batches read straight from a class-per-folder image tree.

    ``slice_input_producer`` over the paths and labels of
    :func:`~queuekit.scan_image_folder`, ``read_file``, ``decode_image`` with 3
    channels (first frame of animations), resize to ``image_size`` = (height,
    width). Only formats TensorFlow decodes are listed (jpg, png, gif, bmp);
    an alpha channel is dropped, not composited (``make`` composites it).
    Returns ``image``, ``label`` and ``filename``.
    """
    _check_counts(batch_size=batch_size, num_threads=num_threads)
    folder = source if isinstance(source, ImageFolder) else scan_image_folder(
        source, extensions=TF_IMAGE_EXTENSIONS)
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    capacity = _capacity(capacity, batch_size, h * w * 3, None)
    with quiet_deprecations(), tf.name_scope(name or "image_folder_batches"):
        path, label = _v1.train.slice_input_producer(
            [tf.constant(folder.paths), tf.constant(folder.labels, tf.int32)],
            num_epochs=num_epochs, shuffle=shuffle, seed=seed)
        contents = tf.io.read_file(path)
        # decode_image's own error does not say which file; check the magic bytes first.
        known = tf.reduce_any(tf.stack([
            tf.equal(tf.strings.substr(contents, 0, len(magic)), magic)
            for magic in (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM")]))
        check = tf.debugging.Assert(known, ["not a JPEG, PNG, GIF or BMP image:", path])
        with tf.control_dependencies([check]):
            image = tf.io.decode_image(contents, channels=3, expand_animations=False)
        image = tf.image.resize(image, [h, w], antialias=True)
        image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
        image.set_shape([h, w, 3])
        tensors = {"image": image, "label": label,
                   "filename": tf.strings.regex_replace(
                       path, "^" + _regex_escape(folder.root.rstrip(os.sep) + os.sep), "")}
        if shuffle:
            capacity, min_after = _shuffle_sizes(capacity, None, batch_size)
        else:
            min_after = None
        batch = _batch([tensors], batch_size=batch_size, shuffle=shuffle, seed=seed,
                       capacity=capacity, min_after_dequeue=min_after,
                       allow_smaller=num_epochs is not None, enqueue_many=False,
                       num_threads=num_threads)
        return _finish(batch, normalize)


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in r".^$*+?{}[]\|()" else c for c in text)
