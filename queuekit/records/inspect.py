"""A report on TFRecord files (``queuekit inspect``): records, features, labels, corruption."""

from __future__ import annotations

import collections
import dataclasses
import json
import os

from queuekit.records.files import expand_files
from queuekit.records.proto import feature_lists, feature_value, first_value, parse_example
from queuekit.records.schema import detect, normalise_format, record_shape
from queuekit.records.tfrecord import Corruption, compression_of, scan_records

_NOT_EXAMPLE = "not a tf.train.Example"
MAX_PARSED = 64 << 20  # larger records are CRC-checked as they stream by, not parsed
_TOO_LARGE = f"over {MAX_PARSED >> 20} MiB: CRC checked, not parsed"


def printable(text: str) -> str:
    """``text`` with control and undecodable characters escaped, safe for a terminal."""
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{ord(c) - 0xDC00:02x}"
    return c.encode("unicode_escape").decode("ascii")


@dataclasses.dataclass
class FileReport:
    path: str
    records: int
    bytes: int
    corrupt: list[Corruption]
    compression: str = ""  # "", "GZIP" or "ZLIB"


@dataclasses.dataclass
class InspectReport:
    """What :func:`inspect_tfrecords` found."""

    files: list[FileReport]
    features: dict[str, dict]  # name -> {"type": ..., "lengths": [...], "count": n}
    shapes: dict[str, int]  # "HxWxC format" -> records
    labels: dict[str, int]  # label (and label_text) -> records
    not_examples: int = 0  # records that are not a tf.train.Example
    schemas: dict[str, int] = dataclasses.field(default_factory=dict)  # layout -> records
    # A SequenceExample's per-step features: name -> {"type", "steps": [...], "count"}
    feature_lists: dict[str, dict] = dataclasses.field(default_factory=dict)
    sequence_examples: int = 0  # records with feature lists (their context is in features)

    @property
    def bad(self) -> bool:
        """Corrupt records, or records that are not Examples: ``inspect`` exits 1."""
        return bool(self.corrupt) or self.not_examples > 0

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def corrupt(self) -> list[tuple[str, Corruption]]:
        return [(f.path, c) for f in self.files for c in f.corrupt]

    def to_json(self) -> str:
        return json.dumps({
            "records": self.records,
            "files": [{"path": f.path, "records": f.records, "bytes": f.bytes,
                       "compression": f.compression,
                       "corrupt": [dataclasses.asdict(c) for c in f.corrupt]}
                      for f in self.files],
            "features": self.features, "shapes": self.shapes, "labels": self.labels,
            "not_examples": self.not_examples, "schemas": self.schemas,
            "feature_lists": self.feature_lists, "sequence_examples": self.sequence_examples,
        }, indent=2, ensure_ascii=True)

    def __str__(self) -> str:
        lines = [f"{f.path}: {f.records} records, {f.bytes:,} bytes"
                 + (f" ({f.compression})" if f.compression else "")
                 + (f", {len(f.corrupt)} corrupt" if f.corrupt else "") for f in self.files]
        if self.sequence_examples:
            lines.append(f"layout: SequenceExample ({self.sequence_examples} record(s)): a "
                         f"context and feature lists; a schema reads the context only: read "
                         f"them with parse_fn= and tf.io.parse_single_sequence_example "
                         f"(variable lengths are padded per batch; docs/datasets.rst)")
        else:
            lines.append("layout: " + (", ".join(f"{k}: {v}" for k, v in sorted(
                self.schemas.items())) or "none queuekit knows (pass "
                                          "decode=Decode(schema=) or parse_fn=)"))
        lines.append(("context: " if self.sequence_examples else "features: ") + ", ".join(
            f"{n} ({d['type']}{'' if d['lengths'] == [1] else ' x' + str(d['lengths'])})"
            for n, d in sorted(self.features.items())))
        if self.feature_lists:
            lines.append("feature lists: " + ", ".join(
                f"{n} ({d['type']}, {_range(d['steps'])} steps, in {d['count']} record(s))"
                for n, d in sorted(self.feature_lists.items())))
        lines.append("images: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.shapes.items())))
        lines.append("labels: " + ", ".join(f"{printable(k)}: {v}"
                                            for k, v in sorted(self.labels.items())))
        if self.not_examples:
            lines.append(f"NOT EXAMPLES: {self.not_examples} record(s) are not a "
                         f"tf.train.Example")
        for path, c in self.corrupt:
            lines.append(f"CORRUPT {path}: record {c.index} at byte offset {c.offset}: {c.reason}")
        lines.append(f"{self.records} records in {len(self.files)} file(s), "
                     f"{len(self.corrupt)} corrupt")
        return "\n".join(lines)


def inspect_tfrecords(paths) -> InspectReport:
    """Count records, list features, shapes and labels, and find every corrupt record."""
    files = expand_files(paths)
    features: dict[str, dict] = {}
    shapes: collections.Counter = collections.Counter()
    labels: collections.Counter = collections.Counter()
    schemas: collections.Counter = collections.Counter()
    lists: dict[str, dict] = {}
    sequences = 0
    reports = []
    for path in files:
        n, bad = 0, []
        for item in scan_records(path, max_data=MAX_PARSED):
            if isinstance(item, Corruption):
                bad.append(item)
                continue
            n += 1
            if item.length > MAX_PARSED:
                shapes[_TOO_LARGE] += 1  # checked, not parsed: memory stays bounded
                continue
            sequences += _tally(item.data, features, shapes, labels, schemas, lists)
        reports.append(FileReport(path, n, os.path.getsize(path), bad, compression_of(path)))
    for d in features.values():
        d["lengths"] = sorted(d["lengths"])
    for d in lists.values():
        d["steps"] = sorted(d["steps"])
    return InspectReport(reports, features, dict(shapes), dict(labels),
                         shapes.get(_NOT_EXAMPLE, 0), dict(schemas), lists, sequences)


def _range(values: list[int]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]} to {values[-1]}"


def _tally(data, features, shapes, labels, schemas, lists) -> bool:
    """Count one record; True when it is a SequenceExample (it has feature lists)."""
    try:
        feats = parse_example(data)
        steps = feature_lists(data)
    except ValueError:  # not an Example: count it as such
        shapes[_NOT_EXAMPLE] += 1
        return False
    for name, values in steps.items():
        kinds = {kind for kind, _ in values if kind != "empty"}
        d = lists.setdefault(name, {"type": "/".join(sorted(kinds)) or "empty",
                                    "steps": set(), "count": 0})
        d["steps"].add(len(values))
        d["count"] += 1
    for name, feature in feats.items():
        kind, values = feature_value(feature)
        d = features.setdefault(name, {"type": kind, "lengths": set(), "count": 0})
        d["lengths"].add(len(values))
        d["count"] += 1
    schema = detect(feats)
    if schema is None:
        return bool(steps)
    schemas[schema.name] += 1
    fmt = normalise_format(first_value(feats, schema.format_key) if schema.format_key
                           else None, schema.encoding)
    h, w, c = record_shape(feats, schema)
    said = schema.shape_keys is not None and schema.shape_keys[0] in feats
    shapes[f"{h}x{w}x{c} {fmt}" if said else f"{h}x{w}x{c} {fmt} ({schema.name} default)"] += 1
    label = first_value(feats, schema.label) if schema.label else None
    text_key = schema.extras.get("label_text", (None,))[0]
    text = first_value(feats, text_key) if text_key else None
    if label is not None:
        label -= schema.label_offset
        labels[f"{label} {text.decode('utf-8', 'replace')}" if text else str(label)] += 1
    return bool(steps)
