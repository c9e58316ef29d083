"""QueueSession: one object that owns a Session, its Coordinator and its runner threads."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from queuekit.errors import EndOfData
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.graph_walk import checkpoint_run
from queuekit.session.policy import PartialRun, report_cut_input, run_with_hooks
from queuekit.session.queue_ops import queue_ops
from queuekit.session.reads import ReadsCache
from queuekit.session.runners import QueueStat
from queuekit.session.start import (
    Initializer,
    SessionInterface,
    observed,
    program_graph,
    served_task,
    session_config,
)
from queuekit.session.threads import SessionThreads, abandoned, close_session

if TYPE_CHECKING:
    from queuekit.session.report import InputReport
    from queuekit.session.tuner import Tuning

DEFAULT_STOP_GRACE_SECS = 2.0
INTERRUPTED_GRACE_SECS = 2.0  # the most a shutdown after Ctrl-C waits for a thread
# What request_stop(e) takes as the input's normal end, as the Coordinator's default does.
CLEAN_STOP = (tf.errors.OutOfRangeError,)
DEFAULT_STALL_TIMEOUT_SECS = 60.0
# The features of every session (queuekit.features), before those its graph installs:
# the input files checked at start and at the end, and the input report.
DEFAULT_FEATURES = ("queuekit.session.checks:InputChecks", "queuekit.session.profile:for_session")

_v1 = tf.compat.v1


class QueueSession(SessionInterface):
    """A context manager that runs a TF1 queue pipeline safely; a drop-in ``Session``.

    Usage::

        with qk.QueueSession() as qs:
            image, label = ...            # any TF1 queue pipeline, built in qs.graph
            for img, lab in qs.iterate([image, label]):
                ...

    The first :meth:`run` (or :meth:`start`) restores the latest checkpoint of
    ``checkpoint_dir`` if any, initialises every variable without a value
    (never a restored one, also not one restored by hand through
    :attr:`session`) and starts every queue runner in named daemon threads
    (``queuekit-runner-<queue>-<i>``); runners added later start on the next
    run. A ``SessionInterface``: ``saver.save(qs, path)``,
    ``tensor.eval(session=qs)`` run through :meth:`run` and its policy.

    The graph: ``graph``, else the default graph if the program built ops in it
    (as ``Session()`` does), else a fresh one; the default inside ``with``.

    End of data: :meth:`run` raises :class:`EndOfData` (an ``OutOfRangeError``);
    :meth:`iterate` just stops.

    Exception handling:
        A runner thread's error (a corrupt record, a bad image, a
        ``py_function``'s) is raised by the next :meth:`run` (else on leaving
        the ``with``), noted with the thread, its queue and for a corrupt record
        the file, record index and offset. It is never an end of data.

    Stalls:
        A run blocked for more than ``stall_timeout_secs`` while no element
        entered the queues it dequeues from, one of them open and not full,
        raises :class:`PipelineStalled` naming the starved queue (and input
        files that hold no records). A long training step does not count: the
        queues it reads fill up. A stall ends the session. ``None`` disables.

    Grace period: on exit the threads stop (this task's queues closed, blocked
    enqueues cancelled) within ``stop_grace_secs``, or :class:`ShutdownTimeout`.

    Ctrl-C: while the session is active in the main thread, SIGINT closes the
    queues even under a blocked dequeue, which raises ``KeyboardInterrupt``;
    the shutdown that follows waits at most 2 s for a thread (a reader blocked
    in I/O), whatever ``stop_grace_secs``; a Ctrl-C during any shutdown ends it
    at once.

    Autotune: a tuner thread (:meth:`tuning`). On a cluster: ``is_chief``,
    ``start.session_config``, work queue threads; shutdown leaves shared queues alone.

    Args:
        graph: the graph to run (see *The graph*).
        target: the execution engine, e.g. ``"grpc://host:port"``.
        config: a ``ConfigProto``; None: TF's defaults, or for a graph with ops
            that block an inter-op thread (``py_func``) a pool with room for
            every runner thread (TF issue 4917).
        initialize: restore and initialise on start (see above); False leaves
            every variable to the caller.
        is_chief: False: wait for the chief to initialise the global variables;
            None: the server's task decides (``chief``, or worker 0).
        checkpoint_dir: restore its latest checkpoint on start, if it has one.
        session_creator: a ``SessionCreator`` (TF's ``ChiefSessionCreator``...)
            that makes, restores and initialises the session instead.
        stop_grace_secs: how long shutdown waits for threads.
        stall_timeout_secs: see *Stalls*; None disables.
        hooks: ``tf.compat.v1.train.SessionRunHook`` objects, called as
            ``MonitoredSession`` calls them (on every :meth:`run`).
        resume_input: continue the input of queuekit's builders where the
            restored checkpoint's steps left it (:mod:`queuekit.resume.tally`):
            None, in a graph that trains (an evaluation restoring a checkpoint reads
            every record); True, always; False starts it over.
        input_report: count the steps and trace a run now and then for
            :meth:`input_report` (traced runs cost at most 1% of the loop's time,
            :mod:`queuekit.session.profile`); False: nothing counted or traced.
    """

    def __init__(self, graph: tf.Graph | None = None, *, target: str = "",
                 config: Any = None, initialize: bool = True,
                 checkpoint_dir: str | None = None, session_creator: Any = None,
                 stop_grace_secs: float = DEFAULT_STOP_GRACE_SECS,
                 stall_timeout_secs: float | None = DEFAULT_STALL_TIMEOUT_SECS,
                 hooks: Sequence[Any] = (), is_chief: bool | None = None,
                 resume_input: bool | None = None, input_report: bool = True):
        self._graph = graph if graph is not None else program_graph()
        self._target = target
        self._task = served_task(target)
        if is_chief is None:
            is_chief = self._task is None or self._task.is_chief
        self._config = config
        self._initialize = initialize
        self._creator = session_creator
        self._grace = float(stop_grace_secs)
        self._stall_timeout = None if stall_timeout_secs is None else float(stall_timeout_secs)
        self._hooks = list(hooks)
        self._sess: Any = None  # the Session: made at start, or earlier by `.session`
        # Everything a started session runs: Coordinator, threads, run policy. None until the
        # first run (or start()): the program builds its pipeline inside `with` first.
        self._running: SessionThreads | None = None
        self._init = Initializer(self._graph, checkpoint_dir, chief=is_chief)
        self._checkpoint_dir = checkpoint_dir
        # What the features read (queuekit.features); the session itself never does.
        self._options = {"resume_input": resume_input, "input_report": input_report}
        self._hook_session: Any = None  # what hooks get: the session, seen by the features
        self._reads = ReadsCache(self._graph)
        self._graph_ctx: Any = None
        self._closed = False
        self._hook_stop = False  # a hook's run_context.request_stop()
        self._pid = os.getpid()  # a forked child must not use the parent's session or threads
        self._finalizer: weakref.finalize | None = None

    # -- context manager -----------------------------------------------------
    def __enter__(self) -> QueueSession:
        self._check_open()
        if self._graph_ctx is not None:
            raise RuntimeError("this QueueSession is already entered; a nested `with` on it "
                               "would close it on the inner exit")
        ctx = self._graph.as_default()
        ctx.__enter__()
        self._graph_ctx = ctx
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            # Ctrl-C, SIGTERM, sys.exit: the user wants out, whatever the grace of a
            # healthy shutdown (MonitoredTrainingSession's is 120 s).
            interrupted = exc_type is not None and not issubclass(exc_type, Exception)
            self._close(body_failed=exc_type is not None and not issubclass(exc_type, EndOfData),
                        clean_end=exc_type is None or issubclass(exc_type, EndOfData),
                        grace=min(self._grace, INTERRUPTED_GRACE_SECS) if interrupted else None)
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
    def sess_str(self) -> str:  # the target, as Session.sess_str
        return self._target

    @property
    def session(self) -> Any:
        """The underlying ``tf.compat.v1.Session``, created on first use (with a
        ``session_creator``, by starting: it runs after the hooks' ``begin``). Runs
        on it bypass the policy: no end-of-data, error or stall handling, no hooks."""
        if self._sess is None:
            self._check_open()
            if self._creator is not None:
                self.start()
            else:
                config = session_config(self._graph, self._target, self._config)
                self._sess = _v1.Session(self._target, graph=self._graph, config=config)
        return self._sess

    @property
    def coordinator(self) -> Any:
        """The Coordinator of the runner threads (None before the first run)."""
        return self._running.coord if self._running else None

    @property
    def threads(self) -> list[threading.Thread]:
        """The runner threads started so far."""
        return list(self._running.runners.threads) if self._running else []

    def queue_stats(self) -> list[QueueStat]:
        """Name, current size, capacity and closed state of every queue that has a runner."""
        return self._running.runners.stats() if self._running else []

    def input_report(self) -> list[InputReport]:
        """Where the loop's time went since the session started, per pipeline (the queue its
        steps take batches from): ``str()`` of each is a one-line verdict."""
        profile = self._running.feature("profile") if self._running else None
        return profile.reports() if profile is not None else []

    def tuning(self) -> dict[str, Tuning]:
        """Per ``"auto"`` queue: active thread count, maximum and the tuner's decisions."""
        tuner = self._running.feature("tuner") if self._running else None
        return tuner.tuning() if tuner is not None else {}

    def should_stop(self) -> bool:
        """True once the input ended, a stop was requested or a thread failed."""
        running = self._running
        return self._hook_stop or self._closed or (running is not None and (
            running.policy.ended or running.coord.should_stop()))

    def request_stop(self, exc: BaseException | None = None) -> None:
        """Ask the runner threads to stop; ``exc`` is re-raised by the next run or on exit.

        As ``Coordinator.request_stop(ex)`` then ``join()``: an exception the loop
        caught and handed back here (even one a run raised, with queuekit's note on
        the file and record) is raised when the session closes, so the program
        fails as the original did. The end of the input (``OutOfRangeError``, so
        :class:`EndOfData`) is a clean stop, as in the Coordinator's
        ``clean_stop_exception_types``: never raised again."""
        running = self._ensure_started()
        if exc is not None and isinstance(exc, CLEAN_STOP):
            exc = None
        if exc is not None and running.policy.requested is None:
            running.policy.requested = exc
        # A tuple, because the Coordinator otherwise reads sys.exc_info(), which is
        # only right inside the except block that caught exc.
        info = None if exc is None else (type(exc), exc, exc.__traceback__)
        running.coord.request_stop(info)

    def start(self) -> QueueSession:
        """Create (restore, initialise) the session and start the threads now (idempotent;
        the first :meth:`run` does it otherwise)."""
        self._ensure_started()
        return self

    # -- running -------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``Session.run`` with the pipeline's policy on end of data, errors and stalls.

        Raises:
            EndOfData: the input is exhausted.
            PipelineStalled: the run was blocked too long (see the class docs).
            Exception: the first error of a runner thread, as it was raised there.
        """
        if self._running is None:
            checkpoint = checkpoint_run(self._graph, fetches, feed_dict, {})
            if checkpoint is not None and checkpoint[0] == "restore":
                # saver.restore(qs, path) before the first run: restore, let the features
                # resume from that checkpoint (the input position), then start the runners.
                restored = []
                self._ensure_started(restore=lambda sess: restored.append(sess.run(
                    fetches, feed_dict, options, run_metadata)), restored=checkpoint[1])
                return restored[0]
        running = self._ensure_started()
        running.policy.raise_pending(None)
        for feature in running.observers:  # a Saver's save: the input position beside it
            feature.observe(fetches, feed_dict)
        hooks = self._hooks + running.hooks  # the program's, then those of queuekit's features
        if not hooks:
            return self._step(fetches, feed_dict, options, run_metadata)
        result, stop = run_with_hooks(hooks, self._hook_session, self._step, fetches,
                                      feed_dict, options, run_metadata)
        if stop:
            self._hook_stop = True
        return result

    def _step(self, fetches, feed_dict, options, run_metadata):
        running = self._running
        assert running is not None  # started by the caller
        reads = self._reads(fetches)
        states = []
        for feature in running.steppers:
            options, run_metadata, state = feature.before_step(reads, options, run_metadata)
            states.append(state)
        try:
            out = running.policy.run(self._sess, fetches, feed_dict, options, run_metadata,
                                     reads=reads)
        except EndOfData as end:
            for feature in running.features:  # a file cut while it was read...
                feature.end_of_data(end)
            report_cut_input(end, self.queue_stats())
            raise
        for feature, state in zip(running.steppers, states, strict=True):
            feature.after_step(run_metadata, state)
        return out

    def partial_run_setup(self, fetches, feeds=None):  # on the session, without the policy
        return self.start().session.partial_run_setup(fetches, feeds)

    def partial_run(self, handle, fetches, feed_dict=None):
        """``Session.partial_run`` with the run policy."""
        policy = self._ensure_started().policy
        policy.raise_pending(None)
        return policy.run(PartialRun(self._sess, handle), fetches, feed_dict, None, None,
                          reads=self._reads(fetches))

    def iterate(self, fetches, feed_dict=None) -> Iterator[Any]:
        """Yield ``run(fetches, feed_dict)`` until end of data, a stop request or an error."""
        self._check_open()
        while not self.should_stop():
            try:
                value = self.run(fetches, feed_dict)
            except EndOfData:
                return
            yield value
        if self._running is not None:
            self._running.policy.raise_pending(None)

    # -- starting ------------------------------------------------------------
    def _check_open(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this QueueSession was created in process {self._pid} and is used in its "
                f"forked child {os.getpid()}: a TensorFlow session and its threads do not "
                f"survive a fork (a run would block forever); create the session in the child")
        if self._closed:
            raise RuntimeError("this QueueSession is closed")

    def _collection(self) -> list:
        return self._graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)

    def _ensure_started(self, restore=None, restored: str | None = None) -> SessionThreads:
        self._check_open()
        if self._running is not None:
            if self._running.has_new_runners():  # runners added after the first run
                if self._initialize:
                    self._init.uninitialized(self._sess)
                self._running.start_new_runners()
            return self._running
        # The order of MonitoredSession: hooks' begin, (the creator finalizes the graph),
        # the session, runner threads, then after_create_session.
        with self._graph.as_default():
            for hook in self._hooks:
                hook.begin()
            # queuekit's helper ops must exist before a creator finalizes the graph.
            queue_ops(self._graph).update(self._collection())
            if self._task is not None and self._stall_timeout is not None:
                from queuekit.cluster.tasks import wait_for_parameter_servers
                wait_for_parameter_servers(self._task, self._stall_timeout)
            if self._creator is not None:
                self._sess = self._creator.create_session()
            sess = self.session
            if self._initialize and self._creator is None:
                self._init.first(sess)
                restored = restored or self._init.restored
            elif self._checkpoint_dir and self._init.chief:  # the creator restored it
                restored = restored or tf.train.latest_checkpoint(self._checkpoint_dir)
            if restore is not None:
                restore(sess)
            running = SessionThreads(
                self._graph, sess, self._reads, self._stall_timeout, self._grace,
                task=self._task.device if self._task else self._target, chief=self._init.chief,
                features=DEFAULT_FEATURES + tuple(graph_objects(self._graph, GraphKeys.FEATURES)),
                options=self._options)
            self._hook_session = observed(sess, running.observers)
            running.created(restored)
        # Dropped without close(): warn as an unclosed file does, and stop the threads.
        self._finalizer = weakref.finalize(self, abandoned, running, self._pid)
        self._finalizer.atexit = False  # at exit the daemon threads just end with the process
        self._running = running
        running.start()
        for hook in self._hooks:
            hook.after_create_session(self._hook_session, running.coord)
        return running

    # -- stopping ------------------------------------------------------------
    def _close(self, *, body_failed: bool, clean_end: bool, grace: float | None = None) -> None:
        if self._closed:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        if os.getpid() != self._pid:
            self._closed = True  # the parent's session and threads are the parent's to stop
            return
        grace = self._grace if grace is None else grace
        running = self._running
        if running is None:  # never started: no thread, nothing pending
            self._closed = True
            if self._sess is not None:
                close_session(self._sess, self._target, time.monotonic() + grace)
            return
        running.state.closing = True
        stuck: list[str] = []
        try:
            if clean_end and running.policy.pending_error() is None:
                for hook in self._hooks:
                    hook.end(self._hook_session)
            for feature in running.features:
                feature.closing()
        finally:
            # One deadline for the whole stop, as Coordinator.join has. A remote session's
            # close is what cancels a step blocked on a ps (a relay's take): half is kept for it.
            deadline = time.monotonic() + grace
            stuck = running.stop(deadline - grace / 2 if self._target else deadline)
            self._closed = True
            if not stuck or self._target:
                close_session(self._sess, self._target, deadline)
                stuck = running.still_alive(deadline) if stuck else []
        running.policy.after_close(body_failed=body_failed, stuck=stuck, grace=grace)
