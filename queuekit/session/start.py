"""Starting a session: its config, restoring a checkpoint, initialising what is left."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence

import tensorflow as tf

from queuekit.graph_keys import GraphKeys, on_graph
from queuekit.graph_walk import uninitialized_report

try:  # what Saver.save checks: TF's own base of Session, stable since TF 1.0
    from tensorflow.python.client.session import SessionInterface
except ImportError:  # pragma: no cover - a TF without the private module
    SessionInterface = object

log = logging.getLogger(__name__)
_v1 = tf.compat.v1

# Synchronous kernels that can wait indefinitely while holding an inter-op thread.
BLOCKING_OPS = frozenset({
    "PyFunc", "PyFuncStateless", "EagerPyFunc", "Stage", "Unstage", "MapStage", "MapUnstage",
    "MapUnstageNoKey", "MapPeek", "OrderedMapStage", "OrderedMapUnstage",
    "OrderedMapUnstageNoKey", "OrderedMapPeek",
})


def default_config(graph: tf.Graph, target: str):
    """TF's defaults (None), unless the graph has ops that block an inter-op thread."""
    blocking = sorted({op.type for op in graph.get_operations()} & BLOCKING_OPS)
    if not blocking:
        # Queue and reader ops are asynchronous kernels: they wait without holding
        # an inter-op thread, so TF's defaults are safe, and a bigger pool only
        # adds contention (measured: about 10% fewer records/s on 2 cores).
        return None
    # A synchronous op that blocks (a py_func waiting on a queue, a staging area)
    # holds an inter-op thread until it returns; with one per runner thread the
    # pool can run dry and deadlock (TF issue 4917). Leave room for every runner
    # plus the main thread's step.
    runners = graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)
    runner_threads = sum(len(qr.enqueue_ops) for qr in runners)
    pool = runner_threads + (os.cpu_count() or 1) + 1
    log.debug("ops that block an inter-op thread (%s): a pool of %d", blocking, pool)
    config = _v1.ConfigProto(inter_op_parallelism_threads=pool)
    if not target:
        config.use_per_session_threads = True
    return config


def session_config(graph: tf.Graph, target: str, config):
    """``config`` (else :func:`default_config`), with device filters on a cluster task.

    A session to a server this process started sees only the parameter
    servers and its own task (``ClusterTask.device_filters``), so a worker
    that never started cannot hang ``CreateSession``.
    """
    if config is None:
        config = default_config(graph, target)
    task = served_task(target)
    return config if task is None else task.session_config(config)


def served_task(target):
    """The cluster task behind ``target`` if this process serves it, else None. A local
    session loads no cluster module: only a process that started a server has one."""
    if not target:
        return None
    from queuekit.cluster.tasks import task_of
    return task_of(target)


def program_graph() -> tf.Graph:
    """The default graph when the program built ops in it (what ``Session()`` runs), else new."""
    graph = _v1.get_default_graph()
    return graph if graph.get_operations() else tf.Graph()


def graph_variables(graph: tf.Graph) -> list:
    return (graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
            + graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES))


_REPORTS_LOCK = threading.Lock()


def _report_op(graph: tf.Graph, variables: list):
    key = tuple(v.name for v in variables)
    with _REPORTS_LOCK:
        # {variable names: report_uninitialized_variables op}; made once per graph.
        ops = on_graph(graph, "_queuekit_reports", dict)
        if key not in ops:
            if graph.finalized:
                return None
            with graph.as_default(), tf.name_scope("queuekit"):
                ops[key] = uninitialized_report(variables, "report_uninitialized_variables")
        return ops[key]


def default_saver(graph: tf.Graph):
    """The graph's saver (the SAVERS collection), else one made and added there, as TF's
    Scaffold does; None when the graph has no variables or is finalized without one."""
    savers = graph.get_collection(_v1.GraphKeys.SAVERS)
    if savers:
        return savers[0]
    if graph.finalized or not graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES):
        return None
    with graph.as_default():
        saver = _v1.train.Saver(sharded=True, allow_empty=True)
    graph.add_to_collection(_v1.GraphKeys.SAVERS, saver)
    return saver


