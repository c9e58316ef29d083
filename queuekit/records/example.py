"""Image records as ``tf.train.Example`` bytes: decoding any known layout to pixels and label.

queuekit's record format: the seed script's ``label`` (int64) and ``img_raw``
(raw RGB bytes), plus self-describing features its parser ignores:
``height``, ``width``, ``channels``, ``format`` (raw/jpeg/png),
``label_text``, ``filename``. Files with only ``label`` and ``img_raw`` are
seed files and decode as 256x256x3 raw. :func:`decode_example` decodes every
layout of :mod:`queuekit.records.schema`.

The encoder lives in :mod:`queuekit.records.encode` (plain Python, no
TensorFlow: ``make``'s worker processes use it); this module decodes.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
from PIL import Image

from queuekit.errors import BadRecordError
from queuekit.records.encode import FORMATS, encode_example, make_example
from queuekit.records.proto import feature_value, first_value, parse_example
from queuekit.records.schema import (
    SEED_SHAPE,
    detect,
    how_to_declare,
    normalise_format,
    record_shape,
    resolve,
)

__all__ = ["FORMATS", "SEED_SHAPE", "Decoded", "decode_example", "encode_example",
           "feature_value", "first_value", "make_example", "record_shape"]


@dataclasses.dataclass
class Decoded:
    """One record as Python values."""

    label: int | None
    image: np.ndarray
    label_text: str | None
    filename: str | None
    fmt: str


def decode_example(data: bytes, *, where: str, schema=None) -> Decoded:
    """Decode one serialized record to pixels and label (0-based: the schema's offset removed).

    Args:
        data: the serialized ``tf.train.Example``.
        where: file and record index, for errors.
        schema: a :class:`~queuekit.RecordSchema` or preset name; None or
            ``"auto"`` picks the preset from the record's features.

    Raises:
        BadRecordError: naming ``where`` (file and record index) and what was expected.
    """
    try:
        feats = parse_example(data)
    except ValueError as e:
        raise BadRecordError(f"{where}: not a tf.train.Example ({e})") from e
    chosen = resolve(schema) or detect(feats)
    if chosen is None:
        raise BadRecordError(f"{where}: not a layout queuekit knows ({how_to_declare(feats)})")

    def one(name, default=None):
        return None if name is None else first_value(feats, name, default)

    img = one(chosen.image)
    if img is None:
        raise BadRecordError(f"{where}: no {chosen.image!r} feature for the "
                             f"{chosen.describe()} (features: {sorted(feats)})")
    fmt = normalise_format(one(chosen.format_key), chosen.encoding)
    label = one(chosen.label)
    text = one(chosen.extras.get("label_text", (None,))[0])
    name = one(chosen.extras.get("filename", (None,))[0])
    if fmt == "raw":
        h, w, c = record_shape(feats, chosen)
        if min(h, w, c) < 1:
            raise BadRecordError(f"{where}: invalid image shape {h}x{w}x{c} (height, width "
                                 f"and channels must be positive)")
        if len(img) != h * w * c:
            raise BadRecordError(f"{where}: {chosen.image} has {len(img)} bytes, expected "
                                 f"{h * w * c} for a {h}x{w}x{c} raw image")
        image = np.frombuffer(img, np.uint8).reshape(h, w, c)
    else:
        try:
            with Image.open(io.BytesIO(img)) as im:
                image = np.asarray(im.convert("RGB"))
        except Exception as e:  # noqa: BLE001 - Pillow's many decode errors
            kind = "an image" if fmt == "any" else f"a valid {fmt} image"
            raise BadRecordError(f"{where}: {chosen.image} is not {kind} ({e})") from e
    return Decoded(None if label is None else int(label) - chosen.label_offset, image,
                   None if text is None else text.decode("utf-8", "surrogateescape"),
                   None if name is None else name.decode("utf-8", "surrogateescape"),
                   "jpeg" if fmt == "any" else fmt)
