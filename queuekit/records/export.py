"""TFRecord files -> image folder (``queuekit export``)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import sys

from PIL import Image
from tqdm import tqdm

from queuekit.errors import CorruptRecordError, DatasetError, OutputExistsError
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


MANIFEST = ".queuekit-export.json"  # what an export wrote: an --overwrite removes just that
CLASSES = "classes.json"  # folder name -> label and label text
_NAME_BYTES = 200  # under every common file system's 255-byte name limit, room for a suffix


def export_images(tfrecords, out_dir, *, format: str = "jpg", overwrite: bool = False,
                  progress: bool = True) -> ExportReport:
    """Write every record's image to ``out_dir/<label folder>/<index>.<ext>``.

    ``index`` counts records across all files in order. The label folder is
    the label text (else the label) made safe for a file name; two labels
    never share a folder (``a/b`` and ``a_b`` get distinct names) and long ones
    are shortened within the name limit; ``classes.json`` maps each folder back
    to its label and text. Each image is written to a temporary name and
    renamed, so no half-written image is left behind.

    Args:
        overwrite: replace what a previous export wrote there (listed in its
            ``.queuekit-export.json``); a folder holding anything else is refused.

    Raises:
        OutputExistsError: ``out_dir`` is not empty and ``overwrite`` is False, or
            it holds files no export wrote.
        CorruptRecordError: after exporting every record before the corruption,
            naming the file, record index and byte offset.
        BadRecordError: a record that is not an image record.
    """
    ext = format.lower().lstrip(".")
    if ext not in _EXPORT_FORMATS:
        raise DatasetError(f"format must be jpg or png, not {format!r}")
    files = expand_files(tfrecords)
    out_dir = os.fspath(out_dir)
    _clear_previous(out_dir, overwrite)
    os.makedirs(out_dir, exist_ok=True)
    per_label: collections.Counter = collections.Counter()
    folders: dict[tuple, str] = {}  # (label, label text) -> folder name
    written: list[str] = []
    count = 0
    try:
        with tqdm(unit="img", desc="export", disable=not progress, file=sys.stderr) as bar:
            for path in files:
                for item in scan_records(path):
                    if isinstance(item, Corruption):
                        raise CorruptRecordError(path, item.index, item.offset, item.reason)
                    rec = decode_example(item.data, where=f"{path}: record {item.index}")
                    key = (rec.label, rec.label_text)
                    if key not in folders:
                        folders[key] = _unique(_safe_name(rec.label_text or str(rec.label)),
                                               set(folders.values()), rec.label)
                    folder = folders[key]
                    rel = os.path.join(folder, f"{count}.{ext}")
                    os.makedirs(os.path.join(out_dir, folder), exist_ok=True)
                    _save_atomic(rec.image, os.path.join(out_dir, rel), _EXPORT_FORMATS[ext])
                    written.append(rel)
                    per_label[folder] += 1
                    count += 1
                    bar.update()
    finally:
        # Also after a failure: the images written stay, and an --overwrite can find them.
        _write_json(os.path.join(out_dir, CLASSES), {
            folder: {"label": label, "label_text": text}
            for (label, text), folder in folders.items()})
        _write_json(os.path.join(out_dir, MANIFEST), {"files": written + [CLASSES]})
    return ExportReport(count, out_dir, dict(per_label))


def _clear_previous(out_dir: str, overwrite: bool) -> None:
    try:
        entries = os.listdir(out_dir)
    except FileNotFoundError:
        return
    if not entries:
        return
    if not overwrite:
        raise OutputExistsError(f"{out_dir} is not empty; use overwrite=True / --overwrite to "
                                f"replace a previous export")
    manifest = os.path.join(out_dir, MANIFEST)
    try:
        with open(manifest, encoding="utf-8") as f:
            previous = set(json.load(f)["files"])
    except (OSError, ValueError, KeyError) as e:
        raise OutputExistsError(f"{out_dir} holds files that no queuekit export wrote; "
                                f"choose an empty folder") from e
    ours = previous | {MANIFEST} | {p.split(os.sep)[0] for p in previous}
    foreign = [os.path.join(out_dir, e) for e in entries if e not in ours]
    foreign += [os.path.join(out_dir, d, f) for d in entries if d in ours
                and os.path.isdir(os.path.join(out_dir, d))
                for f in os.listdir(os.path.join(out_dir, d))
                if os.path.join(d, f) not in previous]
    if foreign:
        raise OutputExistsError(f"{out_dir} holds files no queuekit export wrote (first: "
                                f"{foreign[0]}); they are kept, choose an empty folder")
    for rel in sorted(previous, reverse=True):
        try:
            os.unlink(os.path.join(out_dir, rel))
        except FileNotFoundError:
            pass
    for entry in os.listdir(out_dir):
        path = os.path.join(out_dir, entry)
        if os.path.isdir(path) and not os.listdir(path):
            os.rmdir(path)
    os.unlink(manifest)


def _write_json(path: str, value) -> None:
    tmp = temp_beside(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=True)  # lone surrogates as \udcxx
    os.replace(tmp, path)


def _safe_name(name: str) -> str:
    bad = '<>:"/\\|?*\0'
    cleaned = "".join("_" if c in bad or ord(c) < 32 else c for c in name).strip(" .")
    cleaned = cleaned or "_"
    if cleaned in (CLASSES, MANIFEST):
        cleaned = "_" + cleaned
    raw = cleaned.encode("utf-8", "surrogateescape")
    if len(raw) > _NAME_BYTES:
        digest = hashlib.sha1(raw).hexdigest()[:8]
        cleaned = raw[:_NAME_BYTES].decode("utf-8", "ignore") + "~" + digest
    return cleaned


def _unique(name: str, taken: set[str], label) -> str:
    """``name``, or ``name~<label>`` (then a counter) when another label has it."""
    if name not in taken:
        return name
    candidate = f"{name}~{label}"
    n = 2
    while candidate in taken:
        candidate = f"{name}~{label}~{n}"
        n += 1
    return candidate


def _save_atomic(pixels, dest: str, pil_format: str) -> None:
    tmp = temp_beside(dest)
    try:
        with open(tmp, "wb") as f:
            image = (Image.fromarray(pixels[..., 0], "L") if pixels.shape[-1] == 1
                     else Image.fromarray(pixels, "RGB"))  # MNIST's are grayscale
            image.save(f, pil_format, quality=95)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise
