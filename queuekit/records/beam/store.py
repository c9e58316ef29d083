"""Where a Beam ``make`` stages and commits its files: the local file system or one of Beam's."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile

from queuekit.errors import DatasetError
from queuekit.records.make.commit import (
    check_output,
    commit,
    output_lock,
    previous_dataset,
    remove_stale,
    spool_prefix,
)
from queuekit.records.tfrecord import Corruption, scan_stream

log = logging.getLogger(__name__)


class OutputStore:
    """The output's file system: the local one (atomic commit), or one of Beam's."""

    def __init__(self, output):
        text = os.fspath(output)
        self.remote = "://" in text
        self.output = text if self.remote else check_output(text)
        from apache_beam.io.filesystems import FileSystems

        self.fs = FileSystems
        self.folder = self.fs.split(self.output)[0]

    def locked(self):
        """The output's lock (:func:`~queuekit.records.make.commit.output_lock`); none on an object
        store, which has no locks: two jobs to one bucket path are the user's to avoid."""
        return contextlib.nullcontext() if self.remote else output_lock(self.output)

    def previous(self, finals: list[str]) -> list[str]:
        if not self.remote:
            remove_stale(self.output, [os.path.basename(f) for f in finals])
            return previous_dataset(self.output)
        stem, ext = os.path.splitext(self.output)
        patterns = [self.output + s for s in ("", ".labels.txt", ".manifest.json",
                                              ".skipped.jsonl")]
        patterns.append(f"{stem}-?????-of-?????{ext or '.tfrecords'}")
        found = self.fs.match(patterns)
        return sorted(m.path for r in found for m in r.metadata_list)

    def staging(self) -> str:
        if not self.remote:
            return tempfile.mkdtemp(prefix=spool_prefix(self.output), dir=self.folder)
        path = self.join(self.folder, f"{spool_prefix(self.output)}{secrets.token_hex(4)}")
        self.fs.mkdirs(path)
        return path

    def join(self, folder: str, name: str) -> str:
        return os.path.join(folder, name) if not self.remote else self.fs.join(folder, name)

    def write_text(self, path: str, text: str) -> None:
        with self.fs.create(path) as f:
            f.write(text.encode("utf-8", "surrogateescape"))

    def read_text(self, path: str) -> str:
        with self._open(path) as f:
            return f.read().decode("utf-8", "surrogateescape")

    def count_records(self, path: str) -> int:
        n = 0
        with self._open(path) as f:
            for item in scan_stream(f, data=True):
                if isinstance(item, Corruption):
                    raise DatasetError(f"{path}: record {item.index} (offset {item.offset}) "
                                       f"written by the Beam job is bad: {item.reason}")
                n += 1
        return n

    def _open(self, path: str):
        from apache_beam.io.filesystem import CompressionTypes

        return self.fs.open(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def commit(self, moves: list[tuple[str, str]], previous: list[str]) -> None:
        if not self.remote:
            commit(moves, previous)
            return
        # Object stores have no atomic rename: the old dataset goes first and the
        # manifest comes last, so a dataset without its manifest is not complete.
        if previous:
            self.fs.delete(previous)
        for src, dst in moves:
            self.fs.rename([src], [dst])

    def remove(self, staging: str) -> None:
        if not self.remote:
            shutil.rmtree(staging, ignore_errors=True)
            return
        try:  # an object store has no folders: delete what is under the prefix
            left = [m.path for m in self.fs.match([staging + "/**"])[0].metadata_list]
            if left:
                self.fs.delete(left)
            if self.fs.exists(staging):  # a file system that does have them
                self.fs.delete([staging])
        except Exception as e:  # a clean-up must not hide the job's own error
            log.warning("could not remove the staging folder %s: %s", staging, e)

    def size(self, paths: list[str]) -> int:
        return sum(m.size_in_bytes for r in self.fs.match(paths) for m in r.metadata_list)
