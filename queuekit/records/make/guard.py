"""The guard of a command's output: one writer at a time (the signals a command defers or
ends on are in :mod:`queuekit.signals`).

One writer per output: an exclusive ``flock`` held for the whole of a
``make`` or ``export``. A pid in a file name cannot tell a live run from a dead one across PID
namespaces (two containers sharing a volume see different pids); a lock can,
because the kernel drops it when its holder dies, however it dies. So a run
that holds the lock of an output knows that every temp or spool file left
for that output belongs to a dead run, and two runs to one output never mix:
the second fails at once, naming the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator

from queuekit.errors import OutputBusyError


@contextlib.contextmanager
def exclusive(path: str, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the lock file ``path`` (created, and removed at the end).

    Raises:
        OutputBusyError: another live process holds it; names ``what`` and ``path``.
        OSError: ``path`` is not a regular file (a link, a FIFO...), naming it.
    """
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK, 0o644)
        except OSError as e:  # a link (ELOOP) or a folder there: not followed, not replaced
            raise OSError(e.errno, f"cannot take the lock of {what}: {e.strerror} (queuekit's "
                                   f"lock file goes there; it is not followed or replaced)",
                          path) from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{path} is not a regular file; queuekit's lock file goes there")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OutputBusyError(
                    f"{what} is being written by another queuekit process (it holds the lock "
                    f"{path}); wait for it to finish") from None
            # The holder before us unlinks the file while it still holds it: if we
            # opened that old file, the lock we got guards nothing. Take the new one.
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_ino, current.st_dev) == (mine.st_ino,
                                                                            mine.st_dev):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(path)  # still held: a process waiting on this file retries, as above
        finally:
            os.close(fd)
