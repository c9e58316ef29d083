"""QueueSession: one object that owns a Session, its Coordinator and its runner threads."""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from queuekit.errors import EndOfData, PipelineStalled, ShutdownTimeout
from queuekit.interrupt import ROUTER
from queuekit.runners import QueueStat, RunnerSet

log = logging.getLogger(__name__)

# Synchronous kernels that can wait indefinitely while holding an inter-op thread.
_BLOCKING_OPS = frozenset({
    "PyFunc", "PyFuncStateless", "EagerPyFunc", "Stage", "Unstage", "MapStage", "MapUnstage",
    "MapUnstageNoKey", "MapPeek", "OrderedMapStage", "OrderedMapUnstage",
    "OrderedMapUnstageNoKey", "OrderedMapPeek",
})
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
        self._n_runners_seen = 0
        self._graph_ctx = None
        self._started = False
        self._closed = False
        self._hook_stop = False  # a hook's run_context.request_stop()
        self._ended = False  # EndOfData was raised
        self._error_reported = False  # the runner error reached the caller once
        self._closing_now = False
        self._initialized: set[str] = set()  # names of the variables we initialised
        # Set by the watchdog / SIGINT router; turned into exceptions by the main thread.
        self._lock = threading.RLock()
        self._in_run = False
        self._run_started = 0.0
        self._stall: PipelineStalled | None = None
        self._interrupted = False
        self._routed = False
        self._watch_stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # -- context manager -----------------------------------------------------
    def __enter__(self) -> "QueueSession":
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
            config = self._config if self._config is not None else self._default_config()
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
        return (self._ended or self._hook_stop or self._closed
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
        self._raise_pending(None)
        if self._hooks:
            return self._run_with_hooks(fetches, feed_dict, options, run_metadata)
        return self._guarded_run(fetches, feed_dict, options, run_metadata)

    def iterate(self, fetches, feed_dict=None) -> Iterator[Any]:
        """Yield ``run(fetches, feed_dict)`` until end of data or a stop request."""
        while not self.should_stop():
            try:
                value = self.run(fetches, feed_dict)
            except EndOfData:
                return
            yield value

    def _guarded_run(self, fetches, feed_dict, options, run_metadata):
        with self._lock:
            self._run_started = time.monotonic()
            self._in_run = True
        try:
            result = self._sess.run(fetches, feed_dict, options, run_metadata)
        except tf.errors.OpError as e:
            self._leave_run()
            self._raise_pending(e)
            if isinstance(e, tf.errors.OutOfRangeError):
                self._ended = True
                raise EndOfData(f"input exhausted: {e.message.splitlines()[0]}") from e
            raise
        except BaseException as e:
            self._leave_run()
            # A SIGINT handler that raised while TF's binding was converting an error
            # comes out as "RuntimeError: ... REPLACED BY KeyboardInterrupt".
            if self._interrupted or (isinstance(e, RuntimeError)
                                     and "KeyboardInterrupt" in str(e)):
                self._interrupted = False
                self._ended = True
                raise KeyboardInterrupt from None
            raise
        self._leave_run()
        if self._interrupted:
            # The run finished as Ctrl-C came. The result is dropped: the caller stops.
            self._raise_pending(None)
        return result

    def _leave_run(self) -> None:
        with self._lock:
            self._in_run = False

    def _raise_pending(self, cause: BaseException | None) -> None:
        """Raise what a thread left for the main thread: Ctrl-C, a runner error, a stall."""
        if self._interrupted:
            self._interrupted = False
            self._ended = True
            raise KeyboardInterrupt from None
        error = self._pending_error()
        if error is not None:
            self._error_reported = True
            raise error from cause
        if self._stall is not None:
            raise self._stall from cause

    def _run_with_hooks(self, fetches, feed_dict, options, run_metadata):
        # The merge follows monitored_session._HookedSession.run.
        ctx = _v1.train.SessionRunContext(
            original_args=_v1.train.SessionRunArgs(fetches, feed_dict), session=self._sess)
        options = options if options is not None else _v1.RunOptions()
        feeds = dict(feed_dict or {})
        hook_fetches = {}
        for hook in self._hooks:
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
        out = self._guarded_run({"caller": fetches, "hooks": hook_fetches},
                                feeds, options, run_metadata)
        for hook in self._hooks:
            hook.after_run(ctx, _v1.train.SessionRunValues(
                results=out["hooks"].get(hook), options=options, run_metadata=run_metadata))
        if ctx.stop_requested:
            self._hook_stop = True
        return out["caller"]

    # -- starting ------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this QueueSession is closed")

    def _default_config(self):
        blocking = sorted({op.type for op in self._graph.get_operations()} & _BLOCKING_OPS)
        if not blocking:
            # Queue and reader ops are asynchronous kernels: they wait without holding
            # an inter-op thread, so TF's defaults are safe, and a bigger pool only
            # adds contention (measured: about 10% fewer records/s on 2 cores).
            return None
        # A synchronous op that blocks (a py_func waiting on a queue, a staging area)
        # holds an inter-op thread until it returns; with one per runner thread the
        # pool can run dry and deadlock (TF issue 4917). Leave room for every runner
        # plus the main thread's step.
        runner_threads = sum(len(qr.enqueue_ops) for qr in self._collection())
        pool = runner_threads + (os.cpu_count() or 1) + 1
        log.debug("ops that block an inter-op thread (%s): a pool of %d", blocking, pool)
        config = _v1.ConfigProto(inter_op_parallelism_threads=pool)
        if not self._target:
            config.use_per_session_threads = True
        return config

    def _collection(self) -> list:
        return self._graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)

    def _ensure_started(self) -> None:
        self._check_open()
        if self._started:
            runners = self._collection()
            if len(runners) != self._n_runners_seen:  # runners added after the first run
                self._initialize_new_variables()
                self._start_runners(runners)
            return
        with self._graph.as_default():
            for hook in self._hooks:
                hook.begin()
            sess = self.session
            if self._initialize:
                sess.run([_v1.global_variables_initializer(), _v1.local_variables_initializer(),
                          _v1.tables_initializer()])
                self._initialized = {v.name for v in self._variables()}
        self._coord = _v1.train.Coordinator()
        self._runners = RunnerSet(sess, self._coord)
        self._started = True
        self._routed = ROUTER.register(self)
        if self._stall_timeout is not None:
            self._watchdog = threading.Thread(target=self._watch, name="queuekit-watchdog",
                                              daemon=True)
            self._watchdog.start()
        self._start_runners(self._collection())
        for hook in self._hooks:
            hook.after_create_session(sess, self._coord)

    def _variables(self) -> list:
        return self._graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES) + \
            self._graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES)

    def _initialize_new_variables(self) -> None:
        # A producer built after the first run brings its own epoch counter.
        if not self._initialize:
            return
        new = [v for v in self._variables() if v.name not in self._initialized]
        if new:
            with self._graph.as_default():
                self._sess.run(_v1.variables_initializer(new))
            self._initialized.update(v.name for v in new)

    def _start_runners(self, runners) -> None:
        self._runners.prepare(self._graph, runners)
        self._runners.start(runners)
        self._n_runners_seen = len(runners)

    # -- watchdog and Ctrl-C (other threads) --------------------------------
    def _watch(self) -> None:
        limit = self._stall_timeout
        while not self._watch_stop.wait(min(0.5, max(0.02, limit / 10))):
            with self._lock:
                if not self._in_run:
                    continue
                quiet_since = max(self._run_started, self._runners.last_progress)
            waited = time.monotonic() - quiet_since
            if waited < limit:
                continue
            stats = self._runners.stats()
            starving = not stats or any(
                s.closed is not True and (s.capacity is None or s.size is None
                                          or s.size < s.capacity) for s in stats)
            with self._lock:
                if not self._in_run or not starving:
                    continue
                if self._runners.last_progress > quiet_since:
                    continue
                live = self._runners.live_count()
                listing = ", ".join(str(s) for s in stats) or "no runner queues"
                self._stall = PipelineStalled(
                    f"run blocked for {waited:.1f} s with no input progress "
                    f"(stall_timeout_secs={limit:g}); {live} live runner thread(s); "
                    f"queues: {listing}", seconds=waited, queue_stats=stats, live_threads=live)
            self._coord.request_stop()
            self._runners.cancel()
            return

    def _sigint_arrived(self) -> None:
        """SIGINT, told by the router thread while the main thread may be blocked in C++."""
        with self._lock:
            if not self._in_run:
                return  # the main thread is in Python: the handler raises there
            self._interrupted = True
        self._coord.request_stop()
        self._runners.cancel()

    def _absorb_sigint(self) -> bool:
        """Called by the SIGINT handler (main thread): True to swallow the signal."""
        with self._lock:
            if not (self._in_run or self._interrupted or self._closing_now):
                return False
            self._interrupted = True
            in_run = self._in_run
        if in_run:
            self._coord.request_stop()
            self._runners.cancel()
        return True

    # -- stopping ------------------------------------------------------------
    def _close(self, *, body_failed: bool, clean_end: bool) -> None:
        if self._closed:
            return
        self._closing_now = True
        stuck: list[str] = []
        try:
            if self._started and clean_end and self._pending_error() is None:
                for hook in self._hooks:
                    hook.end(self._sess)
        finally:
            if self._started:
                self._coord.request_stop()
                if not self._runners.cancelled:
                    self._runners.drain(min(0.5, self._grace / 2))
                self._runners.cancel()
                stuck = self._runners.join(self._grace)
                self._watch_stop.set()
                if self._watchdog is not None:
                    self._watchdog.join(self._grace)
                if self._routed:
                    ROUTER.unregister(self)
            self._closed = True
            if self._sess is not None and not stuck:
                self._sess.close()
        if stuck:
            message = (f"runner threads still alive {self._grace:g} s after stop "
                       f"(stop_grace_secs): {', '.join(stuck)}")
            if body_failed:
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            else:
                raise ShutdownTimeout(message, thread_names=stuck)
        error = None if self._error_reported else self._pending_error()
        if body_failed:
            if error is not None:
                log.warning("while the body failed, the pipeline failed too: %r", error)
            return
        if self._interrupted:  # Ctrl-C during shutdown
            self._interrupted = False
            raise KeyboardInterrupt
        if error is not None:
            self._error_reported = True
            raise error

    def _pending_error(self) -> BaseException | None:
        """The first runner error, else an exception given to ``coordinator.request_stop``."""
        if self._runners is not None and self._runners.failure is not None:
            return self._runners.failure.exception
        if self._coord is not None:
            try:
                self._coord.raise_requested_exception()
            except BaseException as e:  # noqa: BLE001 - returned, raised by the caller
                return e
        return None
