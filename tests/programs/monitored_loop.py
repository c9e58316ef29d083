"""A MonitoredTrainingSession loop with hooks, in the pattern of TF's later tutorials."""

import argparse

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()


class PrintEvery(tf.train.SessionRunHook):
    def __init__(self, total):
        self._total = total
        self._steps = 0

    def after_run(self, run_context, run_values):
        self._steps += 1
        if self._steps % 2 == 0:
            print("step %d" % self._steps)

    def end(self, session):
        print("total %.1f" % session.run(self._total))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logdir")
    p.add_argument("files", nargs="+")
    p.add_argument("--last-step", type=int, default=100)
    args = p.parse_args()
    queue = tf.train.string_input_producer(args.files, num_epochs=1, shuffle=False)
    _, serialized = tf.TFRecordReader().read(queue)
    features = tf.parse_single_example(serialized, {
        "image_raw": tf.FixedLenFeature([], tf.string),
        "label": tf.FixedLenFeature([], tf.int64)})
    image = tf.cast(tf.decode_raw(features["image_raw"], tf.uint8), tf.float32)
    image.set_shape([16])
    images, labels = tf.train.batch([image, features["label"]], batch_size=4,
                                    allow_smaller_final_batch=True)
    step = tf.train.get_or_create_global_step()
    total = tf.Variable(0.0, name="total")
    train_op = tf.group(tf.assign_add(total, tf.reduce_sum(images)), tf.assign_add(step, 1))
    hooks = [tf.train.StopAtStepHook(last_step=args.last_step), PrintEvery(total)]
    with tf.train.MonitoredTrainingSession(checkpoint_dir=args.logdir, hooks=hooks,
                                           save_summaries_steps=None,
                                           save_summaries_secs=None) as sess:
        while not sess.should_stop():
            sess.run(train_op)
    print("done")


if __name__ == "__main__":
    main()
