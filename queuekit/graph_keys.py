"""What queuekit's builders leave in a graph for its sessions to find, named once.

As TensorFlow's ``GraphKeys``: a builder (``pipelines``) marks what it built,
a ``QueueSession`` (``session``) finds it in the graph; the two parts never
import each other, both import this. Names go in graph collections;
Python objects (a work queue's or an input position's ops) in
:func:`graph_objects`, because a ``Saver`` writes every collection into the
checkpoint's meta graph and warns, on every save, about any it cannot
serialize.
"""

from __future__ import annotations

import threading

# The batch component naming each record's file in a work queue's pipeline: the builder puts it
# in, the work queue's session feature fetches it with the run that takes the batch.
FILE_KEY = "queuekit_work_file"

_LOCK = threading.RLock()


class GraphKeys:
    """Names of queuekit's graph collections and object lists."""

    # Collection: names of the queues whose runners an "auto" builder built; a tuner thread
    # sets how many of their threads run.
    AUTOTUNE = "queuekit_autotune"
    # Collection: names of the queues whose element is a whole batch (read_many="batch"):
    # one dequeue takes a batch of records, not one.
    WHOLE_BATCHES = "queuekit_whole_batches"
    # Collection: names of tuned queues whose readers decode each record (JPEG, PNG): a read
    # of many costs per record, so its tuner starts, as a read of one does, at half the threads.
    DECODING = "queuekit_decoding"
    # Collection: names of the queues of batches made ready ahead of the step (prefetch).
    READY_BATCHES = "queuekit_ready_batches"
    # Collection: summaries made while a builder built its readers (a parse_fn's), kept out
    # of SUMMARIES: merge_all() in a step would read records that never reach a batch.
    READER_SUMMARIES = "queuekit_reader_summaries"
    # Collection: report_uninitialized_variables ops a builder made, for a graph finalized
    # before its session starts (the session cannot make one then).
    VARIABLE_REPORTS = "queuekit_variable_reports"
    # Objects: one cluster.work.WorkQueue per work_queue builder; the session runs its threads.
    WORK_QUEUES = "queuekit_work_queues"
    # Objects: one pipelines.position.InputPosition per resumable builder; the session tracks
    # what the steps consumed and resumes there from a checkpoint.
    INPUT_POSITIONS = "queuekit_input_positions"
    # Objects: a Delivery per builder's batch (pipelines.delivery): qk.prefetched builds the
    # same pipeline's batch again with another number of batches made ready ahead of the step.
    DELIVERIES = "queuekit_deliveries"
    # Objects: the names of the queues whose runners a queuekit session started: a started
    # ready stage cannot be replaced (its thread would keep taking batches no step reads).
    STARTED_QUEUES = "queuekit_started_queues"
    # Objects: the features a session of this graph runs (``install``): "module:name" of each
    # one's factory, loaded when the session starts.
    FEATURES = "queuekit_features"


def graph_objects(graph, key: str) -> list:
    """The list of ``key``'s objects of ``graph`` (made empty on first use), alive as long
    as the graph is."""
    return on_graph(graph, "_queuekit_objects", dict).setdefault(key, [])


def on_graph(graph, name: str, make):
    """The object called ``name`` kept on ``graph`` (``make()`` the first time), as long as the
    graph lives.

    On the graph, not in a module-level ``WeakKeyDictionary``: such objects hold the graph's
    ops, so a dictionary's value would hold its own key and keep every graph, and the session
    that ran it, alive for good. A cycle through the graph is collected with it.
    """
    with _LOCK:
        value = getattr(graph, name, None)
        if value is None:
            value = make()
            setattr(graph, name, value)
        return value

