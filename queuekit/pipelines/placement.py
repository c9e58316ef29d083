"""Where a pipeline's ops go: on a cluster, this worker's device; on one machine, nowhere
in particular, decided without loading any of the cluster's modules."""

from __future__ import annotations

import contextlib
import sys

import tensorflow as tf

_v1 = tf.compat.v1


def input_device(device: str | None = None) -> str:
    """This worker's input device (:func:`queuekit.cluster.inputs.worker_device`), "" on one
    machine. Found without loading the cluster's modules where none can apply: no device
    function in force, and no server started by this process (``start_server`` is in
    ``queuekit.cluster.tasks``: a process that never loaded it started none)."""
    if device is not None:
        return device
    graph = _v1.get_default_graph()
    stack = getattr(graph, "_device_function_stack", None)  # private: else ask the cluster
    if stack is not None and not len(stack) and "queuekit.cluster.tasks" not in sys.modules:
        return ""
    from queuekit.cluster.inputs import worker_device
    return worker_device(graph)


def pinned(device: str):
    """The ops built inside on ``device`` (:func:`input_device`); nothing for ""."""
    return _v1.device(device) if device else contextlib.nullcontext()
