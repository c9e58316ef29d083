"""A TF-Slim program, run by tf_slim's own loops or by queuekit.slim's (the tests compare).

    python slim_job.py RUNNER WORKDIR    # RUNNER: slim | queuekit

Trains a line (y = 2x + 1) on id records with Slim's losses and
``create_train_op`` for two epochs (``slim.learning.train``), evaluates the
checkpoint over every record once (``evaluate_once``) and again by
``evaluation_loop``, and prints one JSON line: the final step, the weights,
the loss, both evaluations' metrics and the summary tags written.

tf-slim 1.1.0 on TensorFlow 2 needs one shim to run its own loops:
``tf.compat.v1.disable_eager_execution()`` (the Supervisor's step counter thread
and summary thread otherwise run eagerly and fail on the graph's global step);
queuekit's loops need none.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import tf_slim as slim

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.helpers import id_reader_batch, write_id_records  # noqa: E402

v1 = tf.compat.v1
N, BATCH = 20, 8


def model(files, num_epochs):
    ids = id_reader_batch(files, batch_size=BATCH, num_epochs=num_epochs)
    x = tf.cast(ids, tf.float32) / N
    w = v1.get_variable("w", [], initializer=v1.zeros_initializer())
    b = v1.get_variable("b", [], initializer=v1.zeros_initializer())
    return ids, x, w * x + b, w, b


def tags(logdir):
    found = set()
    for name in os.listdir(logdir):
        if name.startswith("events."):
            for event in v1.train.summary_iterator(os.path.join(logdir, name)):
                found |= {v.tag for v in event.summary.value}
    return sorted(found)


def main(runner, workdir):
    if runner == "slim":
        v1.disable_eager_execution()
        loops = types_of_slim()
    else:
        import queuekit.slim as loops
    files = [write_id_records(os.path.join(workdir, "ids.tfrecords"), N)]
    train_dir, eval_dir = os.path.join(workdir, "train"), os.path.join(workdir, "eval")
    with tf.Graph().as_default():
        _, x, y, w, b = model(files, num_epochs=2)
        slim.losses.mean_squared_error(2 * x + 1, y)
        loss = slim.losses.get_total_loss()
        v1.summary.scalar("w", w)  # not the loss: Slim's summary thread would take batches
        train_op = slim.learning.create_train_op(loss, v1.train.GradientDescentOptimizer(0.5))
        final_loss = loops.train(train_op, train_dir, save_summaries_secs=0.01,
                                 log_every_n_steps=1)
        trained_tags = tags(train_dir)
    results = {}
    for name in ("once", "loop"):
        with tf.Graph().as_default():
            v1.train.get_or_create_global_step()
            ids, x, y, w, b = model(files, num_epochs=1)
            values, updates = slim.metrics.aggregate_metric_map({
                "mean_id": v1.metrics.mean(ids),
                "mse": v1.metrics.mean_squared_error(2 * x + 1, y),
                "records": v1.metrics.true_positives(tf.ones_like(ids, tf.bool),
                                                     tf.ones_like(ids, tf.bool)),
            })
            for k, v in values.items():
                v1.summary.scalar("eval/" + k, v)
            kwargs = dict(num_evals=-(-N // BATCH), eval_op=list(updates.values()),
                          final_op=values)
            if name == "once":
                got = loops.evaluate_once("", v1.train.latest_checkpoint(train_dir),
                                          eval_dir + "-once", **kwargs)
            else:
                got = loops.evaluation_loop("", train_dir, eval_dir + "-loop",
                                            eval_interval_secs=0, max_number_of_evaluations=1,
                                            **kwargs)
            results[name] = {k: float(v) for k, v in got.items()}
            results[name + "_tags"] = tags(eval_dir + "-" + name)
    reader = tf.train.load_checkpoint(v1.train.latest_checkpoint(train_dir))
    print(json.dumps({
        "checkpoint": os.path.basename(v1.train.latest_checkpoint(train_dir)),
        "w": float(reader.get_tensor("w")), "b": float(reader.get_tensor("b")),
        "loss": float(np.asarray(final_loss)), "train_tags": trained_tags, **results}))


def types_of_slim():
    """Slim's loops under the names queuekit.slim gives them."""
    class Loops:
        train = staticmethod(slim.learning.train)
        evaluate_once = staticmethod(slim.evaluation.evaluate_once)
        evaluation_loop = staticmethod(slim.evaluation.evaluation_loop)
    return Loops


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
