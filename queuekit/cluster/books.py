"""The chief's books of a work queue: what was filled, taken by whom, read, done, lost.

The protocol is in :mod:`queuekit.cluster.work`; the threads that feed the
books are in :mod:`queuekit.cluster.work_threads`.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time

import tensorflow as tf

from queuekit.cluster.work import WorkQueue, entry, entry_path
from queuekit.errors import ClusterError

log = logging.getLogger("queuekit.cluster")


class Books:
    """The chief's view of one work queue: what was filled, taken by whom, read, done.

    The todo queue is closed once every entry was read (the workers' pipelines
    can then end and give out their last records); the books end once every
    entry is done (its records consumed), or lost.
    """

    def __init__(self, work: WorkQueue, sess, *, resume: tuple[int, list[str]] | None = None):
        self.work = work
        self._sess = sess
        # A checkpoint's books (next epoch to fill, entries not done): see :meth:`state`.
        self._resume = resume
        # The books change in the chief's thread and are read by a checkpoint's save.
        self.lock = threading.Lock()
        self.started = False  # the first fill is done (only then may a save update the books)
        self.epoch = 0
        self.closed = False
        self.pending: set[str] = set()  # filled, not done
        self.taken: dict[str, str] = {}  # entry -> the task that holds it
        self.read: set[str] = set()  # taken entries whose reader finished them
        self.seen: dict[str, float] = {}  # task -> when it was last heard of
        self.lost: list[str] = []
        self.lost_tasks: set[str] = set()
        self.ledger = Ledger(work.lost_after_secs)

    def start(self) -> None:
        """The first fill: an epoch, or what a restored checkpoint's books left unfinished."""
        with self.lock:
            if self._resume is None:
                self.fill_epoch()
            else:
                self.epoch, entries = self._resume
                if entries:
                    self.fill(entries)
                    self.pending.update(entries)
                log.info("work queue %s resumes: %d file(s) not done at the checkpoint "
                         "re-queued, then epoch %d", self.work.name, len(entries), self.epoch)
            self.started = True

    def state(self) -> dict:
        """What a checkpoint saves: the next epoch to fill and every entry filled and not
        done (still queued, taken, read but not consumed, lost): a restart fills those again
        and skips the files done. A file is done once its records were consumed."""
        with self.lock:
            if not self.started:  # a save before the first fill (a session's first checkpoint)
                epoch, entries = self._resume or (0, [])
                return {"epoch": epoch, "unfinished": sorted(entries)}
            return {"epoch": self.epoch, "unfinished": sorted(self.pending | set(self.lost))}

    def fill(self, entries: list[str]) -> None:
        try:
            self._sess.run(self.work.fill, {self.work.fill_entries: entries})
            self.ledger.filled(entries)
        except tf.errors.CancelledError as e:
            raise ClusterError(
                f"the work queue {self.work.name} on the parameter server is closed "
                f"already: a previous job used it (its state lives as long as the ps); "
                f"restart the ps, or give this job another name=") from e

    def close(self) -> None:
        self.closed = True
        try:  # closing never blocks
            self._sess.run(self.work.close)
        except tf.errors.OpError as e:
            log.debug("could not close the work queue %s: %r", self.work.name, e)

    def fill_epoch(self) -> None:
        files = list(self.work.files)
        if self.work.shuffle:
            random.Random(None if self.work.seed is None
                          else self.work.seed + self.epoch).shuffle(files)
        entries = [entry(self.epoch, f) for f in files]
        self.fill(entries)
        self.pending.update(entries)
        self.epoch += 1

    def update(self) -> bool:
        """Read the events, handle lost tasks, top up or close; True once every entry is done."""
        with self.lock:  # the chief's thread, or a checkpoint's save bringing them up to date
            if not self.started:  # a save must never make the first fill (twice, or wrong)
                return False
            work = self.work
            n = int(self._sess.run(work.events_size))
            events = self._sess.run(work.take_events, {work.events_count: n}) if n else []
            return self._update(events)

    def _update(self, events) -> bool:
        work = self.work
        now = time.monotonic()
        for raw in events:
            kind, task, *rest = raw.decode().split("\t", 2)
            value = rest[0] if rest else ""
            if kind == "take":  # the ps says so, also for a task that died in the take
                self.taken[value] = task
                self.seen.setdefault(task, now)
                self.ledger.announced(value)
                continue
            self.seen[task] = now
            if kind == "read":
                self.read.add(value)
            elif kind == "done":
                self.taken.pop(value, None)
                self.read.discard(value)
                self.pending.discard(value)
            elif kind == "back" and self.taken.get(value) == task:
                self._release([value], task, "", requeue=True)
        for task, last in self.seen.items():
            if now - last > work.lost_after_secs:
                self._lose(task)
        todo = int(self._sess.run(work.todo_size))
        vanished = self.ledger.vanished(todo, now)
        if vanished:
            self._gone(vanished)
        more = work.num_epochs is None or self.epoch < work.num_epochs
        if more and todo < len(work.files):
            self.fill_epoch()
        if not more and not self.closed and self.pending <= self.read:
            self.close()  # every entry read: the pipelines may end
        return self.closed and not self.pending

    def _release(self, entries: list[str], task: str, why: str, *, requeue: bool) -> None:
        """Entries ``task`` no longer holds: to the queue again while it is open (and
        ``requeue``), else lost."""
        for e in entries:
            self.taken.pop(e, None)
            self.read.discard(e)
        files = [entry_path(e) for e in entries]
        if requeue and not self.closed:
            if why:  # a worker that stops gives its files back: no news
                log.warning("work queue %s: %s %s; re-queued its %d unfinished file(s) "
                            "(read at least once): %s", self.work.name, task, why,
                            len(entries), files)
            self.fill(entries)
            return
        log.error("work queue %s: %s %s; its %d unfinished file(s) are lost: %s",
                  self.work.name, task, why or "stopped after the input ended with records "
                  "it never consumed", len(entries), files)
        self.lost += entries
        self.lost_tasks.add(task)
        self.pending.difference_update(entries)

    def _lose(self, task: str) -> None:
        held = [e for e, t in self.taken.items() if t == task]
        if held:
            self._release(held, task, f"silent for {self.work.lost_after_secs:.0f} s",
                          requeue=self.work.on_lost == "requeue")

    def _gone(self, entries: list[str]) -> None:
        """Entries taken from the queue and never announced: their task died in the take."""
        self._release(entries, "a task that died while taking", "took them unannounced",
                      requeue=self.work.on_lost == "requeue")


