"""The input position's file: what identifies a dataset's files, and reading, checking and
removing ``<checkpoint>.queuekit-input`` files safely.

A position file is untrusted input (a user may edit it, another program may put
anything under its name), so it is read only when it is a regular file, up to
:data:`MAX_BYTES`, and checked against the pipeline it is applied to before
anything of it is used. A file is identified by its content, not its path: a
dataset moved, reached through a link or its shards renamed resumes exactly,
and one rewritten under the same names and sizes is refused (#44).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from typing import Any

import numpy as np
import tensorflow as tf

from queuekit.errors import DatasetError

log = logging.getLogger(__name__)

SUFFIX = ".queuekit-input"
FORMAT = 1  # what a position file says it is
MAX_BYTES = 64 * 2**20  # a position of 1,000 files and a 10,000-record buffer is ~100 KB
_SAMPLES = 8  # pieces of a file hashed into its fingerprint, spread over the whole file
_SAMPLE_BYTES = 4096
# A position's temp file, as records.files.temp_beside names it: ".<name>.<pid>-<hex>.tmp"
_TEMP = re.compile(r"^\.(?P<name>.+\.queuekit-input)\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
_TEMP_AGE_SECS = 10.0  # a position is written in milliseconds: an older temp of a dead pid is left


def fingerprint(path: str, size: int) -> str:
    """A cheap identity of a file's content: its size and 8 pieces of 4 KiB spread over it
    (32 KiB read). Two shards swapped, or one rewritten in another order, differ in it."""
    digest = hashlib.blake2b(str(size).encode(), digest_size=8)
    with open(path, "rb") as f:
        for k in range(_SAMPLES):
            f.seek(max(0, size - _SAMPLE_BYTES) * k // (_SAMPLES - 1))
            digest.update(f.read(_SAMPLE_BYTES))
    return digest.hexdigest()


def match_files(saved: list[tuple[str, int, int, str | None]],
                now: list[tuple[str, int, int, str]], pipeline: str) -> dict[str, str] | None:
    """Which of the pipeline's files (``now``: name, size, records, fingerprint) each file of
    the checkpoint's (``saved``) is: by content where the checkpoint has it, whatever its
    path now; else by name. None when none is the same file (another input altogether).

    Raises:
        DatasetError: a file of the checkpoint is not among the pipeline's (gone, or
            changed: same name, other size or content), or one was added.
    """
    fix = ("; restore a checkpoint of this dataset, or start its input over with "
           "QueueSession(resume_input=False)")
    by_content: dict[tuple[int, int, str], list[str]] = {}
    for name, size, n, content in now:
        by_content.setdefault((size, n, content), []).append(name)
    current = {name: (size, n, content) for name, size, n, content in now}
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for name, size, n, print_ in saved:
        if print_ is None:  # written before fingerprints (or a work queue's books): by name
            same = name in current and current[name][:2] == (size, n) and name not in taken
            candidates = [name] if same else []
        else:
            candidates = [c for c in by_content.get((size, n, print_), []) if c not in taken]
        if candidates:
            found = name if name in candidates else candidates[0]
            mapping[name] = found
            taken.add(found)
    if not mapping and not set(current) & {name for name, _, _, _ in saved}:
        return None
    for name, size, n, _ in saved:
        if name in mapping:
            continue
        if name in current:
            size_now, n_now, _ = current[name]
            what = (f"({size} bytes, {n} records then; {size_now} bytes, {n_now} records now)"
                    if (size, n) != (size_now, n_now) else
                    f"(same size, {size} bytes, but other content: another dataset under the "
                    f"same name)")
            raise DatasetError(f"{name} changed since the checkpoint {what}{fix}")
        raise DatasetError(f"{name} was in pipeline {pipeline}'s input at the checkpoint and is "
                           f"not now (nor any file of its content){fix}")
    added = sorted(set(current) - taken)
    if added:
        raise DatasetError(f"{added[0]} was added to pipeline {pipeline}'s input since the "
                           f"checkpoint{fix}")
    moved = sum(1 for a, b in mapping.items() if a != b)
    if moved:
        log.info("pipeline %s: %d file(s) of the checkpoint found by content under another "
                 "path (e.g. %s is now %s)", pipeline, moved,
                 *next((a, b) for a, b in mapping.items() if a != b))
    return mapping


def rle(counts: np.ndarray) -> list[list[int]]:
    """``[[value, run], ...]``: a consumed prefix, scattered records, the rest: a few runs."""
    if not len(counts):
        return []
    edges = np.flatnonzero(np.diff(counts)) + 1
    starts = np.concatenate([[0], edges])
    runs = np.diff(np.concatenate([starts, [len(counts)]]))
    return [[int(counts[s]), int(r)] for s, r in zip(starts, runs, strict=True)]


def unrle(runs, n: int, num_epochs: int | None) -> np.ndarray:
    """The counts of ``runs``, checked first: the file is untrusted input (a run of 10**12
    must be an error, not an allocation; 3 passes of a one-epoch pipeline, not 30 records
    silently skipped)."""
    values = [int(v) for v, _ in runs]
    lengths = [int(r) for _, r in runs]
    if min(values + lengths, default=0) < 0 or sum(lengths) != n:
        raise DatasetError(f"an input position of {sum(lengths)} records for a file of {n}")
    if num_epochs is not None and max(values, default=0) > num_epochs:
        raise DatasetError(f"an input position of a record consumed {max(values)} times by "
                           f"a pipeline of {num_epochs} epoch(s)")
    return np.repeat(values, lengths).astype(np.int64)


def read_position(path: str) -> dict[str, Any] | None:
    """The position file ``path`` as JSON, checked in shape; None when there is none.

    Raises:
        DatasetError: naming the file, when it is not a regular file, is over
            :data:`MAX_BYTES`, or is not a position (its JSON or its shape).
    """
    try:
        if "://" in path:
            with tf.io.gfile.GFile(path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
        else:
            # O_NONBLOCK: a FIFO under the name must not block the open (then it is refused).
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise DatasetError(f"{path}: not a regular file (an input position is one)")
                data = f.read(MAX_BYTES + 1)
    except (FileNotFoundError, tf.errors.NotFoundError):
        return None
    except (OSError, tf.errors.OpError) as e:
        raise DatasetError(f"{path}: cannot read the input position ({e})") from e
    if len(data) > MAX_BYTES:
        raise DatasetError(f"{path}: over {MAX_BYTES} bytes, not an input position")
    try:
        state = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise DatasetError(f"{path}: not a queuekit input position ({e!r})") from e
    _check_shape(state, path)
    return state


def _check_shape(state: Any, path: str) -> None:
    def bad(what: str):
        return DatasetError(f"{path}: a malformed input position: {what}")

    if not isinstance(state, dict):
        raise bad("not a JSON object")
    for key in ("pipelines", "work_queues"):
        if not isinstance(state.get(key, []), list):
            raise bad(f"{key!r} is not a list")
    for p in state.get("pipelines", []):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise bad("a pipeline without a name")
        files, counts = p.get("files"), p.get("counts")
        if not isinstance(files, list) or not isinstance(counts, list) or len(files) != len(
                counts):
            raise bad(f"pipeline {p['name']}: files and counts do not pair")
        for entry in files:
            if not (isinstance(entry, list) and 3 <= len(entry) <= 4
                    and isinstance(entry[0], str)
                    and all(_small_int(v) for v in entry[1:3])
                    and (len(entry) == 3 or isinstance(entry[3], str))):
                raise bad(f"pipeline {p['name']}: a file entry {str(entry)[:80]}")
        for runs in counts:
            if not isinstance(runs, list) or not all(
                    isinstance(r, list) and len(r) == 2 and all(_small_int(v) for v in r)
                    for r in runs):
                raise bad(f"pipeline {p['name']}: counts that are not runs of counts")


def _small_int(value: Any) -> bool:
    """A non-negative int that fits in int64: a huge number is an error, not an OverflowError."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def identity(path: str, data: bytes) -> tuple[int, int, int, int, str]:
    """What proves later that ``path`` is still the file written here with ``data``: device,
    inode, size, modification time and a hash of the content."""
    st = os.lstat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            hashlib.blake2b(data, digest_size=16).hexdigest())


