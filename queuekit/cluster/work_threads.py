"""The threads of a work queue: a relay per reader and a heartbeat on every worker, the books
on the chief. The protocol and its guarantees are in :mod:`queuekit.cluster.work`."""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any

import tensorflow as tf

from queuekit.cluster.books import Books
from queuekit.cluster.work import BEAT_SECS, MARKER, WorkQueue, entry_path
from queuekit.errors import WorkLost
from queuekit.records.tfrecord import Record, scan_records

log = logging.getLogger("queuekit.cluster")
_BOOKS_SECS = 0.1
_ACK_SECS = 0.1


class WorkThreads:
    """The threads one session runs for one work queue; ``fail(exc, thread_name)`` reports."""

    def __init__(self, sess, coord, work: WorkQueue, task: str, chief: bool, fail, *,
                 by_consumption: bool = True, resume: tuple[int, list[str]] | None = None):
        self._sess = sess
        self._coord = coord
        self.work = work
        self._task = task
        self._fail = fail
        # Done means consumed: the run that dequeues a batch reports its records' files.
        self.by_consumption = by_consumption and work.consumed is not None
        self._lock = threading.Lock()
        n = len(work.local_puts)
        self._moved: list[list[str]] = [[] for _ in range(n)]  # entries per reader, in order
        self._puts = [0] * n  # completed puts into each local queue (files and markers)
        self._read = [0] * n  # entries each reader finished
        self._waiting: list[str] = []  # finished by the reader, records not all consumed
        self._credit: collections.Counter[str] = collections.Counter()  # consumed, unmatched
        self._counts: dict[str, int] = {}  # records per file
        name = work.name.replace("/", "-")
        targets: list[tuple[Any, str, tuple]] = [
            (self._relay, f"queuekit-work-{name}-{i}", (i,)) for i in range(len(work.local_puts))]
        targets.append((self._beat, f"queuekit-work-{name}-beat", ()))
        # The chief's books; ``resume``: a restored checkpoint's (Books.state).
        self.books = Books(work, sess, resume=resume) if chief else None
        if chief:
            targets.append((self._books, f"queuekit-work-{name}-chief", ()))
        self.threads = [threading.Thread(target=self._guard, args=(fn, args), name=n,
                                         daemon=True) for fn, n, args in targets]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _guard(self, fn, args) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - every failure must reach the caller
            log.debug("%s failed: %r", threading.current_thread().name, e)
            if self._coord.should_stop() and isinstance(
                    e, (tf.errors.CancelledError, tf.errors.OutOfRangeError)):
                return  # woken by our own shutdown
            self._fail(e, threading.current_thread().name)

    def _remote(self, fetch, feed=None):
        """Run an op on the ps; None once this session is stopping."""
        if self._coord.should_stop():
            return None
        return self._sess.run(fetch, feed)

    def _event(self, kind: str, value: str = "") -> None:
        text = f"{kind}\t{self._task}" + (f"\t{value}" if value else "")
        try:  # never blocks: the events queue is unbounded
            self._sess.run(self.work.put_event, {self.work.event: text})
        except tf.errors.OpError as e:
            if not self._coord.should_stop():
                raise
            log.debug("could not report %s while stopping: %r", text, e)

    # -- every worker --------------------------------------------------------
    def _relay(self, i: int) -> None:
        """Move entries from the ps to reader ``i``'s own filename queue, each followed by
        the marker (the reader takes it once it finished the file)."""
        work = self.work
        while True:
            try:  # blocks while the chief has none; the "take" event is sent on the ps
                value = self._remote(work.take, {work.task_name: self._task})
            except tf.errors.OutOfRangeError:
                break  # the chief closed the queue: every file is done
            if value is None:
                return
            taken = value[0].decode()
            if self.by_consumption:
                self._count(entry_path(taken))  # before its records can be consumed
            with self._lock:
                self._moved[i].append(taken)
            for path in (entry_path(taken), MARKER):
                self._sess.run(work.local_puts[i], {work.local_path: path})
                with self._lock:
                    self._puts[i] += 1
        self._sess.run(work.local_closes[i])
        while self._ack() and not self._coord.wait_for_stop(0.05):
            pass  # the last files: until their records were consumed

    def _count(self, path: str) -> None:
        if path not in self._counts:
            self._counts[path] = sum(isinstance(r, Record) for r in scan_records(path, data=False))

    def consumed(self, files) -> None:
        """The files of the records one run took out of the batch queue (main thread)."""
        with self._lock:
            self._credit.update(os.fsdecode(f) for f in files)

    def hook(self, dequeues) -> ConsumedFiles:
        """The hook that reports what each run consumed; ``dequeues(fetches)``: whether a
        run of ``fetches`` takes a batch out of this work queue's batch queue."""
        return ConsumedFiles(self, dequeues)

    def _ack(self) -> int:
        """Report the files read and the files done (consumed); how many are not done."""
        with self._lock:
            puts = list(self._puts)  # read before the sizes: never acks too much
        sizes = self._sess.run(self.work.local_sizes)
        read, done = [], []
        with self._lock:
            for i, (n, size) in enumerate(zip(puts, sizes, strict=True)):
                finished = (n - int(size)) // 2  # items taken: file, marker, file, marker...
                read += self._moved[i][self._read[i]:finished]
                self._read[i] = max(self._read[i], finished)
            self._waiting += read
            for e in list(self._waiting):
                need = self._counts.get(entry_path(e), 0) if self.by_consumption else 0
                if self._credit[entry_path(e)] >= need:
                    self._credit[entry_path(e)] -= need
                    self._waiting.remove(e)
                    done.append(e)
            unfinished = len(self._unfinished())
        for kind, entries in (("read", read), ("done", done)):
            for e in entries:
                self._event(kind, e)
        return unfinished

    def _unfinished(self) -> list[str]:
        """Entries taken and not done (the lock held)."""
        return [e for m, r in zip(self._moved, self._read, strict=True) for e in m[r:]] + \
            self._waiting

    def _beat(self) -> None:
        """Report finished files and beat; on stop, give the unfinished ones back."""
        last = 0.0
        while not self._coord.wait_for_stop(_ACK_SECS):
            self._ack()
            if time.monotonic() - last >= BEAT_SECS:
                self._event("beat")
                last = time.monotonic()
        try:  # what the last runs consumed
            self._ack()
        except tf.errors.OpError as err:
            log.debug("no last ack: %r", err)
        with self._lock:
            unfinished = self._unfinished()
        for e in unfinished:  # the chief re-queues them at once, not after lost_after_secs
            self._event("back", e)

    # -- the chief -----------------------------------------------------------
    def state(self) -> dict:
        """The books as a checkpoint saves them, first brought up to what this task's steps
        consumed (the threads report only every tenth of a second)."""
        assert self.books is not None
        try:
            if not self._coord.should_stop():
                self._ack()
                self.books.update()
        except tf.errors.OpError as e:  # stopping: the books as they are (files re-read)
            log.debug("books not brought up to date for a checkpoint: %r", e)
        return dict(self.books.state(), name=self.work.name)

    def _books(self) -> None:
        books = self.books
        assert books is not None
        try:
            books.start()
            while not self._coord.wait_for_stop(_BOOKS_SECS):
                if books.update():
                    break
        finally:
            books.close()  # also when stopping: the chief ends the job, nobody waits for more
        if books.lost:
            raise WorkLost(
                f"work queue {self.work.name}: {len(books.lost)} file(s) taken by lost task(s) "
                f"{', '.join(sorted(books.lost_tasks))} were never finished: "
                f"{', '.join(sorted({entry_path(e) for e in books.lost}))}",
                files=[entry_path(e) for e in books.lost], tasks=sorted(books.lost_tasks))


class ConsumedFiles(tf.compat.v1.train.SessionRunHook):
    """Fetches the file of each record with the run that takes its batch, so a file is done
    once its records reached a step (the session runs it after the program's hooks)."""

    def __init__(self, threads: WorkThreads, dequeues):
        self._threads = threads
        self._dequeues = dequeues

    def before_run(self, run_context):
        if self._dequeues(run_context.original_args.fetches):
            return tf.compat.v1.train.SessionRunArgs(self._threads.work.consumed)
        return None

    def after_run(self, run_context, run_values):
        if run_values.results is not None:
            self._threads.consumed(run_values.results)

