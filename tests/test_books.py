"""The chief's books of a work queue, on its real queue ops in a local session, and the
ledger that finds entries taken by a task that died in the take."""

import logging
import time

import pytest
import tensorflow as tf

from queuekit.cluster.books import Books, Ledger
from queuekit.cluster.inputs import WorkQueueInput, work_queue_inputs
from queuekit.cluster.work import entry
from tests.helpers import v1


def test_ledger_names_an_entry_taken_and_never_announced():
    """Of three entries two left the queue; the one announced is fine, the other vanished
    once the patience ran out (not before)."""
    ledger = Ledger(patience=5.0)
    ledger.filled(["a", "b", "c"])
    ledger.announced("a")  # the take event can come before the chief sees the size
    assert ledger.vanished(todo_size=1, now=100.0) == []
    assert ledger.vanished(todo_size=1, now=104.0) == []
    assert ledger.vanished(todo_size=1, now=105.5) == ["b"]
    assert ledger.vanished(todo_size=1, now=200.0) == []  # reported once


def test_ledger_counts_a_requeued_entry_twice():
    """An entry filled again (re-queued) is two takes: one announcement covers one."""
    ledger = Ledger(patience=1.0)
    ledger.filled(["a", "b"])
    ledger.filled(["a"])
    ledger.announced("a")
    ledger.announced("b")
    assert ledger.vanished(todo_size=0, now=0.0) == []
    assert ledger.vanished(todo_size=0, now=2.0) == ["a"]


class Chief:
    """A work queue's ops on this machine, a session, and the chief's books over them."""

    def __init__(self, files, *, num_epochs=1, shuffle=False, seed=None, on_lost="requeue",
                 lost_after_secs=30.0):
        self.graph = tf.Graph()
        with self.graph.as_default():
            _, self.work = work_queue_inputs(
                WorkQueueInput("", lost_after_secs, on_lost), files, 1, name="books_test",
                num_epochs=num_epochs, shuffle=shuffle, seed=seed)
        self.sess = v1.Session(graph=self.graph)
        self.books = Books(self.work, self.sess)

    def take(self, task):
        taken, _ = self.sess.run(self.work.take, {self.work.task_name: task})
        return taken.decode()

    def event(self, kind, task, value=""):
        self.sess.run(self.work.put_event,
                      {self.work.event: "\t".join([kind, task] + ([value] if value else []))})

    def todo(self):
        return int(self.sess.run(self.work.todo_size))


@pytest.fixture
def chief():
    made = []

    def make(*args, **kw):
        made.append(Chief(*args, **kw))
        return made[-1]

    yield make
    for c in made:
        c.sess.close()


def test_books_close_the_queue_once_read_and_end_once_done(chief):
    """Every entry read: the todo queue is closed (pipelines may end); every entry done: the
    books end."""
    c = chief(["f0", "f1"])
    c.books.start()
    assert c.todo() == 2
    taken = [c.take("w0"), c.take("w1")]
    assert taken == [entry(0, "f0"), entry(0, "f1")]
    for task, e in zip(["w0", "w1"], taken, strict=True):
        c.event("read", task, e)
    assert c.books.update() is False  # read, not consumed yet
    assert c.books.closed
    c.event("done", "w0", taken[0])
    assert c.books.update() is False
    c.event("done", "w1", taken[1])
    assert c.books.update() is True


def test_books_fill_each_epoch_in_the_seeded_order(chief):
    """With shuffle and a seed, epoch k's order is the seed + k shuffle, the same in every run;
    the next epoch is filled once the queue runs low."""
    files = [f"f{i}" for i in range(6)]
    orders = []
    for _ in range(2):
        c = chief(files, num_epochs=2, shuffle=True, seed=7)
        c.books.start()
        first = [c.take("w0") for _ in files]
        c.books.update()  # the queue is empty: epoch 1 is filled
        second = [c.take("w0") for _ in files]
        orders.append((first, second))
    (first, second), again = orders
    assert again == (first, second)
    assert sorted(first) == [entry(0, f) for f in files]
    assert sorted(second) == [entry(1, f) for f in files]
    assert [e.split("\t")[1] for e in first] != [e.split("\t")[1] for e in second]


def test_books_requeue_what_a_stopping_worker_gives_back(chief):
    """A ``back`` from the task that holds an entry puts it in the queue again at once."""
    c = chief(["f0"])
    c.books.start()
    e = c.take("w1")
    c.event("back", "w1", e)
    c.books.update()
    assert c.todo() == 1 and c.take("w0") == e


@pytest.mark.parametrize("on_lost", ["requeue", "raise"])
def test_books_requeue_or_report_the_files_of_a_silent_task(chief, caplog, on_lost):
    """A task silent for lost_after_secs: its entries go back to the queue, or are lost by
    name (the session then raises WorkLost)."""
    c = chief(["f0", "f1"], on_lost=on_lost, lost_after_secs=0.05)
    c.books.start()
    e = c.take("w1")
    c.books.update()  # the chief hears of w1 (its take)
    deadline = time.monotonic() + 10
    with caplog.at_level(logging.WARNING, logger="queuekit.cluster"):
        while e in c.books.taken and time.monotonic() < deadline:
            c.books.update()
    assert e not in c.books.taken
    if on_lost == "requeue":
        assert c.todo() == 2 and "re-queued" in caplog.text and "w1" in caplog.text
        assert not c.books.lost
    else:
        assert c.todo() == 1 and c.books.lost == [e] and c.books.lost_tasks == {"w1"}


def test_a_save_before_the_first_fill_neither_fills_nor_forgets_restored_books(chief):
    """A checkpoint saved before the chief's thread made its first fill (a session's first
    checkpoint) must not fill the queue itself (the epoch would be queued twice), and saves
    the books the job was restored with, not empty ones."""
    c = chief(["f0", "f1", "f2"])
    assert c.books.update() is False and c.todo() == 0
    assert c.books.state() == {"epoch": 0, "unfinished": []}
    c.books.start()
    assert c.todo() == 3
    assert c.books.state() == {"epoch": 1, "unfinished": [entry(0, f) for f in ("f0", "f1", "f2")]}
    restored = Books(c.work, c.sess, resume=(1, [entry(0, "f1")]))
    assert restored.state() == {"epoch": 1, "unfinished": [entry(0, "f1")]}
    restored.start()
    assert c.todo() == 4  # f1 again, after the first books' epoch
