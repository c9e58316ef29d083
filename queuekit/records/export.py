"""TFRecord files -> image folder (``queuekit export``)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import unicodedata

from PIL import Image
from tqdm import tqdm

import queuekit.errors as errors
from queuekit.errors import (
    DatasetError,
    OutputExistsError,
    QueuekitError,
    add_note,
)
from queuekit.records.example import decode_example
from queuekit.records.files import atomic_write, expand_files
from queuekit.records.make.guard import exclusive
from queuekit.records.tfrecord import Corruption, scan_records
from queuekit.signals import first_signal_ends, signals_deferred

log = logging.getLogger(__name__)

_EXPORT_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG"}


@dataclasses.dataclass
class ExportReport:
    """What :func:`export_images` wrote."""

    count: int
    out_dir: str
    per_label: dict[str, int]

    def __str__(self) -> str:
        return f"exported {self.count} images in {len(self.per_label)} folders to {self.out_dir}"


MANIFEST = ".queuekit-export.json"  # what an export wrote, with digests: --overwrite removes that
CLASSES = "classes.json"  # folder name -> label and label text
LOCK = ".queuekit-export.lock"  # held while an export writes the folder
STAGING = ".queuekit-export-"  # the new export, before it replaces the previous one
_NAME_BYTES = 200  # under every common file system's 255-byte name limit, room for a suffix
_MANIFEST_BYTES = 256 << 20  # a manifest this large is not one an export wrote
# The names an export before manifest version 2 wrote (it recorded no digests).
_V1_NAME = re.compile(r"[^/\0]+/\d+\.(?:jpg|jpeg|png)")
_ENTRY = collections.namedtuple("_ENTRY", "path size sha256")


def export_images(tfrecords, out_dir, *, format: str = "jpg", overwrite: bool = False,
                  progress: bool = True) -> ExportReport:
    """Write every record's image to ``out_dir/<label folder>/<index>.<ext>``.

    ``index`` counts records across all files in order. The label folder is
    the label text (else the label) made safe for a file name; two labels
    never share a folder, also on case-insensitive or Unicode-normalising file
    systems (``a/b`` and ``a_b``, ``Cat`` and ``cat`` get distinct names), and
    long ones are shortened within the name limit; ``classes.json`` maps each
    folder back to its label and text.

    The export is written into a hidden staging folder inside ``out_dir`` and
    moved into place when complete, with ``.queuekit-export.json`` (each file's
    size and SHA-256) written last; an interrupted or failed export leaves
    ``out_dir`` as it was. One export writes a folder at a time (a lock file in
    it); a staging folder a killed export left is removed by the next one.

    Args:
        overwrite: replace what a previous export wrote there. Only regular
            files inside ``out_dir`` that its manifest lists, with the size and
            digest it recorded, are removed, never through a link; a folder
            holding anything else, or a manifest that is not an export's, is
            refused before anything is written.

    Raises:
        OutputExistsError: ``out_dir`` is not empty and ``overwrite`` is False, or
            it holds files no export wrote, naming the first.
        OutputBusyError: another export is writing ``out_dir``.
        CorruptRecordError: naming the file, record index and byte offset; the
            images of the records before it are exported first, unless that
            would replace a previous export (which is then kept whole).
        BadRecordError: a record that is not an image record (as above).
    """
    ext = format.lower().lstrip(".")
    if ext not in _EXPORT_FORMATS:
        raise DatasetError(f"format must be jpg or png, not {format!r}")
    files = expand_files(tfrecords)
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    with first_signal_ends(), exclusive(os.path.join(out_dir, LOCK), f"export folder {out_dir}"):
        _remove_dead_staging(out_dir)  # we hold the lock: no live export owns one
        previous = _previous_export(out_dir, overwrite)
        staging = tempfile.mkdtemp(prefix=STAGING, dir=out_dir)
        try:
            written, folders, per_label, fault = _write_images(files, staging, ext, progress)
            if fault is not None and previous:
                add_note(fault, f"the previous export in {out_dir} is kept as it was")
                raise fault
            with signals_deferred():  # a Ctrl-C now would leave half of each export
                _commit(out_dir, staging, written, folders, previous)
        finally:
            with signals_deferred():
                shutil.rmtree(staging, ignore_errors=True)
    if fault is not None:
        raise fault
    return ExportReport(sum(per_label.values()), out_dir, dict(per_label))


def _write_images(files, staging: str, ext: str, progress: bool):
    """Write every record's image under ``staging``, up to the first bad record.

    Returns (manifest entries, folders, images per folder, the bad record's error or None)."""
    per_label: collections.Counter = collections.Counter()
    folders: dict[tuple, str] = {}  # (label, label text) -> folder name
    written: list[_ENTRY] = []
    fault: QueuekitError | None = None
    try:
        with tqdm(unit="img", desc="export", disable=not progress, file=sys.stderr) as bar:
            for path in files:
                for item in scan_records(path):
                    if isinstance(item, Corruption):
                        # (its class loads TensorFlow: only when a record is corrupt)
                        raise errors.CorruptRecordError(path, item.index, item.offset,
                                                        item.reason)
                    rec = decode_example(item.data, where=f"{path}: record {item.index}")
                    key = (rec.label, rec.label_text)
                    if key not in folders:
                        folders[key] = _unique(_safe_name(rec.label_text or str(rec.label)),
                                               set(folders.values()), rec.label)
                    folder = folders[key]
                    rel = f"{folder}/{len(written)}.{ext}"
                    os.makedirs(os.path.join(staging, folder), exist_ok=True)
                    written.append(_save_image(rec.image, staging, rel, _EXPORT_FORMATS[ext]))
                    per_label[folder] += 1
                    bar.update()
    except QueuekitError as e:  # a corrupt or malformed record (all the loop raises)
        fault = e
    return written + [_classes(staging, folders)], folders, per_label, fault


def _classes(staging: str, folders: dict) -> _ENTRY:
    data = json.dumps({folder: {"label": label, "label_text": text}
                       for (label, text), folder in folders.items()},
                      indent=2, ensure_ascii=True).encode()  # lone surrogates as \udcxx
    with open(os.path.join(staging, CLASSES), "wb") as f:
        f.write(data)
    return _ENTRY(CLASSES, len(data), hashlib.sha256(data).hexdigest())


def _commit(out_dir: str, staging: str, written: list[_ENTRY], folders: dict,
            previous: list[_ENTRY]) -> None:
    """Replace the previous export by the staged one.

    The manifest lists both while they are swapped, so that whatever a kill
    leaves in between, a later ``--overwrite`` can prove every file its own."""
    manifest = os.path.join(out_dir, MANIFEST)
    if previous:
        _write_manifest(manifest, previous + written)
    root = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in previous:
            _remove(root, entry, out_dir)
        for folder in sorted({e.path.split("/")[0] for e in previous if "/" in e.path}):
            try:
                os.rmdir(folder, dir_fd=root)  # emptied; a folder with a foreign file stays
            except OSError:
                pass
    finally:
        os.close(root)
    for folder in sorted(set(folders.values())):
        os.rename(os.path.join(staging, folder), os.path.join(out_dir, folder))
    os.replace(os.path.join(staging, CLASSES), os.path.join(out_dir, CLASSES))
    _write_manifest(manifest, written)


def _write_manifest(path: str, entries: list[_ENTRY]) -> None:
    atomic_write(path, json.dumps({"format": "queuekit-export", "version": 2,
                                   "files": [e._asdict() for e in entries]},
                                  indent=1, ensure_ascii=True).encode("ascii"))  # \udcxx


def _remove_dead_staging(out_dir: str) -> None:
    for entry in os.scandir(out_dir):
        if entry.name.startswith(STAGING) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)  # rmtree does not follow links
            log.warning("removed %s, left by an export that was killed", entry.path)


