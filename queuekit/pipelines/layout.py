"""What a record holds and how to parse it: the one parse shared by the builders and ``bench``.

A :class:`RecordLayout` is read from the first record of the files (queuekit's
self-describing features, or the seed's ``label`` + ``img_raw``), and
:func:`parse_records` turns serialized records into a uint8 image, an int32
label and the optional string features, checking every image against the
declared shape.
"""

from __future__ import annotations

import dataclasses
import functools

import tensorflow as tf

from queuekit.errors import DatasetError
from queuekit.records.example import SEED_SHAPE, first_value
from queuekit.records.tfrecord import Record, scan_records, what_it_is

_EXTRA_STRING_FEATURES = ("label_text", "filename")


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """The image shape and encoding of a set of TFRecord files, and their optional features.

    Attributes:
        shape: (height, width, channels) of every image.
        fmt: ``raw``, ``jpeg`` or ``png``: how ``img_raw`` holds the pixels.
        extras: optional string features present (``label_text``, ``filename``).
    """

    shape: tuple[int, int, int]
    fmt: str = "raw"
    extras: tuple[str, ...] = ()

    @property
    def image_bytes(self) -> int:
        """Bytes of one decoded uint8 image."""
        h, w, c = self.shape
        return h * w * c


def record_layout(files, image_shape=None) -> RecordLayout:
    """The :class:`RecordLayout` of ``files``, from their first record.

    Args:
        files: a list of TFRecord paths (already expanded).
        image_shape: (H, W, C) of seed files, which do not say (default 256x256x3).

    Raises:
        DatasetError: the files hold no records, or the first has no ``img_raw``.
    """
    for path in files:
        for item in scan_records(path):
            if not isinstance(item, Record):
                break  # corrupt at the start: the reader thread will report it
            try:
                feats = tf.train.Example.FromString(item.data).features.feature
            except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, and others
                raise DatasetError(f"{path}: record 0 is not a tf.train.Example ({e})") from e
            one = functools.partial(first_value, feats)

            if "img_raw" not in feats:
                raise DatasetError(f"{path}: record 0 has no 'img_raw' feature "
                                   f"(features: {sorted(feats)})")
            if "height" in feats:
                shape = (int(one("height", 0)), int(one("width", 0)), int(one("channels", 3)))
            else:
                shape = tuple(image_shape or SEED_SHAPE)  # a seed file: label + img_raw only
            fmt = one("format", b"raw").decode()
            extras = tuple(n for n in _EXTRA_STRING_FEATURES if n in feats)
            return RecordLayout(shape, fmt, extras)
    hints = [f"{p} looks {what}" for p in files if (what := what_it_is(p))]
    raise DatasetError(f"no records in {', '.join(files)}"
                       + (f" ({'; '.join(hints)})" if hints else ""))


def parse_records(serialized: tf.Tensor, keys: tf.Tensor, layout: RecordLayout, *,
                  many: bool = False) -> dict[str, tf.Tensor]:
    """``image`` (uint8 [H, W, C], or [n, H, W, C] with ``many``), ``label`` (int32), extras.

    ``keys`` are the reader's ``file:index`` keys, used to name a record whose
    image does not match the layout.
    """
    spec = {"label": tf.io.FixedLenFeature([], tf.int64),
            "img_raw": tf.io.FixedLenFeature([], tf.string)}
    for name in layout.extras:
        spec[name] = tf.io.FixedLenFeature([], tf.string, default_value="")
    if not many:
        feats = tf.io.parse_single_example(serialized, spec)
        image = _decode(feats["img_raw"], keys, layout)
    else:
        feats = tf.io.parse_example(serialized, spec)
        if layout.fmt == "raw":
            image = _decode_raw_many(feats["img_raw"], keys, layout.shape)
        else:
            image = tf.map_fn(lambda kv: _decode(kv[1], kv[0], layout),
                              (keys, feats["img_raw"]), fn_output_signature=tf.uint8)
    out = {"image": image, "label": tf.cast(feats["label"], tf.int32)}
    for name in layout.extras:
        out[name] = feats[name]
    return out


def _decode(img_raw, key, layout: RecordLayout):
    """uint8 [H, W, C] from one record's bytes, checked against the declared shape."""
    h, w, c = shape = layout.shape
    fmt = layout.fmt
    if fmt == "raw":
        expected = h * w * c
        length = tf.strings.length(img_raw)
        check = tf.debugging.Assert(tf.equal(length, expected), [
            (f"img_raw size mismatch: expected {expected} bytes for a {h}x{w}x{c} raw image; "
             f"record (file:byte offset) and actual size:"), key, length])
        with tf.control_dependencies([check]):
            return tf.reshape(tf.io.decode_raw(img_raw, tf.uint8), shape)
    image = tf.io.decode_image(img_raw, channels=c, expand_animations=False)
    got = tf.shape(image)
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(got, shape)), [
        f"decoded {fmt} image is not {h}x{w}x{c}; record (file:byte offset) and decoded "
        f"shape:",
        key, got])
    with tf.control_dependencies([check]):
        return tf.ensure_shape(tf.identity(image), shape)


def _decode_raw_many(img_raw, keys, shape):
    h, w, c = shape
    expected = h * w * c
    lengths = tf.strings.length(img_raw)
    bad = tf.not_equal(lengths, expected)
    check = tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(bad)),
        [(f"img_raw size mismatch: expected {expected} bytes for a {h}x{w}x{c} raw image; "
          f"records (file:byte offset) and actual sizes:"), tf.boolean_mask(keys, bad),
         tf.boolean_mask(lengths, bad)], summarize=4)
    with tf.control_dependencies([check]):
        return tf.reshape(tf.io.decode_raw(img_raw, tf.uint8), [-1, h, w, c])
