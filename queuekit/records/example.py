"""queuekit's record format as ``tf.train.Example`` bytes: encoding and decoding.

Record format: the seed script's ``label`` (int64) and ``img_raw`` (raw RGB
bytes), plus self-describing features its parser ignores: ``height``,
``width``, ``channels``, ``format`` (raw/jpeg/png), ``label_text``,
``filename``. Files with only ``label`` and ``img_raw`` are seed files and
decode as 256x256x3 raw.

The encoder is plain Python (no protobuf, no TensorFlow): ``make``'s worker
processes use it.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import tensorflow as tf
from PIL import Image

from queuekit.errors import BadRecordError

SEED_SHAPE = (256, 256, 3)
FORMATS = ("raw", "jpeg", "png")


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # protobuf encodes a negative int64 as its 64-bit two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: dict[str, int | bytes]) -> bytes:
    """Serialize a ``tf.train.Example`` of single int64 or bytes features, without protobuf.

    ``make`` builds one record per image in its worker processes: writing the
    wire format directly avoids building protobuf objects and the copies they
    make of every image. Keys are written in sorted order, so the same
    features always give the same bytes.
    """
    entries = []
    for key in sorted(features):
        value = features[key]
        if isinstance(value, bytes):
            feature = _field(1, _field(1, value))  # Feature.bytes_list{value: [v]}
        else:  # Feature.int64_list{value: [v]}, packed
            feature = _field(3, _field(1, _varint(int(value))))
        entries.append(_field(1, _field(1, key.encode()) + _field(2, feature)))
    return _field(1, b"".join(entries))  # Example.features{feature: map entries}


def make_example(pixels_or_bytes: bytes, *, label: int, height: int, width: int,
                 channels: int = 3, fmt: str = "raw", label_text: str = "",
                 filename: str = "") -> bytes:
    """Serialize one record in queuekit's format (a superset of the seed's)."""
    return encode_example({
        "label": label, "img_raw": bytes(pixels_or_bytes), "height": height, "width": width,
        "channels": channels, "format": fmt.encode(),
        # surrogateescape: a name that is not UTF-8 on disk keeps its exact bytes.
        "label_text": label_text.encode("utf-8", "surrogateescape"),
        "filename": filename.encode("utf-8", "surrogateescape")})


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
