"""The input position: which records the steps consumed, saved with every checkpoint and
resumed from it, so a killed job delivers every record once per epoch.

For each resumable pipeline of the graph (:mod:`queuekit.resume.graph`)
a :class:`Tally` counts, per record, how many times a run took it out of the
batch queue: the graph puts each batch's reader keys in a queue in the run
that takes the batch (also a hook's run, or a run on the raw session), and
the tally drains that queue every :data:`_DRAIN_RUNS` runs and before each
checkpoint (the keys never pass through Python with a step), and splits the
keys in a graph and session of its own (:mod:`queuekit.resume.keys`). Records read but
still in the queues (a shuffle buffer) are not consumed.

A checkpoint written through the session (``saver.save(qs, path)``, TF's
``CheckpointSaverHook`` among its hooks, ``monitored_training_session``) gets
``<prefix>.queuekit-input``, a JSON file written (atomically) before the
model's own files: the checkpoint index, which TF's ``Saver`` updates last,
makes both current at once, so a crash at any point leaves an index whose
checkpoint has its own input state, never another's. Its size is bounded by
the files and what is in flight: each file's counts are run-length encoded
(a consumed prefix, the shuffle buffer's scattered records, the rest).

On restore (``checkpoint_dir``, ``saver.restore(qs, path)`` before the first
run, a session creator's restore of ``checkpoint_dir``) the session reads that
file before any runner starts (:mod:`queuekit.resume.restore`, loaded only then):
each pipeline's producer restarts at the oldest epoch not finished, and its
runner threads drop, per record, the reads already consumed (counted down here,
in Python, under a lock: two readers can read the same record at once, one pass
of it in each of two epochs), feeding the others to the enqueue op, until
nothing is left to skip. The files must be those the checkpoint saw (same
content), or the restore is a :class:`DatasetError` naming the first one that
differs.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from typing import Any

import numpy as np
import tensorflow as tf

from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.graph_walk import checkpoint_run, ops_above
from queuekit.records.files import atomic_write, record_offsets

log = logging.getLogger(__name__)


def _file():
    """The position file's module: loaded at the first save or restore (a session that
    never checkpoints, an evaluation's, never needs it)."""
    from queuekit.resume import file

    return file


def _keys():
    """The drained keys' splitter's module: loaded at the first drain that took any."""
    from queuekit.resume import keys

    return keys


_DRAIN_RUNS = 1000  # runs between two drains of the graph's queue (its memory)


class Tally:
    """What the steps consumed of one pipeline: per file, a count per record."""

    def __init__(self, position, split):
        self.position = position
        self._split = split
        self.files = list(position.files)
        self._file_index = {os.fsencode(f): i for i, f in enumerate(self.files)}
        self.sizes = [os.path.getsize(f) for f in self.files]
        self.places = [_record_places(f, position) for f in self.files]
        self.counts = [np.zeros(len(p), np.int64) for p in self.places]
        self._skip: dict[bytes, int] = {}  # reader key -> its reads still to drop
        self.pending = 0  # reads still to drop (their sum)
        self._skip_lock = threading.Lock()  # the runner threads count down together
        self._lock = threading.Lock()

    @functools.cached_property
    def prints(self) -> list[str]:
        """Each file's content identity (32 KiB read each, at the first save or restore)."""
        fingerprint = _file().fingerprint
        return [fingerprint(f, size) for f, size in zip(self.files, self.sizes, strict=True)]

    def drain(self, sess) -> None:
        """Count what the runs consumed since the last drain (the graph's queue, emptied)."""
        with self._lock:  # one drainer at a time: its run takes what it counted, never waits
            joined = sess.run(self.position.drain)
            if len(joined):
                self._count(*self._split(joined))

    def _count(self, names: np.ndarray, which: np.ndarray, places: np.ndarray) -> None:
        """Count drained keys, split (:mod:`queuekit.resume.keys`): ``names[which[k]]`` is
        key k's file."""
        if not len(places):
            return
        order = np.argsort(which, kind="stable")
        ends = np.searchsorted(which[order], np.arange(1, len(names) + 1))
        for name, mine in zip(names, np.split(order, ends[:-1]), strict=True):
            i = self._file_index.get(bytes(name))
            if i is None or not len(self.counts[i]):
                continue
            index = np.searchsorted(self.places[i], places[mine])
            np.add.at(self.counts[i], np.minimum(index, len(self.counts[i]) - 1), 1)

    def keep(self, keys) -> np.ndarray:
        """Which of the records read (reader keys ``keys``) go on; each read of a record a
        restore said was consumed is dropped, and counted down."""
        keep = np.ones(len(keys), bool)
        with self._skip_lock:
            for i, key in enumerate(keys):
                left = self._skip.get(key, 0)
                if left:
                    keep[i] = False
                    self.pending -= 1
                    if left == 1:
                        del self._skip[key]
                    else:
                        self._skip[key] = left - 1
        return keep

    def start_from(self, counts: list[np.ndarray], skips: dict[bytes, int], sess) -> None:
        """Continue from a checkpoint's ``counts`` (:mod:`queuekit.resume.restore`), the
        runner threads dropping ``skips`` (reader key -> reads to drop) before the rest."""
        with self._skip_lock:
            self._skip = dict(skips)
            self.pending = sum(skips.values())
        self.drain(sess)  # nothing was consumed yet: empty
        self.counts = counts

    def state(self, sess) -> dict[str, Any]:
        self.drain(sess)
        p = self.position
        return {"name": p.name, "kind": p.record_kind, "shuffle": p.shuffle, "seed": p.seed,
                "num_epochs": p.num_epochs,
                "files": [[f, size, len(c), fp] for f, size, c, fp in
                          zip(self.files, self.sizes, self.counts, self.prints, strict=True)],
                "counts": [_file().rle(c) for c in self.counts]}


