"""``image_folder_batches``: batches read straight from a class-per-folder image tree, an
ordinary TF1 queue-runner graph (``slice_input_producer``-style, with the input position)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import tensorflow as tf

from queuekit.pipelines.batching import (
    Batching,
    capacity_for,
    keeps_last_batch,
    make_batch,
    mark_tuned,
    quiet_deprecations,
    ready_count,
    resolve_count,
    shuffle_sizes,
)
from queuekit.pipelines.decode import image_size_pair, resized
from queuekit.pipelines.delivery import deliver
from queuekit.pipelines.options import spelled
from queuekit.pipelines.placement import input_device, pinned
from queuekit.records.folder import ImageFolder, scan_image_folder
from queuekit.resume.graph import POSITION_KEY, epoch_files, reads

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queuekit.pipelines.options import EarlierPrefetch

_v1 = tf.compat.v1
TF_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


def image_folder_batches(source, *, image_size=(256, 256), batch_size: int = 32,
                         num_epochs: int | None = None, shuffle: bool = False,
                         seed: int | None = None, num_threads: int | str = 1,
                         capacity: int | None = None, normalize: bool = True,
                         max_threads: int | None = None,
                         allow_smaller_final_batch: bool | None = None,
                         name: str | None = None,
                         **earlier: Unpack[EarlierPrefetch]) -> dict[str, tf.Tensor]:
    """Batches read straight from a class-per-folder image tree.

    ``slice_input_producer`` over the paths and labels of
    :func:`~queuekit.scan_image_folder`, ``read_file``, ``decode_image`` with 3
    channels (first frame of animations), resize to ``image_size`` = (height,
    width). Only formats TensorFlow decodes are listed (jpg, png, gif, bmp);
    an alpha channel is dropped, not composited (``make`` composites it).
    Returns ``image``, ``label`` and ``filename``. ``num_threads="auto"`` builds
    ``max_threads`` (default: 8, or the cores up to 16) and lets the session's
    tuner keep only as many running as raise the rate. ``allow_smaller_final_batch``
    and prefetch (:func:`~queuekit.prefetched`): as in :func:`tfrecord_batches` (by default
    2 batches made ready with ``num_threads="auto"``); ``prefetch=`` of earlier versions
    still works, with a ``DeprecationWarning``.
    """
    prefetch = spelled("image_folder_batches", None, None, earlier,
                       accepts=("prefetch",)).prefetch
    Batching(batch_size=batch_size, prefetch=prefetch)  # checks them
    prefetch = ready_count(prefetch, num_threads)
    num_threads, tuned = resolve_count("num_threads", num_threads, max_threads)
    folder = source if isinstance(source, ImageFolder) else scan_image_folder(
        source, extensions=TF_IMAGE_EXTENSIONS)
    h, w = image_size_pair(image_size)
    capacity = capacity_for(capacity, batch_size, h * w * 3)
    with quiet_deprecations(), pinned(input_device()), \
            tf.name_scope(name or "image_folder_batches"):
        # The producer carries each image's index (for its label); its name is the record.
        queue, position = epoch_files(
            folder.paths, num_epochs, shuffle, seed, items=[b"%d" % i for i in range(
                len(folder.paths))], position_name=_v1.get_default_graph().get_name_scope())
        # As bytes: a name that is not UTF-8 is kept, not a UnicodeEncodeError.
        paths = tf.constant([os.fsencode(p) for p in folder.paths])

        def next_image():
            index = tf.strings.to_number(queue.dequeue(), tf.int32)
            return tf.strings.join([tf.gather(paths, index), ":0"]), index

        key, index = reads(position, next_image, many=False)
        path = tf.gather(paths, index)
        label = tf.gather(tf.constant(folder.labels, tf.int32), index)
        contents = tf.io.read_file(path)
        # decode_image's own error does not say which file; check the magic bytes first.
        known = tf.reduce_any(tf.stack([
            tf.equal(tf.strings.substr(contents, 0, len(magic)), magic)
            for magic in (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM")]))
        check = tf.debugging.Assert(known, ["not a JPEG, PNG, GIF or BMP image:", path])
        with tf.control_dependencies([check]):
            image = tf.io.decode_image(contents, channels=3, expand_animations=False)
        image = resized(image, (h, w))
        image.set_shape([h, w, 3])
        tensors = {"image": image, "label": label, POSITION_KEY: key,
                   "filename": tf.strings.regex_replace(
                       path, "^" + _regex_escape(folder.root.rstrip(os.sep) + os.sep), "")}
        if shuffle:
            capacity, min_after = shuffle_sizes(capacity, None, batch_size)
        else:
            min_after = None
        batch = make_batch([tensors], batch_size=batch_size, shuffle=shuffle, seed=seed,
                           capacity=capacity, min_after_dequeue=min_after,
                           allow_smaller=keeps_last_batch(allow_smaller_final_batch, num_epochs),
                           enqueue_many=False,
                           num_threads=num_threads)
        if tuned:
            mark_tuned()
        return deliver(batch, normalize=normalize, prefetch=prefetch, position=position)


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in r".^$*+?{}[]\|()" else c for c in text)
