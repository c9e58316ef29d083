"""The work queue's contract: the ops a builder makes, the threads a session runs on them.

``tfrecord_batches(work_queue="/job:ps/task:0")`` builds the ops
(:func:`queuekit.cluster.inputs.work_queue_inputs`) and adds one
:class:`WorkQueue` to the graph's ``GraphKeys.WORK_QUEUES`` objects; a
``QueueSession`` finds it there and runs the threads
(:mod:`queuekit.cluster.work_threads`) and their hook.

The protocol, over two queues on the parameter server that every worker's
graph names alike (``shared_name``):

- ``todo``: entries ``"<epoch>\\t<file>"``. Only the chief fills it, epoch by
  epoch, and closes it when every entry is done (or reported lost).
- ``events``: ``"take|read|done|back\\t<task>\\t<entry>"`` and ``"beat\\t<task>"``.
  A worker's relay thread takes an entry for one of its readers (the ps
  enqueues the ``take`` event in the same step, so an entry never vanishes
  with a worker that dies in the take; each reader
  has its own local filename queue) and puts the file there, then
  :data:`MARKER`, an empty file: the reader takes the marker only once it
  finished the file, so the count of items taken from the local queue says
  which files the reader finished without asking it (its lock is held while it
  waits for work). A finished file is ``done`` once the training loop has also
  taken every one of its records out of the batch queue: the session fetches
  each batch's :data:`FILE_KEY` component with the run that dequeues it and
  counts the records per file against the file's record count, so records
  still in a dead worker's queues are not counted as delivered. Every worker
  beats every :data:`BEAT_SECS`; a worker that stops gives its unfinished
  entries ``back``.

The chief keeps the books: an entry taken by a task that stopped beating for
``lost_after_secs`` is re-queued (``on_lost="requeue"``: at least once for
that file, its records may have reached the lost worker's step) or reported by
name (``on_lost="raise"``: ``WorkLost``). An epoch never silently shrinks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

BEAT_SECS = 0.5
MARKER = "/dev/null"  # zero records, on every POSIX host a reader may run on
ON_LOST = ("requeue", "raise")


def entry(epoch: int, path: str) -> str:
    return f"{epoch}\t{path}"


def entry_path(value: str) -> str:
    return value.split("\t", 1)[1]


@dataclasses.dataclass
class WorkQueue:
    """The ops of one work queue (tensors and ops of the graph that holds them)."""

    name: str
    files: tuple[str, ...]
    num_epochs: int | None
    shuffle: bool
    seed: int | None
    lost_after_secs: float
    on_lost: str
    # on the parameter server
    fill: Any  # op: todo.enqueue_many(fill_entries)
    fill_entries: Any  # placeholder [None] string
    close: Any  # op: todo.close() (pending takes see the end)
    todo_size: Any
    take: Any  # (todo.dequeue(), its "take" event enqueued on the ps): one entry
    task_name: Any  # placeholder [] string: the taking task
    put_event: Any  # op: events.enqueue(event)
    event: Any  # placeholder [] string
    events_size: Any
    take_events: Any  # events.dequeue_many(events_count)
    events_count: Any
    # on this worker, one per reader
    local_puts: list[Any]  # ops: local_i.enqueue(local_path)
    local_path: Any  # placeholder [] string
    local_closes: list[Any]
    local_sizes: list[Any]
    # the batch's file names, one per record (FILE_KEY, taken out of the user's dict)
    consumed: Any = None

    def local_queues(self) -> list[str]:
        """The names of this worker's per-reader filename queues."""
        return [op.inputs[0].op.name for op in self.local_puts]
