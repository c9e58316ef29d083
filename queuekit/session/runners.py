"""Runner threads: one per enqueue op of every ``QueueRunner`` in a graph.

This mirrors ``QueueRunner._run`` in TensorFlow's ``queue_runner_impl.py`` (a
cached callable per enqueue op; the last thread of a runner to see its input
closed closes the runner's queue) with what queuekit needs on top: named
threads, the first error kept together with the thread and queue it came from,
a progress clock for stall detection, and closing *every* queue of the graph
when the pipeline must stop, so nothing stays blocked.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time

import tensorflow as tf

from queuekit.errors import add_note
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.session.queue_ops import GraphQueueOps
from queuekit.session.reads import READER_OPS, ancestors, queues_read

log = logging.getLogger(__name__)

# Small ops (close, size) get a deadline so a starved inter-op pool cannot block shutdown.
_SMALL_OP_TIMEOUT_MS = 2000
# A run made in the thread that asks for it, not handed op by op to the inter-op pool.
_IN_CALLER_THREAD = tf.compat.v1.RunOptions(inter_op_thread_pool=-1)


class Gate:
    """Lets threads 0..active-1 of a runner enqueue; the others wait between enqueues."""

    def __init__(self, total: int, active: int):
        self.total = total
        self._active = max(1, min(active, total))
        self._open = False
        self._cond = threading.Condition()

    @property
    def active(self) -> int:
        return self.total if self._open else self._active

    @property
    def opened(self) -> bool:
        return self._open

    def wait(self, index: int) -> None:
        """Return once thread ``index`` may run its next enqueue."""
        if index < self._active or self._open:  # the common case, without the lock
            return
        with self._cond:
            while index >= self._active and not self._open:
                self._cond.wait()

    def set_active(self, n: int) -> None:
        with self._cond:
            self._active = max(1, min(n, self.total))
            self._cond.notify_all()

    def open(self) -> None:
        """Let every thread run from now on (end of input, or stop); idempotent."""
        with self._cond:
            self._open = True
            self._cond.notify_all()


@dataclasses.dataclass(frozen=True)
class QueueStat:
    """One queue fed by a runner: its size now and its capacity.

    ``size`` and ``closed`` are None when they could not be read in time;
    ``capacity`` is None for an unbounded queue.
    """

    name: str
    size: int | None
    capacity: int | None
    closed: bool | None

    @property
    def fill(self) -> float | None:
        """size / capacity, or None when either is unknown."""
        if self.size is None or not self.capacity:
            return None
        return self.size / self.capacity

    def __str__(self) -> str:
        size = "?" if self.size is None else self.size
        cap = "unbounded" if self.capacity is None else self.capacity
        state = " closed" if self.closed else ""
        return f"{self.name} {size}/{cap}{state}"


@dataclasses.dataclass
class RunnerFailure:
    """The first exception a runner thread raised, and where."""

    exception: BaseException
    thread_name: str
    queue_name: str


class RunnerSet:
    """Starts, watches, stops and joins the runner threads of one session."""

    def __init__(self, session: tf.compat.v1.Session, coord: tf.compat.v1.train.Coordinator,
                 ops: GraphQueueOps, *, chief: bool = True, enqueue_for=None):
        self._sess = session
        # enqueue_for(op, make_callable): the callable a thread runs for that enqueue op (a
        # feature's own, e.g. a resumed input's reads that skip what was consumed); by
        # default the op's own.
        self._enqueue_for = enqueue_for or (lambda op, make_callable: make_callable(op))
        # Only a local session runs in the caller's thread (a remote one runs on its task).
        self._local = getattr(session, "sess_str", None) in ("", b"")  # TF keeps it as bytes
        self._inline: set[str] = set()  # enqueue ops run in their thread (in_own_thread)
        self._chief = chief
        self._coord = coord
        self._ops = ops
        self._lock = threading.Lock()
        self._started: set[int] = set()  # id() of every QueueRunner already started
        self._live: dict[int, int] = {}  # id(QueueRunner) -> its threads still running
        self._queue_names: list[str] = []  # the runner queues, in start order
        self._consumers: dict[str, set[int]] = {}  # queue -> id() of runners dequeuing it
        self.threads: list[threading.Thread] = []
        self.failure: RunnerFailure | None = None
        # monotonic time of the last completed enqueue, per queue: "is the input moving?"
        self.progress: dict[str, float] = {}
        self.enqueues: dict[str, int] = {}  # completed enqueues per queue (the tuner's rate)
        self.gates: dict[str, Gate] = {}  # queue -> the gate of its tuned runner
        self._cancelled = False

    def start(self, runners, gates: dict[str, Gate] | None = None) -> None:
        """Start one named daemon thread per enqueue op of each runner not started yet.

        The runners' helper ops must exist already (``GraphQueueOps.update``).
        ``gates`` maps a queue to the :class:`Gate` its
        runner's threads wait on between enqueues.
        """
        self.gates.update(gates or {})
        if self._local:
            every = self._sess.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
            self._inline = in_own_thread([*every, *runners])
        for qr in runners:
            if id(qr) in self._started:
                continue
            self._started.add(id(qr))
            self._live[id(qr)] = len(qr.enqueue_ops)
            for queue in queues_read(qr.enqueue_ops):  # what this runner dequeues from
                self._consumers.setdefault(queue, set()).add(id(qr))
            if _queue_name(qr) not in self._queue_names:
                self._queue_names.append(_queue_name(qr))
                graph_objects(qr.queue.queue_ref.graph, GraphKeys.STARTED_QUEUES).append(
                    _queue_name(qr))
            for i, op in enumerate(qr.enqueue_ops):
                name = f"queuekit-runner-{_queue_name(qr)}-{i}"
                t = threading.Thread(target=self._run, args=(qr, op, name, i), name=name,
                                     daemon=True)
                self.threads.append(t)
                t.start()

    # -- the thread ----------------------------------------------------------
    def _run(self, qr, enqueue_op, name: str, index: int) -> None:
        closed_cleanly = False
        try:
            enqueue = self._enqueue_for(enqueue_op, self._make_callable(enqueue_op))
            queue = _queue_name(qr)
            gate = self.gates.get(queue)
            self.enqueues.setdefault(queue, 0)
            while not self._coord.should_stop():
                if gate is not None:
                    gate.wait(index)  # paused between enqueues, never inside one
                    if self._coord.should_stop():
                        break
                try:
                    enqueue()
                except qr.queue_closed_exception_types:
                    if gate is not None:
                        gate.open()  # paused readers finish their files before the end
                    # Our input is exhausted: the last thread of this runner closes its queue,
                    # so the consumer sees end of data once the queue is drained.
                    with self._lock:
                        self._live[id(qr)] -= 1
                        closed_cleanly = True
                        last = self._live[id(qr)] == 0
                    if last:
                        self._run_quietly(qr.close_op)
                    return
                self.progress[queue] = time.monotonic()
                self.enqueues[queue] += 1  # a lost update under a race only blurs a rate
        except Exception as e:  # noqa: BLE001 - every runner error must reach the caller
            if self._coord.should_stop() and isinstance(
                    e, (tf.errors.CancelledError, tf.errors.OutOfRangeError)):
                return  # woken by our own shutdown: not an error
            self._fail(e, name, _queue_name(qr), enqueue_op)
        finally:
            if not closed_cleanly:
                with self._lock:
                    self._live[id(qr)] -= 1

    def _make_callable(self, enqueue_op):
        """``make_callable(fetches, feed_list=None)`` for the runs of ``enqueue_op``'s thread."""
        if enqueue_op.name not in self._inline:
            return self._sess.make_callable

        def make_callable(fetches, feed_list=None):
            run = self._sess.make_callable(fetches, feed_list, accept_options=True)
            return functools.partial(run, options=_IN_CALLER_THREAD)

        return make_callable

    def fail(self, exc: BaseException, thread_name: str, queue_name: str) -> None:
        """Report the error of a thread that feeds ``queue_name`` (not a runner's own)."""
        self._fail(exc, thread_name, queue_name, None)

    def _fail(self, exc: BaseException, thread_name: str, queue_name: str,
              enqueue_op) -> None:
        # Named before the error is published: the main thread may raise it at once.
        note = None
        if enqueue_op is not None and self.failure is None:  # a runner's op: name its file
            from queuekit.session import diagnose  # only when a runner fails

            exc, note = diagnose.named_error(exc, enqueue_op)
        with self._lock:
            first = self.failure is None
            if first:
                add_note(exc, f"queuekit: raised in runner thread {thread_name!r} "
                             f"feeding queue {queue_name!r}")
                if note:
                    add_note(exc, note)
                self.failure = RunnerFailure(exc, thread_name, queue_name)
        if first:
            log.debug("runner %s failed: %r", thread_name, exc)
            self._coord.request_stop(exc)
            self.cancel()  # wake every consumer now, so the error is seen at once

    # -- stopping ------------------------------------------------------------
    def drain(self, seconds: float) -> None:
        """Make room in full queues so runners blocked in an enqueue finish and see the stop.

        Cancelling a blocked enqueue works too, but TF's C++ code then logs
        "Local rendezvous is aborting with status: CANCELLED: Enqueue operation
        was cancelled" for every such step. Call after ``request_stop``; what
        is still blocked after ``seconds`` (an empty upstream) is left to
        :meth:`cancel`. The elements taken out are dropped: the caller stopped.

        A queue is drained only once no live runner dequeues from it: with no
        other consumer its size can only grow, so taking ``size`` elements
        never blocks (a blocked, timed-out dequeue logs a warning of its own).
        Draining the batch queue lets its runners finish, and then theirs.
        """
        deadline = time.monotonic() + seconds
        options = tf.compat.v1.RunOptions(timeout_in_ms=_SMALL_OP_TIMEOUT_MS)
        handles = [h for h in self._ops.handles(self._queue_names, owned_only=True)
                   if h.drain is not None]
        while self.live_count() and time.monotonic() < deadline and handles:
            with self._lock:
                drains = [h for h in handles if not any(
                    self._live.get(r, 0) for r in self._consumers.get(h.name, ()))]
            try:
                sizes = self._sess.run([h.size for h in drains], options=options)
                for h, size in zip(drains, sizes, strict=True):
                    n = int(size) - h.min_after_dequeue  # a shuffle queue keeps min_after
                    if n <= 0:
                        continue
                    if h.drain_count is None:
                        for _ in range(n):
                            self._sess.run(h.drain, options=options)
                    else:
                        self._sess.run(h.drain, {h.drain_count: n}, options=options)
            except tf.errors.OpError as e:
                log.debug("drain stopped: %r", e)
                return
            for t in self.threads:
                t.join(0.005)

    def cancel(self) -> None:
        """Close this task's queues (and, on the chief, a sync token queue) with
        ``cancel_pending_enqueues=True``; idempotent."""
        with self._lock:
            self._cancelled = True
        self.open_gates()
        for h in self._ops.handles():
            # Synchronous training cannot go on without the chief (its queue runner makes
            # the updates and the tokens): the chief closes the token queue when it stops,
            # which ends the others' steps instead of leaving them waiting for a token.
            # Another worker never does: the chief can go on alone, and a closed token
            # queue would end its training early.
            if h.owned or (h.sync_tokens and self._chief):
                self._run_quietly(h.cancel)
            elif h.sync_tokens and h.give_back is not None:
                self._run_quietly(h.give_back)  # the token of a gradient it never sends

    def open_gates(self) -> None:
        """Wake every paused thread (it then sees the stop and ends)."""
        for gate in self.gates.values():
            gate.open()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def _run_quietly(self, op) -> None:
        try:
            self._sess.run(op, options=tf.compat.v1.RunOptions(timeout_in_ms=_SMALL_OP_TIMEOUT_MS))
        except Exception as e:  # noqa: BLE001 - closing an already closed or dead queue
            log.debug("ignored while closing %s: %r", getattr(op, "name", op), e)

    def join(self, timeout: float) -> list[str]:
        """Join every thread within ``timeout`` seconds in all; names of those still alive."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    # -- looking -------------------------------------------------------------
    def last_progress(self, queues) -> float:
        """When the last enqueue into any of ``queues`` completed (0.0: never)."""
        progress = self.progress
        return max((progress.get(q, 0.0) for q in queues), default=0.0)

    def live_count(self) -> int:
        return sum(t.is_alive() for t in self.threads)

    def fill(self, queue: str) -> float | None:
        """How full one runner queue is now (0 to 1), or None when it cannot be read in time."""
        handles = [h for h in self._ops.handles([queue]) if h.size is not None and h.capacity]
        if not handles or not handles[0].capacity:
            return None
        try:
            size = self._sess.run(handles[0].size, options=tf.compat.v1.RunOptions(
                timeout_in_ms=_SMALL_OP_TIMEOUT_MS))
        except Exception:  # noqa: BLE001 - a closed or starved session: unknown
            return None
        # A shuffle queue never gives its last min_after_dequeue: its fill starts there.
        floor = handles[0].min_after_dequeue
        return min(1.0, max(0.0, (int(size) - floor) / max(1, handles[0].capacity - floor)))

    def span(self, queue: str) -> int:
        """The elements that fill one runner queue from empty (from its shuffle floor);
        0 when its capacity is unknown."""
        for h in self._ops.handles([queue]):
            if h.capacity:
                return max(0, h.capacity - h.min_after_dequeue)
        return 0

    def stats(self) -> list[QueueStat]:
        """Size and capacity of every runner queue, read with a deadline."""
        handles = [h for h in self._ops.handles(self._queue_names) if h.size is not None]
        if not handles:
            return []
        try:
            values = self._sess.run(
                [(h.size, h.closed) for h in handles],
                options=tf.compat.v1.RunOptions(timeout_in_ms=_SMALL_OP_TIMEOUT_MS))
        except Exception:  # noqa: BLE001 - a starved or closed session: sizes unknown
            values = [(None, None)] * len(handles)
        return [QueueStat(h.name, None if size is None else int(size), h.capacity,
                          None if closed is None else bool(closed))
                for h, (size, closed) in zip(handles, values, strict=True)]


def in_own_thread(runners) -> set[str]:
    """Names of the enqueue ops whose runs are made in their runner's thread, not handed op
    by op to the session's inter-op pool: those that read with a read op no other runner
    thread runs.

    The pool's two threads (on two cores) also run the step, and each op of a run waits
    its turn there and wakes the next: run in their own threads, two readers of workload
    (a)'s records read about 1.4x as fast, with a quarter less CPU per record
    (``docs/benchmarks-history.rst``).

    A read op reads on a thread of its own, and such a run goes on in that thread after
    the read: two runner threads on one read op (``tf.train.batch(num_threads=4)`` over
    one reader) would take turns in it, so those keep the pool."""
    threads: dict[str, int] = {}  # read op -> the runner threads that run it
    reads: dict[str, list[str]] = {}  # enqueue op -> its read ops
    for qr in {id(qr): qr for qr in runners}.values():
        for op in qr.enqueue_ops:
            if op.name not in reads:
                reads[op.name] = [a.name for a in ancestors([op]) if a.type in READER_OPS]
            for read in reads[op.name]:
                threads[read] = threads.get(read, 0) + 1
    return {op for op, ops in reads.items() if ops and all(threads[r] == 1 for r in ops)}


def _queue_name(qr) -> str:
    return qr.queue.queue_ref.op.name  # with its name scope: "batch/fifo_queue"
