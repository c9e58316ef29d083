"""tf-slim's learning.train, then evaluation.evaluate_once, as slim's train/eval scripts do."""

import argparse

import tensorflow.compat.v1 as tf
import tf_slim as slim

tf.disable_eager_execution()


def inputs(files, epochs):
    queue = tf.train.string_input_producer(files, num_epochs=epochs, shuffle=False)
    _, serialized = tf.TFRecordReader().read(queue)
    features = tf.parse_single_example(serialized, {
        "image_raw": tf.FixedLenFeature([], tf.string),
        "label": tf.FixedLenFeature([], tf.int64)})
    image = tf.cast(tf.decode_raw(features["image_raw"], tf.uint8), tf.float32) / 255.0
    image.set_shape([16])
    return tf.train.batch([image, features["label"]], batch_size=4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logdir")
    p.add_argument("files", nargs="+")
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        images, labels = inputs(args.files, None)
        logits = slim.fully_connected(images, 10, activation_fn=None, scope="logits")
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        train_op = slim.learning.create_train_op(loss, tf.train.GradientDescentOptimizer(0.5))
        final = slim.learning.train(train_op, args.logdir, number_of_steps=args.steps,
                                    save_summaries_secs=10000, save_interval_secs=10000)
        print("final loss %.4f" % final)
    with tf.Graph().as_default():
        images, labels = inputs(args.files, 1)
        logits = slim.fully_connected(images, 10, activation_fn=None, scope="logits")
        accuracy, update = tf.metrics.accuracy(labels, tf.argmax(logits, 1))
        tf.train.get_or_create_global_step()
        value = slim.evaluation.evaluate_once(
            "", tf.train.latest_checkpoint(args.logdir), args.logdir + "/eval",
            num_evals=5, eval_op=update, final_op=accuracy)
        print("accuracy %.4f" % value)


if __name__ == "__main__":
    main()
