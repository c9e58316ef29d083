"""``make``'s worker processes: each turns a chunk of images into framed records in a spool file.

This module runs in the workers: it imports Pillow, numpy and queuekit's record
encoder, and no TensorFlow of its own.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator

from queuekit.records.encode import make_example
from queuekit.records.images import encode, load_rgb_image
from queuekit.records.tfrecord import frame
from queuekit.signals import signals_deferred

log = logging.getLogger("queuekit.records.make.writer")

CHUNK = 8  # images per task sent to a worker
# copy_file_range errors that mean "not here": fall back to read + write.
_NO_COPY_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)


def encode_example(task, source=None) -> tuple[bytes | None, str | None]:
    """One image -> (its serialized tf.train.Example, None), or (None, why it was skipped).

    ``task`` is (path, (height, width), encoding, label, label text, relative
    filename, schema); ``source`` is what to decode instead of the path (a file
    object, for paths Pillow cannot open itself, such as ``gs://``). The local
    writer and Beam's workers both call this, so the records are the same.
    """
    path, size, encoding, label, label_text, filename, schema = task
    try:
        data = encode(load_rgb_image(path if source is None else source, size), encoding)
    except ValueError as e:
        return None, str(e)
    except MemoryError:
        return None, "out of memory while decoding"
    return make_example(data, label=label, height=size[0], width=size[1], fmt=encoding,
                        label_text=label_text, filename=filename, schema=schema), None


def encode_record(task) -> tuple[bytes | None, str | None]:
    """One image -> (the framed TFRecord bytes, None), or (None, why it was skipped)."""
    example, reason = encode_example(task)
    return (None if example is None else frame(example)), reason


def _encode_chunk(tasks, chunk_path: str) -> list[tuple[int | None, str | None]]:
    """Write the records of ``tasks`` to ``chunk_path``; (length or None, skip reason) each."""
    results = []
    try:
        with open(chunk_path, "wb") as f:
            for task in tasks:
                record, reason = encode_record(task)
                if record is not None:
                    f.write(record)
                results.append((None if record is None else len(record), reason))
    except OSError as e:  # a full disk says "[Errno 28] No space left on device", no file
        if e.filename is not None:
            raise
        raise OSError(e.errno, f"{e.strerror} (writing {chunk_path}, make's spool file "
                      f"beside the output)", chunk_path) from e
    return results


def _init_worker(program: int) -> None:
    # Ctrl-C reaches the whole process group: the parent alone handles it and
    # shuts the pool down, instead of every worker dying with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(program)


def _die_with(program: int) -> None:
    """Exit when the program that started the pool dies, even by SIGKILL.

    A killed program cannot shut its pool down, and under forkserver the
    worker's parent is the fork server, which lives as long as its workers
    do: so the worker watches the program itself, with a pidfd where Linux has
    one (woken the moment it exits), else by polling.
    """
    try:
        fd = os.pidfd_open(program)
    except (AttributeError, OSError):
        fd = None
    if fd is None and not pid_alive(program):
        os._exit(1)
    threading.Thread(target=_watch, args=(program, fd), daemon=True,
                     name="queuekit-parent-watch").start()


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (also someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(program: int, fd: int | None) -> None:
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has exited
        os._exit(1)
    while pid_alive(program):
        time.sleep(0.5)
    os._exit(1)


@contextlib.contextmanager
def encoded_chunks(tasks, workers: int, spool: str,
                   start_method: str | None = None) -> Iterator[Iterator[tuple]]:
    """(chunk's tasks, chunk file, results of :func:`_encode_chunk`), in task order.

    Each chunk of :data:`CHUNK` images is encoded by a worker process into
    its own file in ``spool``. Sending 200 KB per image back through a pipe
    costs four copies (pickle, pipe, read, unpickle) and much of the parent's
    CPU; a file costs one write in the worker and an in-kernel copy in the
    parent (measured: 470 -> 580 images/s on 2 cores).

    At most ``2 * workers`` chunks are in flight, so memory and spool size stay
    bounded. Leaving the ``with`` block (normally, on an error or Ctrl-C)
    cancels what has not started and waits for the chunks that have, at most
    one chunk's time: no worker outlives it.
    """
    chunks = [(tasks[start:start + CHUNK], os.path.join(spool, f"{start}.chunk"))
              for start in range(0, len(tasks), CHUNK)]
    if workers == 1 or len(chunks) == 1:
        yield ((part, path, _encode_chunk(part, path)) for part, path in chunks)
        return
    with main_hidden():
        pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=_context(start_method), initializer=_init_worker,
            initargs=(os.getpid(),))
    window: collections.deque = collections.deque()

    def in_order():
        for part, path in chunks:
            # A submit may start a worker, and a Ctrl-C inside that start (waiting for the
            # fork server to name the new process) left a worker the pool did not know:
            # at shutdown it took the stop meant for a known one, and the pool waited for
            # that one forever (1 make in 10 under load, reproduced).
            with signals_deferred(), main_hidden():
                future = pool.submit(_encode_chunk, part, path)
            window.append((part, path, future))
            if len(window) >= 2 * workers:
                part, path, future = window.popleft()
                yield part, path, future.result()
        while window:
            part, path, future = window.popleft()
            yield part, path, future.result()

    try:
        yield in_order()
    except concurrent.futures.process.BrokenProcessPool as e:
        raise RuntimeError(_BROKEN) from e
    finally:
        with signals_deferred():  # a second Ctrl-C inside the shutdown left a hung process
            for _, _, future in window:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


_BROKEN = "make's worker processes died (see the error above); workers=1 encodes in-process"


def check_not_bootstrapping() -> None:
    """Raise in a process that multiprocessing is starting (another program's pool, whose
    workers import its main module) when that module calls make at its top level.

    Raises:
        RuntimeError: saying to add the ``__main__`` guard.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError("make was called while a multiprocessing worker started (it runs "
                           "the program's main module again): put that call under "
                           "`if __name__ == \"__main__\":`")


@contextlib.contextmanager
def main_hidden():
    """While workers start: ``sys.modules["__main__"]`` an empty module, so that a spawned
    or forkserver worker never imports the program's main file.

    multiprocessing's workers import it (as ``__mp_main__``) to find pickled
    functions; ours are all in this module. Imported, a script's top level would
    run again in every worker: ``write_tfrecords`` at a script's top level (the
    seed script's own shape) ran the script 3 times, its ``rmtree`` of the output
    folder too (#43); a script read from stdin could not be imported at all; a
    script importing TensorFlow cost each worker 4 s. A spawn happens only while
    the pool is made and in ``submit``, in this thread.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = main


def _context(method: str | None):
    """The start method's context: ``method``, else forkserver (spawn where there is none).

    Never a fork of the calling process by default: it runs TensorFlow's
    threads, a fork copies their locks as they are, and one held at that
    moment deadlocks the child. The fork server preloads only this module
    (Pillow, numpy, queuekit's encoder); no worker imports the program's main
    module (:func:`main_hidden`).
    """
    available = multiprocessing.get_all_start_methods()
    method = method or ("forkserver" if "forkserver" in available else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__])
    return ctx


def copy_bytes(src: int, dst: int, length: int) -> None:
    """Append ``length`` bytes from ``src``'s position to ``dst``, in the kernel where it can."""
    while length:
        try:
            n = os.copy_file_range(src, dst, length)
        except (AttributeError, OSError) as e:  # not Linux, or a filesystem that cannot
            if isinstance(e, OSError) and e.errno not in _NO_COPY_RANGE:
                raise
            data = os.read(src, min(length, 1 << 20))
            n = len(data)
            while data:
                data = data[os.write(dst, data):]
        if n == 0:
            raise OSError(f"chunk file ended early: {length} bytes missing")
        length -= n
