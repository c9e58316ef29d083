"""A legacy TF1 training loop on queuekit: a small convnet trained from TFRecords.

    python examples/train_tf1.py [--workdir DIR] [--images 800] [--steps 300]

Everything is written the TF1 way (``tf.compat.v1`` variables, an optimizer,
``global_step``, a ``Saver`` through ``CheckpointSaverHook``, ``StopAtStepHook``)
in a ``tf.Graph``, never with eager execution turned off globally. The data is
the demo's generated image folder, split 80/20 into train and held-out
TFRecords by ``write_tfrecords``; the held-out split is read once
(``num_epochs=1``) to evaluate the last checkpoint.

Before, the input choreography every such script carried (the seed's)::

    with tf.compat.v1.Session() as sess:
        sess.run([tf.compat.v1.global_variables_initializer(),
                  tf.compat.v1.local_variables_initializer()])
        coord = tf.compat.v1.train.Coordinator()
        threads = tf.compat.v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            for step in range(steps):          # hangs if a runner died or never started
                sess.run(train_op)
        except tf.errors.OutOfRangeError:      # also what a corrupt record looks like
            pass
        finally:
            coord.request_stop()
            coord.join(threads)                # 120 s wait, CancelledError walls

After, with queuekit (below, :func:`train`)::

    with qk.QueueSession(graph, hooks=[stop_at_step, checkpoint_saver]) as qs:
        while not qs.should_stop():
            qs.run(train_op)
"""

from __future__ import annotations

import argparse
import os
import sys

import tensorflow as tf

import queuekit as qk
from queuekit.demo import generate_images

v1 = tf.compat.v1
IMAGE_SIZE = (64, 64)


def make_splits(workdir: str, images: int, *, seed: int = 0,
                shards: int = 1) -> tuple[list[str], list[str], int]:
    """Demo images -> train (``shards`` files) and held-out TFRecords (80/20); (train files,
    test files, classes)."""
    img_dir = os.path.join(workdir, "images")
    if not os.path.isdir(img_dir):
        generate_images(img_dir, images, seed=seed)
    folder = qk.scan_image_folder(img_dir, shuffle=True, seed=seed)
    cut = len(folder) * 4 // 5
    outputs = []
    for name, part in (("train", slice(0, cut)), ("test", slice(cut, None))):
        split = qk.ImageFolder(folder.root, folder.paths[part], folder.labels[part],
                               folder.class_names)
        report = qk.write_tfrecords(split, os.path.join(workdir, "data", f"{name}.tfrecords"),
                                    image_size=IMAGE_SIZE, overwrite=True, progress=False,
                                    shards=shards if name == "train" else 1)
        outputs.append(report.outputs)
    return outputs[0], outputs[1], len(folder.class_names)


def model(images: tf.Tensor, num_classes: int) -> tf.Tensor:
    """Three conv + max-pool blocks, global average pooling, a linear layer: the logits."""
    x = images
    for i, channels in enumerate((16, 32, 64)):
        with v1.variable_scope(f"conv{i}"):
            w = v1.get_variable("w", [3, 3, x.shape[-1], channels],
                                initializer=v1.initializers.he_normal())
            b = v1.get_variable("b", [channels], initializer=v1.zeros_initializer())
            x = tf.nn.relu(tf.nn.conv2d(x, w, strides=1, padding="SAME") + b)
            x = tf.nn.max_pool2d(x, 2, 2, "VALID")
    x = tf.reduce_mean(x, axis=[1, 2])
    with v1.variable_scope("logits"):
        w = v1.get_variable("w", [x.shape[-1], num_classes],
                            initializer=v1.initializers.glorot_uniform())
        b = v1.get_variable("b", [num_classes], initializer=v1.zeros_initializer())
    return tf.matmul(x, w) + b


def train(files: list[str], num_classes: int, model_dir: str, *, steps: int,
          batch_size: int = 32, learning_rate: float = 2e-3, log_every: int = 20,
          out=sys.stdout) -> list[float]:
    """Train for ``steps`` steps, checkpointing into ``model_dir``; the loss of every step."""
    graph = tf.Graph()
    with graph.as_default():
        graph.seed = 0
        batch = qk.tfrecord_batches(files, batch_size=batch_size, shuffle=True, seed=0,
                                    num_readers=2, read_many=32)
        logits = model(batch["image"], num_classes)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=batch["label"], logits=logits))
        global_step = v1.train.get_or_create_global_step()
        train_op = v1.train.AdamOptimizer(learning_rate).minimize(loss, global_step=global_step)
        saver = v1.train.Saver(max_to_keep=2)
    hooks = [v1.train.StopAtStepHook(last_step=steps),
             v1.train.CheckpointSaverHook(model_dir, save_steps=max(1, steps // 2), saver=saver)]
    losses = []
    with qk.QueueSession(graph, hooks=hooks) as qs:
        while not qs.should_stop():
            _, value = qs.run([train_op, loss])
            losses.append(float(value))
            if len(losses) % log_every == 0:
                print(f"step {len(losses):4d}  loss {value:.3f}", file=out, flush=True)
    return losses


def evaluate(files: list[str], num_classes: int, model_dir: str, *,
             batch_size: int = 64) -> tuple[float, int]:
    """(accuracy, records) of the latest checkpoint on ``files``, each record read once."""
    graph = tf.Graph()
    with graph.as_default():
        batch = qk.tfrecord_batches(files, batch_size=batch_size, num_epochs=1,
                                    allow_smaller_final_batch=True)  # every record, n <= batch
        correct = tf.equal(tf.argmax(model(batch["image"], num_classes), 1, output_type=tf.int32),
                           batch["label"])
        saver = v1.train.Saver()
    right = total = 0
    # initialize=False: the weights come from the checkpoint; only the epoch counter
    # (a local variable) needs initialising.
    with qk.QueueSession(graph, initialize=False) as qs:
        qs.session.run(v1.local_variables_initializer())
        saver.restore(qs.session, tf.train.latest_checkpoint(model_dir))
        for hits in qs.iterate(correct):
            right += int(hits.sum())
            total += len(hits)
    return right / total, total


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="queuekit-train")
    ap.add_argument("--images", type=int, default=800)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args(argv)
    train_files, test_files, classes = make_splits(args.workdir, args.images)
    model_dir = os.path.join(args.workdir, "model")
    losses = train(train_files, classes, model_dir, steps=args.steps)
    accuracy, n = evaluate(test_files, classes, model_dir)
    print(f"held-out accuracy {accuracy:.1%} on {n} images ({classes} classes); "
          f"checkpoints in {model_dir}")
    return {"losses": losses, "accuracy": accuracy, "evaluated": n, "model_dir": model_dir}


if __name__ == "__main__":
    main()