class Ledger:
    """Which entries left the todo queue, from its size: it is FIFO and only the chief
    fills it, so the first ``filled - size`` entries of the fill order were taken.

    A taking worker's ``take`` event is enqueued in the same step as the take on
    the ps, but a worker that dies then can have that step cancelled after the
    take: an entry taken and never announced for ``patience`` seconds vanished.
    """

    def __init__(self, patience: float):
        self._patience = patience
        self._order: list[str] = []  # every entry in the order it was filled
        self._scanned = 0  # entries of _order known to be taken
        self._missing: dict[int, float] = {}  # index in _order -> when it was seen taken
        self._early: collections.Counter[str] = collections.Counter()  # announced, not scanned

    def filled(self, entries: list[str]) -> None:
        self._order += entries

    def announced(self, entry: str) -> None:
        for i in sorted(self._missing):
            if self._order[i] == entry:
                del self._missing[i]
                return
        self._early[entry] += 1

    def vanished(self, todo_size: int, now: float) -> list[str]:
        """Entries taken more than ``patience`` seconds ago and still not announced."""
        taken = len(self._order) - todo_size
        for i in range(self._scanned, taken):
            if self._early[self._order[i]]:
                self._early[self._order[i]] -= 1
            else:
                self._missing[i] = now
        self._scanned = max(self._scanned, taken)
        gone = [i for i, since in self._missing.items() if now - since > self._patience]
        for i in gone:
            del self._missing[i]
        return [self._order[i] for i in sorted(gone)]
