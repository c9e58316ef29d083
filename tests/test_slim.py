"""queuekit.slim: TF-Slim's train, evaluate_once and evaluation_loop on queuekit sessions."""

import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

import queuekit as qk
import queuekit.slim as qslim
from tests.helpers import id_reader_batch, patience, v1, write_id_records, write_image_records

HERE = os.path.dirname(os.path.abspath(__file__))


def _train_op(ids):
    """A line fitted to the ids: (train_op returning the loss, the weight)."""
    x = tf.cast(ids, tf.float32) / 10
    w = v1.get_variable("w", [], initializer=v1.zeros_initializer())
    loss = tf.reduce_mean((w * x - 2 * x) ** 2)
    update = v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=v1.train.get_or_create_global_step())
    with tf.control_dependencies([update]):
        return tf.identity(loss), w


def _step_of(logdir):
    return int(tf.train.latest_checkpoint(logdir).rsplit("-", 1)[1])


@pytest.mark.slow
def test_slim_program_gives_what_slims_own_loops_give(tmp_path):
    """A Slim program (Slim's losses, create_train_op, aggregate_metric_map) run by tf_slim's
    train/evaluate_once/evaluation_loop and by queuekit.slim's: the same checkpoint step,
    weights, loss, metrics over every record, and summary tags."""
    pytest.importorskip("tf_slim")
    results = {}
    for runner in ("slim", "queuekit"):
        workdir = tmp_path / runner
        workdir.mkdir()
        done = subprocess.run([sys.executable, os.path.join(HERE, "slim_job.py"), runner,
                               str(workdir)], capture_output=True, text=True, timeout=patience(120))
        assert done.returncode == 0, done.stderr[-3000:]
        results[runner] = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["queuekit"] == results["slim"]
    got = results["queuekit"]
    assert got["checkpoint"] == "model.ckpt-5"  # 2 epochs of 20 records in batches of 8
    assert got["once"]["records"] == got["loop"]["records"] == 20  # every record once
    assert got["once"]["mean_id"] == 9.5
    assert {"w_1", "global_step/sec"} <= set(got["train_tags"])
    assert "eval/mse" in got["once_tags"] and "eval/mse" in got["loop_tags"]


def test_train_stops_at_number_of_steps_and_resumes_without_reinitialising(tmp_path):
    """number_of_steps ends the run at that global step; a second train restores logdir
    (init_fn is not run again, the weight goes on from where it was)."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 10)]
    logdir = str(tmp_path / "train")
    inits, weights = [], []
    for steps in (3, 5):
        with tf.Graph().as_default():
            train_op, w = _train_op(id_reader_batch(files, batch_size=2, num_epochs=None))
            loss = qslim.train(train_op, logdir, number_of_steps=steps,
                               init_fn=lambda sess, w=w: inits.append(sess.run(w)))
            assert isinstance(loss, np.floating)
            weights.append(tf.train.load_checkpoint(logdir).get_tensor("w"))
        assert _step_of(logdir) == steps
    assert inits == [0.0]  # the first run only: the second restored the checkpoint
    assert 0 < weights[0] < weights[1] < 2


def test_train_ends_at_the_end_of_the_input_and_saves_the_last_step(tmp_path):
    """One epoch of 10 records in batches of 4 (the last of 2): 3 steps, the last saved
    although save_interval_secs is 0, as Slim saves at the end; summaries every step."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 10)]
    logdir = str(tmp_path / "train")
    with tf.Graph().as_default():
        train_op, w = _train_op(id_reader_batch(files, batch_size=4, num_epochs=1))
        v1.summary.scalar("weight", w)
        qslim.train(train_op, logdir, save_interval_secs=0, save_summaries_secs=1e-9)
    assert _step_of(logdir) == 3
    steps = {e.step for name in os.listdir(logdir) if name.startswith("events.")
             for e in v1.train.summary_iterator(os.path.join(logdir, name))
             if any(v.tag == "weight" for v in e.summary.value)}
    assert {1, 2, 3} <= steps


