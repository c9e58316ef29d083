"""QueueSession as a drop-in Session: restore, checkpoints, the default graph, TF's session APIs."""

import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

import queuekit as qk
from tests.helpers import (
    id_reader_batch,
    patience,
    run_script,
    signal_when_ready,
    v1,
    write_id_records,
)


def _model(files):
    """A variable `w`, a global step, a train op (gives the new step), and an id batch."""
    w = v1.get_variable("w", initializer=tf.zeros([3]))
    step = v1.train.get_or_create_global_step()
    ids = id_reader_batch(files, batch_size=4, num_epochs=None)
    with tf.control_dependencies([v1.assign_add(w, tf.ones([3]))]):
        train = v1.assign_add(step, 1)
    return w, step, ids, train


def _checkpoint(tmp_path, files, value=7.0, step=11):
    """A real checkpoint where w == value and global_step == step; returns its dir and path."""
    ckpt_dir = str(tmp_path / "ckpt")
    with tf.Graph().as_default():
        w, gs, _, _ = _model(files)
        with v1.Session() as sess:
            sess.run([v1.assign(w, tf.fill([3], value)), v1.assign(gs, step)])
            path = v1.train.Saver().save(sess, os.path.join(ckpt_dir, "model.ckpt"),
                                         global_step=step)
    return ckpt_dir, path


@pytest.fixture
def files(tmp_path):
    return [write_id_records(tmp_path / f"{k}.tfrecords", 20, start=20 * k) for k in range(2)]


def test_checkpoint_dir_restores_and_the_first_run_keeps_it(tmp_path, files):
    """With checkpoint_dir, values after the first run are the checkpoint's, input still runs."""
    ckpt_dir, _ = _checkpoint(tmp_path, files)
    with tf.Graph().as_default() as g:
        w, gs, ids, _ = _model(files)
        with qk.QueueSession(g, checkpoint_dir=ckpt_dir) as qs:
            value, step, batch = qs.run([w, gs, ids])
    assert value.tolist() == [7.0] * 3 and step == 11 and len(batch) == 4


def test_restore_by_hand_before_the_first_run_is_kept(tmp_path, files):
    """saver.restore(qs.session, ...) before the first run: the first run does not re-initialise."""
    _, path = _checkpoint(tmp_path, files)
    with tf.Graph().as_default() as g:
        w, _, ids, _ = _model(files)
        saver = v1.train.Saver()
        with qk.QueueSession(g) as qs:
            saver.restore(qs.session, path)
            value, batch = qs.run([w, ids])
    assert value.tolist() == [7.0] * 3 and len(batch) == 4


def test_saver_save_and_restore_take_the_queue_session(tmp_path, files):
    """Saver.save/restore, Tensor.eval and Operation.run accept a QueueSession."""
    _, path = _checkpoint(tmp_path, files)
    with tf.Graph().as_default() as g:
        w, _, ids, train = _model(files)
        saver = v1.train.Saver()
        with qk.QueueSession(g) as qs:
            assert qs.run(w).tolist() == [0.0] * 3  # a fresh start: initialised
            saver.restore(qs, path)  # after the first run
            assert w.eval(session=qs).tolist() == [7.0] * 3
            train.op.run(session=qs)
            saved = saver.save(qs, str(tmp_path / "again" / "m.ckpt"))
            assert len(ids.eval(session=qs)) == 4
    assert v1.train.load_variable(saved, "w").tolist() == [8.0] * 3


def test_default_graph_is_used_when_the_program_built_one(files):
    """QueueSession() runs the graph built before it, like tf.compat.v1.Session()."""
    with tf.Graph().as_default() as g:
        _, _, ids, train = _model(files)
        hook = v1.train.StopAtStepHook(last_step=3)
        with qk.QueueSession(hooks=[hook]) as qs:
            assert qs.graph is g
            steps = [int(s) for s, _ in qs.iterate([train, ids])]
    assert steps == [1, 2, 3]
    with qk.QueueSession() as fresh:  # nothing built: a fresh graph, as before
        assert fresh.graph is not g and not fresh.graph.get_operations()


def test_ten_sessions_on_one_graph_add_no_ops(tmp_path, files):
    """An eval loop opening a session per checkpoint leaves the op count unchanged."""
    _, path = _checkpoint(tmp_path, files)
    with tf.Graph().as_default() as g:
        w, _, ids, _ = _model(files)
        saver = v1.train.Saver()
        counts = []
        for _ in range(10):
            with qk.QueueSession(g, stall_timeout_secs=5) as qs:
                saver.restore(qs, path)
                assert qs.run(w).tolist() == [7.0] * 3
                qs.run(ids)
            counts.append(len(g.get_operations()))
    assert len(set(counts)) == 1, counts


def test_monitored_training_session_resumes_from_its_checkpoints(tmp_path, files):
    """A second monitored_training_session on the same checkpoint_dir continues the global step."""
    train_dir = str(tmp_path / "train")

    def train(last_step):
        with tf.Graph().as_default():
            w, gs, ids, op = _model(files)
            seen = []
            with qk.monitored_training_session(
                    checkpoint_dir=train_dir,
                    hooks=[v1.train.StopAtStepHook(last_step=last_step)]) as sess:
                while not sess.should_stop():
                    seen.append(int(sess.run(op)))
            return seen

    assert train(4) == [1, 2, 3, 4]
    assert train(7) == [5, 6, 7]
    assert v1.train.latest_checkpoint(train_dir).endswith("model.ckpt-7")
    assert v1.train.load_variable(train_dir, "w").tolist() == [7.0] * 3


