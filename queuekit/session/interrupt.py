"""Signals for a main thread that is blocked inside ``Session.run``.

Python runs signal handlers only when the main thread returns to bytecode, so
neither ``KeyboardInterrupt`` nor a user's SIGTERM handler can run while
``Session.run`` blocks in C++ (TF issues 11303, 7573). The C-level part of
Python's handler does run at once, though, and writes the signal number to the
wakeup fd. A small thread reads that fd and tells every active
:class:`~queuekit.QueueSession`, which closes its queues with
``cancel_pending_enqueues=True`` so the blocked run returns.

Routed signals: SIGINT, and SIGTERM and SIGHUP when the program installed a
Python handler for them (at their default they end the process at once, which
never hangs). The order, for a signal that comes during a run:

1. With Python's default SIGINT handler, the run is woken at once and raises a
   plain ``KeyboardInterrupt``.
2. With the program's own handler, the run may finish: it is woken only if it
   has not returned within ``stop_grace_secs``. Either way the handler is then
   called in the main thread, in Python, right after the run. If it returns
   normally and the run had to be woken (its result is lost), the run raises
   ``KeyboardInterrupt`` for SIGINT and ``SystemExit(128 + signum)`` otherwise.
3. A handler never runs inside TensorFlow's binding, where an exception would
   come out as ``RuntimeError: ... MISMATCH ... REPLACED BY ...``.

Outside a run the program's handler is called as usual. One router serves
every session of the process: the handlers and wakeup fd are installed when the
first session starts in the main thread and restored when the last one closes.
A session closed from another thread cannot restore them (Python allows that
only in the main thread); they are restored by the next session that starts or
closes in the main thread, and meanwhile behave as the program's own.
"""

from __future__ import annotations

import collections
import logging
import select
import signal
import socket
import threading
import time
from collections.abc import Callable

from queuekit.session.policy import RunState

log = logging.getLogger(__name__)

_STOP = b"\x00"  # not a signal number: tells the reader thread to exit
_WAKE = b"\xff"  # not a signal number either: a handler asks the reader thread to wake a run
ROUTED = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
               if s is not None)


class _Router:
    def __init__(self):
        # RLock: the handler runs in the main thread, which may hold the lock.
        self._lock = threading.RLock()
        self._sessions: list[SessionSignals] = []
        self._previous: dict[int, Callable] = {}  # signum -> the program's handler
        self._sockets = None
        self._thread = None
        self._stale = False  # installed, but the last session closed off the main thread
        self._deadlines: list[tuple[float, SessionSignals, float, int]] = []
        # (session, run, signal) a handler asked to wake; a deque: appended without a lock
        self._wakes: collections.deque = collections.deque()

    def register(self, session: SessionSignals) -> bool:
        """Route signals to ``session`` while it is active; False if that cannot be done here."""
        if threading.current_thread() is not threading.main_thread():
            return False
        with self._lock:
            if self._stale:
                self._uninstall()
            if not self._sessions and not self._install():
                return False
            self._sessions.append(session)
            return True

    def unregister(self, session: SessionSignals) -> None:
        with self._lock:
            if session not in self._sessions:
                return
            self._sessions.remove(session)
            if self._sessions:
                return
            if threading.current_thread() is threading.main_thread():
                self._uninstall()
            else:
                self._stop_reader()  # handlers stay: they call the program's own now
                self._stale = True

    def previous(self, signum: int) -> Callable | None:
        """The program's own handler of ``signum``."""
        return self._previous.get(signum)

    def _install(self) -> bool:
        previous = {}
        for signum in ROUTED:
            current = signal.getsignal(signum)
            if callable(current):  # SIG_DFL, SIG_IGN and None are the process's choice
                previous[signum] = current
        if signal.SIGINT not in previous:
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
        self._previous = previous
        self._sockets = (reader, writer)
        for signum in previous:
            signal.signal(signum, self._handle)
        self._thread = threading.Thread(target=self._read, args=(reader,),
                                        name="queuekit-sigint", daemon=True)
        self._thread.start()
        return True

    def _uninstall(self) -> None:
        """Restore the program's handlers and wakeup fd (main thread only)."""
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._handle:
                signal.signal(signum, handler)
        signal.set_wakeup_fd(-1)
        self._stop_reader()
        if self._sockets is not None:
            for s in self._sockets:
                s.close()
        self._sockets = None
        self._stale = False  # _previous stays: a session may still dispatch a deferred signal

    def _stop_reader(self) -> None:
        if self._thread is None:
            return
        try:
            if self._sockets is not None:
                self._sockets[1].send(_STOP)
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._thread = None
        self._deadlines = []

    def _read(self, reader: socket.socket) -> None:
        while True:
            timeout = None
            if self._deadlines:
                timeout = max(0.0, min(d[0] for d in self._deadlines) - time.monotonic())
            try:
                ready, _, _ = select.select([reader], [], [], timeout)
            except (OSError, ValueError):  # closed under us: the router is gone
                return
            self._wake_overdue()
            while self._wakes:
                session, run_started, signum = self._wakes.popleft()
                session.overdue(run_started, signum)
            if not ready:
                continue
            try:
                data = reader.recv(512)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not data or _STOP in data:
                return
            # Copies, without the lock: unregister holds it while it waits for this
            # thread to end, so a signal read meanwhile would keep both waiting.
            sessions, previous = list(self._sessions), dict(self._previous)
            for signum in set(data) & set(previous):
                for s in sessions:
                    try:
                        grace = s.arrived(signum, at_once=previous[signum] is
                                          signal.default_int_handler)
                        if grace is not None:
                            self._deadlines.append((time.monotonic() + grace[0], s,
                                                    grace[1], signum))
                    except Exception:  # never let the reader die: signals must keep working
                        log.debug("signal routing failed", exc_info=True)

    def _wake_overdue(self) -> None:
        now = time.monotonic()
        due = [d for d in self._deadlines if d[0] <= now]
        self._deadlines = [d for d in self._deadlines if d[0] > now]
        for _, s, run_started, signum in due:
            s.overdue(run_started, signum)

    def wake_soon(self, session: SessionSignals, run_started: float, signum: int) -> None:
        """From a handler in the main thread: have the reader thread wake ``session``'s run.

        The handler may run anywhere in the main thread's bytecode, also inside
        TensorFlow's ``Session.run`` before it enters C++, where the main thread
        may hold the plain (non-reentrant) lock inside the graph's session-run
        lock: closing the queues from there, with a ``Session.run`` of its own,
        would wait for that lock forever.
        """
        self._wakes.append((session, run_started, signum))
        try:
            if self._sockets is not None:
                self._sockets[1].send(_WAKE)
        except OSError:  # full (the reader is behind and will see the deque) or closed
            pass

    def _handle(self, signum, frame):
        with self._lock:
            sessions = list(self._sessions)
            previous = self._previous.get(signum)
        if any(s.absorb(signum, frame) for s in sessions):
            return  # dispatched by the session in the main thread, after its run
        if callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt


