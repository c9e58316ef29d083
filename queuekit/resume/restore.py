"""A restore's half of the input position, loaded only when a checkpoint is restored: the
checkpoint's position file read (untrusted input, :mod:`queuekit.resume.file`), its
pipelines matched to this graph's by name or by their files, and where each starts: its
epoch, the files it consumed whole left out, the reads its runner threads drop
(:meth:`~queuekit.resume.tally.Tally.start_from`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import tensorflow as tf

from queuekit.errors import DatasetError
from queuekit.resume import file

log = logging.getLogger(__name__)

# What an optimizer's update of a variable runs (minimize(), apply_gradients()).
_UPDATE_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
_INCREMENTS = ("AssignAdd", "AssignAddVariableOp")


def resume_input(positions, prefix: str, sess, *,
                 always: bool = False) -> dict[str, tuple[int, list[str]]]:
    """Continue every pipeline from the input state saved with checkpoint ``prefix``;
    unless ``always``, only in a graph that trains (:func:`trains`). Returns what each work
    queue starts from (its name -> next epoch, entries to fill again)."""
    graph = positions.running.graph
    if not always and not trains(graph):
        log.info("restored %s into a graph that trains nothing (an evaluation): its "
                 "input starts at the beginning, every record read once per epoch; "
                 "QueueSession(resume_input=True) resumes it", prefix)
        return {}
    warn_unresumable(graph, {t.position.producer_queue for t in positions.tallies}, prefix)
    if not positions.tallies and not positions.works:
        return {}
    path = prefix + file.SUFFIX
    state = file.read_position(path)
    if state is None:
        log.warning("checkpoint %s has no input position (written outside a queuekit "
                    "session, or by an earlier version): the input starts its epoch over",
                    prefix)
        return {}
    if state.get("format") != file.FORMAT:
        raise DatasetError(f"{path}: an input position of an unknown format")
    saved = {p["name"]: p for p in state.get("pipelines", [])}
    books = {w.get("name"): w for w in state.get("work_queues", []) if isinstance(w, dict)}
    work_resume = {}
    try:
        for tally in positions.tallies:
            found = _saved_for(tally, saved, path)
            if found is not None:
                resume_tally(tally, found, sess)
        for work in positions.works:
            if work.name in books:
                work_resume[work.name] = _work_resume(work, books[work.name])
    except DatasetError:
        raise  # names the file that differs, or what the position claims
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DatasetError(f"{path}: a malformed input position ({e!r})") from e
    if saved:
        log.warning("%s: the input position of pipeline(s) %s matched no pipeline of this "
                    "graph (%s): nothing of it is applied", path, ", ".join(sorted(saved)),
                    ", ".join(t.position.name for t in positions.tallies) or "none")
    return work_resume


def _saved_for(tally, saved: dict[str, dict], path: str) -> dict | None:
    """The checkpoint's pipeline ``tally`` continues, taken out of ``saved``: the one of
    its name, else one that read the same files (a script that renamed its pipeline, or
    built another first)."""
    if tally.position.name in saved:
        return saved.pop(tally.position.name)
    for name, state in saved.items():
        try:
            same = matches(tally, state)
        except DatasetError:
            same = None
        if same is not None:
            log.warning("%s: pipeline %s continues the checkpoint's pipeline %s, which "
                        "read the same files", path, tally.position.name, name)
            return saved.pop(name)
    return None


def matches(tally, state: dict[str, Any]) -> dict[str, str] | None:
    """Which of ``tally``'s files each file of a checkpoint's pipeline ``state`` is
    (:func:`~queuekit.resume.file.match_files`); None: another input."""
    saved = [(str(e[0]), int(e[1]), int(e[2]), str(e[3]) if len(e) > 3 else None)
             for e in state["files"]]
    now = list(zip(tally.files, tally.sizes, (len(c) for c in tally.counts), tally.prints,
                   strict=True))
    return file.match_files(saved, now, tally.position.name)


def resume_tally(tally, state: dict[str, Any], sess) -> bool:
    """Continue ``tally``'s pipeline from a checkpoint's ``state`` of it; False when it is
    another input altogether (no file in common)."""
    p = tally.position
    then = (state.get("kind"), state.get("num_epochs"), bool(state.get("shuffle")))
    if then != (p.record_kind, p.num_epochs, p.shuffle):
        # Another pipeline over the same files: an evaluation (num_epochs=1, in order)
        # restoring a training checkpoint must read its epoch whole.
        log.info("pipeline %s: the checkpoint's pipeline of that name read these files "
                 "as %s (kind, num_epochs, shuffle), this one as %s: starting at the "
                 "beginning", p.name, then, (p.record_kind, p.num_epochs, p.shuffle))
        return False
    mapping = matches(tally, state)
    if mapping is None:
        log.info("pipeline %s: the checkpoint's input of that name reads other files; "
                 "starting at the beginning", p.name)
        return False
    by_name = {mapping[str(e[0])]: file.unrle(runs, int(e[2]), p.num_epochs)
               for runs, e in zip(state["counts"], state["files"], strict=True)}
    counts = [by_name[f] for f in tally.files]  # in this pipeline's order, whatever it was
    done = min((int(c.min()) for c in counts if len(c)), default=0)
    skips, whole = {}, []
    for path, item, places, c in zip(tally.files, p.items, tally.places, counts, strict=True):
        base = done
        if len(c) and int(c.min()) > done:  # consumed whole in epoch `done`: not read
            whole.append(item)
            base = done + 1
        name = os.fsencode(path)  # as the reader reports it, also when not UTF-8
        for i in np.nonzero(c > base)[0]:
            skips[name + b":%d" % int(places[i])] = int(c[i] - base)
    epoch = done if p.num_epochs is None else min(done, p.num_epochs)
    sess.run(p.set_epoch, {p.epoch_value: epoch})
    if whole:
        sess.run(p.drop_files, {p.consumed_whole: whole})
    tally.start_from(counts, skips, sess)
    log.info("pipeline %s resumes in epoch %d: %d file(s) of it consumed whole before the "
             "checkpoint are left out, %d record(s) skipped", p.name, epoch, len(whole),
             len(skips))
    return True


def _work_resume(work, saved: dict[str, Any]) -> tuple[int, list[str]]:
    """(next epoch, entries to fill again) of a work queue from its checkpoint's books,
    checked against the files it reads now (the file is untrusted input)."""
    then = {str(f): int(size) for f, size, _ in saved["files"]}
    now = {f: size for f, size, _ in file.work_files(work)}
    for f, size in now.items():  # a size one side could not see is no difference
        if f in then and min(size, then[f]) < 0:
            now[f] = then[f]
    if file.match_files([(f, size, 0, None) for f, size in then.items()],
                        [(f, size, 0, "") for f, size in now.items()], work.name) is None and then:
        raise ValueError(f"none of the files {sorted(then)[:3]} is read now")
    epoch = int(saved["epoch"])
    if epoch < 0 or (work.num_epochs is not None and epoch > work.num_epochs):
        raise ValueError(f"epoch {epoch}")
    entries = [str(e) for e in saved["unfinished"]]
    for e in entries:
        at, _, name = e.partition("\t")
        if name not in now or not 0 <= int(at) < max(epoch, 1):
            raise ValueError(f"entry {e!r}")
    log.info("work queue %s resumes from its checkpoint: %d file(s) to read again, then "
             "epoch %d", work.name, len(entries), epoch)
    return epoch, entries


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
