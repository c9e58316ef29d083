"""A run: what the main thread is doing, what a run raises, and a run with hooks.

:class:`RunState` is what the main thread is doing right now (inside
``Session.run`` or not), shared with the stall watchdog and the signal router,
which run in other threads and leave their findings there (a stall, an
interrupt) for the main thread. :func:`run_with_hooks` merges
``SessionRunHook`` requests into one run as ``MonitoredSession`` does.

:class:`RunPolicy` decides what a run raises on end of data, a runner error, a
stall or Ctrl-C. End of input is policy, as ``clean_stop_exception_types=(OutOfRangeError,)``
is in TensorFlow's Coordinator: it becomes :class:`EndOfData`. Everything the
other threads found (a runner's exception, a stall, a signal) is raised in the
main thread, by the next run or when the session closes, and a runner's error
is never turned into an ordinary end of data.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from queuekit.errors import EndOfData, ShutdownTimeout

log = logging.getLogger(__name__)
_v1 = tf.compat.v1


class RunState:
    """``in_run`` while the main thread is inside ``Session.run``, and what came meanwhile."""

    def __init__(self) -> None:
        # RLock: the SIGINT handler runs in the main thread, which may hold the lock.
        self.lock = threading.RLock()
        self.in_run = False
        self.run_started = 0.0
        self.reads: tuple[str, ...] = ()  # the queues the current run dequeues from
        self.deferred: list[tuple[int, Any]] = []  # (signum, frame) for the main thread to dispatch
        self.woken_by: int | None = None  # the signal that made us wake the run
        self.stall: Any = None  # a PipelineStalled left by the watchdog
        self.closing = False  # shutdown is under way

    def enter_run(self, reads: tuple[str, ...] = ()) -> None:
        with self.lock:
            self.run_started = time.monotonic()
            self.reads = reads
            self.in_run = True

    def leave_run(self) -> None:
        with self.lock:
            self.in_run = False


class RunPolicy:
    """Runs a session's steps and raises what its threads left behind."""

    def __init__(self, state: RunState, coord, runners, signals):
        self.state = state
        self.ended = False  # EndOfData (or Ctrl-C) ended the input
        self._error_reported = False  # the runner error reached the caller once
        # What the caller handed to request_stop(exc): raised at close as Coordinator.join
        # raises it, also when it is the runner error a run raised before (an eval loop's
        # `except Exception as e: coord.request_stop(e)` must not end in exit 0).
        self.requested: BaseException | None = None
        self._coord = coord
        self._runners = runners
        self._signals = signals

    def run(self, sess, fetches, feed_dict, options, run_metadata, reads=()):
        """``sess.run`` in the main thread, with the policy applied to what it raises."""
        state = self.state
        state.enter_run(reads)
        try:
            result = sess.run(fetches, feed_dict, options, run_metadata)
        except tf.errors.OpError as e:
            state.leave_run()
            self.raise_pending(e)
            if isinstance(e, tf.errors.OutOfRangeError):
                self.ended = True
                warn_dropped(e)
                raise EndOfData(f"input exhausted: {_reason(e.message)}") from e
            raise
        except BaseException as e:
            state.leave_run()
            self._dispatch_signals()
            # A handler that is not queuekit's and raised while TF's binding was
            # converting an error comes out as "RuntimeError: ... REPLACED BY ...".
            if isinstance(e, RuntimeError) and "REPLACED BY KeyboardInterrupt" in str(e):
                self.ended = True
                raise KeyboardInterrupt from None
            raise
        state.leave_run()
        # A signal came during the run: its handler runs now, in Python. If it
        # returns and the run was not woken for it, the result stands.
        self._dispatch_signals()
        return result

    def raise_pending(self, cause: BaseException | None) -> None:
        """Raise what a thread left for the main thread: a signal, a runner error, a stall."""
        self._dispatch_signals()
        error = self.pending_error()
        if error is not None:
            self._error_reported = True
            if error is self.requested:
                self.requested = None  # handed back, and raised by this run: it reached the caller
            raise error from cause
        if self.state.stall is not None:
            self._error_reported = True
            raise self.state.stall from cause

    def _dispatch_signals(self) -> None:
        if self._signals.pending:
            if self.state.woken_by is not None:
                self.ended = True  # the pipeline was stopped to let the signal through
            self._signals.dispatch()

    def pending_error(self) -> BaseException | None:
        """The first runner error, else an exception given to ``coordinator.request_stop``."""
        if self._runners.failure is not None:
            return self._runners.failure.exception
        try:
            self._coord.raise_requested_exception()
        except BaseException as e:  # noqa: BLE001 - returned, raised by the caller
            return e
        return None

    def after_close(self, *, body_failed: bool, stuck: list[str], grace: float) -> None:
        """Raise what closing found, unless the body's own exception is on its way out.

        Threads still alive are a :class:`ShutdownTimeout` (a warning while the
        body failed); then a signal that came during shutdown; then a runner
        error, or a stall, no run has raised yet.
        """
        if stuck:
            message = (f"runner threads still alive {grace:g} s after stop "
                       f"(stop_grace_secs): {', '.join(stuck)}")
            if body_failed:
                warnings.warn(message, RuntimeWarning, stacklevel=4)
            else:
                raise ShutdownTimeout(message, thread_names=stuck)
        error = None if self._error_reported else self.pending_error()
        if error is None and not self._error_reported and self.state.stall is not None:
            error = self.state.stall  # the run the watch woke ended well: say why it stopped
        if error is None:
            error = self.requested
        if body_failed:
            if error is not None:
                log.warning("while the body failed, the pipeline failed too: %r", error)
            return
        self._dispatch_signals()  # a signal during shutdown
        if error is not None:
            self._error_reported = True
            raise error


