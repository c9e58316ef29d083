"""A Supervisor loop with init_fn (the weights a pretrained model would load)."""

import argparse

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_eager_execution()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logdir")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    queue = tf.train.string_input_producer(args.files, num_epochs=1, shuffle=False)
    _, serialized = tf.TFRecordReader().read(queue)
    features = tf.parse_single_example(serialized, {
        "image_raw": tf.FixedLenFeature([], tf.string),
        "label": tf.FixedLenFeature([], tf.int64)})
    image = tf.cast(tf.decode_raw(features["image_raw"], tf.uint8), tf.float32)
    image.set_shape([16])
    images = tf.train.batch([image], batch_size=5)
    scale = tf.Variable(np.zeros([16], np.float32), name="scale")
    total = tf.Variable(0.0, name="total")
    step = tf.train.get_or_create_global_step()
    train_op = tf.group(tf.assign_add(total, tf.reduce_sum(images * scale)),
                        tf.assign_add(step, 1))
    init_scale = scale.assign(np.full([16], 0.5, np.float32))

    def init_fn(sess):
        sess.run(init_scale)

    sv = tf.train.Supervisor(logdir=args.logdir, init_fn=init_fn, summary_op=None,
                             save_model_secs=0)
    with sv.managed_session() as sess:
        steps = 0
        while not sv.should_stop():
            try:
                sess.run(train_op)
            except tf.errors.OutOfRangeError:
                break
            steps += 1
        print("steps %d total %.1f" % (steps, sess.run(total)))


if __name__ == "__main__":
    main()
