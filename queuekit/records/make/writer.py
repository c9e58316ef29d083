"""Image folder -> TFRecord files (``queuekit make``)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
import sys
import tempfile
import time

from tqdm import tqdm

from queuekit.errors import (
    DatasetError,
    ImageDecodeError,
    OutputExistsError,
    UnreadableFolderError,
)
from queuekit.records.encode import FORMATS, WRITE_SCHEMAS
from queuekit.records.files import temp_beside
from queuekit.records.folder import ImageFolder, scan_image_folder
from queuekit.records.images import MAX_PIXELS
from queuekit.records.make.commit import (
    check_output,
    commit,
    manifest_path,
    manifest_text,
    output_lock,
    previous_dataset,
    remove_stale,
    spool_prefix,
)
from queuekit.records.make.labels import write_labels
from queuekit.records.make.workers import check_not_bootstrapping, copy_bytes, encoded_chunks
from queuekit.signals import first_signal_ends, signals_deferred

log = logging.getLogger(__name__)


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
    """The class-names file beside ``output``: one name per line, in label order (escaped:
    see :mod:`queuekit.records.make.labels`)."""
    return output + ".labels.txt"


def write_tfrecords(source, output, *, image_size=(256, 256), encoding: str | None = None,
                    schema: str = "queuekit", shards: int = 1, workers: int | None = None,
                    overwrite: bool = False,
                    strict: bool = False, progress: bool = True,
                    start_method: str | None = None) -> WriteReport:
    """Write the images of a class-per-folder tree to TFRecord file(s).

    Args:
        source: a folder path or an :class:`ImageFolder` (from :func:`scan_image_folder`).
        output: the output path; with ``shards > 1`` the shard names are derived from it.
        image_size: (height, width) every image is resized to, after becoming RGB.
        encoding: ``raw`` (the seed's format: raw RGB bytes), ``jpeg`` or ``png``;
            None is raw for the queuekit layout, jpeg for the inception one.
        schema: ``queuekit`` (a superset of the seed's features) or
            ``inception``: the features of Inception's ``build_image_data.py``
            (labels stored from 1), which Slim and Inception trainers read.
        shards: number of output files; the i-th record written (in folder order)
            goes to shard i % shards.
        workers: decode/resize processes; None means one per core. The output bytes do
            not depend on it.
        overwrite: replace existing outputs instead of refusing.
        strict: make the first unreadable image an error instead of a skip.
        progress: show a tqdm bar.
        start_method: how worker processes start: None is forkserver (spawn
            where there is none), which never forks this process and its
            TensorFlow threads; ``fork`` starts faster for a script that
            imports TensorFlow at its top (see ``records.make.workers``).

    Output is written to temporary files in the same folder and committed as
    one unit when complete (:mod:`queuekit.records.make.commit`): the shards, then
    ``<output>.labels.txt``, then ``<output>.manifest.json``. An interrupted or
    failed run leaves no output and no temp; the previous dataset of the same
    name (any shard count) is replaced whole with ``overwrite``, or kept whole
    on failure. Temp files a killed run left are removed by the next one.

    Raises:
        InputNotFound, DatasetError: bad source or output (nothing is written).
        OutputExistsError: an output exists and ``overwrite`` is False.
        ImageDecodeError: with ``strict``, the first unreadable image.
    """
    check_not_bootstrapping()
    height, width, encoding = check_options(image_size, encoding, schema, shards)
    workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))
    output = check_output(output)
    # One make per output: what it finds of it is a dead run's. A second Ctrl-C must not
    # cut the first one's clean-up.
    with first_signal_ends(), output_lock(output):
        return _write(source, output, height, width, encoding, schema, shards, workers,
                      overwrite, strict, progress, start_method)


def _write(source, output: str, height: int, width: int, encoding: str, schema: str,
           shards: int, workers: int, overwrite: bool, strict: bool, progress: bool,
           start_method: str | None) -> WriteReport:
    out_dir = os.path.dirname(output)
    finals = shard_paths(output, shards) + [labels_path(output), manifest_path(output)]
    remove_stale(output, [os.path.basename(f) for f in finals])
    previous = previous_dataset(output)
    if previous and not overwrite:
        raise OutputExistsError(f"output exists: {previous[0]} (use overwrite=True / "
                                f"--overwrite to replace the dataset)")
    folder = source if isinstance(source, ImageFolder) else scan_image_folder(source)
    check_listing(folder, strict)

    started = time.monotonic()
    temps: list[str] = []
    files: list[int] = []
    spool = None
    skipped: list[tuple[str, str]] = []
    per_class: collections.Counter = collections.Counter()
    per_shard = [0] * shards
    written = size = 0
    tasks = image_tasks(folder, (height, width), encoding, schema)
    try:
        temps = [temp_beside(final) for final in finals]
        for tmp in temps[:shards]:
            files.append(os.open(tmp, os.O_WRONLY))
        spool = tempfile.mkdtemp(prefix=spool_prefix(output), dir=out_dir)
        bar = tqdm(total=len(tasks), unit="img", desc="make", disable=not progress,
                   file=sys.stderr)
        with bar, encoded_chunks(tasks, workers, spool, start_method) as chunks:
            for part, chunk_path, results in chunks:
                src = os.open(chunk_path, os.O_RDONLY)
                try:
                    done = zip(part, results, strict=True)
                    for (path, _, _, _, class_name, _, _), (length, reason) in done:
                        bar.update()
                        if length is None:
                            if strict:
                                raise ImageDecodeError(f"{path}: {reason}")
                            log.warning("skipped %s: %s", path, reason)
                            skipped.append((path, reason))
                            continue
                        shard = written % shards
                        _append(src, files[shard], length, finals[shard])
                        per_class[class_name] += 1
                        per_shard[shard] += 1
                        written += 1
                        size += length
                finally:
                    os.close(src)
                    os.unlink(chunk_path)
        if written == 0:
            raise DatasetError(f"{folder.root}: none of the {len(tasks)} images could be read "
                               f"(first: {skipped[0][0]}: {skipped[0][1]})")
        for fd in files:
            os.close(fd)
        files = []
        write_labels(temps[shards], folder.class_names)
        with open(temps[shards + 1], "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(manifest_text(shards=finals[:shards], records=per_shard,
                                  labels=finals[shards], classes=list(folder.class_names),
                                  image_size=(height, width), encoding=encoding,
                                  schema=schema))
        with signals_deferred():  # renames: a second signal must not cut them in half
            commit(list(zip(temps, finals, strict=True)), previous)  # the manifest last
            temps = []
    finally:
        with signals_deferred():  # after a first Ctrl-C, a second must not stop the clean-up
            for fd in files:
                os.close(fd)
            if spool:
                shutil.rmtree(spool, ignore_errors=True)
            for tmp in temps:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    return WriteReport(written, skipped, finals[:shards], finals[shards],
                       list(folder.class_names), size, time.monotonic() - started,
                       dict(per_class))


def check_options(image_size, encoding: str | None, schema: str,
                  shards: int) -> tuple[int, int, str]:
    """(height, width, encoding) of valid write options; errors before any work.

    Raises:
        DatasetError: naming the option and what it may be.
    """
    if schema not in WRITE_SCHEMAS:
        raise DatasetError(f"schema must be one of {WRITE_SCHEMAS}, not {schema!r}")
    if encoding is None:
        encoding = "jpeg" if schema == "inception" else "raw"
    if encoding not in FORMATS:
        raise DatasetError(f"encoding must be one of {FORMATS}, not {encoding!r}")
    if schema == "inception" and encoding == "raw":
        raise DatasetError("the inception layout holds encoded images: use encoding jpeg "
                           "or png")
    if shards < 1:
        raise DatasetError(f"shards must be at least 1, not {shards}")
    height, width = _size(image_size)
    return height, width, encoding


def check_listing(folder: ImageFolder, strict: bool) -> None:
    """Warn of the folders that could not be listed, or (``strict``) fail on the first."""
    for path, reason in folder.unreadable:
        if strict:
            raise UnreadableFolderError(f"{path}: cannot list this folder ({reason}); its "
                                        f"images would be missing")
        log.warning("cannot list %s (%s): its images are not written", path, reason)


def image_tasks(folder: ImageFolder, size: tuple[int, int], encoding: str,
                schema: str) -> list[tuple]:
    """One task per image, in folder order: what
    :func:`~queuekit.records.make.workers.encode_example` takes."""
    return [(path, size, encoding, folder.labels[i], folder.class_names[folder.labels[i]],
             folder.relative(i), schema) for i, path in enumerate(folder.paths)]


def _append(src: int, dst: int, length: int, final: str) -> None:
    try:
        copy_bytes(src, dst, length)
    except OSError as e:  # disk full, quota: say which output
        raise OSError(e.errno, f"{e.strerror} (writing {final})", final) from e


def _size(image_size) -> tuple[int, int]:
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    h, w = (int(v) for v in image_size)
    if h < 1 or w < 1:
        raise DatasetError(f"image_size must be positive, not {image_size}")
    if h * w > MAX_PIXELS:
        # Each worker holds a few copies of one image: bound it before any work starts.
        raise DatasetError(f"image_size {h}x{w} is {h * w:,} pixels per image, over the limit "
                           f"of {MAX_PIXELS:,} (Pillow's decompression-bomb bound)")
    return h, w
