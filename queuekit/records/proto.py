"""``tf.train.Example`` bytes to its features, without TensorFlow or protobuf.

The reading half of :mod:`queuekit.records.encode`: ``export`` and
``inspect`` read records with no TensorFlow loaded (3.5 s and 500 MB of a
small run). The wire format is protobuf's: an ``Example`` holds ``Features``
(field 1), a map of name to ``Feature`` (field 1, entries of key 1 and value
2); a ``Feature`` is one of ``bytes_list`` (1), ``float_list`` (2) or
``int64_list`` (3), each a repeated field 1, packed or not. Unknown fields are
skipped, as protobuf does: a ``SequenceExample`` reads as its context (its
field 1, also ``Features``); :func:`feature_lists` reads its field 2,
``FeatureLists``: a map of name to ``FeatureList`` (repeated ``Feature``, field 1).
"""

from __future__ import annotations

import struct

_KINDS = {1: "bytes", 2: "float", 3: "int64"}


def parse_example(data: bytes) -> dict[str, tuple[str, list]]:
    """Feature name -> (``"bytes"`` | ``"float"`` | ``"int64"`` | ``"empty"``, values).

    Raises:
        ValueError: the bytes are not a protobuf message of this shape.
    """
    features: dict[str, tuple[str, list]] = {}
    for field, value in _fields(data):
        if field == 1:
            for key, feature in _map_entries(_bytes(value)):
                features[key] = _feature(feature)  # a map: the last entry of a key wins
    return features


def feature_value(feature):
    """(type name, list of values) of a feature: what :func:`parse_example` gives, or a
    ``tf.train.Feature``."""
    if isinstance(feature, tuple):
        return feature
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


def feature_lists(data: bytes) -> dict[str, list[tuple[str, list]]]:
    """A ``SequenceExample``'s feature lists: name -> each step's (kind, values); empty
    for an ``Example`` (which has no field 2).

    Raises:
        ValueError: the bytes are not a protobuf message of this shape.
    """
    lists: dict[str, list[tuple[str, list]]] = {}
    for field, value in _fields(data):
        if field == 2:
            for key, feature_list in _map_entries(_bytes(value)):
                lists[key] = [_feature(_bytes(v)) for f, v in _fields(feature_list) if f == 1]
    return lists


def _map_entries(data: bytes):
    """(key, value bytes) of a protobuf ``map<string, message>`` (entries: field 1)."""
    for entry_field, entry in _fields(data):
        if entry_field != 1:
            continue
        key, value = "", b""
        for f, v in _fields(_bytes(entry)):
            if f == 1:
                key = _bytes(v).decode("utf-8")
            elif f == 2:
                value = _bytes(v)
        yield key, value


def _feature(data: bytes) -> tuple[str, list]:
    kind, values = "empty", []  # type: tuple[str, list]
    for field, value in _fields(data):
        if field not in _KINDS:
            continue
        kind, values = _KINDS[field], []  # a oneof: the last one set wins
        for f, v in _fields(_bytes(value)):
            if f != 1:
                continue
            values += _values(kind, v)
    return kind, values


def _values(kind: str, value) -> list:
    if kind == "bytes":
        return [_bytes(value)]
    if kind == "float":
        if isinstance(value, bytes):  # packed
            if len(value) % 4:
                raise ValueError("a packed float list of a length not a multiple of 4")
            return list(struct.unpack(f"<{len(value) // 4}f", value))
        if isinstance(value, tuple) and value[0] == 5:
            return [struct.unpack("<f", value[1])[0]]
        raise ValueError("a float list value of the wrong wire type")
    if isinstance(value, bytes):  # packed int64
        out, pos = [], 0
        while pos < len(value):
            n, pos = _varint(value, pos)
            out.append(_signed(n))
        return out
    if isinstance(value, int):
        return [_signed(value)]
    raise ValueError("an int64 list value of the wrong wire type")


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _bytes(value) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("a length-delimited field expected")
    return value


def _fields(data: bytes):
    """(field number, value) of each field: an int (varint), bytes (length-delimited), or
    (wire type, raw bytes) for fixed64/fixed32."""
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos)
            yield field, value
        elif wire == 2:
            n, pos = _varint(data, pos)
            if pos + n > end:
                raise ValueError("a length-delimited field runs past the end")
            yield field, data[pos:pos + n]
            pos += n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ValueError("a fixed-size field runs past the end")
            yield field, (wire, data[pos:pos + size])
            pos += size
        else:
            raise ValueError(f"wire type {wire} (groups are not part of an Example)")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("a varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("a varint longer than 10 bytes")