class PartialRun:
    """``partial_run`` of one handle, shaped like ``Session.run`` for the run policy."""

    def __init__(self, sess, handle):
        self._sess = sess
        self._handle = handle

    def run(self, fetches, feed_dict, options, run_metadata):
        return self._sess.partial_run(self._handle, fetches, feed_dict)


_LEFT = re.compile(r"(\w+) '([^']+)' is closed and has insufficient elements "
                   r"\(requested (\d+), current size (\d+)\)")


def ended_queue(error: BaseException) -> str | None:
    """The queue whose end ended a run, as TensorFlow's message names it (the op's name, without
    the ``_<n>_`` prefix of a queue made in a name scope's first use)."""
    cause = error.__cause__ if isinstance(error, EndOfData) else error
    match = _LEFT.search(getattr(cause, "message", None) or "")
    return None if match is None else re.sub(r"^_\d+_", "", match.group(2))


def report_cut_input(end: EndOfData, stats) -> None:
    """Say what was read and will never reach a step when a queue other than the input's
    ended the run (``stats``: the session's queues): SyncReplicasOptimizer's token queue,
    closed by the chief when its own input ended, cuts another worker's input short (#26:
    424 of 640 records trained, exit 0, no word)."""
    ended = ended_queue(end)
    if ended is None or any(s.name == ended for s in stats):
        return  # the input's own end
    left = [f"{s.name}: {s.size}" for s in stats if s.size]
    if left:
        log.warning("the run ended because queue %r ended, with elements still in this "
                    "session's input queues, read and never delivered to a step (%s); a "
                    "SyncReplicasOptimizer job ends when the chief's input does",
                    ended, "; ".join(left))


def warn_dropped(error: tf.errors.OutOfRangeError) -> None:
    """Say so when the end of the input left elements no batch will deliver.

    A batch without ``allow_smaller_final_batch`` (and every ``dequeue_many``)
    needs a full batch: TensorFlow ends the input with the rest undelivered,
    and says so only in the error's text ("requested" is what the dequeue still
    lacked, after taking what was there)."""
    match = _LEFT.search(error.message or "")
    if match is None:
        return
    kind, queue, lacking, queued = match.groups()
    wanted = None
    try:
        if error.op is not None and error.op.type.startswith("QueueDequeue"):
            wanted = tf.get_static_value(error.op.inputs[1])
    except (IndexError, ValueError, TypeError):
        pass
    taken = int(wanted) - int(lacking) if wanted is not None else 0
    left = taken + int(queued)
    if left <= 0:
        return
    log.warning("end of data: %s %r closed with %d elements that a dequeue of %s could not "
                "fill: they were not delivered. To keep them, build the batch with "
                "allow_smaller_final_batch=True (the last batch is then smaller).",
                kind, queue, left, wanted if wanted is not None else "more")


def _reason(message: str | None) -> str:
    """The informative line of TF's message ("FIFOQueue '...' is closed and has ...")."""
    useful = useful_lines(message)
    return next((line for line in useful if "closed" in line), useful[0] if useful
                else "end of input")


def useful_lines(message: str | None) -> list[str]:
    """The lines of TensorFlow's error message that say what happened, without its framing
    ("Graph execution error:", "Detected at node", the node and stack lines)."""
    lines = [line.strip() for line in (message or "").splitlines()]
    return [line for line in lines if line and not line.startswith(
        ("Graph execution error", "Detected at node", "[[", "Original stack trace", "File ",
         "Node: "))]


def run_with_hooks(hooks: Sequence[Any], session, run: Callable, fetches, feed_dict,
                   options, run_metadata) -> tuple[Any, bool]:
    """``run(fetches, feeds, options, run_metadata)`` with every hook's requests added.

    The merge follows ``monitored_session._HookedSession.run``: each hook's
    ``before_run`` may add fetches, feeds (never one already fed) and run
    options; ``after_run`` gets its own results. Returns the caller's results
    and whether a hook asked to stop.
    """
    ctx = _v1.train.SessionRunContext(
        original_args=_v1.train.SessionRunArgs(fetches, feed_dict), session=session)
    options = options if options is not None else _v1.RunOptions()
    feeds = dict(feed_dict or {})
    hook_fetches = {}
    for hook in hooks:
        request = hook.before_run(ctx)
        if request is None:
            continue
        if request.fetches is not None:
            hook_fetches[hook] = request.fetches
        if request.feed_dict:
            clash = set(feeds) & set(request.feed_dict)
            if clash:
                raise RuntimeError(f"{type(hook).__name__} feeds tensors already fed: {clash}")
            feeds.update(request.feed_dict)
        if request.options:
            options.trace_level = max(options.trace_level, request.options.trace_level)
            options.timeout_in_ms = max(options.timeout_in_ms, request.options.timeout_in_ms)
            options.debug_options.debug_tensor_watch_opts.extend(
                request.options.debug_options.debug_tensor_watch_opts)
    if run_metadata is None:
        run_metadata = _v1.RunMetadata()
    out = run({"caller": fetches, "hooks": hook_fetches}, feeds, options, run_metadata)
    for hook in hooks:
        hook.after_run(ctx, _v1.train.SessionRunValues(
            results=out["hooks"].get(hook), options=options, run_metadata=run_metadata))
    return out["caller"], ctx.stop_requested