ROUTER = _Router()


class SessionSignals:
    """One session as the router sees it: wake its blocked run, dispatch signals after it."""

    def __init__(self, state: RunState, wake: Callable[[], None], grace: float):
        self._state = state
        self._wake = wake
        self._grace = grace

    def arrived(self, signum: int, *, at_once: bool):
        """A signal, told by the router thread while the main thread may be blocked in C++.

        Returns (seconds, run) when the run is to be woken later if still blocked.
        """
        state = self._state
        with state.lock:
            if not state.in_run:
                return None  # the main thread is in Python: the handler runs there
            if not at_once:
                return self._grace, state.run_started
            state.woken_by = signum
        self._wake()
        return None

    def overdue(self, run_started: float, signum: int) -> None:
        """The grace for a signal's run is over: wake it if it is the same run, still blocked."""
        state = self._state
        with state.lock:
            if not state.in_run or state.run_started != run_started:
                return
            state.woken_by = signum
        self._wake()

    def absorb(self, signum: int, frame) -> bool:
        """Called by the handler (main thread): True to leave the signal to :meth:`dispatch`."""
        state = self._state
        with state.lock:
            if not (state.in_run or state.closing or state.woken_by is not None):
                return False
            if (state.closing and not state.in_run and signum == signal.SIGINT
                    and ROUTER.previous(signum) is signal.default_int_handler):
                return False  # Ctrl-C while shutting down: end it now, not after its grace
            state.deferred.append((signum, frame))
            wake_now = state.in_run and signum == signal.SIGINT and (
                ROUTER.previous(signum) is signal.default_int_handler)
            run_started = state.run_started
        if wake_now:  # never from here: see _Router.wake_soon
            ROUTER.wake_soon(self, run_started, signum)
        return True

    def dispatch(self) -> None:
        """In the main thread, out of any run: call the handlers of deferred signals.

        Raises what a handler raises; ``KeyboardInterrupt`` for Python's default
        SIGINT handler; and when the run had to be woken and every handler
        returned, ``KeyboardInterrupt`` (SIGINT) or ``SystemExit(128 + signum)``.
        """
        state = self._state
        with state.lock:
            deferred, state.deferred = state.deferred, []
            woken, state.woken_by = state.woken_by, None
        for signum, frame in deferred:
            handler = ROUTER.previous(signum)
            if handler is signal.default_int_handler or not callable(handler):
                raise KeyboardInterrupt from None
            handler(signum, frame)
        if woken == signal.SIGINT:
            raise KeyboardInterrupt from None
        if woken is not None:
            raise SystemExit(128 + woken)

    @property
    def pending(self) -> bool:
        return bool(self._state.deferred) or self._state.woken_by is not None