def _previous_export(out_dir: str, overwrite: bool) -> list[_ENTRY]:
    """The files of the previous export in ``out_dir``, each checked to be the one it wrote.

    Raises:
        OutputExistsError: naming what is in the way, before anything is written or removed.
    """
    entries = [e for e in os.listdir(out_dir) if e != LOCK and not e.startswith(STAGING)]
    if not entries:
        return []
    if not overwrite:
        raise OutputExistsError(f"{out_dir} is not empty; use overwrite=True / --overwrite to "
                                f"replace a previous export")
    listed = _read_manifest(out_dir)
    if listed is None:
        raise OutputExistsError(f"{out_dir} holds files that no queuekit export wrote (there "
                                f"is no {MANIFEST}); choose an empty folder")
    paths = {e.path for e in listed}
    folders = {p.split("/")[0] for p in paths if "/" in p}
    for name in entries:
        path = os.path.join(out_dir, name)
        if name == MANIFEST or name in paths:
            continue
        if name not in folders:
            raise OutputExistsError(f"{out_dir} holds files no queuekit export wrote (first: "
                                    f"{path}); they are kept, choose an empty folder")
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise OutputExistsError(f"{path} is not a folder (a link?): an export wrote a "
                                    f"folder there; nothing is removed through it")
        for inner in os.listdir(path):
            if f"{name}/{inner}" not in paths:
                raise OutputExistsError(
                    f"{out_dir} holds files no queuekit export wrote (first: "
                    f"{os.path.join(path, inner)}); they are kept, choose an empty folder")
    root = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in listed:
            _check_ours(root, entry, out_dir)
    finally:
        os.close(root)
    return listed


