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
file before any runner starts: each pipeline's producer restarts at the
oldest epoch not finished, and its runner threads drop, per record, the reads
already consumed (counted down here, in Python, under a lock: two readers can
read the same record at once, one pass of it in each of two epochs), feeding
the others to the enqueue op, until nothing is left to skip. The files must be
those the checkpoint saw (same names, same sizes), or the restore is a
:class:`DatasetError` naming the first one that differs.
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

from queuekit.errors import DatasetError
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
FORMAT = 1


class Tally:
    """What the steps consumed of one pipeline: per file, a count per record."""

    def __init__(self, position, split):
        self.position = position
        self._split = split
        self.files = list(position.files)
        self._file_index = {os.fsencode(f): i for i, f in enumerate(self.files)}
        self.sizes = [os.path.getsize(f) for f in self.files]
        self._places = [_record_places(f, position) for f in self.files]
        self.counts = [np.zeros(len(p), np.int64) for p in self._places]
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
            index = np.searchsorted(self._places[i], places[mine])
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

    def state(self, sess) -> dict[str, Any]:
        self.drain(sess)
        p = self.position
        return {"name": p.name, "kind": p.record_kind, "shuffle": p.shuffle, "seed": p.seed,
                "num_epochs": p.num_epochs,
                "files": [[f, size, len(c), fp] for f, size, c, fp in
                          zip(self.files, self.sizes, self.counts, self.prints, strict=True)],
                "counts": [_file().rle(c) for c in self.counts]}

    def matches(self, state: dict[str, Any]) -> dict[str, str] | None:
        """Which of this pipeline's files each file of a checkpoint's pipeline ``state`` is
        (:func:`~queuekit.resume.file.match_files`); None: another input."""
        saved = [(str(e[0]), int(e[1]), int(e[2]), str(e[3]) if len(e) > 3 else None)
                 for e in state["files"]]
        now = list(zip(self.files, self.sizes, (len(c) for c in self.counts), self.prints,
                       strict=True))
        return _file().match_files(saved, now, self.position.name)

    def resume(self, state: dict[str, Any], sess) -> bool:
        """Continue from a checkpoint's ``state`` of this pipeline; False when it is another
        input altogether (no file in common)."""
        p = self.position
        then = (state.get("kind"), state.get("num_epochs"), bool(state.get("shuffle")))
        if then != (p.record_kind, p.num_epochs, p.shuffle):
            # Another pipeline over the same files: an evaluation (num_epochs=1, in order)
            # restoring a training checkpoint must read its epoch whole.
            log.info("pipeline %s: the checkpoint's pipeline of that name read these files "
                     "as %s (kind, num_epochs, shuffle), this one as %s: starting at the "
                     "beginning", p.name, then, (p.record_kind, p.num_epochs, p.shuffle))
            return False
        mapping = self.matches(state)
        if mapping is None:
            log.info("pipeline %s: the checkpoint's input of that name reads other files; "
                     "starting at the beginning", p.name)
            return False
        by_name = {mapping[str(e[0])]: _file().unrle(runs, int(e[2]), p.num_epochs)
                   for runs, e in zip(state["counts"], state["files"], strict=True)}
        counts = [by_name[f] for f in self.files]  # in this pipeline's order, whatever it was
        done = min((int(c.min()) for c in counts if len(c)), default=0)
        keys, skips, whole = [], [], []
        for path, item, places, c in zip(self.files, p.items, self._places, counts,
                                         strict=True):
            base = done
            if len(c) and int(c.min()) > done:  # consumed whole in epoch `done`: not read
                whole.append(item)
                base = done + 1
            ahead = np.nonzero(c > base)[0]
            name = os.fsencode(path)  # as the reader reports it, also when not UTF-8
            keys += [name + b":%d" % int(places[i]) for i in ahead]
            skips += [int(c[i] - base) for i in ahead]
        epoch = done if p.num_epochs is None else min(done, p.num_epochs)
        sess.run(p.set_epoch, {p.epoch_value: epoch})
        if whole:
            sess.run(p.drop_files, {p.consumed_whole: whole})
        with self._skip_lock:
            self._skip = dict(zip(keys, skips, strict=True))
            self.pending = sum(skips)
        self.drain(sess)  # nothing was consumed yet: empty
        self.counts = counts
        log.info("pipeline %s resumes in epoch %d: %d file(s) of it consumed whole before the "
                 "checkpoint are left out, %d record(s) skipped", p.name, epoch, len(whole),
                 len(keys))
        return True


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
        if resume is not False and self.running.chief:
            self.resume(restored, self._sess, always=resume is True)

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
        return {"format": FORMAT, "pipelines": [t.state(self._sess) for t in self.tallies],
                "work_queues": [dict(t.state(), files=_work_files(t.work))
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

    def resume(self, prefix: str | None, sess, *, always: bool = False) -> None:
        """Continue every pipeline from the input state saved with checkpoint ``prefix``;
        unless ``always``, only in a graph that trains (:func:`trains`)."""
        if prefix is None:
            return
        if not always and not trains(self._graph):
            log.info("restored %s into a graph that trains nothing (an evaluation): its "
                     "input starts at the beginning, every record read once per epoch; "
                     "QueueSession(resume_input=True) resumes it", prefix)
            return
        warn_unresumable(self._graph, {t.position.producer_queue for t in self.tallies},
                          prefix)
        if not self.tallies and not self.works:
            return
        path = prefix + _file().SUFFIX
        state = _file().read_position(path)
        if state is None:
            log.warning("checkpoint %s has no input position (written outside a queuekit "
                        "session, or by an earlier version): the input starts its epoch over",
                        prefix)
            return
        if state.get("format") != FORMAT:
            raise DatasetError(f"{path}: an input position of an unknown format")
        saved = {p["name"]: p for p in state.get("pipelines", [])}
        books = {w.get("name"): w for w in state.get("work_queues", []) if isinstance(w, dict)}
        try:
            for tally in self.tallies:
                found = self._saved_for(tally, saved, path)
                if found is not None:
                    tally.resume(found, sess)
            for work in self.works:
                if work.name in books:
                    self.work_resume[work.name] = _work_resume(work, books[work.name])
        except DatasetError:
            raise  # names the file that differs, or what the position claims
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DatasetError(f"{path}: a malformed input position ({e!r})") from e
        if saved:
            log.warning("%s: the input position of pipeline(s) %s matched no pipeline of this "
                        "graph (%s): nothing of it is applied", path, ", ".join(sorted(saved)),
                        ", ".join(t.position.name for t in self.tallies) or "none")

    @staticmethod
    def _saved_for(tally: Tally, saved: dict[str, dict], path: str) -> dict | None:
        """The checkpoint's pipeline ``tally`` continues, taken out of ``saved``: the one of
        its name, else one that read the same files (a script that renamed its pipeline, or
        built another first)."""
        if tally.position.name in saved:
            return saved.pop(tally.position.name)
        for name, state in saved.items():
            try:
                same = tally.matches(state)
            except DatasetError:
                same = None
            if same is not None:
                log.warning("%s: pipeline %s continues the checkpoint's pipeline %s, which "
                            "read the same files", path, tally.position.name, name)
                return saved.pop(name)
        return None


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


def _work_files(work) -> list[list]:
    """A work queue's files as a checkpoint names them: ``[name, size, 0]`` (size -1 where
    the chief cannot see the file: the workers read it)."""
    out = []
    for f in work.files:
        try:
            size = tf.io.gfile.stat(f).length
        except tf.errors.OpError:
            size = -1
        out.append([f, size, 0])
    return out


def _work_resume(work, saved: dict[str, Any]) -> tuple[int, list[str]]:
    """(next epoch, entries to fill again) of a work queue from its checkpoint's books,
    checked against the files it reads now (the file is untrusted input)."""
    then = {str(f): int(size) for f, size, _ in saved["files"]}
    now = {f: size for f, size, _ in _work_files(work)}
    for f, size in now.items():  # a size one side could not see is no difference
        if f in then and min(size, then[f]) < 0:
            now[f] = then[f]
    if _file().match_files([(f, size, 0, None) for f, size in then.items()],
                   [(f, size, 0, "") for f, size in now.items()], work.name) is None and then:
        raise ValueError(f"none of the files {sorted(then)[:3]} is read now")
    epoch = int(saved["epoch"])
    if epoch < 0 or (work.num_epochs is not None and epoch > work.num_epochs):
        raise ValueError(f"epoch {epoch}")
    entries = [str(e) for e in saved["unfinished"]]
    for e in entries:
        at, _, file = e.partition("\t")
        if file not in now or not 0 <= int(at) < max(epoch, 1):
            raise ValueError(f"entry {e!r}")
    log.info("work queue %s resumes from its checkpoint: %d file(s) to read again, then "
             "epoch %d", work.name, len(entries), epoch)
    return epoch, entries


# What an optimizer's update of a variable runs (minimize(), apply_gradients()).
_UPDATE_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
_INCREMENTS = ("AssignAdd", "AssignAddVariableOp")


def trains(graph: tf.Graph) -> bool:
    """Whether ``graph`` trains: an optimizer's update op, a gradient, or an op that
    increments the global step. A restore into a graph that does not is an evaluation of
    that checkpoint, not a resume of its input: resuming would evaluate only the records
    training had not consumed yet (80 of 120, or none, silently; #44)."""
    step = tf.compat.v1.train.get_global_step(graph)
    step_op = None if step is None else step.op
    for op in graph.get_operations():
        if op.type.startswith(_UPDATE_PREFIXES) or op.name.startswith("gradients/"):
            return True
        if op.type in _INCREMENTS and step_op is not None and op.inputs[0].op is step_op:
            return True
    return False


def for_session(running) -> InputPositions | None:
    """The input position's feature for a started session: where the graph has resumable
    pipelines, or work queues whose books this chief keeps."""
    graph = running.graph
    if graph_objects(graph, GraphKeys.INPUT_POSITIONS) or (
            running.chief and graph_objects(graph, GraphKeys.WORK_QUEUES)):
        return InputPositions(running)
    return None


def warn_unresumable(graph: tf.Graph, ours: set[str], prefix: str) -> None:
    """Say so when a restored job has input producers queuekit cannot resume (a hand-built
    ``string_input_producer`` or ``slice_input_producer``)."""
    theirs = sorted({qr.queue.queue_ref.op.name for qr in
                     graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
                     if "input_producer" in qr.queue.queue_ref.op.name} - ours)
    if theirs:
        log.warning("restored %s: the input of %s (not built by queuekit's builders) "
                    "starts over: records read before the checkpoint are read again in this "
                    "epoch", prefix, ", ".join(theirs))
