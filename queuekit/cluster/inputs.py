"""Input pipelines on a cluster: pinned to this worker, sharded, or fed by a work queue.

Under ``replica_device_setter`` every variable goes to a parameter server,
and so does ``string_input_producer``'s epoch counter (a local variable): the
workers then share one counter, and one of them reads nothing. The builders
build their input inside :func:`worker_inputs`, which pins every op to the
worker (a device with a job beats the setter's choice for variables too).
"""

from __future__ import annotations

import contextlib
import dataclasses

import tensorflow as tf

from queuekit.cluster.tasks import local_task
from queuekit.cluster.work import ON_LOST, WorkQueue
from queuekit.errors import DatasetError
from queuekit.features import install
from queuekit.graph_keys import GraphKeys, graph_objects

_v1 = tf.compat.v1
# Records a remote worker reads per step when nobody said: each run is a network round trip
# (measured over gRPC: 1.2-2.5 k records/s one at a time, 24 k with 64 per step).


def worker_device(graph: tf.Graph | None = None) -> str:
    """The device this worker's input belongs on; "" on one machine.

    What the device functions in force (``replica_device_setter``'s
    ``worker_device``) give an op that is not a variable, else the task of the
    one server this process started (``qk.start_server``).
    """
    graph = graph or _v1.get_default_graph()
    task = local_task()
    # No device function in force and no server: one machine, and no probe op in its graph.
    # (The stack is private; a TF without it gets the probe.)
    stack = getattr(graph, "_device_function_stack", None)
    if stack is not None and task is None and not len(stack):
        return ""
    with graph.as_default(), tf.name_scope("queuekit_device_probe"):
        device = tf.no_op().device  # an op the device functions place like any input op
    spec = tf.DeviceSpec.from_string(device)
    if spec.job and spec.task is not None:
        return tf.DeviceSpec(job=spec.job, task=spec.task).to_string()
    return task.device if task is not None else ""


@contextlib.contextmanager
def worker_inputs(device: str | None = None):
    """Pin the ops built inside to this worker: its readers, queues and epoch counters.

    For a hand-built pipeline under ``replica_device_setter``::

        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(...)):
            with qk.worker_inputs():
                files = tf.compat.v1.train.string_input_producer(...)

    ``device`` defaults to :func:`worker_device`; on one machine nothing changes.
    """
    device = worker_device() if device is None else device
    if not device:
        yield ""
        return
    with _v1.device(device):
        yield device


@dataclasses.dataclass(frozen=True)
class Shard:
    """This worker's share of the input (``tfrecord_batches(source=Shard(i, n))``).

    ``by="file"``: every ``count``-th file from ``index`` (an error with fewer
    files than shards); ``by="record"``: every file, and its share of the
    records (a stable hash of each record's ``file:byte offset`` key). A tuple
    ``(index, count)`` means ``Shard(index, count)``.
    """

    index: int
    count: int
    by: str = "file"

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard must be (index, count) with 0 <= index < count, not "
                             f"({self.index}, {self.count})")
        if self.by not in ("file", "record"):
            raise ValueError(f"shard_by must be 'file' or 'record', not {self.by!r}")

    @classmethod
    def of(cls, shard, by: str | None = None) -> Shard | None:
        """A :class:`Shard` from what a builder was given (None, a tuple, a Shard)."""
        if shard is None or isinstance(shard, Shard):
            if by is not None and by != "file" and isinstance(shard, Shard):
                raise ValueError("give Shard(..., by=...) or shard_by, not both")
            return shard
        index, count = (int(v) for v in shard)
        return cls(index, count, by or "file")


@dataclasses.dataclass(frozen=True)
class WorkQueueInput:
    """Files from a work queue on a parameter server
    (``tfrecord_batches(source=WorkQueueInput("/job:ps/task:0"))``).

    The chief fills the queue, so fast workers read more files and each is read
    once per epoch across the cluster (``docs/cluster.rst``). A worker silent
    for ``lost_after_secs`` is lost; ``on_lost="requeue"`` puts its unfinished
    files in the queue again (at least once for them), ``"raise"`` raises
    ``WorkLost`` naming them. A string means ``WorkQueueInput(device)``.
    """

    device: str
    lost_after_secs: float = 10.0
    on_lost: str = "requeue"

    def __post_init__(self):
        if self.on_lost not in ON_LOST:
            raise ValueError(f"on_lost must be one of {ON_LOST}, not {self.on_lost!r}")
        if self.lost_after_secs <= 0:
            raise ValueError(f"lost_after_secs must be positive, not {self.lost_after_secs}")

    @classmethod
    def of(cls, work_queue, lost_after_secs: float | None = None,
           on_lost: str | None = None) -> WorkQueueInput | None:
        """A :class:`WorkQueueInput` from what a builder was given (None, a device, one)."""
        if work_queue is None or isinstance(work_queue, WorkQueueInput):
            if work_queue is not None and (lost_after_secs, on_lost) != (None, None):
                raise ValueError("give WorkQueueInput(..., lost_after_secs=, on_lost=) or "
                                 "the keywords, not both")
            return work_queue
        return cls(str(work_queue), 10.0 if lost_after_secs is None else lost_after_secs,
                   on_lost or "requeue")