def test_train_raises_a_bad_record_naming_the_file(tmp_path):
    """A record of the wrong size fails the training with the file and record, where Slim's
    Supervisor loop would log and return."""
    path = write_image_records(tmp_path / "short.tfrecords", range(5), raw_len=50)
    with tf.Graph().as_default():
        batch = qk.tfrecord_batches(path, batch_size=2, num_epochs=1, num_readers=1)
        train_op, _ = _train_op(batch["label"])
        with pytest.raises(tf.errors.InvalidArgumentError, match="short.tfrecords:0"):
            qslim.train(train_op, str(tmp_path / "train"))


def test_a_step_function_sees_slims_kwargs_and_an_aborted_session_is_retried(tmp_path):
    """A program's train_step_fn gets Slim's should_stop/should_log tensors and can call
    queuekit.slim.train_step; an AbortedError (a parameter server restarted) opens a new
    session, restored from the last checkpoint, as Slim retries."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 10)]
    logdir = str(tmp_path / "train")
    calls, sessions = [], []

    class Sessions(v1.train.SessionRunHook):
        def after_create_session(self, session, coord):
            sessions.append(session.run(v1.train.get_global_step()))

    def step_fn(sess, train_op, global_step, kwargs):
        calls.append(sorted(k for k in kwargs if k.startswith("should")))
        if len(calls) == 3:
            raise tf.errors.AbortedError(None, None, "a parameter server restarted")
        return qslim.train_step(sess, train_op, global_step, kwargs)

    with tf.Graph().as_default():
        train_op, _ = _train_op(id_reader_batch(files, batch_size=2, num_epochs=None))
        qslim.train(train_op, logdir, train_step_fn=step_fn, number_of_steps=4,
                    save_interval_secs=0, hooks=[Sessions()])
    assert calls[0] == ["should_log", "should_stop"]
    assert sessions == [0, 0]  # the aborted session saved only its first checkpoint
    assert _step_of(logdir) == 4


def test_traces_and_a_session_wrapper_as_slim_has_them(tmp_path):
    """trace_every_n_steps writes Slim's Chrome timelines (tf_trace-<step>.json) and the run
    metadata; session_wrapper's session is the one the steps run on."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 10)]
    logdir = str(tmp_path / "train")
    wrapped = []

    class Counting:
        def __init__(self, sess):
            self._sess = sess

        def run(self, *args, **kwargs):
            wrapped.append(1)
            return self._sess.run(*args, **kwargs)

    with tf.Graph().as_default():
        train_op, _ = _train_op(id_reader_batch(files, batch_size=2, num_epochs=None))
        qslim.train(train_op, logdir, number_of_steps=3, trace_every_n_steps=2,
                    session_wrapper=Counting)
    traces = sorted(n for n in os.listdir(logdir) if n.startswith("tf_trace-"))
    assert traces and all(json.load(open(os.path.join(logdir, n)))["traceEvents"]
                          for n in traces)
    assert len(wrapped) >= 3


def test_ignore_live_threads_returns_past_a_stuck_runner(tmp_path):
    """A runner stuck in user code past the grace: ShutdownTimeout, or with
    ignore_live_threads=True the loss, as Slim's Supervisor does."""
    release, entered = threading.Event(), threading.Event()

    def block():
        entered.set()
        release.wait(30)
        return np.int64(1)

    try:
        for ignore in (False, True):
            with tf.Graph().as_default():
                q = tf.queue.FIFOQueue(2, tf.int64, shapes=[[]], name="slowq")
                v1.train.add_queue_runner(v1.train.QueueRunner(
                    q, [q.enqueue(tf.py_function(block, [], tf.int64))]))
                train_op, _ = _train_op(tf.constant([1, 2], tf.int64))

                def step_fn(sess, train_op, global_step, kwargs):
                    assert entered.wait(10)  # the runner is inside block() before the stop
                    return qslim.train_step(sess, train_op, global_step, kwargs)

                args = dict(number_of_steps=1, train_step_fn=step_fn, stop_grace_period_secs=0.2)
                if ignore:
                    assert qslim.train(train_op, None, ignore_live_threads=True,
                                       **args) is not None
                else:
                    with pytest.raises(qk.ShutdownTimeout):
                        qslim.train(train_op, None, **args)
    finally:
        release.set()


