"""The input checks of every session: the files its readers read, found from what the
graph says about them, checked at start and at the end of the input, whoever built the
pipeline.

Each reader op reads a filename queue, and the runner feeding that queue enqueues
string constants (what ``string_input_producer`` builds, and what hand-built
pipelines do too). TensorFlow's readers end a file quietly at a record cut short,
so a cut file would be a short epoch. At start (and when runners are added) every
TFRecord file's framing is walked and every fixed-length file's size checked;
their sizes are noted, and at the end of the input a file whose size changed while
it was read is an error naming it. A stall on a reader whose files hold no record
is said so; an error's diagnosis reads the same files (``diagnose.py``).
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from queuekit.errors import DatasetError
from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.records.files import check_files, check_sizes, resized, sizes
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


class InputChecks(Feature):
    """Framing and sizes at start, sizes at the end (see the module)."""

    name = "input_checks"

    def __init__(self, running) -> None:
        super().__init__(running)
        self._sizes: dict[str, int] = {}  # at start: a file cut or grown under a reader
        self._started = False

    def created(self, restored: str | None) -> None:
        self._check()
        if restored and not graph_objects(self.running.graph, GraphKeys.INPUT_POSITIONS):
            from queuekit.resume.restore import warn_unresumable  # only after a restore
            warn_unresumable(self.running.graph, set(), restored)

    def starting(self, runners) -> dict:
        if self._started and runners:  # runners added after the first run
            self._check()
        self._started = True
        return {}

    def _check(self) -> None:
        check_inputs(self.running.graph, self._sizes)

    def end_of_data(self, end: BaseException) -> None:
        """At the end of the input: raise if a file changed size while it was read."""
        changed = changed_while_read(self._sizes)
        if changed is not None:
            raise changed from end

    def describe_stall(self, ops: list) -> str:
        empty = empty_files(self.running.graph, ops)
        return f"; its input files hold no records: {', '.join(empty)}" if empty else ""


def check_inputs(graph, known: dict[str, int]) -> list[str]:
    """Check the framing of every TFRecord file and the size of every fixed-length file the
    graph's readers read (raising an error naming the file); add their sizes to ``known``.
    Returns the TFRecord files."""
    files = tfrecord_files(graph)
    check_files(files)
    records = list(files)
    for paths, record_bytes, header_bytes, footer_bytes in fixed_length_inputs(graph):
        check_sizes(paths, record_bytes, header_bytes, footer_bytes)
        files += paths
    known.update(sizes(f for f in files if f not in known))
    return records


def changed_while_read(known: dict[str, int]) -> DatasetError | None:
    """The error for the first file whose size is not what ``known`` noted at start."""
    changed = resized(known)
    if not changed:
        return None
    path, before, now = changed[0]
    return DatasetError(
        f"{path} changed while the pipeline read it ({before} bytes at the start, "
        + ("gone now" if now < 0 else f"{now} now")
        + "): the epoch did not read it as it is; the input ended early or late")