def shard_files(files: list[str], shard: Shard | None) -> tuple[list[str], tuple | None]:
    """(this shard's files, the record shard or None)."""
    if shard is None:
        return files, None
    index, count = shard.index, shard.count
    if shard.by == "record":
        return files, (index, count)
    if len(files) < count:
        raise DatasetError(f"{len(files)} files cannot make {count} shards by file (shard "
                           f"{index} would read nothing): give at least {count} files, or "
                           f"Shard(..., by='record') (every worker reads every file and keeps "
                           f"its share of the records)")
    return files[index::count], None


def keep_shard(keys: tf.Tensor, shard: tuple[int, int]) -> tf.Tensor:
    """A mask of the records (reader keys ``file:byte offset``) of one record shard: a
    stable hash."""
    index, count = shard
    return tf.equal(tf.strings.to_hash_bucket_fast(keys, count), index)


def file_of(keys: tf.Tensor) -> tf.Tensor:
    """The file of each reader key (``file:byte offset``)."""
    return tf.strings.regex_replace(keys, ":[0-9]+$", "")


def work_queue_inputs(spec: WorkQueueInput, files, n_readers: int, *, name: str, num_epochs,
                      shuffle, seed) -> tuple[list, WorkQueue]:
    """The work queue's ops: shared queues on ``spec.device`` (a ps), one local queue per
    reader (capacity 1: a reader holds its file and at most the next item); (the local
    queues, the :class:`WorkQueue`)."""
    shared = f"queuekit/{name}"
    with _v1.device(spec.device), tf.name_scope("work_queue"):
        todo = tf.queue.FIFOQueue(-1, [tf.string], [[]], shared_name=f"{shared}/todo",
                                  name="todo")
        events = tf.queue.FIFOQueue(-1, [tf.string], [[]], shared_name=f"{shared}/events",
                                    name="events")
        fill_entries = _v1.placeholder(tf.string, [None], name="fill_entries")
        event = _v1.placeholder(tf.string, [], name="event")
        events_count = _v1.placeholder(tf.int32, [], name="events_count")
        task_name = _v1.placeholder(tf.string, [], name="task")
        taken = todo.dequeue()
        # Taken and announced in one step on the ps: a worker that dies in the take
        # cannot make an entry vanish unannounced.
        told = events.enqueue([tf.strings.join(["take\t", task_name, "\t", taken])])
        ops = dict(fill=todo.enqueue_many([fill_entries]), fill_entries=fill_entries,
                   close=todo.close(), todo_size=todo.size(), take=(taken, told),
                   task_name=task_name,
                   put_event=events.enqueue([event]), event=event,
                   events_size=events.size(), take_events=events.dequeue_many(events_count),
                   events_count=events_count)
    with tf.name_scope("work_files"):
        local_path = _v1.placeholder(tf.string, [], name="path")
        local = [tf.queue.FIFOQueue(1, [tf.string], [[]], name=f"files_{i}")
                 for i in range(n_readers)]
        work = WorkQueue(name, tuple(files), num_epochs, shuffle, seed,
                         float(spec.lost_after_secs), spec.on_lost,
                         local_puts=[q.enqueue([local_path]) for q in local],
                         local_path=local_path, local_closes=[q.close() for q in local],
                         local_sizes=[q.size() for q in local], **ops)
    # The session runs its threads from there.
    graph = _v1.get_default_graph()
    graph_objects(graph, GraphKeys.WORK_QUEUES).append(work)
    # Its threads; and the chief's books go into the checkpoints with the input position.
    install(graph, "queuekit.session.work_queues:WorkQueues")
    install(graph, "queuekit.resume.tally:for_session")
    return local, work
