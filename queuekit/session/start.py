"""Starting a session: its config, and initialising the variables of its graph."""

from __future__ import annotations

import logging
import os

import tensorflow as tf

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


def graph_variables(graph: tf.Graph) -> list:
    return (graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
            + graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES))


class Initializer:
    """Runs the variable and table initialisers of a graph on one session."""

    def __init__(self, graph: tf.Graph):
        self._graph = graph
        self._done: set[str] = set()  # names of the variables we initialised

    def first(self, sess) -> None:
        with self._graph.as_default():
            sess.run([_v1.global_variables_initializer(), _v1.local_variables_initializer(),
                      _v1.tables_initializer()])
        self._done = {v.name for v in graph_variables(self._graph)}

    def new_variables(self, sess) -> None:
        # A producer built after the first run brings its own epoch counter.
        new = [v for v in graph_variables(self._graph) if v.name not in self._done]
        if new:
            with self._graph.as_default():
                sess.run(_v1.variables_initializer(new))
            self._done.update(v.name for v in new)
