"""Scanning a class-per-folder image tree: ``root/<class>/**/<image>``."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import stat

from queuekit.errors import DatasetError, InputNotFound
from queuekit.records.images import IMAGE_EXTENSIONS

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ImageFolder:
    """The images of a folder tree, their integer labels and the class names.

    ``labels[i]`` indexes ``class_names``, which are the sorted first-level
    sub-folder names. ``skipped`` counts what was passed over, by reason;
    ``unreadable`` lists the folders that could not be listed, and why.
    """

    root: str
    paths: list[str]
    labels: list[int]
    class_names: list[str]
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    unreadable: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (folder, why)

    def __len__(self) -> int:
        return len(self.paths)

    def relative(self, i: int) -> str:
        """The i-th path relative to the root, with forward slashes on every OS."""
        return os.path.relpath(self.paths[i], self.root).replace(os.sep, "/")


def scan_image_folder(root, *, shuffle: bool = False, seed: int | None = None,
                      extensions=None) -> ImageFolder:
    """List the images under ``root``; the class is the first-level sub-folder.

    Images in nested folders belong to their first-level class. Files directly
    in ``root``, hidden files and folders, and files without an image extension
    are skipped and counted. Order is sorted (so labels and output are
    reproducible); ``shuffle=True`` with a ``seed`` is a deterministic shuffle.

    A class folder (or one inside it) that cannot be listed is not an error
    here: it is in ``unreadable``, and ``make`` warns, or fails with ``strict``.

    Raises:
        InputNotFound: ``root`` does not exist or is not a folder.
        DatasetError: ``root`` has no class folders, or no images at all.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise InputNotFound(f"image folder not found: {root}")
    exts = _extensions(extensions)
    skipped: dict[str, int] = {}

    def skip(reason):
        skipped[reason] = skipped.get(reason, 0) + 1

    classes = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.startswith("."):
            skip("hidden")
        elif entry.is_dir():
            classes.append(entry.name)
        else:
            skip("file directly in root")
    if not classes:
        raise DatasetError(f"{root}: no class sub-folders (expected {root}/<class>/<image>)")
    paths, labels = [], []
    unreadable: list[tuple[str, str]] = []

    def cannot_list(error: OSError) -> None:
        unreadable.append((error.filename or "?", error.strerror or str(error)))

    for label, name in enumerate(classes):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, name),
                                                    onerror=cannot_list):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for filename in sorted(filenames):
                if filename.startswith("."):
                    skip("hidden")
                elif os.path.splitext(filename)[1].lower() not in exts:
                    skip("not an image extension")
                elif not _regular_or_unknown(os.path.join(dirpath, filename)):
                    # A FIFO named x.jpg blocks its reader forever; a device never ends.
                    log.warning("skipped %s: not a regular file (a FIFO, device or socket)",
                                os.path.join(dirpath, filename))
                    skip("not a regular file")
                else:
                    paths.append(os.path.join(dirpath, filename))
                    labels.append(label)
    return _finish(root, paths, labels, classes, skipped, unreadable, exts, shuffle, seed)


def folder_from_listing(root: str, relative, *, shuffle: bool = False, seed: int | None = None,
                        extensions=None) -> ImageFolder:
    """:func:`scan_image_folder`'s result for a listing of files instead of a walk.

    ``relative`` holds every file's path under ``root``, with ``/`` separators:
    what an object store (``gs://``, ``s3://``) lists through Beam's file
    systems. The rules and the order are the walk's (per folder, its files
    sorted, then its sub-folders sorted); an object store has no empty folders,
    so a class folder without files has no label here.
    """
    exts = _extensions(extensions)
    skipped: dict[str, int] = {}
    by_class: dict[str, list[tuple[tuple, str]]] = {}
    for rel in relative:
        parts = rel.strip("/").split("/")
        if any(p.startswith(".") for p in parts[:-1]):
            continue  # inside a hidden folder: the walk never enters it
        reason = ("file directly in root" if len(parts) == 1 else "hidden"
                  if parts[-1].startswith(".") else "not an image extension"
                  if os.path.splitext(parts[-1])[1].lower() not in exts else None)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        # os.walk's order: a folder's own files (0) before its sub-folders (1), each sorted.
        key = tuple((1, p) for p in parts[1:-1]) + ((0, parts[-1]),)
        by_class.setdefault(parts[0], []).append((key, rel.strip("/")))
    classes = sorted(by_class)
    if not classes:
        raise DatasetError(f"{root}: no class sub-folders (expected {root}/<class>/<image>)")
    base = root.rstrip("/") + "/"
    paths, labels = [], []
    for label, name in enumerate(classes):
        for _, rel in sorted(by_class[name]):
            paths.append(base + rel)
            labels.append(label)
    return _finish(root, paths, labels, classes, skipped, [], exts, shuffle, seed)


def _regular_or_unknown(path: str) -> bool:
    """False for a FIFO, device or socket; a file that cannot be stat'ed is the reader's to
    report, with its reason."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True


def _extensions(extensions) -> frozenset[str]:
    return IMAGE_EXTENSIONS if extensions is None else frozenset(
        e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)


def _finish(root, paths, labels, classes, skipped, unreadable, exts, shuffle, seed):
    if not paths:
        why = f"; cannot list: {unreadable[0][0]} ({unreadable[0][1]})" if unreadable else ""
        raise DatasetError(f"{root}: no images in any class folder "
                           f"(extensions: {', '.join(sorted(exts))}){why}")
    if shuffle:
        order = list(range(len(paths)))
        random.Random(seed).shuffle(order)
        paths = [paths[i] for i in order]
        labels = [labels[i] for i in order]
    return ImageFolder(root, paths, labels, classes, skipped, unreadable)
