"""queuekit's record format as ``tf.train.Example`` bytes: encoding and decoding.

Record format: the seed script's ``label`` (int64) and ``img_raw`` (raw RGB
bytes), plus self-describing features its parser ignores: ``height``,
``width``, ``channels``, ``format`` (raw/jpeg/png), ``label_text``,
``filename``. Files with only ``label`` and ``img_raw`` are seed files and
decode as 256x256x3 raw.

The encoder lives in :mod:`queuekit.records.encode` (plain Python, no
TensorFlow: ``make``'s worker processes use it); this module decodes.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import tensorflow as tf
from PIL import Image

from queuekit.errors import BadRecordError
from queuekit.records.encode import FORMATS, SEED_SHAPE, encode_example, make_example

__all__ = ["FORMATS", "SEED_SHAPE", "Decoded", "decode_example", "encode_example",
           "feature_value", "first_value", "make_example"]


@dataclasses.dataclass
class Decoded:
    """One record as Python values."""

    label: int | None
    image: np.ndarray
    label_text: str | None
    filename: str | None
    fmt: str


def feature_value(feature):
    """(type name, list of values) of a ``tf.train.Feature``."""
    kind = feature.WhichOneof("kind")
    if kind is None:
        return "empty", []
    return {"int64_list": "int64", "bytes_list": "bytes", "float_list": "float"}[kind], list(
        getattr(feature, kind).value)


def first_value(feats, name: str, default=None):
    """The first value of feature ``name`` in a features map, or ``default``."""
    if name not in feats:
        return default
    values = feature_value(feats[name])[1]
    return values[0] if values else default


def decode_example(data: bytes, *, where: str) -> Decoded:
    """Decode one serialized record (queuekit or seed format) to pixels and label.

    Raises:
        BadRecordError: naming ``where`` (file and record index) and what was expected.
    """
    try:
        example = tf.train.Example.FromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise BadRecordError(f"{where}: not a tf.train.Example ({e})") from e
    feats = example.features.feature

    def one(name, default=None):
        return first_value(feats, name, default)

    img = one("img_raw")
    if img is None:
        raise BadRecordError(f"{where}: no 'img_raw' feature (features: {sorted(feats)})")
    fmt = one("format", b"raw").decode()
    label = one("label")
    text = one("label_text")
    name = one("filename")
    if fmt == "raw":
        shape = (int(one("height", SEED_SHAPE[0])), int(one("width", SEED_SHAPE[1])),
                 int(one("channels", SEED_SHAPE[2])))
        if min(shape) < 1:
            raise BadRecordError(f"{where}: invalid image shape {shape[0]}x{shape[1]}x"
                                 f"{shape[2]} (height, width and channels must be positive)")
        expected = shape[0] * shape[1] * shape[2]
        if len(img) != expected:
            raise BadRecordError(f"{where}: img_raw has {len(img)} bytes, expected {expected} "
                               f"for a {shape[0]}x{shape[1]}x{shape[2]} raw image")
        image = np.frombuffer(img, np.uint8).reshape(shape)
    elif fmt in ("jpeg", "png"):
        try:
            with Image.open(io.BytesIO(img)) as im:
                image = np.asarray(im.convert("RGB"))
        except Exception as e:  # noqa: BLE001 - Pillow's many decode errors
            raise BadRecordError(f"{where}: img_raw is not a valid {fmt} image ({e})") from e
    else:
        raise BadRecordError(f"{where}: unknown format {fmt!r}, expected one of {FORMATS}")
    return Decoded(None if label is None else int(label), image,
                   None if text is None else text.decode("utf-8", "surrogateescape"),
                   None if name is None else name.decode("utf-8", "surrogateescape"), fmt)
