"""Every error queuekit raises.

Each specific error also subclasses the built-in or TensorFlow error a caller
would naturally catch, so existing ``except`` clauses keep working: a loop
written as ``except tf.errors.OutOfRangeError:`` still ends on
:class:`EndOfData`, and ``except FileNotFoundError:`` still catches a missing
input. This module loads TensorFlow only when one of the two errors that
subclass TensorFlow's is first used.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = [
    "QueuekitError",
    "EndOfData",  # noqa: F822 - defined on first use (__getattr__)
    "PipelineStalled",
    "ShutdownTimeout",
    "DatasetError",
    "BadRecordError",
    "InputNotFound",
    "CorruptRecordError",  # noqa: F822 - defined on first use (__getattr__)
    "ImageDecodeError",
    "UnreadableFolderError",
    "OutputExistsError",
    "OutputBusyError",
    "ClusterError",
    "WorkLost",
    "UnknownBatchSize",
]


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; on Python 3.10, which has no notes, kept in ``__notes__``."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        notes = getattr(exc, "__notes__", None)
        if notes is None:
            notes = []
            exc.__notes__ = notes  # type: ignore[attr-defined]
        notes.append(note)


class QueuekitError(Exception):
    """Base class of every queuekit error."""


class PipelineStalled(QueuekitError, TimeoutError):
    """A run was blocked longer than ``stall_timeout_secs`` with no input progress.

    Attributes:
        seconds: how long the run had been blocked.
        queue_stats: the :class:`~queuekit.QueueStat` of every runner queue at that time.
        live_threads: how many runner threads were still alive.
    """

    def __init__(self, message: str, *, seconds: float, queue_stats, live_threads: int):
        super().__init__(message)
        self.seconds = seconds
        self.queue_stats = list(queue_stats)
        self.live_threads = live_threads


class ShutdownTimeout(QueuekitError, TimeoutError):
    """Runner threads did not stop within ``stop_grace_secs``.

    Attributes:
        thread_names: names of the threads still alive.
    """

    def __init__(self, message: str, *, thread_names):
        super().__init__(message)
        self.thread_names = list(thread_names)


class DatasetError(QueuekitError, ValueError):
    """The input data is not what was expected (names the path and what is wrong)."""


class BadRecordError(DatasetError):
    """A record's content is not what was expected (names the file and record index)."""


class InputNotFound(QueuekitError, FileNotFoundError):
    """A file, folder or glob the caller named does not exist or matches nothing."""


class ImageDecodeError(QueuekitError, ValueError):
    """An image file cannot be read or decoded (names the file and why)."""


class UnreadableFolderError(DatasetError):
    """A folder of the input cannot be listed and ``strict`` was given: its images would be
    missing (names the folder and why)."""


class OutputExistsError(QueuekitError, FileExistsError):
    """An output already exists and ``overwrite`` was not given."""


class OutputBusyError(QueuekitError, BlockingIOError):
    """Another live queuekit process is writing the same output (it holds the output's lock)."""


class MissingDependencyError(QueuekitError, ImportError):
    """An optional feature needs a package that is not installed (names the extra to install)."""


class ClusterError(QueuekitError, RuntimeError):
    """A cluster task, its server or its configuration is not what was expected."""


class WorkLost(ClusterError):
    """Files a work queue handed to a worker that stopped before it finished them.

    Attributes:
        files: the files, by name (an epoch's files may repeat for later epochs).
        tasks: the tasks that took them and were lost.
    """

    def __init__(self, message: str, *, files, tasks):
        super().__init__(message)
        self.files = list(files)
        self.tasks = list(tasks)


class UnknownBatchSize(UserWarning):
    """The default keeps an epoch's last, smaller batch, so the batch dimension is None in the
    graph (``num_epochs`` without ``allow_smaller_final_batch``). Filter it, or pass
    ``allow_smaller_final_batch`` either way."""


# The two errors that subclass TensorFlow's are defined when first used, so that
# the tools that need no TensorFlow (make, its worker processes) do not load it
# (3.5 s and about 500 MB of a small make).
_WITH_TENSORFLOW = ("EndOfData", "CorruptRecordError")
_DEFINING = threading.Lock()  # two threads' first use must not make two classes


def __getattr__(name: str) -> Any:
    if name not in _WITH_TENSORFLOW:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _DEFINING:
        if name not in globals():
            _define_tensorflow_errors()
    return globals()[name]


def _define_tensorflow_errors() -> None:
    import tensorflow as tf

    class EndOfData(QueuekitError, tf.errors.OutOfRangeError):
        """The input pipeline is exhausted: every queue feeding the run is closed and empty.

        Subclasses :class:`tf.errors.OutOfRangeError`, so hand-written loops that
        catch that keep working unchanged.
        """

        def __init__(self, message: str = "input exhausted (end of data)"):
            tf.errors.OutOfRangeError.__init__(self, None, None, message)

    class CorruptRecordError(QueuekitError, tf.errors.DataLossError):
        """A TFRecord file is corrupt or truncated.

        Attributes:
            path: the file.
            index: index of the first bad record in that file.
            offset: byte offset of that record.
            reason: what is wrong (``bad length CRC``, ``bad data CRC``, ``truncated``...).
        """

        def __init__(self, path: str, index: int, offset: int, reason: str):
            message = f"{path}: record {index} at byte offset {offset}: {reason}"
            tf.errors.DataLossError.__init__(self, None, None, message)
            self.path = path
            self.index = index
            self.offset = offset
            self.reason = reason

        def __reduce__(self):
            return (type(self), (self.path, self.index, self.offset, self.reason))

    for cls in (EndOfData, CorruptRecordError):
        cls.__qualname__ = cls.__name__  # pickled and named as module-level classes
        globals()[cls.__name__] = cls
