"""TFRecord files -> image folder (``queuekit export``)."""

from __future__ import annotations

import collections
import dataclasses
import os
import sys

from PIL import Image
from tqdm import tqdm

from queuekit.errors import CorruptRecordError, DatasetError
from queuekit.records.example import decode_example
from queuekit.records.files import expand_files, temp_beside
from queuekit.records.tfrecord import Corruption, scan_records

_EXPORT_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG"}


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
