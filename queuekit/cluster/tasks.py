"""One task of a TF cluster: read from ``TF_CONFIG``, its gRPC server, its session config.

queuekit adds no distributed machinery of its own: a task is a
``tf.distribute.Server`` of TF's gRPC runtime, exactly as the TF1 ps/worker
programs start it. What this module adds is the knowledge a session needs:
which task this process is (so a session can filter out the others, a
non-chief never initialises the model and shutdown touches only this
worker's queues), and a clear error when the port is taken.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence

import tensorflow as tf

from queuekit.errors import ClusterError

log = logging.getLogger("queuekit.cluster")
PS_JOB = "ps"

# server.target -> the task it serves, for the servers this process started.
_SERVED: dict[str, ClusterTask] = {}
_SERVED_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class ClusterTask:
    """This process's place in a cluster: ``cluster`` is ``{job: [host:port, ...]}``."""

    cluster: dict[str, list[str]]
    job: str
    task: int

    def __post_init__(self):
        if self.job not in self.cluster:
            raise ClusterError(f"job {self.job!r} is not in the cluster {sorted(self.cluster)}")
        if not 0 <= self.task < len(self.cluster[self.job]):
            raise ClusterError(f"task {self.task} of job {self.job!r} does not exist: the "
                               f"cluster has {len(self.cluster[self.job])} such tasks")

    @property
    def spec(self) -> tf.train.ClusterSpec:
        return tf.train.ClusterSpec(self.cluster)

    @property
    def device(self) -> str:
        return f"/job:{self.job}/task:{self.task}"

    @property
    def address(self) -> str:
        return self.cluster[self.job][self.task]

    @property
    def is_chief(self) -> bool:
        """TF's rule: the ``chief`` task, or worker 0 of a cluster without one."""
        if "chief" in self.cluster:
            return self.job == "chief"
        return self.job == "worker" and self.task == 0

    def device_filters(self) -> list[str]:
        """The parameter servers and this task: a session never waits for another worker."""
        return [f"/job:{PS_JOB}", self.device]

    def session_config(self, config=None):
        """``config`` (or a new ``ConfigProto``) with :meth:`device_filters` if it has none."""
        out = tf.compat.v1.ConfigProto()
        if config is not None:
            out.CopyFrom(config)
        if not out.device_filters:
            out.device_filters.extend(self.device_filters())
        return out


def cluster_from_env(environ=None) -> ClusterTask | None:
    """This process's task from ``TF_CONFIG`` (``{"cluster": ..., "task": {"type", "index"}}``),
    None when it is unset."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster = {job: list(addresses) for job, addresses in config["cluster"].items()}
        task = config["task"]
        return ClusterTask(cluster, str(task["type"]), int(task.get("index", 0)))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ClusterError(f"TF_CONFIG is not a cluster and task ({e!r}): expected "
                           '{"cluster": {"ps": ["host:port"], "worker": [...]}, '
                           '"task": {"type": "worker", "index": 0}}') from e


def start_server(task: ClusterTask | None = None, *, config=None) -> tf.distribute.Server:
    """Start this task's ``tf.distribute.Server`` (``task`` from ``TF_CONFIG`` when None).

    TF's gRPC server has no authentication and listens on every interface,
    whatever address the cluster gives it: run it only on a trusted network.
    """
    task = task if task is not None else cluster_from_env()
    if task is None:
        raise ClusterError("no task given and TF_CONFIG is not set")
    port = task.address.rsplit(":", 1)[-1]
    try:
        server = tf.distribute.Server(task.spec, job_name=task.job, task_index=task.task,
                                      config=config, start=True)
    except tf.errors.UnknownError as e:
        raise ClusterError(f"cannot start the server of {task.device} on port {port} "
                           f"({task.address}): is the port taken? ({e.message})") from e
    log.warning("%s serves on *:%s (every interface) with no authentication: anyone who "
                "can reach the port can run ops in it", task.device, port)
    with _SERVED_LOCK:
        _SERVED[server.target.decode() if isinstance(server.target, bytes)
                else server.target] = task
    return server


def task_of(target) -> ClusterTask | None:
    """The task behind a session target: a server this process started, else None."""
    if isinstance(target, bytes):
        target = target.decode()
    if not target:
        return None
    with _SERVED_LOCK:
        return _SERVED.get(target)


def local_task() -> ClusterTask | None:
    """The one non-ps task this process serves, if it serves exactly one."""
    with _SERVED_LOCK:
        tasks = {t.device: t for t in _SERVED.values() if t.job != PS_JOB}
    return next(iter(tasks.values())) if len(tasks) == 1 else None


def unreachable_tasks(task: ClusterTask, *, timeout: float = 1.0,
                      jobs: Sequence[str] | None = None, grpc: bool = False) -> list[str]:
    """The other tasks of ``task``'s cluster whose port takes no connection: "device (why)".

    A task whose process died refuses at once; a dead host times out after
    ``timeout`` seconds. Only says who is gone, not who is merely slow.
    ``jobs``: only the tasks of these jobs; ``grpc``: a task whose port takes the
    connection but does not answer as a gRPC server counts as gone too.
    """
    gone = []
    for job, addresses in sorted(task.cluster.items()):
        if jobs is not None and job not in jobs:
            continue
        for i, address in enumerate(addresses):
            if (job, i) == (task.job, task.task):
                continue
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)),
                                              timeout=timeout) as conn:
                    if grpc and not _speaks_http2(conn):
                        gone.append(f"/job:{job}/task:{i} ({address}: takes connections but "
                                    f"does not answer as a TensorFlow server: another program "
                                    f"listens there?)")
            except (OSError, ValueError) as e:
                why = getattr(e, "strerror", None) or str(e) or type(e).__name__
                gone.append(f"/job:{job}/task:{i} ({address}: {why})")
    return gone


# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (a TensorFlow server is
# one) answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4


def _speaks_http2(conn: socket.socket) -> bool:
    """Whether the peer answers HTTP/2's preface with a SETTINGS frame (within the socket's
    timeout): a port where another program listens takes the connection and hung the
    worker's session for good (#44)."""
    try:
        conn.sendall(_HTTP2_PREFACE)
        head = b""
        while len(head) < 9:
            part = conn.recv(9 - len(head))
            if not part:
                return False
            head += part
    except OSError:
        return False
    return head[3] == _SETTINGS


def wait_for_parameter_servers(task: ClusterTask, seconds: float) -> None:
    """Return once every ps task of ``task``'s cluster answers as a TensorFlow (gRPC) server.

    A session whose ps is not there blocks its first run for ever (TF waits
    for the cluster), whatever the stall timeout: the start-up is bounded here.

    Raises:
        ClusterError: naming the tasks and addresses that took no connection in ``seconds``.
    """
    deadline = time.monotonic() + seconds
    while True:
        gone = unreachable_tasks(task, jobs=(PS_JOB,), timeout=min(1.0, max(0.1, seconds)),
                                 grpc=True)
        if not gone:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"{task.device}: no TensorFlow server answers at {', '.join(gone)} after "
                f"{seconds:g} s: is the ps process running, and is its address in the "
                f"cluster (TF_CONFIG) right?")
        time.sleep(0.25)  # polling a port that is not open yet
