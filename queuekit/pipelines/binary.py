"""Fixed-length binary records (CIFAR-10/100's ``.bin`` files) -> batches.

``FixedLengthRecordReader`` reads a file as a header, k records of
``record_bytes`` and a footer. A file of any other size has a cut or extra
tail, which that reader drops without a word (the original CIFAR-10 input
loses a truncated last record silently): here it is an error naming the file
before the graph runs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import tensorflow as tf

from queuekit.errors import DatasetError
from queuekit.pipelines.batching import (
    Batching,
    auto_max_readers,
    default_readers,
    file_batches,
    read_count,
    records_per_read,
)
from queuekit.pipelines.options import spelled
from queuekit.records.files import check_sizes, expand_files

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queuekit.pipelines.options import EarlierPrefetch

_v1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class FixedLengthLayout:
    """Label bytes followed by uint8 pixels, every record the same length.

    Attributes:
        image_shape: (height, width, channels) of the image returned (HWC).
        labels: output names of the label bytes, in order (CIFAR-100: coarse, fine).
        channels_first: the pixels are stored CHW (CIFAR's: all red, then green, blue).
        header_bytes: bytes to skip at the start of each file.
        footer_bytes: bytes to skip at the end of each file.
    """

    image_shape: tuple[int, int, int]
    labels: tuple[str, ...] = ("label",)
    channels_first: bool = True
    header_bytes: int = 0
    footer_bytes: int = 0

    @property
    def record_bytes(self) -> int:
        h, w, c = self.image_shape
        return len(self.labels) + h * w * c


CIFAR10 = FixedLengthLayout((32, 32, 3))
CIFAR100 = FixedLengthLayout((32, 32, 3), labels=("coarse_label", "label"))
FIXED_LENGTH_PRESETS = {"cifar10": CIFAR10, "cifar100": CIFAR100}


def fixed_length_batches(files, layout="cifar10", *, record_bytes: int | None = None,
                         header_bytes: int | None = None, footer_bytes: int | None = None,
                         parse_fn=None, batch_size: int = 32, num_epochs: int | None = None,
                         shuffle: bool = False, seed: int | None = None,
                         num_readers: int | str | None = None,
                         num_threads: int = 1, read_many: int | str | None = None,
                         capacity: int | None = None, min_after_dequeue: int | None = None,
                         allow_smaller_final_batch: bool | None = None,
                         normalize: bool = True, max_readers: int | None = None,
                         name: str | None = None, **earlier: Unpack[EarlierPrefetch]):
    """Batches of ``image`` (HWC) and ``label`` from fixed-length binary files (CIFAR-10's).

    Args:
        files: a path, a glob, a directory, or a list of those.
        layout: ``"cifar10"``, ``"cifar100"`` or a :class:`FixedLengthLayout`;
            ignored with ``parse_fn``.
        record_bytes, header_bytes, footer_bytes: the framing; by default the
            layout's. ``record_bytes`` is required with ``parse_fn``.
        parse_fn: your function from one record's bytes (a scalar string; a
            vector of them with ``read_many``) to a dict of fixed-shape tensors.
        The others: as in :func:`~queuekit.tfrecord_batches` (``prefetch=`` of earlier
        versions too, now :func:`~queuekit.prefetched`).

    Raises:
        InputNotFound: nothing matches ``files``.
        CorruptRecordError: a file's size is not header + k x record_bytes + footer.
        DatasetError: the files hold no records.
    """
    prefetch = spelled("fixed_length_batches", None, None, earlier,
                       accepts=("prefetch",)).prefetch
    num_readers = default_readers(num_readers, parse_fn, num_epochs=num_epochs)
    records_per_read(read_many, num_readers)  # a bad read_many is an error before any I/O
    opts = Batching(batch_size, num_epochs, shuffle, seed, num_readers, num_threads, capacity,
                    min_after_dequeue, allow_smaller_final_batch, normalize, max_readers,
                    prefetch=prefetch)
    if parse_fn is None:
        layout = _layout(layout)
        if record_bytes is not None and record_bytes != layout.record_bytes:
            raise ValueError(f"record_bytes={record_bytes} does not match the layout's "
                             f"{layout.record_bytes} (labels + image bytes)")
        record_bytes = layout.record_bytes
        header_bytes = layout.header_bytes if header_bytes is None else header_bytes
        footer_bytes = layout.footer_bytes if footer_bytes is None else footer_bytes
    elif record_bytes is None:
        raise ValueError("parse_fn needs record_bytes")
    header_bytes, footer_bytes = header_bytes or 0, footer_bytes or 0
    read_many = records_per_read(read_many, num_readers,
                                 raw_bytes=record_bytes if parse_fn is None else None)
    opts = dataclasses.replace(opts, max_readers=auto_max_readers(
        max_readers, raw_many=bool(read_many) and parse_fn is None))
    files = expand_files(files)
    if check_sizes(files, record_bytes, header_bytes, footer_bytes) == 0:
        raise DatasetError(f"no records in {', '.join(files)}")

    def read(filename_queue):
        reader = _v1.FixedLengthRecordReader(record_bytes, header_bytes=header_bytes,
                                             footer_bytes=footer_bytes)

        count = read_count(read_many, batch_size)

        def next_read(up_to=None):  # up_to: a resumed runner's skipping read
            if up_to is not None:
                return reader.read_up_to(filename_queue, up_to)
            return (reader.read_up_to(filename_queue, count) if count
                    else reader.read(filename_queue))

        return next_read, lambda keys, value: (
            parse_fn or (lambda v: parse_fixed(v, layout)))(value)

    return file_batches(files, read, opts, read_many=read_many,
                        fixed=(record_bytes, header_bytes, footer_bytes),
                        name=name or "fixed_length_batches")


def _layout(layout) -> FixedLengthLayout:
    if isinstance(layout, FixedLengthLayout):
        return layout
    if isinstance(layout, str) and layout in FIXED_LENGTH_PRESETS:
        return FIXED_LENGTH_PRESETS[layout]
    raise ValueError(f"layout must be one of {sorted(FIXED_LENGTH_PRESETS)} or a "
                     f"FixedLengthLayout, not {layout!r}")


def parse_fixed(value, layout: FixedLengthLayout) -> dict[str, tf.Tensor]:
    """``image`` uint8 [.., H, W, C] and int32 labels from records of ``layout`` (one or many)."""
    h, w, c = layout.image_shape
    n = len(layout.labels)
    data = tf.io.decode_raw(value, tf.uint8)  # [record_bytes], or [k, record_bytes]
    lead = data.shape[:-1].as_list()  # [] for one record, [None] for many
    pixels = data[..., n:]
    if layout.channels_first:
        image = tf.reshape(pixels, [-1, c, h, w])
        image = tf.transpose(image, [0, 2, 3, 1])
    else:
        image = tf.reshape(pixels, [-1, h, w, c])
    out = {"image": image if lead else image[0]}
    for i, label in enumerate(layout.labels):
        out[label] = tf.cast(data[..., i], tf.int32)
    return out