def _read_manifest(out_dir: str) -> list[_ENTRY] | None:
    """The manifest's entries, each a path the export could have written; None if there is none.

    Raises:
        OutputExistsError: the manifest is not one an export wrote, naming the entry.
    """
    path = os.path.join(out_dir, MANIFEST)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise OutputExistsError(f"{path}: cannot read the export manifest ({e.strerror})") from e
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OutputExistsError(f"{path} is not a regular file: not an export's manifest")
        data = f.read(_MANIFEST_BYTES + 1)

    def bad(why: str) -> OutputExistsError:
        return OutputExistsError(f"{path} is not a manifest queuekit wrote ({why}); nothing "
                                 f"was removed, choose an empty folder")

    if len(data) > _MANIFEST_BYTES:
        raise bad("over 256 MiB")
    try:
        value = json.loads(data)
    except ValueError as e:
        raise bad(f"not JSON: {e}") from None
    files = value.get("files") if isinstance(value, dict) else None
    if not isinstance(files, list):
        raise bad('expected an object with a "files" list')
    out = []
    for i, item in enumerate(files):
        if isinstance(item, str) and (item == CLASSES or _V1_NAME.fullmatch(item)):
            entry = _ENTRY(item, None, None)  # an export before version 2: no digest
        elif (isinstance(item, dict) and isinstance(item.get("path"), str)
              and isinstance(item.get("size"), int) and isinstance(item.get("sha256"), str)):
            entry = _ENTRY(item["path"], item["size"], item["sha256"])
        else:
            raise bad(f"entry {i} is {item!r:.80}, expected a path, size and sha256")
        parts = entry.path.split("/")
        if (entry.path != CLASSES and len(parts) != 2) or any(
                p in ("", ".", "..") or "\0" in p for p in parts):
            raise bad(f"entry {i}, {entry.path!r:.80}, is not a file an export writes "
                      f"(<folder>/<name> inside the folder)")
        out.append(entry)
    return out


def _open_parent(root: int, entry: _ENTRY) -> tuple[int, str]:
    """(a descriptor of the entry's folder, its name), never through a link."""
    folder, _, name = entry.path.rpartition("/")
    if not folder:
        return os.dup(root), name
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root), name


def _check_ours(root: int, entry: _ENTRY, out_dir: str) -> None:
    """Raise unless ``entry`` is absent, or a regular file with the recorded size and digest."""
    where = os.path.join(out_dir, entry.path)
    try:
        parent, name = _open_parent(root, entry)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputExistsError(f"{os.path.dirname(where)} is not a folder the export wrote "
                                f"({e.strerror}); nothing is removed through it") from e
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as e:
            raise OutputExistsError(f"{where} is not a file the export wrote ({e.strerror}); "
                                    f"it is kept") from e
        with open(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OutputExistsError(f"{where} is not a regular file; it is kept")
            if entry.size is not None and (
                    info.st_size != entry.size or _digest(f) != entry.sha256):
                raise OutputExistsError(f"{where} changed since the export wrote it (its size "
                                        f"or SHA-256 differs from the manifest); it is kept")
    finally:
        os.close(parent)


def _remove(root: int, entry: _ENTRY, out_dir: str) -> None:
    _check_ours(root, entry, out_dir)  # again, just before: the folder is ours, but not locked
    try:
        parent, name = _open_parent(root, entry)
    except FileNotFoundError:
        return
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def _digest(f) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


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
    """``name``, or ``name~<label>`` (then a counter) when another label has it.

    Compared as a case-insensitive, normalising file system (macOS, Windows,
    exFAT) compares names: ``Cat`` and ``cat``, or NFC and NFD ``café``, are one
    folder there."""
    folded = {_fold(t) for t in taken}
    if _fold(name) not in folded:
        return name
    candidate = f"{name}~{label}"
    n = 2
    while _fold(candidate) in folded:
        candidate = f"{name}~{label}~{n}"
        n += 1
    return candidate


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", name).casefold())


def _save_image(pixels, staging: str, rel: str, pil_format: str) -> _ENTRY:
    """Write one image under ``staging``; its manifest entry."""
    buffer = io.BytesIO()
    image = (Image.fromarray(pixels[..., 0], "L") if pixels.shape[-1] == 1
             else Image.fromarray(pixels, "RGB"))  # MNIST's are grayscale
    image.save(buffer, pil_format, quality=95)
    data = buffer.getvalue()
    dest = os.path.join(staging, rel)
    try:
        with open(dest, "xb") as f:
            f.write(data)
    except OSError as e:  # a full disk: say which file
        raise OSError(e.errno, f"{e.strerror} (writing {dest})", dest) from e
    return _ENTRY(rel, len(data), hashlib.sha256(data).hexdigest())
