"""What a record holds and how to parse it: the one parse shared by the builders and ``bench``.

A :class:`RecordLayout` is a :class:`~queuekit.RecordSchema` (given, or
recognised from the first record's features) made concrete by that record:
the image shape the batch queue holds, the encoding, and which optional
features are there. :func:`parse_records` turns serialized records into a
uint8 image, an int32 label (0-based) and the optional features, checking
every image against the shape.
"""

from __future__ import annotations

import dataclasses
import io
import logging

import tensorflow as tf
from PIL import Image

from queuekit.errors import BadRecordError, DatasetError
from queuekit.pipelines.decode import DecodeOptions, check_raw, check_raw_many, decode_encoded
from queuekit.records.proto import feature_lists, first_value, parse_example
from queuekit.records.schema import (
    QUEUEKIT,
    RecordSchema,
    detect,
    how_to_declare,
    record_shape,
    resolve,
)
from queuekit.records.schema import normalise_format as _format
from queuekit.records.tfrecord import Record, scan_records, what_it_is

log = logging.getLogger("queuekit.pipelines")

_FEATURES = {
    "string": lambda: tf.io.FixedLenFeature([], tf.string, default_value=""),
    "int64": lambda: tf.io.FixedLenFeature([], tf.int64, default_value=0),
    "float": lambda: tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "var_float": lambda: tf.io.VarLenFeature(tf.float32),
    "var_int64": lambda: tf.io.VarLenFeature(tf.int64),
}


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """The image shape and encoding of a set of TFRecord files, and their optional features.

    Attributes:
        shape: (height, width, channels) of every image in the batch queue.
        fmt: ``raw``, ``jpeg``, ``png`` or ``any``: how the image feature holds the pixels.
        extras: (output name, feature, kind) of the optional features present.
        schema: the schema the files are read with.
        decode: how encoded images are decoded, cropped and resized.
    """

    shape: tuple[int, int, int]
    fmt: str = "raw"
    extras: tuple[tuple[str, str, str], ...] = ()
    schema: RecordSchema = QUEUEKIT
    decode: DecodeOptions = DecodeOptions()

    @property
    def image_bytes(self) -> int:
        """Bytes of one decoded uint8 image."""
        h, w, c = self.shape
        return h * w * c


def first_example(files):
    """(path, the features map of the first record) of ``files``.

    Raises:
        DatasetError: the files hold no records, or the first is not an Example.
    """
    for path in files:
        for item in scan_records(path):
            if not isinstance(item, Record):
                break  # corrupt at the start: the reader thread will report it
            try:
                feats, steps = parse_example(item.data), feature_lists(item.data)
            except ValueError as e:
                raise BadRecordError(f"{path}: record 0 is not a tf.train.Example ({e})") from e
            if steps:  # read as an Example, its feature lists would be dropped unsaid
                raise BadRecordError(
                    f"{path}: record 0 is a tf.train.SequenceExample (context "
                    f"{', '.join(sorted(feats)) or 'empty'}; feature lists "
                    f"{', '.join(sorted(steps))}): a schema reads Example features only. "
                    f"Pass parse_fn= with tf.io.parse_single_sequence_example; outputs of "
                    f"variable length are padded per batch (docs/datasets.rst)")
            return path, feats
    hints = [f"{p} looks {what}" for p in files if (what := what_it_is(p))]
    raise DatasetError(f"no records in {', '.join(files)}"
                       + (f" ({'; '.join(hints)})" if hints else ""))


