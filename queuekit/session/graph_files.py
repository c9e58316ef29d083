"""The files a graph's readers read, found from what the graph says about them.

Each reader op reads a filename queue, and the runner feeding that queue enqueues
string constants (what ``string_input_producer`` builds, and what hand-built
pipelines do too). The session's input checks read them at start
(``checks.py``); an error's diagnosis reads them (``diagnose.py``).
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.records.tfrecord import has_records
from queuekit.session.reads import READER_OPS, ancestors, queue_op

log = logging.getLogger(__name__)
MAX_FILES = 10_000  # candidate files checked when naming a corrupt one


def _runners_by_queue(graph: tf.Graph) -> dict[str, list]:
    feeding: dict[str, list] = {}
    for qr in graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS):
        feeding.setdefault(qr.queue.queue_ref.op.name, []).append(qr)
    return feeding


def _upstream(ops, feeding: dict[str, list]) -> list[tf.Operation]:
    """Every op upstream of ``ops``, going up through queues to the runners that feed them."""
    seen: dict[str, tf.Operation] = {}
    todo = list(ops)
    while todo:
        reached = ancestors(todo)
        todo = []
        for op in reached:
            if op.name in seen:
                continue
            seen[op.name] = op
            for qr in feeding.get(op.name, ()):
                todo.extend(qr.enqueue_ops)
    return list(seen.values())


def _string_files(ops, limit: int | None = None) -> list[str]:
    """Existing files named by the string constants among ``ops`` (an Assert's message is not)."""
    files: list[str] = []
    for op in ops:
        if op.type == "Const" and op.get_attr("dtype") == tf.string:
            values = tf.make_ndarray(op.get_attr("value")).reshape(-1)
            files.extend(os.fsdecode(v) for v in values[:limit])
    return [f for f in dict.fromkeys(files) if os.path.isfile(f)]


def reader_files(graph: tf.Graph, ops, *, whole_files: bool | None = None) -> list[str]:
    """The existing files that the readers upstream of ``ops`` can be given, in graph order.

    From a batch dequeue the walk reaches the readers, their filename queues
    and the string constants the runners of those queues enqueue.
    ``whole_files``: only a ``WholeFileReader``'s (True), or only the record
    readers' (False).
    """
    feeding = _runners_by_queue(graph)
    queues = dict.fromkeys(
        queue_op(op.inputs[1]).name for op in _upstream(ops, feeding)
        if op.type in READER_OPS and (whole_files is None or whole_files == (
            queue_op(op.inputs[0]).type == "WholeFileReaderV2")))
    # A work queue's readers are given names by its relay threads, from work.files.
    work = [f for w in graph_objects(graph, GraphKeys.WORK_QUEUES)
            if set(w.local_queues()) & set(queues) for f in w.files if os.path.isfile(f)]
    return work + _string_files(op for name in queues for qr in feeding.get(name, ())
                                for op in ancestors(qr.enqueue_ops))


def tfrecord_files(graph: tf.Graph) -> list[str]:
    """The files every uncompressed ``TFRecordReader`` of the graph can be given."""
    files: list[str] = []
    for op in graph.get_operations():
        if op.type not in READER_OPS:
            continue
        reader = queue_op(op.inputs[0])
        if reader.type == "TFRecordReaderV2" and not reader.get_attr("compression_type"):
            files.extend(reader_files(graph, [op]))
    return list(dict.fromkeys(files))


def fixed_length_inputs(graph: tf.Graph) -> list[tuple[list[str], int, int, int]]:
    """(files, record, header and footer bytes) of every uncompressed, non-overlapping
    ``FixedLengthRecordReader`` of the graph (CIFAR's binaries, hand-built or not)."""
    out = []
    for op in graph.get_operations():
        if op.type not in READER_OPS:
            continue
        reader = queue_op(op.inputs[0])
        if (reader.type == "FixedLengthRecordReaderV2" and not reader.get_attr("encoding")
                and not reader.get_attr("hop_bytes")):
            out.append((reader_files(graph, [op]), reader.get_attr("record_bytes"),
                        reader.get_attr("header_bytes"), reader.get_attr("footer_bytes")))
    return out


def upstream_files(graph: tf.Graph, ops) -> list[str]:
    """Existing files named by string constants anywhere upstream of ``ops`` (through runners)."""
    return _string_files(_upstream(ops, _runners_by_queue(graph)), MAX_FILES * 10)


def empty_files(graph: tf.Graph, ops) -> list[str]:
    """The files behind ``ops``' readers that hold no records at all."""
    try:
        return [f for f in reader_files(graph, ops) if not has_records(f)]
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the stall itself
        log.debug("could not list the reader files", exc_info=True)
        return []
