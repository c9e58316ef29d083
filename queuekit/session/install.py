"""queuekit's guarantees for a TF1 program as it is, installed into TensorFlow's entry points.

``queuekit run train.py`` and :func:`install` replace four functions of TensorFlow's
TF1 API, and nothing else, while installed. The program builds the graph it
built (no op is added), its runner threads are TensorFlow's own (same names, daemon
flag and ``close_on_stop`` threads), and its Coordinator keeps TensorFlow's semantics:
a runner's error stops it and is raised by ``join``, a clean-stop type is not.

- ``QueueRunner._run``, the loop of every runner thread whoever starts it
  (``start_queue_runners``, ``MonitoredSession``, ``Supervisor``, a program's own
  ``qr.create_threads``): TensorFlow's loop, plus each enqueue noted (the stall watch)
  and a runner's error named (file, record, offset) before the Coordinator gets it.
  Every such error is kept: one that never ended the program is reported at exit.
- ``QueueRunner.create_threads``: the session whose runners start is watched
  (:class:`~queuekit.session.watched.Watched`): its input files checked, Ctrl-C
  routed to its blocked run, the stall watch started.
- ``BaseSession.run``, in the main thread, for a watched session: what the signal
  router and the stall watch need to know, and what the input's end must say.
- ``BaseSession.close``: a watched session's runner threads stopped and joined by one
  deadline first, stragglers named.

What cannot be covered is said once on stderr: a session class with its own ``run``,
an enqueue run by the program's own thread. ``docs/run.rst`` lists what changes for a program.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import tensorflow as tf

from queuekit.errors import add_note
from queuekit.session.reads import queues_read
from queuekit.session.watched import Failure, Watched

_v1 = tf.compat.v1
_QueueRunner = _v1.train.QueueRunner
_BaseSession = next(c for c in _v1.Session.__mro__ if c.__name__ == "BaseSession")
_MAIN = threading.main_thread().ident

_ORIGINAL = {
    "_run": _QueueRunner._run,
    "create_threads": _QueueRunner.create_threads,
    "run": _BaseSession.run,
    "close": _BaseSession.close,
}


class Guard:
    """What is installed: the watched sessions and every runner error, for one process."""

    def __init__(self, *, stall_timeout_secs: float | None, join_timeout_secs: float,
                 check_inputs: bool, report: bool, report_every_secs: float | None,
                 threads: int | None = None, window=None):
        self.stall_timeout = stall_timeout_secs or None
        self.join_timeout = join_timeout_secs
        self.check_inputs = check_inputs
        self.window = window  # a BenchWindow: a child of `queuekit bench --program`
        self.report = report or bool(report_every_secs) or window is not None
        self.report_every = report_every_secs or None
        self.threads = threads
        # queue -> the program's own thread count (varied), or why it cannot be (fixed)
        self.varied: dict[str, int] = {}
        self.fixed: dict[str, str] = {}
        # Reentrant: a session dropped unclosed is closed by its __del__, in whatever thread
        # the garbage collector runs, which may be inside a block that holds this lock.
        self.lock = threading.RLock()
        self.sessions: dict[int, Watched] = {}  # id(session) -> its watch, until closed
        self.failures: list[Failure] = []
        self.progress: dict[str, float] = {}  # queue -> monotonic time of its last enqueue
        self._said: set[str] = set()

    def original_run(self, sess, *args):
        return _ORIGINAL["run"](sess, *args)

    def say_once(self, key: str, message: str) -> None:
        with self.lock:
            if key in self._said:
                return
            self._said.add(key)
        print(f"queuekit: {message}", file=sys.stderr, flush=True)

    def fail(self, exc: BaseException, coords, where: str, sess=None) -> None:
        """Keep ``exc`` (a runner's error, a stall, a bad input) and stop ``coords`` with it.

        Runners started without a Coordinator (``start_queue_runners(sess)`` alone, as
        old tutorials do) have no one to tell: TensorFlow logs the error and the program
        blocks in its next dequeue for good. Here ``sess``'s queues are closed and its next
        run raises the error instead.
        """
        add_note(exc, f"queuekit: {where}")
        with self.lock:
            self.failures.append(Failure(exc, where))
            watched = self.sessions.get(id(sess)) if sess is not None else None
        for coord in coords:
            if coord is not None:
                # A tuple: request_stop(exc) would keep sys.exc_info(), which is not exc.
                coord.request_stop((type(exc), exc, exc.__traceback__))
        if watched is not None and None in coords:
            watched.failed(exc)

    def resize(self, qr) -> None:
        """Give ``qr`` :attr:`threads` threads where its structure allows: a runner whose
        enqueue ops are one op repeated (``batch``/``shuffle_batch``'s ``num_threads``)
        and that reads something (not a producer of names)."""
        name, ops = qr.queue.queue_ref.op.name, qr.enqueue_ops
        if name in self.varied or name in self.fixed:
            pass
        elif not queues_read(ops):
            self.fixed[name] = "a producer: it enqueues names or constants, it reads nothing"
        elif len({op.name for op in ops}) > 1:
            self.fixed[name] = (f"{len(ops)} distinct enqueue ops (reader copies of a "
                                "*_join or a parallel reader): their number is the graph's")
        else:
            self.varied[name] = len(ops)
            qr._enqueue_ops = [ops[0]] * (self.threads or len(ops))  # noqa: SLF001

    def started(self, qr, sess, coord, threads) -> None:
        """``qr``'s threads were made for ``sess``: watch the session (checking its inputs
        the first time) before they start."""
        if type(sess).run is not _session_run:
            self.say_once("own-run", f"{type(sess).__name__} has a run of its own: its runs "
                          "are not watched (no Ctrl-C while blocked, no stall watch)")
        with self.lock:
            found = self.sessions.get(id(sess))
            new = found is None
            watched = self.sessions[id(sess)] = found or Watched(self, sess)
        watched.add(qr, coord, threads)
        if new:
            watched.start(check=self.check_inputs)

    def woken(self, sess) -> bool:
        """Whether queuekit closed ``sess``'s queues (an error, a stall, a signal, a stop)."""
        watched = self.sessions.get(id(sess))
        return watched is None or watched.woken

    def closed(self, sess) -> None:
        watched = self.sessions.pop(id(sess), None)  # atomic; never waits (see self.lock)
        if watched is not None:
            self._name_stragglers(watched.stop(time.monotonic() + self.join_timeout))

    def finish(self, exiting: BaseException | None = None) -> list[Failure]:
        """At the program's end: stop and join every watched session's threads by one
        deadline; the errors that did not end the program (``exiting``)."""
        with self.lock:
            watched, self.sessions = list(self.sessions.values()), {}
        deadline = time.monotonic() + self.join_timeout
        for w in watched:
            self._name_stragglers(w.stop(deadline))
        seen = set()
        while exiting is not None and id(exiting) not in seen:
            seen.add(id(exiting))
            exiting = exiting.__cause__ or exiting.__context__
        with self.lock:
            return [f for f in self.failures if id(f.exception) not in seen]

    def _name_stragglers(self, names: list[str]) -> None:
        if names:
            print(f"queuekit: {len(names)} runner thread(s) still running "
                  f"{self.join_timeout:g} s after their session stopped: {', '.join(names)}",
                  file=sys.stderr, flush=True)


_GUARD: Guard | None = None


def current() -> Guard | None:
    """The installed guard, or None."""
    return _GUARD


def install(*, stall_timeout_secs: float | None = 60.0, join_timeout_secs: float = 5.0,
            check_inputs: bool = True, report: bool = False,
            report_every_secs: float | None = None, threads: int | None = None,
            window=None) -> Guard:
    """Give every TF1 queue-runner session of this process queuekit's guarantees.

    Installed already (a program that calls this, run by ``queuekit run``): the guard
    installed, as it is.

    For programs started by a launcher queuekit does not control (a cluster job, a
    notebook); ``queuekit run`` does this for a script. ``stall_timeout_secs``: a run
    blocked that long while no element enters the queues it reads raises
    :class:`~queuekit.PipelineStalled` (None or 0: never). ``join_timeout_secs``: how long
    closing waits for a session's runner threads. ``check_inputs``: the framing of every
    TFRecord file and the size of every fixed-length file checked when runners start.
    ``report``: each session's input report (where its steps' time goes, the stage to
    widen) on stderr when it stops, and every ``report_every_secs``. ``threads``: each
    runner that ``batch``/``shuffle_batch`` made (one enqueue op repeated) gets that many
    threads instead of the program's ``num_threads``. ``window``: a ``BenchWindow`` (the
    child of ``queuekit bench --program``).
    At exit the runner errors that never ended the program are reported on stderr.
    """
    global _GUARD
    if _GUARD is not None:  # a program that installs it, run by `queuekit run`: one guard
        return _GUARD
    guard = Guard(stall_timeout_secs=stall_timeout_secs, join_timeout_secs=join_timeout_secs,
                  check_inputs=check_inputs, report=report, report_every_secs=report_every_secs,
                  threads=threads, window=window)
    _QueueRunner._run = _runner_loop
    _QueueRunner.create_threads = _create_threads
    _BaseSession.run = _session_run
    _BaseSession.close = _session_close
    _GUARD = guard
    _report_at_exit()
    return guard


def uninstall() -> None:
    """Put TensorFlow's functions back (running threads keep the guard they started with)."""
    global _GUARD
    for name, function in _ORIGINAL.items():
        setattr(_QueueRunner if name in ("_run", "create_threads") else _BaseSession,
                name, function)
    _GUARD = None


@contextlib.contextmanager
def installed(**options):
    """:func:`install` for a block; at its end every watched session is stopped and joined,
    and the runner errors that did not end the block are reported on stderr."""
    ours = _GUARD is None  # else the outer install's: it reports and uninstalls
    guard = install(**options)
    exiting = None
    try:
        yield guard
    except BaseException as e:
        exiting = e
        raise
    finally:
        if ours:
            try:
                report(guard.finish(exiting))
            finally:
                uninstall()


def report(missed: list[Failure]) -> None:
    """Say on stderr each runner error that never ended the program."""
    for failure in missed:
        exc = failure.exception
        notes = "".join(f"\n  {n}" for n in getattr(exc, "__notes__", ()))
        print(f"queuekit: an input error did not end the program ({failure.where}):\n"
              f"  {type(exc).__name__}: {_first_line(exc)}{notes}", file=sys.stderr,
              flush=True)


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return next((line for line in text.splitlines() if line.strip()), type(exc).__name__)


_EXIT_REGISTERED = False


def _report_at_exit() -> None:
    """Before the interpreter joins non-daemon threads (a runner's would hang it): stop
    the watched sessions and report the missed errors of an :func:`install` left on."""
    global _EXIT_REGISTERED
    register = getattr(threading, "_register_atexit", None)  # Python >= 3.9
    if _EXIT_REGISTERED or register is None:
        return
    try:
        register(_at_exit)
        _EXIT_REGISTERED = True
    except RuntimeError:  # the interpreter is shutting down already
        pass


def _at_exit() -> None:
    guard = _GUARD
    if guard is not None:
        report(guard.finish(getattr(sys, "last_value", None)))


# -- what is installed ---------------------------------------------------------------
def _runner_loop(qr, sess, enqueue_op, coord=None):
    """TensorFlow's ``QueueRunner._run`` (queue_runner_impl.py), each enqueue noted and
    an error named and kept."""
    guard = _GUARD
    if guard is None:
        return _ORIGINAL["_run"](qr, sess, enqueue_op, coord)
    queue = qr.queue.queue_ref.op.name
    progress = guard.progress
    decremented = False
    try:
        enqueue = sess.make_callable(enqueue_op)
        while True:
            if coord and coord.should_stop():
                break
            try:
                enqueue()
            except qr._queue_closed_exception_types:  # noqa: SLF001 - TF's own loop
                with qr._lock:  # noqa: SLF001
                    qr._runs_per_session[sess] -= 1  # noqa: SLF001
                    decremented = True
                    if qr._runs_per_session[sess] == 0:  # noqa: SLF001
                        try:
                            sess.run(qr.close_op)
                        except Exception:  # noqa: BLE001,S110 - TF ignores them too
                            pass
                return
            progress[queue] = time.monotonic()
    except Exception as e:  # noqa: BLE001 - every runner error goes to the Coordinator
        if coord is not None and coord.should_stop():
            coord.request_stop(e)  # after a stop: a consequence of it, as TF has it
            return
        if guard.woken(sess) and isinstance(
                e, (tf.errors.CancelledError, tf.errors.OutOfRangeError)):
            return  # queuekit closed the queue (Ctrl-C, a stall, an error): not news
        if coord is None:
            with qr._lock:  # noqa: SLF001
                qr._exceptions_raised.append(e)  # noqa: SLF001
        from queuekit.session import diagnose  # only when a runner fails

        named, note = diagnose.named_error(e, enqueue_op)
        if note:
            add_note(named, note)
        guard.fail(named, [coord], f"raised in runner thread {threading.current_thread().name!r}"
                   f" feeding queue {queue!r}", sess)
    finally:
        if not decremented:
            with qr._lock:  # noqa: SLF001
                qr._runs_per_session[sess] -= 1  # noqa: SLF001


def _create_threads(qr, sess, coord=None, daemon=False, start=False):
    guard = _GUARD
    if guard is not None and guard.threads:
        guard.resize(qr)
    threads = _ORIGINAL["create_threads"](qr, sess, coord, daemon, False)
    if guard is not None and threads:
        try:
            guard.started(qr, sess, coord, threads)
        except Exception as e:  # noqa: BLE001 - queuekit's own failure must not end the program
            guard.say_once("failed", f"could not watch this session ({type(e).__name__}: {e}); "
                           "it runs as TensorFlow runs it")
    if start:
        for t in threads:
            t.start()
    return threads


def _session_run(sess, fetches, feed_dict=None, options=None, run_metadata=None):
    guard = _GUARD
    if guard is not None:
        watched = guard.sessions.get(id(sess))
        if threading.get_ident() == _MAIN:
            if watched is not None:
                return watched.run(fetches, feed_dict, options, run_metadata)
        elif watched is None and getattr(fetches, "type", "").startswith("QueueEnqueue"):
            guard.say_once("own-enqueue", f"a thread of the program's own runs {fetches.name!r}"
                           ": its errors and stalls are the program's to see")
    return _ORIGINAL["run"](sess, fetches, feed_dict, options, run_metadata)


def _session_close(sess):
    guard = _GUARD
    if guard is not None:
        guard.closed(sess)
    return _ORIGINAL["close"](sess)
