"""Ctrl-C for a main thread that is blocked inside ``Session.run``.

Python runs signal handlers only when the main thread returns to bytecode, so a
``KeyboardInterrupt`` cannot arrive while ``Session.run`` blocks in C++ (TF
issues 11303, 7573). The C-level part of Python's handler does run at once,
though, and writes the signal number to the wakeup fd. A small thread reads
that fd and tells every active :class:`~queuekit.QueueSession`, which closes its
queues with ``cancel_pending_enqueues=True``; the blocked run returns, and the
session raises a plain ``KeyboardInterrupt`` in the main thread.

One router serves every session of the process: the handler and wakeup fd are
installed when the first session starts in the main thread and restored when
the last one closes, so several sessions may be used side by side.
"""

from __future__ import annotations

import logging
import select
import signal
import socket
import threading
from collections.abc import Callable

from queuekit.session.run_state import RunState

log = logging.getLogger(__name__)

_STOP = b"\x00"  # not a signal number: tells the reader thread to exit


class _Router:
    def __init__(self):
        # RLock: the handler runs in the main thread, which may hold the lock.
        self._lock = threading.RLock()
        self._sessions: list = []
        self._prev_handler = None
        self._prev_wakeup_fd = -1
        self._sockets = None
        self._thread = None

    def register(self, session: SessionSignals) -> bool:
        """Route SIGINT to ``session`` while it is active; False if that cannot be done here."""
        if threading.current_thread() is not threading.main_thread():
            return False
        with self._lock:
            if not self._sessions and not self._install():
                return False
            self._sessions.append(session)
            return True

    def unregister(self, session) -> None:
        with self._lock:
            if session not in self._sessions:
                return
            self._sessions.remove(session)
            if not self._sessions:
                self._uninstall()

    def _install(self) -> bool:
        current = signal.getsignal(signal.SIGINT)
        if current in (signal.SIG_IGN, signal.SIG_DFL, None):
            return False  # the process chose to ignore Ctrl-C or die of it: leave that alone
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:
            reader.close()
            writer.close()
            return False
        if previous_fd != -1:
            # Someone (an asyncio loop) owns the wakeup fd: do not steal it.
            signal.set_wakeup_fd(previous_fd)
            reader.close()
            writer.close()
            return False
        self._prev_handler = current
        self._sockets = (reader, writer)
        signal.signal(signal.SIGINT, self._handle)
        self._thread = threading.Thread(target=self._read, args=(reader,),
                                        name="queuekit-sigint", daemon=True)
        self._thread.start()
        return True

    def _uninstall(self) -> None:
        if signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, self._prev_handler)
        signal.set_wakeup_fd(-1)
        reader, writer = self._sockets
        try:
            writer.send(_STOP)
        except OSError:
            pass
        self._thread.join(timeout=5)
        reader.close()
        writer.close()
        self._sockets = self._thread = None

    def _read(self, reader: socket.socket) -> None:
        while True:
            select.select([reader], [], [])
            try:
                data = reader.recv(512)
            except BlockingIOError:
                continue
            except OSError:
                return
            if signal.SIGINT in data:
                with self._lock:
                    sessions = list(self._sessions)
                for s in sessions:
                    try:
                        s.arrived()
                    except Exception:  # never let the reader die: Ctrl-C must keep working
                        log.debug("SIGINT routing failed", exc_info=True)
            if not data or _STOP in data:
                return

    def _handle(self, signum, frame):
        with self._lock:
            sessions = list(self._sessions)
            previous = self._prev_handler
        # A session blocked in a run turns the signal into KeyboardInterrupt itself,
        # after the run returns; raising here would surface inside TF's binding as
        # "RuntimeError: ... MISMATCH ... REPLACED BY KeyboardInterrupt".
        if any(s.absorb() for s in sessions):
            return
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt


ROUTER = _Router()


class SessionSignals:
    """One session as the router sees it: wake its blocked run when SIGINT comes."""

    def __init__(self, state: RunState, wake: Callable[[], None]):
        self._state = state
        self._wake = wake

    def arrived(self) -> None:
        """SIGINT, told by the router thread while the main thread may be blocked in C++."""
        with self._state.lock:
            if not self._state.in_run:
                return  # the main thread is in Python: the handler raises there
            self._state.interrupted = True
        self._wake()

    def absorb(self) -> bool:
        """Called by the SIGINT handler (main thread): True to swallow the signal."""
        state = self._state
        with state.lock:
            if not (state.in_run or state.interrupted or state.closing):
                return False
            state.interrupted = True
            in_run = state.in_run
        if in_run:
            self._wake()
        return True
