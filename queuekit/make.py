"""Image folder -> TFRecord files (``queuekit make``)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import os
import sys
import secrets
import time

import tensorflow as tf
from tqdm import tqdm

from queuekit.errors import DatasetError, ImageDecodeError, OutputExistsError
from queuekit.folder import ImageFolder, scan_image_folder
from queuekit.images import load_and_encode
from queuekit.tfrecord import FORMATS, make_example

log = logging.getLogger(__name__)

_CHUNK = 8  # images per task sent to a worker


@dataclasses.dataclass
class WriteReport:
    """What :func:`write_tfrecords` did."""

    written: int
    skipped: list[tuple[str, str]]  # (path, reason)
    outputs: list[str]
    labels_path: str
    class_names: list[str]
    bytes: int
    seconds: float
    per_class: dict[str, int]

    def __str__(self) -> str:
        rate = self.written / self.seconds if self.seconds else 0.0
        return (f"wrote {self.written} images ({len(self.class_names)} classes) to "
                f"{len(self.outputs)} file(s), {self.bytes / 1e6:.1f} MB, "
                f"skipped {len(self.skipped)}, {rate:.0f} images/s")


def shard_paths(output: str, shards: int) -> list[str]:
    """``name.tfrecords`` for one shard, ``name-00000-of-00004.tfrecords`` for several."""
    if shards == 1:
        return [output]
    stem, ext = os.path.splitext(output)
    ext = ext or ".tfrecords"
    return [f"{stem}-{i:05d}-of-{shards:05d}{ext}" for i in range(shards)]


def labels_path(output: str) -> str:
    """The class-names file written beside ``output``: one name per line, in label order."""
    return output + ".labels.txt"


def write_tfrecords(source, output, *, image_size=(256, 256), encoding: str = "raw",
                    shards: int = 1, workers: int | None = None, overwrite: bool = False,
                    strict: bool = False, progress: bool = True) -> WriteReport:
    """Write the images of a class-per-folder tree to TFRecord file(s).

    Args:
        source: a folder path or an :class:`ImageFolder` (from :func:`scan_image_folder`).
        output: the output path; with ``shards > 1`` the shard names are derived from it.
        image_size: (height, width) every image is resized to, after becoming RGB.
        encoding: ``raw`` (the seed's format: raw RGB bytes), ``jpeg`` or ``png``.
        shards: number of output files; record i (in folder order) goes to shard i % shards.
        workers: decode/resize processes; None means one per core. The output bytes do
            not depend on it.
        overwrite: replace existing outputs instead of refusing.
        strict: make the first unreadable image an error instead of a skip.
        progress: show a tqdm bar.

    Output is written to temporary files in the same folder and renamed into
    place only when complete: an interrupted run leaves no output and no temp.

    Raises:
        InputNotFound, DatasetError: bad source (nothing is written).
        OutputExistsError: an output exists and ``overwrite`` is False.
        ImageDecodeError: with ``strict``, the first unreadable image.
    """
    if encoding not in FORMATS:
        raise DatasetError(f"encoding must be one of {FORMATS}, not {encoding!r}")
    if shards < 1:
        raise DatasetError(f"shards must be at least 1, not {shards}")
    height, width = _size(image_size)
    folder = source if isinstance(source, ImageFolder) else scan_image_folder(source)
    output = os.fspath(output)
    finals = shard_paths(output, shards) + [labels_path(output)]
    if not overwrite:
        existing = [p for p in finals if os.path.exists(p)]
        if existing:
            raise OutputExistsError(f"output exists: {existing[0]} (use overwrite=True / "
                                    f"--overwrite to replace it)")
    out_dir = os.path.dirname(os.path.abspath(output))
    os.makedirs(out_dir, exist_ok=True)
    workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))

    started = time.monotonic()
    temps = []
    writers = []
    skipped: list[tuple[str, str]] = []
    per_class: collections.Counter = collections.Counter()
    try:
        for final in finals:
            temps.append(temp_beside(final))
        writers = [tf.io.TFRecordWriter(t) for t in temps[:-1]]
        tasks = [(i, p, (height, width), encoding) for i, p in enumerate(folder.paths)]
        bar = tqdm(total=len(tasks), unit="img", desc="make", disable=not progress,
                   file=sys.stderr)
        written = 0
        with bar:
            for index, img, reason in _decoded(tasks, workers):
                bar.update()
                path = folder.paths[index]
                if img is None:
                    if strict:
                        raise ImageDecodeError(f"{path}: {reason}")
                    log.warning("skipped %s: %s", path, reason)
                    skipped.append((path, reason))
                    continue
                label = folder.labels[index]
                writers[written % shards].write(make_example(
                    img, label=label, height=height, width=width, fmt=encoding,
                    label_text=folder.class_names[label], filename=folder.relative(index)))
                per_class[folder.class_names[label]] += 1
                written += 1
        if written == 0:
            raise DatasetError(f"{folder.root}: none of the {len(tasks)} images could be read "
                               f"(first: {skipped[0][0]}: {skipped[0][1]})")
        for w in writers:
            w.close()
        writers = []
        with open(temps[-1], "w", encoding="utf-8") as f:
            f.write("".join(name + "\n" for name in folder.class_names))
        for tmp, final in zip(temps, finals):
            os.replace(tmp, final)
        temps = []
    finally:
        for w in writers:
            w.close()
        for tmp in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return WriteReport(written, skipped, finals[:-1], finals[-1], list(folder.class_names),
                       sum(os.path.getsize(p) for p in finals[:-1]),
                       time.monotonic() - started, dict(per_class))


def temp_beside(final: str) -> str:
    """Create an empty temporary file next to ``final`` (same filesystem, so rename is atomic).

    Unlike ``mkstemp`` it gets the usual permissions (0666 less the umask).
    """
    folder, name = os.path.split(os.path.abspath(final))
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue


def _size(image_size) -> tuple[int, int]:
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    h, w = (int(v) for v in image_size)
    if h < 1 or w < 1:
        raise DatasetError(f"image_size must be positive, not {image_size}")
    return h, w


def _decoded(tasks, workers):
    """Yield load_and_encode(task) in task order, decoding in ``workers`` processes.

    At most a few chunks per worker are in flight, so memory stays bounded
    whatever the number of images.
    """
    if workers == 1 or len(tasks) <= _CHUNK:
        yield from map(load_and_encode, tasks)
        return
    # fork: the workers only run Pillow and numpy, and need not import TensorFlow again.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    chunks = [tasks[i:i + _CHUNK] for i in range(0, len(tasks), _CHUNK)]
    window = collections.deque()
    pool = ctx.Pool(workers)
    try:
        for chunk in chunks:
            window.append(pool.map_async(load_and_encode, chunk))
            if len(window) >= 3 * workers:
                yield from window.popleft().get()
        while window:
            yield from window.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()
