"""The run policy and the started session's threads, on their own: a real session, real
queues and runner threads, without QueueSession around them."""

import threading
import time

import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.session.reads import ReadsCache
from queuekit.session.start import session_config
from queuekit.session.threads import SessionThreads
from tests.helpers import v1


def _started(graph, sess):
    running = SessionThreads(graph, sess, ReadsCache(graph), None, 1.0)
    running.start()
    return running


@pytest.fixture
def session():
    """A graph, and a session made on first use with QueueSession's config (an inter-op pool
    with room for runners blocked in a py_function)."""
    graph = tf.Graph()
    made = []

    def sess():
        if not made:
            made.append(v1.Session(graph=graph, config=session_config(graph, "", None)))
        return made[0]

    yield graph, sess
    for s in made:
        s.close()


def test_end_of_input_is_end_of_data_and_ends_the_policy(session):
    """A closed, empty queue's dequeue is EndOfData (an OutOfRangeError), noted as ended."""
    graph, make = session
    with graph.as_default():
        q = tf.queue.FIFOQueue(4, tf.int64, shapes=[[]], name="q")
        fill = q.enqueue_many([[1, 2, 3]])
        close = q.close()
        take = q.dequeue_many(2)
    sess = make()
    running = _started(graph, sess)
    try:
        sess.run(fill)
        sess.run(close)  # not in fill's run: the two would race
        assert running.policy.run(sess, take, None, None, None).tolist() == [1, 2]
        with pytest.raises(qk.EndOfData) as info:
            running.policy.run(sess, take, None, None, None)
        assert isinstance(info.value, tf.errors.OutOfRangeError)
        assert running.policy.ended and "closed" in str(info.value)
    finally:
        assert running.stop(time.monotonic() + 2) == []


def test_a_runner_error_is_raised_once_never_as_end_of_data(session):
    """The runner's exception comes out of the next run, and closing does not raise it again."""
    graph, make = session

    def fail():
        raise ValueError("record 3 is bad")

    with graph.as_default():
        q = tf.queue.FIFOQueue(2, tf.int64, shapes=[[]], name="badq")
        v1.train.add_queue_runner(v1.train.QueueRunner(
            q, [q.enqueue(tf.py_function(fail, [], tf.int64))]))
        take = q.dequeue()
    sess = make()
    running = _started(graph, sess)
    try:
        with pytest.raises(Exception, match="record 3 is bad") as info:
            running.policy.raise_pending(None)
            running.policy.run(sess, take, None, None, None)
        assert not isinstance(info.value, qk.EndOfData)
    finally:
        stuck = running.stop(time.monotonic() + 2)
    running.policy.after_close(body_failed=False, stuck=stuck, grace=2)  # no second raise


def test_an_error_handed_to_request_stop_is_raised_at_close(session):
    """As Coordinator.join: request_stop(e) makes the close raise e, unless a run raised it."""
    graph, make = session
    for raised_by_a_run in (False, True):
        running = _started(graph, make())
        error = RuntimeError("the eval failed")
        running.policy.requested = error
        running.coord.request_stop((type(error), error, None))
        if raised_by_a_run:
            with pytest.raises(RuntimeError):
                running.policy.raise_pending(None)
        stuck = running.stop(time.monotonic() + 2)
        if raised_by_a_run:
            running.policy.after_close(body_failed=False, stuck=stuck, grace=2)
        else:
            with pytest.raises(RuntimeError, match="the eval failed"):
                running.policy.after_close(body_failed=False, stuck=stuck, grace=2)


def test_stop_keeps_one_deadline_and_names_the_threads_left(session):
    """Two runners that ignore the stop: stop() returns by its deadline (not one grace per
    thread) with both names; a ShutdownTimeout, or a warning while the body failed."""
    graph, make = session
    release = threading.Event()
    started = threading.Semaphore(0)

    def block():
        started.release()
        release.wait(30)
        return 0

    with graph.as_default():
        for name in ("slow_a", "slow_b"):
            q = tf.queue.FIFOQueue(2, tf.int64, shapes=[[]], name=name)
            v1.train.add_queue_runner(v1.train.QueueRunner(
                q, [q.enqueue(tf.py_function(block, [], tf.int64))]))
    sess = make()
    running = _started(graph, sess)
    try:
        assert started.acquire(timeout=10) and started.acquire(timeout=10)
        begin = time.monotonic()
        stuck = running.stop(begin + 0.5)
        assert time.monotonic() - begin < 0.5 + 0.4  # one small op's timeout at most on top
        assert sorted(stuck) == ["queuekit-runner-slow_a-0", "queuekit-runner-slow_b-0"]
        with pytest.raises(qk.ShutdownTimeout):
            running.policy.after_close(body_failed=False, stuck=stuck, grace=0.5)
        with pytest.warns(RuntimeWarning, match="still alive"):
            running.policy.after_close(body_failed=True, stuck=stuck, grace=0.5)
    finally:
        release.set()
        for t in running.runners.threads:
            t.join(10)
