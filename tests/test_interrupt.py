"""Ctrl-C (a real SIGINT to a child process) ends a QueueSession loop promptly."""

import signal

import pytest

from tests.helpers import run_script, signal_when_ready

_PRELUDE = """
import sys, threading
import numpy as np
import tensorflow as tf
import queuekit as qk
v1 = tf.compat.v1
forever, entered = threading.Event(), threading.Event()
def block():  # a py_function that never returns: a runner stuck as in blocking I/O
    entered.set()
    forever.wait()
    return np.int64(1)
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
with qk.QueueSession(stall_timeout_secs=None, stop_grace_secs=1.0) as qs:
    v = tf.py_function(block, [], tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64, shapes=[[]])
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(v)]))
    d = q.dequeue()
    print("ready", flush=True)
    qs.run(d)
""",
    # the same stuck runner under monitored_training_session: its grace is 120 s by default
    "stuck-mts": """
with tf.Graph().as_default():
    v = tf.py_function(block, [], tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64, shapes=[[]])
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(v)]))
    d = q.dequeue()
    v1.train.get_or_create_global_step()
    with qk.monitored_training_session(stall_timeout_secs=None) as sess:
        print("ready", flush=True)
        sess.run(d)
""",
    # Ctrl-C during a healthy shutdown that would wait 120 s for a stuck runner
    "long-shutdown": """
with qk.QueueSession(stall_timeout_secs=None, stop_grace_secs=120) as qs:
    v = tf.py_function(block, [], tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64, shapes=[[]])
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(v)]))
    qs.start()
    assert entered.wait(30)  # the runner is stuck: the shutdown will wait for it
    print("ready", flush=True)
""",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_sigint_ends_the_process_with_a_plain_keyboard_interrupt(case):
    """SIGINT while busy, blocked in a dequeue, with a stuck runner (also under
    monitored_training_session's 120 s grace), or during a shutdown waiting for one: a prompt
    KeyboardInterrupt."""
    child = run_script(_PRELUDE + SCRIPTS[case])
    _, err, took = signal_when_ready(child, signal.SIGINT, grace=0.5)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == "KeyboardInterrupt", err[-2000:]
    assert child.returncode in (-signal.SIGINT, 130), err[-2000:]
    assert "MISMATCH" not in err and "RuntimeError" not in err
    assert "CancelledError" not in err
    assert took < 8, f"took {took:.1f} s to exit"


_BLOCKED_PIPELINE = """
nobody = tf.queue.FIFOQueue(4, tf.int64)
q = tf.queue.FIFOQueue(4, tf.int64)
v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(nobody.dequeue())]))
d = q.dequeue()
"""


def _finish(child, sig):
    return signal_when_ready(child, sig, grace=0.3)[:2]


@pytest.mark.slow
def test_sigterm_handler_runs_while_blocked_and_its_exit_code_stands():
    """A user's SIGTERM handler (save and exit 143) runs though the run was blocked in a dequeue."""
    child = run_script(_PRELUDE + """
import signal
calls = []
def on_term(signum, frame):
    calls.append(signum)
    print("handler ran in", threading.current_thread().name, flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
with qk.QueueSession(stall_timeout_secs=None, stop_grace_secs=0.5) as qs:
""" + _BLOCKED_PIPELINE.replace("\n", "\n    ") + """
    print("ready", flush=True)
    qs.run(d)
""")
    out, err = _finish(child, signal.SIGTERM)
    assert child.returncode == 143, err[-2000:]
    assert "handler ran in MainThread" in out
    assert "MISMATCH" not in err and "RuntimeError" not in err and "Traceback" not in err


@pytest.mark.slow
def test_users_sigint_handler_is_called_and_the_loop_finishes_its_step():
    """A "finish the step, then stop" SIGINT handler is called once; the loop ends on its own."""
    child = run_script(_PRELUDE + """
import signal
stop = []
signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
with qk.QueueSession(stall_timeout_secs=None) as qs:
    x = v1.train.batch([v1.train.range_input_producer(10).dequeue()], 4, num_threads=2)
    steps = 0
    for _ in qs.iterate(x):
        steps += 1
        if steps == 2:
            print("ready", flush=True)
        if stop:
            break
print("stopped after the handler ran", len(stop), "time(s)", flush=True)
""")
    out, err = _finish(child, signal.SIGINT)
    assert child.returncode == 0, err[-2000:]
    assert "stopped after the handler ran 1 time(s)" in out


@pytest.mark.slow
def test_close_from_another_thread_keeps_ctrl_c_working():
    """A session closed from another thread closes cleanly; a later session still gets Ctrl-C."""
    child = run_script(_PRELUDE + """
first = qk.QueueSession(stall_timeout_secs=None)
with first.graph.as_default():
    y = v1.train.range_input_producer(10).dequeue()
first.run(y)
errors = []
def close():
    try:
        first.close()
    except BaseException as e:
        errors.append(e)
t = threading.Thread(target=close)
t.start()
t.join()
assert not errors, errors
assert first.session._closed, "the TF session was not closed"
with qk.QueueSession(stall_timeout_secs=None) as qs:
""" + _BLOCKED_PIPELINE.replace("\n", "\n    ") + """
    print("ready", flush=True)
    qs.run(d)
""")
    _, err = _finish(child, signal.SIGINT)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == "KeyboardInterrupt", err[-2000:]
    assert child.returncode in (-signal.SIGINT, 130), err[-2000:]


def test_a_handler_inside_a_run_leaves_the_wake_to_the_router_thread():
    """A SIGINT whose Python handler runs while a run is under way (it can run inside
    TF's Session.run before C++, holding the graph's non-reentrant session lock) must
    not close the queues from the main thread: a Session.run there can wait forever.
    The router's thread wakes the run; the signal is kept for the main thread."""
    import threading

    from queuekit.session.interrupt import ROUTER, SessionSignals
    from queuekit.session.policy import RunState

    state = RunState()
    woken_in, woken = [], threading.Event()

    def wake():
        woken_in.append(threading.current_thread())
        woken.set()

    signals = SessionSignals(state, wake, grace=1.0)
    assert ROUTER.register(signals)
    try:
        state.enter_run()
        signal.raise_signal(signal.SIGINT)  # the handler runs on return, in this thread
        assert woken.wait(10), "the run was never woken"
        assert state.deferred and state.deferred[0][0] == signal.SIGINT
        assert threading.main_thread() not in woken_in
    finally:
        state.leave_run()
        ROUTER.unregister(signals)
    with pytest.raises(KeyboardInterrupt):
        signals.dispatch()  # the main thread raises it, after the run
