"""TF's own distributed runtime, and everything queuekit does only on a cluster: tasks from
``TF_CONFIG`` and their gRPC servers, loopback clusters for tests and trials, the worker's
input device, the work queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuekit.lazy import exports

if TYPE_CHECKING:  # type checkers see the real names; at run time _WHERE loads them
    from queuekit.cluster.inputs import Shard, WorkQueueInput, worker_inputs
    from queuekit.cluster.launch import LocalCluster, exit_with_parent
    from queuekit.cluster.tasks import ClusterTask, cluster_from_env, start_server

_WHERE = {
    "cluster_from_env": "queuekit.cluster.tasks",
    "start_server": "queuekit.cluster.tasks",
    "ClusterTask": "queuekit.cluster.tasks",
    "LocalCluster": "queuekit.cluster.launch",
    "exit_with_parent": "queuekit.cluster.launch",
    "worker_inputs": "queuekit.cluster.inputs",
    "Shard": "queuekit.cluster.inputs",
    "WorkQueueInput": "queuekit.cluster.inputs",
}
__all__ = list(_WHERE)
__getattr__, __dir__ = exports(globals(), _WHERE)