def remove_if_written(path: str, written: tuple[int, int, int, int, str]) -> None:
    """Unlink ``path`` only if it is still the regular file :func:`identity` described: an
    inode number alone is not an identity (a user's file made after ours went away can get
    it), so size, time and content must match too."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != written[:4]:
            return
        with open(path, "rb") as f:
            if hashlib.blake2b(f.read(), digest_size=16).hexdigest() != written[4]:
                return
        os.unlink(path)
    except OSError as e:
        log.debug("could not remove %s: %r", path, e)


def remove_dead_temps(prefix: str) -> None:
    """Remove the temp files of positions that a killed writer left beside ``prefix``'s
    folder: regular files named as :func:`~queuekit.records.files.atomic_write` names a
    position's temp, whose writing process is gone from this host, older than a write."""
    folder = os.path.dirname(os.path.abspath(prefix))
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match is None or _alive(int(match.group("pid"))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > _TEMP_AGE_SECS:
                os.unlink(entry.path)
                log.info("removed %s, a position's temp file left by a killed job", entry.path)
        except OSError:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's live process (or not a pid): not ours to judge
    return True


def work_files(work) -> list[list]:
    """A work queue's files as a checkpoint names them: ``[name, size, 0]`` (size -1 where
    the chief cannot see the file: the workers read it)."""
    out = []
    for f in work.files:
        try:
            size = tf.io.gfile.stat(f).length
        except tf.errors.OpError:
            size = -1
        out.append([f, size, 0])
    return out
