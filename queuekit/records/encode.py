"""queuekit's record format, encoded without protobuf or TensorFlow (``make``'s workers run it).

See :mod:`queuekit.records.example` for the features and for decoding.
"""

from __future__ import annotations

FORMATS = ("raw", "jpeg", "png")
# Layouts make writes: queuekit's, and Inception's build_image_data.py (Slim, Inception).
WRITE_SCHEMAS = ("queuekit", "inception")


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
                 filename: str = "", schema: str = "queuekit") -> bytes:
    """Serialize one record in queuekit's format (a superset of the seed's), or Inception's.

    ``schema="inception"`` writes the features of Inception's
    ``build_image_data.py``, label stored as ``label + 1`` (0 is its
    background class), so an unmodified Inception or Slim trainer reads it.
    """
    if schema == "inception":
        if fmt not in ("jpeg", "png"):
            raise ValueError(f"the inception layout holds JPEG or PNG bytes, not {fmt!r}")
        return encode_example({
            "image/height": height, "image/width": width, "image/colorspace": b"RGB",
            "image/channels": channels, "image/class/label": label + 1,
            "image/class/text": label_text.encode("utf-8", "surrogateescape"),
            "image/format": fmt.upper().encode(),
            "image/filename": filename.encode("utf-8", "surrogateescape"),
            "image/encoded": bytes(pixels_or_bytes)})
    if schema != "queuekit":
        raise ValueError(f"schema must be one of {WRITE_SCHEMAS}, not {schema!r}")
    return encode_example({
        "label": label, "img_raw": bytes(pixels_or_bytes), "height": height, "width": width,
        "channels": channels, "format": fmt.encode(),
        # surrogateescape: a name that is not UTF-8 on disk keeps its exact bytes.
        "label_text": label_text.encode("utf-8", "surrogateescape"),
        "filename": filename.encode("utf-8", "surrogateescape")})
