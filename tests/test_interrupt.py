"""Ctrl-C (a real SIGINT to a child process) ends a QueueSession loop promptly."""

import signal
import time

import pytest

from tests.helpers import run_script

_PRELUDE = """
import sys, threading
import numpy as np
import tensorflow as tf
import queuekit as qk
v1 = tf.compat.v1
"""

SCRIPTS = {
    # the loop body is busy in Python when the signal comes
    "busy": """
with qk.QueueSession(stall_timeout_secs=None) as qs:
    x = v1.train.batch([v1.train.range_input_producer(10).dequeue()], 4, num_threads=2)
    for i, _ in enumerate(qs.iterate(x)):
        if i == 1:
            print("ready", flush=True)
        sum(range(20000))
""",
    # the main thread is blocked inside a dequeue whose upstream nobody feeds
    "blocked": """
with qk.QueueSession(stall_timeout_secs=None) as qs:
    nobody = tf.queue.FIFOQueue(4, tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64)
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(nobody.dequeue())]))
    d = q.dequeue()
    print("ready", flush=True)
    qs.run(d)
""",
    # a runner is stuck inside a py_function that never returns
    "stuck": """
forever = threading.Event()
def block():
    forever.wait()
    return np.int64(1)
with qk.QueueSession(stall_timeout_secs=None, stop_grace_secs=1.0) as qs:
    v = tf.py_function(block, [], tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64, shapes=[[]])
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(v)]))
    d = q.dequeue()
    print("ready", flush=True)
    qs.run(d)
""",
}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_sigint_ends_the_process_with_a_plain_keyboard_interrupt(case):
    """SIGINT while busy, blocked in a dequeue, or with a stuck runner: prompt KeyboardInterrupt."""
    child = run_script(_PRELUDE + SCRIPTS[case])
    try:
        assert child.stdout.readline().strip() == "ready"
        # Tiny grace so the main thread is inside the loop / the blocking run.
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == "KeyboardInterrupt", err[-2000:]
    assert child.returncode in (-signal.SIGINT, 130), err[-2000:]
    assert "MISMATCH" not in err and "RuntimeError" not in err
    assert "CancelledError" not in err
    assert took < 8, f"took {took:.1f} s to exit"
