"""Every process-wide signal handler queuekit sets, in one place (a session's SIGINT router
is the session's own, ``session/interrupt.py``): the ending signals swapped for a block
(``handlers_replaced``), deferred while a worker starts (``signals_deferred``), the first
one ending a command and the later ones ignored until its clean-up is done
(``first_signal_ends``), and a Beam job's worker processes killed before its clean-up
waits for them (``workers_end_first``). Only in the main thread, and only inside a block:
nothing is set on import.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

ENDING = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
                if s is not None)


@contextlib.contextmanager
def handlers_replaced(replace: Callable[[int, Any], Any], signals=ENDING) -> Iterator[None]:
    """While the block runs, each of ``signals`` has the handler ``replace(signum, its
    handler)`` returns, unless that is None; the old ones are back after. Only in the main
    thread: elsewhere Python cannot set a handler, and nothing is replaced."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in signals:
            new = replace(signum, signal.getsignal(signum))
            if new is not None:
                previous[signum] = signal.signal(signum, new)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _defers(handler) -> bool:
    return getattr(handler, "_queuekit_defers", False)


def _wrapping(wrapper, previous: dict[int, Any]) -> Callable[[int, Any], Any]:
    """For :func:`handlers_replaced`: ``wrapper`` in place of each handler set in Python that
    does not defer the signal, that handler kept in ``previous`` for the wrapper to call."""
    def wrap(signum, handler):
        if not callable(handler) or _defers(handler):
            return None
        previous[signum] = handler
        return wrapper
    return wrap


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver them.

    For the clean-up after a first Ctrl-C and for a commit: a second Ctrl-C that
    lands inside a process pool's shutdown or between two renames left a hung
    process or half an output. Blocking the signal with ``pthread_sigmask`` is not
    enough: the kernel hands a process signal to any thread that does not block
    it, and Python runs the handler in the main thread all the same. So the
    Python handlers are swapped for one that notes the signal. Only in the main
    thread (elsewhere there is no handler to swap); nested blocks deliver at the
    outermost end.
    """
    noted: list[int] = []
    note = _noting(noted)

    def defer(signum, handler):
        # Not one ignored, installed from C, or already deferred by an outer block.
        return None if handler in (signal.SIG_IGN, None) or _defers(handler) else note

    try:
        with handlers_replaced(defer):
            yield
    finally:
        for signum in dict.fromkeys(noted):  # each once: a third Ctrl-C is the second's echo
            signal.raise_signal(signum)


@contextlib.contextmanager
def first_signal_ends() -> Iterator[None]:
    """While the block runs, once a SIGINT, SIGTERM or SIGHUP handler has raised (ending the
    block: ``KeyboardInterrupt``), any later ending signal is dropped. A handler that
    does not raise (a program's "stop after this epoch") keeps getting every signal.

    From then on, the block is cleaning up. A second Ctrl-C (a user pressing twice) that
    landed in the unwinding before a :func:`signals_deferred` block began would cut the
    clean-up short and leave temp files. Dropped, not deferred: it asks for what is
    already happening. The clean-up is bounded (one chunk's time for ``make``); SIGKILL
    still ends it at once, and the next run removes what it leaves. Only handlers set in
    Python are wrapped; only in the main thread.
    """
    previous: dict[int, Any] = {}
    ended: list[int] = []

    def end_once(signum, frame):
        if ended:
            return
        try:
            previous[signum](signum, frame)
        except BaseException:
            ended.append(signum)
            raise

    with handlers_replaced(_wrapping(end_once, previous)):
        yield


def _noting(noted: list[int]):
    def note(signum, frame):
        noted.append(signum)
    note._queuekit_defers = True  # type: ignore[attr-defined]
    return note


@contextlib.contextmanager
def workers_end_first(marker: str) -> Iterator[None]:
    """While the block runs, a signal that ends the program (SIGINT, SIGTERM, SIGHUP with a
    Python handler) first kills the descendant processes started meanwhile whose command
    line contains ``marker``, and keeps killing any started later until the block ends;
    then that handler runs.

    For Beam's worker processes: the job's own clean-up (in Beam's ``finally``) waits for
    each worker to exit, and a worker that was still starting when the signal came never
    does (it waits for a runner that is gone): the command hung after SIGTERM. A worker
    may also start while the job unwinds, hence the thread, and after the block (a worker
    forked before the reaper's last look and exec'd after it outlived the command once in
    CI, holding its pipes), hence a last look at exit, after Python joined the job's
    threads. A worker whose parent dies meanwhile is adopted (:func:`_adopt_orphans`), so
    every look still sees it. Ignored and default dispositions are left alone, as is a
    handler that defers the signal (:func:`signals_deferred`); only in the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = set(descendants(os.getpid()))
    done = threading.Event()
    reaper = threading.Thread(target=_reap, args=(marker, before, done), daemon=True,
                              name="queuekit-worker-reaper")
    previous: dict[int, Any] = {}

    def kill_then_handle(signum, frame):
        if not reaper.is_alive() and not done.is_set():
            _adopt_orphans()
            reaper.start()
            atexit.register(_last_look, marker, before)
        _kill(marker, before)
        return previous[signum](signum, frame)

    try:
        with handlers_replaced(_wrapping(kill_then_handle, previous)):
            yield
    finally:
        done.set()
        if reaper.is_alive():
            reaper.join()
            _kill(marker, before)  # one orphaned since the reaper's last pass


def _adopt_orphans() -> None:
    """Make this process the parent of its orphaned descendants (Linux's child subreaper).

    Beam starts a worker through ``sh -c``, which forks the Python worker: a kill that
    lands on the shell between its fork and our next look at ``/proc`` orphaned the worker
    to init, out of our sight, and it outlived the command holding its pipes (CI, 2 runs
    in 5). Adopted, it stays a descendant and the next look kills it. Only once an ending
    signal came: the program is ending, and the zombies of what it kills are reaped when
    it exits. Elsewhere than Linux nothing changes.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def _reap(marker: str, before: set[int], done: threading.Event) -> None:
    while not done.wait(0.05):
        _kill(marker, before)


def _last_look(marker: str, before: set[int], seconds: float = 0.3) -> None:
    """At exit after an ending signal: kill the workers started since, for a moment (a
    fork shows the worker's command line only once it has exec'd)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _kill(marker, before)
        time.sleep(0.02)


def _kill(marker: str, before: set[int]) -> None:
    for pid in descendants(os.getpid()):
        if pid not in before and marker in _command_line(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid``, from ``/proc`` (none where there is no ``/proc``)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    # pid (comm) state ppid ...: comm may hold spaces and parentheses
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