def _record_places(path: str, position) -> np.ndarray:
    """What the reader reports for each record of ``path``: byte offsets of a TFRecord
    file's records (a walk of their headers), or fixed-length records' indexes."""
    if position.record_kind == "file":
        return np.zeros(1, np.int64)
    if position.record_kind == "index":
        record_bytes, header, footer = position.fixed
        n = max(0, (os.path.getsize(path) - header - footer) // record_bytes)
        return np.arange(n, dtype=np.int64)
    return record_offsets(path).offsets  # a fault ends them: the session's input check names it


class InputPositions(Feature):
    """The session feature of the input position: the tallies of the resumable pipelines,
    their checkpoints and resume (installed by the builders and by a work queue)."""

    name = "input_position"

    def __init__(self, running):
        super().__init__(running)
        graph, sess = running.graph, running.sess
        self._splitter: Any = None  # a KeySplitter, made at the first drain that took keys
        self._splitter_lock = threading.Lock()  # two pipelines' drains may come at once
        self.tallies = [Tally(p, self._split)
                        for p in graph_objects(graph, GraphKeys.INPUT_POSITIONS)]
        self._sess = sess
        if self.tallies:  # the graph counts what runs consume from now on
            sess.run([t.position.tally for t in self.tallies])
        # A work queue's position is the chief's books (queuekit.cluster.books): the files
        # done, kept by the work queues' feature; ``work_resume``, what a restored checkpoint
        # says each starts from.
        self.works = list(graph_objects(graph, GraphKeys.WORK_QUEUES))
        self.work_resume: dict[str, tuple[int, list[str]]] = {}
        self._graph = graph
        self._kinds: dict[str, str] = {}
        # The positions this session wrote, with the file's identity: tidy removes one only
        # when its checkpoint is gone, and only if it is still the file written here.
        self._written: dict[str, tuple[int, int, int, int, str]] = {}
        self._saved = False  # a save since the last tidy
        self._runs = 0

    def created(self, restored: str | None) -> None:
        resume = self.running.options.get("resume_input")
        if restored is not None and resume is not False and self.running.chief:
            from queuekit.resume.restore import resume_input  # only a restore needs it

            self.work_resume = resume_input(self, restored, self._sess, always=resume is True)

    def chief_work(self) -> list:
        """The threads of every work queue this chief keeps the books of."""
        work = self.running.feature("work_queues")
        return work.chief_work() if work is not None else []

    def enqueue_for(self, op, plain, make_callable):
        """What a runner thread runs for enqueue ``op``: ``plain``, or while a restore left
        records to skip and ``op`` takes a resumable reader's records, reads of that
        reader alone (of many records: :func:`~queuekit.resume.graph.reads`), what was not
        consumed of them fed into ``op`` in place of its read, until nothing is left to
        skip or kept back.

        ``make_callable(fetches, feed_list=None)``: the session's, as the thread runs."""
        left = any(t.pending for t in self.tallies)  # a restore left reads to skip
        found = _reader_of(op, self.tallies) if left else None
        if found is None or not found[0].pending:
            return plain
        from queuekit.resume.skip import skipping  # only a resumed session skips

        return skipping(op, plain, make_callable, *found)

    def after_step(self, run_metadata, state) -> None:
        """After each run: now and then, count what the runs consumed (bounds the tables)."""
        self._runs += 1
        if self._runs >= _DRAIN_RUNS and self.tallies:
            self._runs = 0
            for t in self.tallies:
                t.drain(self._sess)

    def state(self) -> dict[str, Any]:
        return {"format": _file().FORMAT, "pipelines": [t.state(self._sess) for t in self.tallies],
                "work_queues": [dict(t.state(), files=_file().work_files(t.work))
                                for t in self.chief_work()]}

    def save(self, prefix: str) -> None:
        """Write ``<prefix>.queuekit-input`` (before the model's files: see the module)."""
        data = json.dumps(self.state(), separators=(",", ":")).encode()
        if "://" in prefix:  # a bucket: an object appears whole when its writer closes
            with tf.io.gfile.GFile(prefix + _file().SUFFIX, "wb") as f:
                f.write(data)
            return
        os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)  # as the Saver's op does
        atomic_write(prefix + _file().SUFFIX, data)
        self._written[prefix] = _file().identity(prefix + _file().SUFFIX, data)
        self._saved = True

    def _split(self, joined):
        with self._splitter_lock:
            if self._splitter is None:
                self._splitter = _keys().KeySplitter()
            splitter = self._splitter
        return splitter(joined)

    def closing(self) -> None:
        self.tidy()
        with self._splitter_lock:
            if self._splitter is not None:
                self._splitter.close()
                self._splitter = None

    def tidy(self) -> None:
        """Remove the positions this session wrote whose checkpoint is gone (the ``Saver``'s
        ``max_to_keep`` removes model files after the save; a failed save leaves none): at
        the next run after a save, and when the session closes. Never a file it did not
        write: another job's, or one put there since."""
        if self._saved and self._written:  # a killed writer's temps beside the checkpoints
            _file().remove_dead_temps(next(iter(self._written)))
        self._saved = False
        for prefix, written in list(self._written.items()):
            if os.path.exists(prefix + ".index"):
                continue
            del self._written[prefix]
            _file().remove_if_written(prefix + _file().SUFFIX, written)

    def observe(self, fetches, feed_dict) -> None:
        """Before a run: a ``Saver``'s save gets the input position beside it; a restore
        while the input runs cannot rewind it, and says so."""
        if self._saved:
            self.tidy()
        run = checkpoint_run(self._graph, fetches, feed_dict, self._kinds)
        if run is None:
            return
        kind, prefix = run
        if kind == "save":
            self.save(prefix)
        elif self.tallies:
            log.warning("%s was restored while the input pipeline runs: its input position "
                        "is not applied (restore before the first run, or pass "
                        "checkpoint_dir)", prefix)


def _reader_of(op, tallies):
    """(tally, (keys, values) of its read, many, its read of many or None) of the reader
    whose records ``op`` takes, or None: a walk up ``op``'s inputs to a resumable read."""
    reads = {}
    for t in tallies:
        for read, many, bulk in t.position.reads:
            reads[read[0].ref()] = reads[read[1].ref()] = (t, read, many, bulk)
    for above in ops_above(op):
        for tensor in above.inputs:
            if tensor.ref() in reads:
                return reads[tensor.ref()]
    return None


def for_session(running) -> InputPositions | None:
    """The input position's feature for a started session: where the graph has resumable
    pipelines, or work queues whose books this chief keeps."""
    graph = running.graph
    if graph_objects(graph, GraphKeys.INPUT_POSITIONS) or (
            running.chief and graph_objects(graph, GraphKeys.WORK_QUEUES)):
        return InputPositions(running)
    return None
