"""QueueSession: one object that owns a Session, its Coordinator and its runner threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from queuekit.errors import EndOfData
from queuekit.session.hooked_run import run_with_hooks
from queuekit.session.interrupt import ROUTER
from queuekit.session.policy import RunPolicy
from queuekit.session.queue_ops import queue_ops
from queuekit.session.run_state import RunState
from queuekit.session.runners import QueueStat, RunnerSet
from queuekit.session.shutdown import stop_threads
from queuekit.session.stall import StallWatch
from queuekit.session.start import Initializer, default_config

DEFAULT_STOP_GRACE_SECS = 2.0
DEFAULT_STALL_TIMEOUT_SECS = 60.0

_v1 = tf.compat.v1


class QueueSession:
    """A context manager that runs a TF1 queue pipeline safely.

    Usage::

        with qk.QueueSession() as qs:
            image, label = ...            # any TF1 queue pipeline, built in qs.graph
            for img, lab in qs.iterate([image, label]):
                ...

    On the first :meth:`run` it initialises global and local variables, creates
    the Coordinator and starts every queue runner of the graph in named daemon
    threads (``queuekit-runner-<queue>-<i>``). Queue runners added later start
    on the next run.

    End of data:
        When the input is exhausted :meth:`run` raises :class:`EndOfData`, a
        subclass of ``tf.errors.OutOfRangeError``; :meth:`iterate` just stops.

    Exception handling:
        If a runner thread fails (a corrupt record, a bad image, an exception in
        a ``py_function``), the next :meth:`run` raises *that* exception, with a
        note naming the thread and the queue it fed; if no run comes, leaving
        the ``with`` block raises it. A runner error is never turned into an
        ordinary end of data.

    Stalls:
        A run blocked for more than ``stall_timeout_secs`` while no runner
        completes an enqueue, and while some runner queue is open and not full
        (or there are no runner queues at all), raises :class:`PipelineStalled`
        with the queue stats and the number of live runner threads. A long
        training step does not count: its input queues fill up. A stall ends the
        session. ``stall_timeout_secs=None`` turns detection off.

    Grace period:
        On exit (normal, exception, Ctrl-C) it requests stop, closes every queue
        with ``cancel_pending_enqueues=True`` so blocked threads wake, joins all
        threads within ``stop_grace_secs`` and closes the session. Threads still
        alive after that are named in :class:`ShutdownTimeout` (or a warning
        when the body already raised), and the session is left open, because
        closing it would block on their running step.

    Ctrl-C:
        While the session is active in the main thread, SIGINT closes the
        queues even when the main thread is blocked inside a dequeue, and the
        blocked run raises a plain ``KeyboardInterrupt``.

    Args:
        graph: the graph to run; a fresh ``tf.Graph`` when None. It is the
            default graph inside the ``with`` block.
        target: the execution engine, e.g. ``"grpc://host:port"``.
        config: a ``ConfigProto``. When None, TensorFlow's defaults, except
            for a graph with ops that block an inter-op thread while they wait
            (``py_func``, staging areas): that session gets its own inter-op
            pool with a thread per runner thread on top, so the pipeline cannot
            deadlock (TF issue 4917).
        initialize: run the global, local and table initialisers on start.
        stop_grace_secs: how long shutdown waits for threads.
        stall_timeout_secs: see *Stalls*; None disables.
        hooks: ``tf.compat.v1.train.SessionRunHook`` objects, called as
            ``MonitoredSession`` calls them.
    """

    def __init__(self, graph: tf.Graph | None = None, *, target: str = "",
                 config: Any = None, initialize: bool = True,
                 stop_grace_secs: float = DEFAULT_STOP_GRACE_SECS,
                 stall_timeout_secs: float | None = DEFAULT_STALL_TIMEOUT_SECS,
                 hooks: Sequence[Any] = ()):
        self._graph = graph if graph is not None else tf.Graph()
        self._target = target
        self._config = config
        self._initialize = initialize
        self._grace = float(stop_grace_secs)
        self._stall_timeout = None if stall_timeout_secs is None else float(stall_timeout_secs)
        self._hooks = list(hooks)
        self._sess: _v1.Session | None = None
        self._coord: _v1.train.Coordinator | None = None
        self._runners: RunnerSet | None = None
        self._watch: StallWatch | None = None
        self._init = Initializer(self._graph)
        self._n_runners_seen = 0
        self._graph_ctx = None
        self._started = False
        self._closed = False
        self._hook_stop = False  # a hook's run_context.request_stop()
        self._routed = False
        # Shared with the watchdog and the SIGINT router, which run in other threads.
        self._state = RunState()
        self._policy = RunPolicy(self._state)

    # -- context manager -----------------------------------------------------
    def __enter__(self) -> QueueSession:
        self._graph_ctx = self._graph.as_default()
        self._graph_ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._close(body_failed=exc_type is not None and not issubclass(exc_type, EndOfData),
                        clean_end=exc_type is None or issubclass(exc_type, EndOfData))
        finally:
            if self._graph_ctx is not None:
                ctx, self._graph_ctx = self._graph_ctx, None
                ctx.__exit__(None, None, None)
        # EndOfData escaping the body is the normal end of the input, as in MonitoredSession.
        return exc_type is not None and issubclass(exc_type, EndOfData)

    def close(self) -> None:
        """Stop the threads and close the session; safe to call twice."""
        self._close(body_failed=False, clean_end=True)

    # -- properties ----------------------------------------------------------
    @property
    def graph(self) -> tf.Graph:
        return self._graph

    @property
    def session(self) -> _v1.Session:
        """The underlying ``tf.compat.v1.Session``, created on first use."""
        if self._sess is None:
            self._check_open()
            config = self._config if self._config is not None else default_config(
                self._graph, self._target)
            self._sess = _v1.Session(self._target, graph=self._graph, config=config)
        return self._sess

    @property
    def coordinator(self) -> _v1.train.Coordinator | None:
        """The Coordinator of the runner threads (None before the first run)."""
        return self._coord

    @property
    def threads(self) -> list[threading.Thread]:
        """The runner threads started so far."""
        return list(self._runners.threads) if self._runners else []

    def queue_stats(self) -> list[QueueStat]:
        """Name, current size, capacity and closed state of every queue that has a runner."""
        return self._runners.stats() if self._runners else []

    def should_stop(self) -> bool:
        """True once the input ended, a stop was requested or a thread failed."""
        return (self._policy.ended or self._hook_stop or self._closed
                or (self._coord is not None and self._coord.should_stop()))

    def request_stop(self, exc: BaseException | None = None) -> None:
        """Ask the runner threads to stop; ``exc`` is re-raised by the next run or on exit."""
        self._ensure_started()
        # A tuple, because the Coordinator otherwise reads sys.exc_info(), which is
        # only right inside the except block that caught exc.
        self._coord.request_stop(None if exc is None else (type(exc), exc, exc.__traceback__))

    # -- running -------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``Session.run`` with the pipeline's policy on end of data, errors and stalls.

        Raises:
            EndOfData: the input is exhausted.
            PipelineStalled: the run was blocked too long (see the class docs).
            Exception: the first error of a runner thread, as it was raised there.
        """
        self._ensure_started()
        self._policy.raise_pending(None)
        if not self._hooks:
            return self._policy.run(self._sess, fetches, feed_dict, options, run_metadata)
        result, stop = run_with_hooks(self._hooks, self._sess, self._step, fetches,
                                      feed_dict, options, run_metadata)
        if stop:
            self._hook_stop = True
        return result

    def _step(self, fetches, feed_dict, options, run_metadata):
        return self._policy.run(self._sess, fetches, feed_dict, options, run_metadata)

    def iterate(self, fetches, feed_dict=None) -> Iterator[Any]:
        """Yield ``run(fetches, feed_dict)`` until end of data or a stop request."""
        while not self.should_stop():
            try:
                value = self.run(fetches, feed_dict)
            except EndOfData:
                return
            yield value

    # -- starting ------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this QueueSession is closed")

    def _collection(self) -> list:
        return self._graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)

    def _ensure_started(self) -> None:
        self._check_open()
        if self._started:
            runners = self._collection()
            if len(runners) != self._n_runners_seen:  # runners added after the first run
                if self._initialize:
                    self._init.new_variables(self._sess)
                self._start_runners(runners)
            return
        with self._graph.as_default():
            for hook in self._hooks:
                hook.begin()
        sess = self.session
        if self._initialize:
            self._init.first(sess)
        self._coord = _v1.train.Coordinator()
        self._runners = RunnerSet(sess, self._coord, queue_ops(self._graph))
        self._policy.attach(self._coord, self._runners)
        self._started = True
        self._routed = ROUTER.register(self)
        if self._stall_timeout is not None:
            self._watch = StallWatch(self._state, self._runners, self._stall_timeout,
                                     self._wake)
            self._watch.start()
        self._start_runners(self._collection())
        for hook in self._hooks:
            hook.after_create_session(sess, self._coord)

    def _start_runners(self, runners) -> None:
        queue_ops(self._graph).update(runners)
        self._runners.start(runners)
        self._n_runners_seen = len(runners)

    # -- Ctrl-C and stalls (called from other threads) ------------------------
    def _wake(self) -> None:
        """Stop the runners and close every queue, so a blocked run returns."""
        self._coord.request_stop()
        self._runners.cancel()

    def _sigint_arrived(self) -> None:
        """SIGINT, told by the router thread while the main thread may be blocked in C++."""
        with self._state.lock:
            if not self._state.in_run:
                return  # the main thread is in Python: the handler raises there
            self._state.interrupted = True
        self._wake()

    def _absorb_sigint(self) -> bool:
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

    # -- stopping ------------------------------------------------------------
    def _close(self, *, body_failed: bool, clean_end: bool) -> None:
        if self._closed:
            return
        self._state.closing = True
        stuck: list[str] = []
        try:
            if self._started and clean_end and self._policy.pending_error() is None:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            if self._started:
                stuck = stop_threads(self._coord, self._runners, self._watch, self._grace)
                if self._routed:
                    ROUTER.unregister(self)
            self._closed = True
            if self._sess is not None and not stuck:
                self._sess.close()
        self._policy.after_close(body_failed=body_failed, stuck=stuck, grace=self._grace)
