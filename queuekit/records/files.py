"""File helpers shared by the readers and the writers: inputs, framing checks, temp files."""

from __future__ import annotations

import array
import collections
import contextlib
import glob
import os
import secrets
import stat
import threading
from typing import Any, NamedTuple

import numpy as np

import queuekit.errors as errors
from queuekit.errors import DatasetError, InputNotFound
from queuekit.records.tfrecord import Corruption, check_framing, compression_of, walk, what_it_is


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
                           if os.path.isfile(p)
                           and not p.endswith((".labels.txt", ".manifest.json", ".skipped.jsonl"))
                           and not os.path.basename(p).startswith("."))
            if not found:
                raise InputNotFound(f"no files in directory {item}")
        elif glob.has_magic(item):
            found = sorted(glob.glob(item))
            if not found:
                raise InputNotFound(f"no files match {item}")
        elif os.path.lexists(item):
            found = [item]
        else:
            raise InputNotFound(f"TFRecord file not found: {item}")
        out.extend(found)
    for path in out:
        check_regular(path)
    return out


def check_regular(path: str) -> None:
    """Raise unless ``path`` is a regular file (through links): a FIFO would block its reader
    forever, and a device never ends.

    Raises:
        InputNotFound: naming the path and what it is.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputNotFound(f"TFRecord file not found: {path} (a broken link?)") from None
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device or socket")
        raise InputNotFound(f"{path} is {kind}, not a regular file: not read")


def temp_beside(final: str) -> str:
    """Create an empty temporary file next to ``final`` (same filesystem, so rename is atomic).

    Unlike ``mkstemp`` it gets the usual permissions (0666 less the umask).
    """
    folder, name = os.path.split(os.path.abspath(final))
    while True:
        # The pid lets a later run tell a dead writer's leftovers (records.make.commit).
        tmp = os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue


def atomic_write(final: str, data: bytes) -> None:
    """Write ``final`` whole or not at all: a temp file beside it, synced, renamed over it."""
    tmp = temp_beside(final)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Walk(NamedTuple):
    """One walk of a file's record headers."""

    offsets: Any  # int64 array: the byte offset of each record before the fault
    fault: Corruption | None
    compression: str


class _Walks:
    """Each file's walk by (path, size, mtime): its headers are walked once per process (the
    build's check, the input position's places, the next session's check), the oldest
    forgotten past 64 MB of offsets."""

    limit = 1 << 23

    def __init__(self):
        self._found: collections.OrderedDict[tuple, Walk] = collections.OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(path: str) -> tuple:
        stat_ = os.stat(path)
        return os.path.abspath(path), stat_.st_size, stat_.st_mtime_ns

    def get(self, path: str) -> Walk:
        key = self.key(path)
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
                return found
        offsets = array.array("q")  # 8 bytes a record, not a Python int's 36
        kind, fault = walk(path, offsets)
        places = np.frombuffer(offsets, np.int64) if offsets else np.zeros(0, np.int64)
        places.flags.writeable = False  # shared by every reader of the walk
        found = Walk(places, fault, kind)
        with self._lock:
            if key not in self._found:
                self._found[key] = found
                self._held += len(places)
            while self._held > self.limit:  # a file of more records is never kept
                self._held -= len(self._found.popitem(last=False)[1].offsets)
        return found


_WALKS = _Walks()


def record_offsets(path: str) -> Walk:
    """:class:`Walk` of ``path``: its record headers walked once per version of the file."""
    return _WALKS.get(path)


def check_files(files) -> None:
    """Walk the record headers of every file; raise on the first framing fault.

    TensorFlow's reader ends a file silently at a record header cut short, so
    a truncated file would be a short epoch. The walk reads 12 bytes per
    record (benchmarks/bench_check.py, page cache warm: 0.01 s per GB of 196 KB
    records, 0.9 s per GB of 1 KB records), once per version of a file.

    Raises:
        CorruptRecordError: naming the file, record index, byte offset and what
            the file looks like when it is not a TFRecord file at all.
    """
    for path in files:
        fault, kind = record_offsets(path)[1:]
        if fault is not None:
            what = what_it_is(path) if fault.index == 0 else ""
            reason = fault.reason + (f" (in the {kind}-decompressed stream)" if kind else
                                     f" (the file looks {what}, not like TFRecords)" if what
                                     else "")
            raise errors.CorruptRecordError(path, fault.index, fault.offset, reason)


def check_sizes(files, record_bytes: int, header_bytes: int, footer_bytes: int) -> int:
    """The number of records in ``files``; a file of any other size is a CorruptRecordError."""
    total = 0
    for path in files:
        size = os.path.getsize(path)
        body = size - header_bytes - footer_bytes
        count, tail = divmod(max(body, 0), record_bytes)
        if body < 0 or tail:
            hint = " (it looks like TFRecords: use tfrecord_batches)" if _is_tfrecord(path) else ""
            raise errors.CorruptRecordError(
                path, count, header_bytes + count * record_bytes,
                f"{size} bytes is not a {header_bytes}-byte header + k x {record_bytes}-byte "
                f"records + a {footer_bytes}-byte footer ({tail or size} bytes left over"
                f" after {count} whole records); a cut or wrong file{hint}")
        total += count
    return total


def _is_tfrecord(path: str) -> bool:
    return check_framing(path) is None and os.path.getsize(path) > 0


def sizes(files) -> dict[str, int]:
    """The size of each file now: what :func:`resized` compares with later."""
    out = {}
    for path in files:
        try:
            out[path] = os.path.getsize(path)
        except OSError:
            continue
    return out


def resized(before: dict[str, int]) -> list[tuple[str, int, int]]:
    """(path, size then, size now; -1 if gone) of each file of ``before`` whose size changed."""
    out = []
    for path, size in before.items():
        try:
            now = os.path.getsize(path)
        except OSError:
            now = -1
        if now != size:
            out.append((path, size, now))
    return out


def compression_of_all(files, *, walked: bool = False) -> str:
    """The one compression (``""``, ``"GZIP"``, ``"ZLIB"``) of ``files``; one reader reads them all.
    ``walked``: from a walk of each file's headers (:func:`record_offsets`).

    Raises:
        DatasetError: the files are not all compressed the same way.
    """
    kinds: dict[str, list[str]] = {}
    for path in files:
        # Walked, it is opened once for this and check_files both.
        kind = _WALKS.get(path).compression if walked else compression_of(path)
        kinds.setdefault(kind, []).append(path)
    if len(kinds) > 1:
        shown = "; ".join(f"{kind or 'uncompressed'}: {paths[0]}"
                          + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")
                          for kind, paths in kinds.items())
        raise DatasetError(f"the files mix compressions ({shown}); one reader reads one "
                           f"kind: pass them to separate builders")
    return next(iter(kinds), "")