def _train_and_list(make_session, train_dir, files):
    """Train to step 7, checkpoints every 3 steps, summaries every 2: the steps of each."""
    with tf.Graph().as_default():
        _, _, ids, op = _model(files)
        v1.summary.scalar("batch_mean", tf.reduce_mean(tf.cast(ids, tf.float32)))
        with make_session(checkpoint_dir=train_dir, save_checkpoint_steps=3,
                          save_summaries_steps=2, log_step_count_steps=None,
                          hooks=[v1.train.StopAtStepHook(last_step=7)]) as sess:
            while not sess.should_stop():
                sess.run(op)
    state = v1.train.get_checkpoint_state(train_dir)
    checkpoints = sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)
    events = [os.path.join(train_dir, f) for f in os.listdir(train_dir)
              if f.startswith("events.out.tfevents")]
    summaries = sorted(e.step for f in events for e in v1.train.summary_iterator(f)
                       if any(v.tag == "batch_mean" for v in e.summary.value))
    return checkpoints, summaries


def test_checkpoints_and_summaries_as_monitored_training_session_writes_them(tmp_path, files):
    """save_checkpoint_steps and save_summaries_steps write the same files TF's own session does."""
    ours = _train_and_list(qk.monitored_training_session, str(tmp_path / "ours"), files)
    theirs = _train_and_list(v1.train.MonitoredTrainingSession, str(tmp_path / "tf"), files)
    assert ours == theirs
    checkpoints, summaries = ours
    assert checkpoints[0] == 0 and checkpoints[-1] == 7 and len(checkpoints) == 4
    assert len(summaries) == 4


def test_monitored_training_session_keeps_queuekits_guarantees(tmp_path, files):
    """Under monitored_training_session: every record once, a clean end; runner errors raise."""
    with tf.Graph().as_default():
        ids = id_reader_batch(files, batch_size=6)
        with qk.monitored_training_session() as sess:
            got = np.concatenate(list(sess.iterate(ids)))
    assert sorted(got.tolist()) == list(range(40))
    bad = str(tmp_path / "bad.tfrecords")
    data = bytearray(open(files[1], "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(bad, "wb").write(bytes(data))
    with tf.Graph().as_default(), pytest.raises(tf.errors.DataLossError) as info:
        ids = id_reader_batch([files[0], bad], batch_size=6)
        with qk.monitored_training_session(stop_grace_period_secs=5) as sess:
            for _ in sess.iterate(ids):
                pass
    assert bad in str(info.value) + " ".join(getattr(info.value, "__notes__", []))


def test_monitored_training_session_takes_tfs_arguments():
    """Every argument of tf.compat.v1.train.MonitoredTrainingSession is accepted, in its order."""
    import inspect

    ours = list(inspect.signature(qk.monitored_training_session).parameters)
    theirs = list(inspect.signature(v1.train.MonitoredTrainingSession).parameters)
    assert ours[:len(theirs)] == theirs
    for name in theirs:
        assert (inspect.signature(qk.monitored_training_session).parameters[name].default
                is inspect.signature(v1.train.MonitoredTrainingSession).parameters[name].default
                or inspect.signature(qk.monitored_training_session).parameters[name].default
                == inspect.signature(v1.train.MonitoredTrainingSession).parameters[name].default)


_CHIEF_AND_WORKER = """
import json, tensorflow as tf, queuekit as qk
v1 = tf.compat.v1
server = tf.distribute.Server.create_local_server()
calls = {"chief": [], "worker": []}

class Recorder(v1.train.SessionRunHook):
    def __init__(self, who):
        self.who = who
    def after_create_session(self, session, coord):
        calls[self.who].append("created")

def build():
    step = v1.train.get_or_create_global_step()
    x = v1.train.range_input_producer(100, shuffle=False).dequeue()
    return v1.assign_add(step, 1), x

out = {}
with tf.Graph().as_default():
    train, x = build()
    with qk.monitored_training_session(master=server.target, is_chief=True,
                                       chief_only_hooks=[Recorder("chief")]) as chief:
        out["chief_steps"] = [int(chief.run([train, x])[0]) for _ in range(3)]
        with tf.Graph().as_default():
            wtrain, wx = build()
            with qk.monitored_training_session(master=server.target, is_chief=False,
                                               chief_only_hooks=[Recorder("worker")]) as w:
                out["worker_step"] = int(w.run([wtrain, wx])[0])
out["calls"] = calls
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_non_chief_waits_for_the_chief_and_skips_chief_only_hooks():
    """On one server a non-chief sees the chief's global step; chief_only_hooks run on the chief."""
    child = run_script(_CHIEF_AND_WORKER)
    out, err = child.communicate(timeout=patience(90))
    assert child.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["chief_steps"] == [1, 2, 3]
    assert result["worker_step"] == 4  # the chief's variables, not re-initialised
    assert result["calls"] == {"chief": ["created"], "worker": []}


_BLOCKED_UNDER_MTS = """
import tensorflow as tf, queuekit as qk
v1 = tf.compat.v1
with tf.Graph().as_default():
    nobody = tf.queue.FIFOQueue(4, tf.int64)
    q = tf.queue.FIFOQueue(4, tf.int64)
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(nobody.dequeue())]))
    d = q.dequeue()
    with qk.monitored_training_session(stall_timeout_secs=None) as sess:
        print("ready", flush=True)
        sess.run(d)
"""


@pytest.mark.slow
def test_ctrl_c_while_blocked_under_monitored_training_session():
    """SIGINT while the main thread is blocked in a dequeue ends with a plain KeyboardInterrupt."""
    child = run_script(_BLOCKED_UNDER_MTS)
    _, err, _ = signal_when_ready(child, signal.SIGINT)
    assert child.returncode in (-signal.SIGINT, 130), err[-3000:]
    assert err.rstrip().endswith("KeyboardInterrupt"), err[-3000:]
    assert "MISMATCH" not in err
