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
from collections.abc import Iterator

from queuekit.records.encode import make_example
from queuekit.records.guard import signals_deferred
from queuekit.records.images import encode, load_rgb_image
from queuekit.records.tfrecord import frame

log = logging.getLogger("queuekit.records.writer")

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
    with open(chunk_path, "wb") as f:
        for task in tasks:
            record, reason = encode_record(task)
            if record is not None:
                f.write(record)
            results.append((None if record is None else len(record), reason))
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
    if workers > 1 and start_method != "fork" and (main := unimportable_main()):
        log.warning("worker processes cannot re-import this program's main module (%s): "
                    "encoding in this process, one image at a time. Run the program from "
                    "a file (or queuekit make) to use %d workers.", main, workers)
        workers = 1
    if workers == 1 or len(chunks) == 1:
        yield ((part, path, _encode_chunk(part, path)) for part, path in chunks)
        return
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
            with signals_deferred():
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


_BROKEN = (
    "make's worker processes died. If this program calls write_tfrecords at its top level, "
    "put that under `if __name__ == \"__main__\":` (each worker imports the program's main "
    "module, as multiprocessing's spawn and forkserver do, and would run it again), or pass "
    "workers=1")


def check_not_bootstrapping() -> None:
    """Raise in a worker that is importing the program's main module, which called make again.

    Raises:
        RuntimeError: saying to add the ``__main__`` guard.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(_BROKEN.replace("make's worker processes died", "this is one of "
                                           "make's worker processes, starting"))


def unimportable_main() -> str | None:
    """The main module's path when a spawned or forkserver worker could not import it.

    Such a worker runs the program's main file again, as multiprocessing does;
    a script read from stdin (``python - <<EOF``) has the path ``<stdin>``,
    which no worker can open (it would die with ``FileNotFoundError``).
    """
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None):
        return None  # python -m: imported by name
    path = getattr(main, "__file__", None)
    if path is None:
        return None  # python -c, a notebook: nothing to re-import
    # Where multiprocessing resolves a relative main path (not in its type stubs).
    full = os.path.join(getattr(multiprocessing.process, "ORIGINAL_DIR", None) or "", path)
    return None if os.path.isfile(full) else path


def _context(method: str | None):
    """The start method's context: ``method``, else forkserver (spawn where there is none).

    Never a fork of the calling process by default: it runs TensorFlow's
    threads, a fork copies their locks as they are, and one held at that
    moment deadlocks the child. The fork server preloads only this module
    (Pillow, numpy, queuekit's encoder). Each worker also imports the
    program's main module, as multiprocessing does: nothing for ``queuekit
    make`` or pytest, a TensorFlow import per worker for a script that imports
    TensorFlow at its top (measured: about 4 s once per ``make``; see README).
    ``start_method="fork"`` avoids that cost where the risk is acceptable.
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
