"""The threads of a work queue: a relay per reader and a heartbeat on every worker, the books
on the chief. The protocol and its guarantees are in :mod:`queuekit.cluster.work`."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import tensorflow as tf

from queuekit.cluster.work import BEAT_SECS, MARKER, WorkQueue, entry, entry_path
from queuekit.errors import ClusterError, WorkLost

log = logging.getLogger("queuekit.cluster")
_BOOKS_SECS = 0.1
_ACK_SECS = 0.1


class WorkThreads:
    """The threads one session runs for one work queue; ``fail(exc, thread_name)`` reports."""

    def __init__(self, sess, coord, work: WorkQueue, task: str, chief: bool, fail):
        self._sess = sess
        self._coord = coord
        self.work = work
        self._task = task
        self._fail = fail
        self._lock = threading.Lock()
        n = len(work.local_puts)
        self._moved: list[list[str]] = [[] for _ in range(n)]  # entries per reader, in order
        self._puts = [0] * n  # completed puts into each local queue (files and markers)
        self._acked = [0] * n  # entries reported done per reader
        name = work.name.replace("/", "-")
        targets: list[tuple[Any, str, tuple]] = [
            (self._relay, f"queuekit-work-{name}-{i}", (i,)) for i in range(len(work.local_puts))]
        targets.append((self._beat, f"queuekit-work-{name}-beat", ()))
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
            try:
                value = self._remote(work.take)  # blocks while the chief has none
            except tf.errors.OutOfRangeError:
                break  # the chief closed the queue: every file is done
            if value is None:
                return
            taken = value.decode()
            with self._lock:
                self._moved[i].append(taken)
            self._event("take", taken)
            for path in (entry_path(taken), MARKER):
                self._sess.run(work.local_puts[i], {work.local_path: path})
                with self._lock:
                    self._puts[i] += 1
        self._sess.run(work.local_closes[i])
        while self._ack() and not self._coord.wait_for_stop(0.05):
            pass  # the last files: until the reader took their markers

    def _ack(self) -> int:
        """Report the files every reader finished; how many are still unfinished."""
        with self._lock:
            puts = list(self._puts)  # read before the sizes: never acks too much
        sizes = self._sess.run(self.work.local_sizes)
        unfinished = 0
        for i, (n, size) in enumerate(zip(puts, sizes, strict=True)):
            done = (n - int(size)) // 2  # items taken: file, marker, file, marker...
            with self._lock:
                newly = self._moved[i][self._acked[i]:done]
                self._acked[i] = max(self._acked[i], done)
                unfinished += len(self._moved[i]) - self._acked[i]
            for finished in newly:
                self._event("done", finished)
        return unfinished

    def _beat(self) -> None:
        """Report finished files and beat; on stop, give the unfinished ones back."""
        last = 0.0
        while not self._coord.wait_for_stop(_ACK_SECS):
            self._ack()
            if time.monotonic() - last >= BEAT_SECS:
                self._event("beat")
                last = time.monotonic()
        with self._lock:
            unfinished = [e for m, a in zip(self._moved, self._acked, strict=True) for e in m[a:]]
        for e in unfinished:  # the chief re-queues them at once, not after lost_after_secs
            self._event("back", e)

    # -- the chief -----------------------------------------------------------
    def _books(self) -> None:
        books = Books(self.work, self._sess)
        try:
            books.fill_epoch()
            while not self._coord.wait_for_stop(_BOOKS_SECS):
                if books.update():
                    break
        finally:
            try:  # also when stopping: the chief ends the job, nobody waits for more
                self._sess.run(self.work.close)  # closing never blocks
            except tf.errors.OpError as e:
                log.debug("could not close the work queue %s: %r", self.work.name, e)
        if books.lost:
            raise WorkLost(
                f"work queue {self.work.name}: {len(books.lost)} file(s) taken by lost task(s) "
                f"{', '.join(sorted(books.lost_tasks))} were never finished: "
                f"{', '.join(sorted({entry_path(e) for e in books.lost}))}",
                files=[entry_path(e) for e in books.lost], tasks=sorted(books.lost_tasks))


class Books:
    """The chief's view of one work queue: what was filled, taken by whom, finished."""

    def __init__(self, work: WorkQueue, sess):
        self.work = work
        self._sess = sess
        self.epoch = 0
        self.pending: set[str] = set()  # filled, not finished
        self.taken: dict[str, str] = {}  # entry -> the task that holds it
        self.seen: dict[str, float] = {}  # task -> when it was last heard of
        self.lost: list[str] = []
        self.lost_tasks: set[str] = set()

    def fill(self, entries: list[str]) -> None:
        try:
            self._sess.run(self.work.fill, {self.work.fill_entries: entries})
        except tf.errors.CancelledError as e:
            raise ClusterError(
                f"the work queue {self.work.name} on the parameter server is closed "
                f"already: a previous job used it (its state lives as long as the ps); "
                f"restart the ps, or give this job another name=") from e

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
        """Read the events, handle lost tasks, top up; True once every entry is finished."""
        work = self.work
        n = int(self._sess.run(work.events_size))
        events = self._sess.run(work.take_events, {work.events_count: n}) if n else []
        now = time.monotonic()
        for raw in events:
            kind, task, *rest = raw.decode().split("\t", 2)
            self.seen[task] = now
            value = rest[0] if rest else ""
            if kind == "take":
                self.taken[value] = task
            elif kind == "done":
                self.taken.pop(value, None)
                self.pending.discard(value)
            elif kind == "back" and self.taken.pop(value, None) is not None:
                self.fill([value])
        for task, last in self.seen.items():
            if now - last > work.lost_after_secs:
                self._lose(task)
        more = work.num_epochs is None or self.epoch < work.num_epochs
        if more and int(self._sess.run(work.todo_size)) < len(work.files):
            self.fill_epoch()
        return not self.pending and not more

    def _lose(self, task: str) -> None:
        held = [e for e, t in self.taken.items() if t == task]
        if not held:
            return
        for e in held:
            del self.taken[e]
        if self.work.on_lost == "requeue":
            log.warning("work queue %s: %s silent for %.0f s; re-queued its %d unfinished "
                        "file(s) (read at least once): %s", self.work.name, task,
                        self.work.lost_after_secs, len(held), [entry_path(e) for e in held])
            self.fill(held)
            return
        log.error("work queue %s: %s silent for %.0f s; its %d unfinished file(s) are lost: %s",
                  self.work.name, task, self.work.lost_after_secs, len(held),
                  [entry_path(e) for e in held])
        self.lost += held
        self.lost_tasks.add(task)
        self.pending.difference_update(held)
