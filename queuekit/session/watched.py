"""One session of an unmodified program, watched while its runner threads run.

Made by :mod:`queuekit.session.install` when a session's first runner threads are
created. It uses the core's pieces (the signal router, the run state the router
and a stall watch share, the input checks, what a run reads) around TensorFlow's
own threads and the program's own Coordinator, and adds no op to the graph: a
queue's fill is read only through a size op the graph has (``tf.train.batch``
makes one for its summary); an unknown fill counts as not full, as in
:class:`~queuekit.session.stall.StallWatch`.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import tensorflow as tf

from queuekit.errors import DatasetError, PipelineStalled
from queuekit.records.tfrecord import has_records
from queuekit.session.checks import changed_while_read, check_inputs, empty_files, upstream_files
from queuekit.session.interrupt import ROUTER, SessionSignals
from queuekit.session.policy import RunState, warn_dropped
from queuekit.session.queue_ops import QUEUE_OP_TYPES, owned
from queuekit.session.reads import ReadsCache
from queuekit.session.runners import QueueStat

_SIGNAL_GRACE_SECS = 1.0  # a program's own handler: its run is woken after this
_SMALL_RUN = tf.compat.v1.RunOptions(timeout_in_ms=2000)
_SIZE_OPS = ("QueueSizeV2", "QueueSize")


@dataclasses.dataclass
class Failure:
    """An input error of the program's: a runner's, a stall, a file checked."""

    exception: BaseException
    where: str


class Watched:
    """A session whose runner threads started; see the module."""

    def __init__(self, guard, sess):
        self.guard = guard
        self.sess = sess  # held until it closes: its threads use it
        self.graph = sess.graph
        self.coords: list = []
        self.runners: list = []
        self.threads: list[threading.Thread] = []
        self.state = RunState()
        self.fetches = None  # the current run's, for the stall watch
        self.sizes: dict[str, int] = {}  # the input files' sizes at start
        self._ended = False
        self.pending: BaseException | None = None  # see failed()
        self.woken = False  # its queues were closed by queuekit: their errors are not news
        self._signals = SessionSignals(self.state, self.wake, _SIGNAL_GRACE_SECS)
        self._routed = False
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self.report = None  # a ProgramReport, with `queuekit run --report`
        self._size_ops: dict[str, tf.Tensor] | None = None  # queue -> the graph's size op

    def add(self, qr, coord, threads) -> None:
        self.runners.append(qr)
        self.threads.extend(threads)
        if coord not in self.coords:
            self.coords.append(coord)

    def start(self, *, check: bool) -> None:
        if self.guard.report:
            from queuekit.session.program_report import ProgramReport  # only when asked

            self.report = ProgramReport(self, self.guard.report_every)
        self._routed = ROUTER.register(self._signals)
        if check:
            self._check_inputs()
        if self.guard.stall_timeout is not None:
            self._watch = threading.Thread(target=self._watch_stalls, daemon=True,
                                           name="queuekit-stall-watch")
            self._watch.start()

    def failed(self, exc: BaseException) -> None:
        """An error with no Coordinator to stop: raised by the next run that fails."""
        if self.pending is None:
            self.pending = exc
        self.wake()

    def _check_inputs(self) -> None:
        try:
            records = check_inputs(self.graph, self.sizes)
            if records and not any(has_records(f) for f in records):
                raise DatasetError("the input holds no record: every file the readers read "
                                   f"is empty ({', '.join(records[:5])}"
                                   + (f" and {len(records) - 5} more)" if len(records) > 5
                                      else ")"))
        except (DatasetError, tf.errors.OpError, OSError) as e:
            self.guard.fail(e, self.coords, "the input files, checked when the runners "
                            "started", self.sess)
        except Exception as e:  # noqa: BLE001 - a graph queuekit cannot read: unchecked
            self.guard.say_once("unchecked", f"could not check the input files "
                                f"({type(e).__name__}: {e})")

    # -- a run of the main thread -----------------------------------------------------
    def run(self, fetches, feed_dict, options, run_metadata):
        state, report, traced = self.state, self.report, False
        self.fetches = fetches
        if report is not None:
            options, run_metadata, traced = report.before(fetches, options, run_metadata)
        state.enter_run()
        try:
            result = self.guard.original_run(self.sess, fetches, feed_dict, options,
                                             run_metadata)
            if report is not None:
                report.after(run_metadata, traced)
                if self.guard.window is not None:
                    self.guard.window.tick(report)
            return result
        except tf.errors.OpError as e:
            with state.lock:
                stall, state.stall = state.stall, None
            # Raised in place of the error of the queue closed to wake this run.
            if stall is not None:
                raise stall from None
            if self.pending is not None:
                raise self.pending from None
            if isinstance(e, tf.errors.OutOfRangeError) and not self._signals.pending:
                self._end_of_input(e)
            raise
        finally:
            state.leave_run()
            if self._signals.pending:
                self._signals.dispatch()

    def _end_of_input(self, end: tf.errors.OutOfRangeError) -> None:
        """The input's end (no stop was asked): what it left behind, a file cut meanwhile."""
        if (self._ended or self.pending is not None
                or any(c is not None and c.should_stop() for c in self.coords)):
            return  # a runner's error or the program's stop closed the queues
        self._ended = True
        warn_dropped(end)
        changed = changed_while_read(self.sizes)
        if changed is not None:
            self.guard.fail(changed, (), "the input files, at the end of the input")
            raise changed from end

    def wake(self) -> None:
        """Close the runners' queues so that a blocked run returns (the router's thread)."""
        self.woken = True
        for qr in self.runners:
            try:
                self.guard.original_run(self.sess, qr.cancel_op, None, _SMALL_RUN)
            except Exception:  # noqa: BLE001,S112 - closed already, or the session is
                continue

    # -- stopping ----------------------------------------------------------------------
    def stop(self, deadline: float) -> list[str]:
        """Stop the coordinators, join every thread by ``deadline``: the stragglers' names."""
        self._stop.set()
        for coord in self.coords:
            if coord is not None:
                coord.request_stop()
        if self._coordless():
            self.wake()  # nothing else closes their queues
        for t in [*self.threads, *([self._watch] if self._watch else [])]:
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        if self._routed:
            ROUTER.unregister(self._signals)
            self._routed = False
        if self.report is not None:
            if self.guard.window is not None:
                self.guard.window.write(self.report, ended=True)
            else:
                self.report.print()
            self.report = None
        return [t.name for t in self.threads if t.is_alive()]

    def _coordless(self) -> bool:
        return None in self.coords

    # -- the stall watch ---------------------------------------------------------------
    def _watch_stalls(self) -> None:
        limit, state = self.guard.stall_timeout, self.state
        reads_of = ReadsCache(self.graph)
        while not self._stop.wait(min(0.5, max(0.02, limit / 10))):
            with state.lock:
                if not state.in_run:
                    continue
                started, fetches = state.run_started, self.fetches
            fed = {qr.queue.queue_ref.op.name for qr in list(self.runners)}
            try:
                reads = [q for q in reads_of(fetches) if q in fed]
            except Exception:  # noqa: BLE001,S112 - a fetch TF rejects: no run to judge
                continue
            progress = self.guard.progress
            quiet_since = max([started, *(progress.get(q, 0.0) for q in reads)])
            waited = time.monotonic() - quiet_since
            if not reads or waited < limit:
                continue
            stats = self._stats(reads)
            starving = [s for s in stats if s.capacity is None or s.size is None
                        or s.size < s.capacity]
            if not starving:
                continue  # its queues are full: the step itself is slow
            stall = self._stall(starving, waited)
            with state.lock:
                if not state.in_run or state.run_started != started:
                    continue
                state.stall = stall
            self.guard.fail(stall, self.coords, "the stall watch", self.sess)
            self.wake()
            return

    def queue_sizes(self, queues) -> dict[str, int]:
        """The sizes of ``queues`` that a size op of the graph reads (``tf.train.batch`` makes
        one for its summary): none is added, so a queue without one is not in the result."""
        if self._size_ops is None:
            self._size_ops = {op.inputs[0].op.name: op.outputs[0]
                              for op in self.graph.get_operations() if op.type in _SIZE_OPS
                              and op.inputs[0].op.type in QUEUE_OP_TYPES}
        sizes = {q: self._size_ops[q] for q in queues if q in self._size_ops}
        if not sizes:
            return {}
        try:
            values = self.guard.original_run(self.sess, sizes, None, _SMALL_RUN)
        except Exception:  # noqa: BLE001 - unknown then
            return {}
        return {name: int(v) for name, v in values.items()}

    def _stats(self, reads: list[str]) -> list[QueueStat]:
        """Size and capacity of the queues a run reads that are this task's own."""
        known = self.queue_sizes(reads)
        stats = []
        for name in reads:
            queue = self.graph.get_operation_by_name(name)
            if not owned(queue):
                continue  # a cluster's queue (a sync token queue): other tasks feed it
            capacity = queue.get_attr("capacity")
            stats.append(QueueStat(name, known.get(name), None if capacity < 0 else capacity,
                                   None))
        return stats

    def _stall(self, starving: list[QueueStat], waited: float) -> PipelineStalled:
        ops = [self.graph.get_operation_by_name(s.name) for s in starving]
        files = upstream_files(self.graph, ops)
        empty = empty_files(self.graph, ops)
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        live = sum(t.is_alive() for t in self.threads)
        return PipelineStalled(
            f"run blocked for {waited:.1f} s waiting on "
            + ", ".join(f"{s.name!r} ({s.size if s.size is not None else '?'}/"
                        f"{s.capacity or 'unbounded'})" for s in starving)
            + f", which got no element in that time (stall timeout {self.guard.stall_timeout:g}"
            " s)" + (f"; its input files: {shown}" if files else "")
            + (f"; they hold no record: {', '.join(empty[:5])}" if empty else "")
            + f"; {live} live runner thread(s)",
            seconds=waited, queue_stats=starving, live_threads=live)