def record_layout(files, image_shape=None, schema="auto",
                  decode: DecodeOptions | None = None) -> RecordLayout:
    """The :class:`RecordLayout` of ``files``, from their first record.

    Args:
        files: a list of TFRecord paths (already expanded).
        image_shape: (H, W, C) of raw records that do not say (default 256x256x3).
        schema: ``"auto"``, a preset name or a :class:`~queuekit.RecordSchema`.
        decode: :class:`DecodeOptions` for encoded images (``size`` sets the shape).

    Raises:
        DatasetError: no records, an unknown layout, or a first record without the
            schema's image feature.
    """
    decode = decode or DecodeOptions()
    path, feats = first_example(files)
    chosen = resolve(schema)
    if chosen is None:
        chosen = detect(feats)
        if chosen is None:
            raise BadRecordError(f"{path}: record 0 is not a layout queuekit knows "
                               f"({how_to_declare(feats)})")
        log.info("%s: read with the %s, detected from record 0; pass "
                 "decode=qk.Decode(schema=...) to choose another", path, chosen.describe())
    if chosen.image not in feats:
        raise BadRecordError(f"{path}: record 0 has no {chosen.image!r} feature for the "
                           f"{chosen.describe()} ({how_to_declare(feats)})")
    if chosen.label is not None and chosen.label not in feats:
        log.info("%s: record 0 has no %r label feature: the batches have no 'label' "
                 "(an unlabelled set)", path, chosen.label)
        chosen = chosen.replace(label=None)
    fmt = _format(first_value(feats, chosen.format_key) if chosen.format_key else None,
                  chosen.encoding)
    if fmt == "raw":
        shape = record_shape(feats, chosen, image_shape)
        if decode.size is not None and tuple(decode.size) != shape[:2]:
            raise DatasetError(f"{path}: raw {shape[0]}x{shape[1]} images are not resized; "
                               f"image_size is for encoded (JPEG, PNG) records")
    elif decode.size is not None:
        shape = (*decode.size, record_shape(feats, chosen, (0, 0, 3))[2])
    else:
        shape = _encoded_shape(path, feats, chosen)
    if decode.crop_area is not None:
        if fmt == "raw" or decode.size is None:
            raise DatasetError("random_crop needs encoded (JPEG, PNG) records and image_size")
        low, high = decode.crop_area
        if not 0 < low <= high <= 1:
            raise ValueError(f"random_crop must be (min, max) area fractions with "
                             f"0 < min <= max <= 1, not {decode.crop_area}")
    extras = tuple((out, key, kind) for out, (key, kind) in chosen.extras.items()
                   if key in feats)
    return RecordLayout(shape, fmt, extras, chosen, decode)


def _encoded_shape(path, feats, schema):
    """The first record's decoded shape: what its image is, not what its features claim."""
    channels = record_shape(feats, schema, (0, 0, 3))[2]
    try:
        with Image.open(io.BytesIO(first_value(feats, schema.image))) as im:
            return (im.height, im.width, channels)
    except Exception as e:  # noqa: BLE001 - Pillow's many errors: not an image
        raise BadRecordError(f"{path}: record 0's {schema.image!r} is not an image Pillow "
                           f"reads ({e})") from e


def parse_records(serialized: tf.Tensor, keys: tf.Tensor, layout: RecordLayout, *,
                  many: bool = False) -> dict[str, tf.Tensor]:
    """``image`` (uint8 [H, W, C], or [n, H, W, C] with ``many``), ``label`` (int32), extras.

    ``keys`` are the reader's ``file:index`` keys, used to name a record whose
    image does not match the layout.
    """
    schema = layout.schema
    spec = {schema.image: tf.io.FixedLenFeature([], tf.string)}
    if schema.label is not None:
        spec[schema.label] = tf.io.FixedLenFeature([], tf.int64)
    for _, key, kind in layout.extras:
        spec[key] = _FEATURES[kind]()
    if not many:
        feats = tf.io.parse_single_example(serialized, spec)
        image = _decode(feats[schema.image], keys, layout)
    else:
        feats = tf.io.parse_example(serialized, spec)
        if layout.fmt == "raw":
            image = check_raw_many(feats[schema.image], keys, layout.shape, schema.image)
        else:
            image = tf.map_fn(lambda kv: _decode(kv[1], kv[0], layout),
                              (keys, feats[schema.image]), fn_output_signature=tf.uint8)
    out = {"image": image}
    if schema.label is not None:
        out["label"] = tf.cast(feats[schema.label] - schema.label_offset, tf.int32)
    for name, key, _ in layout.extras:
        out[name] = feats[key]
    return out


def _decode(contents, key, layout: RecordLayout):
    """uint8 [H, W, C] from one record's bytes, checked against the layout's shape."""
    if layout.fmt == "raw":
        return check_raw(contents, key, layout.shape, layout.schema.image)
    return decode_encoded(contents, key, layout.shape, layout.fmt, layout.decode)