class Initializer:
    """Initialises what is not initialised yet, so restored state is never overwritten.

    ``report_uninitialized_variables`` (what ``SessionManager`` checks readiness
    with) says which variables have no value; only their own initializers run.
    Values a checkpoint restored (from ``checkpoint_dir``, or by hand through
    ``QueueSession.session`` before the first run) are kept, and variables
    created later are initialised when they first appear.

    A non-chief never initialises (nor restores) a global variable: the
    chief does, and a second initializer racing it would reset the model. It
    waits, as ``SessionManager.wait_for_session`` does, until the chief made
    every global variable ready, then initialises only its local ones (its
    epoch counters).
    """

    def __init__(self, graph: tf.Graph, checkpoint_dir: str | None = None, *,
                 chief: bool = True, recovery_wait_secs: float = 0.5,
                 max_wait_secs: float = 7200):
        self._graph = graph
        self._checkpoint_dir = checkpoint_dir
        self.chief = chief
        self._recovery_wait = recovery_wait_secs
        self._max_wait = max_wait_secs
        self.restored: str | None = None  # the checkpoint first() restored

    def first(self, sess) -> None:
        """Restore the latest checkpoint of ``checkpoint_dir`` if any; initialise the rest."""
        if not self.chief:
            self._wait_for_chief(sess)
        elif self._checkpoint_dir:
            path = tf.train.latest_checkpoint(self._checkpoint_dir)
            saver = default_saver(self._graph) if path else None
            if saver is not None:
                saver.restore(sess, path)
                self.restored = path
                log.info("restored %s", path)
        self.uninitialized(sess)
        tables = self._graph.get_collection(_v1.GraphKeys.TABLE_INITIALIZERS)
        if tables:
            sess.run(tables)

    def _wait_for_chief(self, sess) -> None:
        variables = self._graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
        report = _report_op(self._graph, variables) if variables else None
        deadline = time.monotonic() + self._max_wait
        while report is not None:
            names = sorted(n.decode() for n in sess.run(report))
            if not names:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the chief did not initialise {names[:5]} within "
                                   f"{self._max_wait:.0f} s")
            log.info("waiting for the chief to initialise %d variable(s), e.g. %s",
                     len(names), names[0])
            time.sleep(self._recovery_wait)  # polling another process: nothing to wait on

    def uninitialized(self, sess) -> None:
        """Run the initializer of every variable that has no value yet (a non-chief: of
        every local variable)."""
        variables = (graph_variables(self._graph) if self.chief
                     else self._graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES))
        if not variables:
            return
        report = _report_op(self._graph, variables)
        # Finalized before the session could make its report: the builders made theirs.
        reports = ([report] if report is not None
                   else self._graph.get_collection(GraphKeys.VARIABLE_REPORTS))
        if not reports:
            log.debug("graph finalized before its variables were checked: not initialised")
            return
        names = {n.decode() for found in sess.run(reports) for n in found}
        todo = [v.initializer for v in variables if v.op.name in names]
        if todo:
            sess.run(todo)


def observed(sess, observers: Sequence):
    """``sess`` as the program's hooks get it: the raw session (no policy, no hooks, as
    MonitoredSession gives them), each of its runs seen first by ``observers`` (TF's
    ``CheckpointSaverHook`` saves through it: the input position is written beside)."""
    return _Observed(sess, list(observers)) if observers else sess


class _Observed(SessionInterface):
    def __init__(self, sess, observers: list):
        self._sess = sess
        self._observers = observers

    @property
    def graph(self):
        return self._sess.graph

    @property
    def sess_str(self):
        return self._sess.sess_str

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        for feature in self._observers:
            feature.observe(fetches, feed_dict)
        return self._sess.run(fetches, feed_dict, options, run_metadata)

    def partial_run_setup(self, fetches, feeds=None):
        return self._sess.partial_run_setup(fetches, feeds)

    def partial_run(self, handle, fetches, feed_dict=None):
        return self._sess.partial_run(handle, fetches, feed_dict)

    def __getattr__(self, name):  # make_callable (SyncReplicasOptimizer's hook), list_devices...
        return getattr(self._sess, name)
