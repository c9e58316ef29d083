"""TFRecord files -> image folder (``queuekit export``) and a report on them (``inspect``)."""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import sys

import tensorflow as tf
from PIL import Image
from tqdm import tqdm

from queuekit.errors import CorruptRecordError, DatasetError, InputNotFound
from queuekit.make import temp_beside
from queuekit.tfrecord import (
    Corruption,
    decode_example,
    feature_value,
    first_value,
    scan_records,
)

_EXPORT_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG"}


def expand_files(files) -> list[str]:
    """A path, a glob, a directory or a list of those -> the sorted matching files.

    Raises:
        InputNotFound: naming what matched nothing.
    """
    items = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not items:
        raise InputNotFound("no TFRecord files given")
    out: list[str] = []
    for item in items:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(p for p in glob.glob(os.path.join(glob.escape(item), "*"))
                           if os.path.isfile(p) and not p.endswith(".labels.txt")
                           and not os.path.basename(p).startswith("."))
            if not found:
                raise InputNotFound(f"no files in directory {item}")
        elif glob.has_magic(item):
            found = sorted(glob.glob(item))
            if not found:
                raise InputNotFound(f"no files match {item}")
        elif os.path.isfile(item):
            found = [item]
        else:
            raise InputNotFound(f"TFRecord file not found: {item}")
        out.extend(found)
    return out


@dataclasses.dataclass
class ExportReport:
    """What :func:`export_images` wrote."""

    count: int
    out_dir: str
    per_label: dict[str, int]

    def __str__(self) -> str:
        return f"exported {self.count} images in {len(self.per_label)} folders to {self.out_dir}"


def export_images(tfrecords, out_dir, *, format: str = "jpg",
                  progress: bool = True) -> ExportReport:
    """Write every record's image to ``out_dir/<label_text or label>/<index>.<ext>``.

    ``index`` counts records across all files in order. Each image is written
    to a temporary name and renamed, so no half-written image is left behind.

    Raises:
        CorruptRecordError: after exporting every record before the corruption,
            naming the file, record index and byte offset.
        DatasetError: a record that is not an image record.
    """
    ext = format.lower().lstrip(".")
    if ext not in _EXPORT_FORMATS:
        raise DatasetError(f"format must be jpg or png, not {format!r}")
    files = expand_files(tfrecords)
    os.makedirs(out_dir, exist_ok=True)
    per_label: collections.Counter = collections.Counter()
    count = 0
    with tqdm(unit="img", desc="export", disable=not progress, file=sys.stderr) as bar:
        for path in files:
            for item in scan_records(path):
                if isinstance(item, Corruption):
                    raise CorruptRecordError(path, item.index, item.offset, item.reason)
                rec = decode_example(item.data, where=f"{path}: record {item.index}")
                folder = _safe_name(rec.label_text or str(rec.label))
                dest_dir = os.path.join(out_dir, folder)
                os.makedirs(dest_dir, exist_ok=True)
                _save_atomic(rec.image, os.path.join(dest_dir, f"{count}.{ext}"),
                             _EXPORT_FORMATS[ext])
                per_label[folder] += 1
                count += 1
                bar.update()
    return ExportReport(count, os.fspath(out_dir), dict(per_label))


def _safe_name(name: str) -> str:
    bad = '<>:"/\\|?*\0'
    cleaned = "".join("_" if c in bad or ord(c) < 32 else c for c in name).strip(" .")
    return cleaned or "_"


def _save_atomic(pixels, dest: str, pil_format: str) -> None:
    tmp = temp_beside(dest)
    try:
        with open(tmp, "wb") as f:
            Image.fromarray(pixels, "RGB").save(f, pil_format, quality=95)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


@dataclasses.dataclass
class FileReport:
    path: str
    records: int
    bytes: int
    corrupt: list[Corruption]


@dataclasses.dataclass
class InspectReport:
    """What :func:`inspect_tfrecords` found."""

    files: list[FileReport]
    features: dict[str, dict]  # name -> {"type": ..., "lengths": [...], "count": n}
    shapes: dict[str, int]  # "HxWxC format" -> records
    labels: dict[str, int]  # label (and label_text) -> records

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
                       "corrupt": [dataclasses.asdict(c) for c in f.corrupt]}
                      for f in self.files],
            "features": self.features, "shapes": self.shapes, "labels": self.labels,
        }, indent=2, ensure_ascii=False)

    def __str__(self) -> str:
        lines = [f"{f.path}: {f.records} records, {f.bytes:,} bytes"
                 + (f", {len(f.corrupt)} corrupt" if f.corrupt else "") for f in self.files]
        lines.append("features: " + ", ".join(
            f"{n} ({d['type']}{'' if d['lengths'] == [1] else ' x' + str(d['lengths'])})"
            for n, d in sorted(self.features.items())))
        lines.append("images: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.shapes.items())))
        lines.append("labels: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.labels.items())))
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
    reports = []
    for path in files:
        n, bad = 0, []
        for item in scan_records(path):
            if isinstance(item, Corruption):
                bad.append(item)
                continue
            n += 1
            _tally(item.data, features, shapes, labels)
        reports.append(FileReport(path, n, os.path.getsize(path), bad))
    for d in features.values():
        d["lengths"] = sorted(d["lengths"])
    return InspectReport(reports, features, dict(shapes), dict(labels))


def _tally(data, features, shapes, labels) -> None:
    try:
        example = tf.train.Example.FromString(data)
    except Exception:  # noqa: BLE001 - not an Example: count it as such
        shapes["not a tf.train.Example"] += 1
        return
    feats = example.features.feature
    for name, feature in feats.items():
        kind, values = feature_value(feature)
        d = features.setdefault(name, {"type": kind, "lengths": set(), "count": 0})
        d["lengths"].add(len(values))
        d["count"] += 1

    def one(name):
        return first_value(feats, name)

    if "img_raw" in feats:
        fmt = (one("format") or b"raw").decode()
        h, w, c = one("height"), one("width"), one("channels")
        shapes[f"{h}x{w}x{c} {fmt}" if h else "256x256x3 raw (seed default)"] += 1
    label, text = one("label"), one("label_text")
    if label is not None:
        labels[f"{label} {text.decode('utf-8', 'replace')}" if text else str(label)] += 1