def _eval_graph(files, batch_size):
    """Streaming metrics over one epoch: (updates, values)."""
    v1.train.get_or_create_global_step()
    ids = id_reader_batch(files, batch_size=batch_size, num_epochs=1)
    mean, update_mean = v1.metrics.mean(ids)
    count, update_count = v1.metrics.true_positives(tf.ones_like(ids, tf.bool),
                                                    tf.ones_like(ids, tf.bool))
    v1.summary.scalar("eval/mean", mean)
    return [update_mean, update_count], {"mean": mean, "count": count}


@pytest.mark.parametrize("num_evals", [None, math.ceil(23 / 5)])
def test_evaluate_once_reads_every_record_once_and_writes_at_the_checkpoints_step(
        tmp_path, num_evals):
    """To the end of the input (num_evals None) or for ceil(records / batch) evaluations:
    the metrics over all 23 records, the summary at the checkpoint's global step."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 23)]
    train_dir, eval_dir = str(tmp_path / "train"), str(tmp_path / "eval")
    with tf.Graph().as_default():
        train_op, _ = _train_op(id_reader_batch(files, batch_size=2, num_epochs=None))
        qslim.train(train_op, train_dir, number_of_steps=7)
    with tf.Graph().as_default():
        updates, values = _eval_graph(files, batch_size=5)
        got = qslim.evaluate_once("", tf.train.latest_checkpoint(train_dir), eval_dir,
                                  num_evals=num_evals, eval_op=updates, final_op=values)
    assert got == {"mean": 11.0, "count": 23}
    events = [e for name in os.listdir(eval_dir)
              for e in v1.train.summary_iterator(os.path.join(eval_dir, name))
              if any(v.tag == "eval/mean" for v in e.summary.value)]
    assert [e.step for e in events] == [7]


def test_evaluate_once_to_the_end_over_a_parse_fn_with_an_image_summary(tmp_path):
    """A builder whose parse_fn makes an image summary (Slim's and Inception's preprocessing
    do): evaluate_once(num_evals=None) counts every record and ends cleanly (its final
    merge_all() read the exhausted input: OutOfRangeError after the metrics)."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 23)]
    train_dir, eval_dir = str(tmp_path / "train"), str(tmp_path / "eval")
    with tf.Graph().as_default():
        train_op, _ = _train_op(id_reader_batch(files, batch_size=2, num_epochs=None))
        qslim.train(train_op, train_dir, number_of_steps=3)

    def parse(serialized):
        ids = tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})
        v1.summary.image("preprocessed", tf.zeros([1, 2, 2, 1]) + tf.cast(ids["id"], tf.float32))
        return ids

    with tf.Graph().as_default():
        v1.train.get_or_create_global_step()
        ids = qk.tfrecord_batches(files, batch_size=5, num_epochs=1, parse_fn=parse,
                                  allow_smaller_final_batch=True)["id"]
        count, update = v1.metrics.true_positives(tf.ones_like(ids, tf.bool),
                                                  tf.ones_like(ids, tf.bool))
        v1.summary.scalar("eval/count", count)
        got = qslim.evaluate_once("", tf.train.latest_checkpoint(train_dir), eval_dir,
                                  num_evals=None, eval_op=update, final_op=count)
    assert got == 23


def test_evaluation_loop_evaluates_each_new_checkpoint_until_its_timeout(tmp_path):
    """Each checkpoint once; without a newer one within `timeout` the loop returns the
    last result (timeout_fn asked first)."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 12)]
    train_dir, eval_dir = str(tmp_path / "train"), str(tmp_path / "eval")
    with tf.Graph().as_default():
        train_op, _ = _train_op(id_reader_batch(files, batch_size=3, num_epochs=None))
        qslim.train(train_op, train_dir, number_of_steps=2)
    asked = []
    with tf.Graph().as_default():
        updates, values = _eval_graph(files, batch_size=5)
        got = qslim.evaluation_loop("", train_dir, eval_dir, num_evals=None, eval_op=updates,
                                    final_op=values, eval_interval_secs=0, timeout=0.01,
                                    timeout_fn=lambda: asked.append(1) or True)
    assert got == {"mean": 5.5, "count": 12}
    assert asked == [1]
