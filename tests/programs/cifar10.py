"""In the pattern of TF's early cifar10 tutorial: CIFAR-style fixed-length binaries,
shuffle_batch; `train` starts the runners with start_queue_runners(sess) alone (no
Coordinator) and loops to max_steps; `eval` starts each runner's threads itself with a
Coordinator, ends with request_stop(e) on an error, then join."""

import argparse

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
IMAGE_BYTES = 16


def inputs(files, batch_size, shuffle):
    queue = tf.train.string_input_producer(files, shuffle=False)
    reader = tf.FixedLengthRecordReader(record_bytes=1 + IMAGE_BYTES)
    _, value = reader.read(queue)
    record = tf.decode_raw(value, tf.uint8)
    label = tf.cast(record[0], tf.int32)
    image = tf.cast(tf.reshape(record[1:], [IMAGE_BYTES]), tf.float32)
    if shuffle:
        return tf.train.shuffle_batch([image, label], batch_size=batch_size, num_threads=2,
                                      capacity=50, min_after_dequeue=10, seed=7)
    return tf.train.batch([image, label], batch_size=batch_size, num_threads=1, capacity=20)


def train(args):
    images, labels = inputs(args.files, 4, shuffle=True)
    weights = tf.Variable(tf.zeros([IMAGE_BYTES, 10]), name="weights")
    logits = tf.matmul(images / 255.0, weights)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    tf.train.start_queue_runners(sess=sess)
    for step in range(args.max_steps):
        sess.run(train_op)
    print("trained %d steps" % args.max_steps)


def evaluate(args):
    images, labels = inputs(args.files, 4, shuffle=False)
    correct = tf.reduce_sum(tf.cast(tf.equal(labels % 2, 0), tf.int32))
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        try:
            threads = []
            for qr in tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS):
                threads.extend(qr.create_threads(sess, coord=coord, daemon=True, start=True))
            true_count, step = 0, 0
            while step < args.max_steps and not coord.should_stop():
                true_count += sess.run(correct)
                step += 1
            print("precision @ 1 = %.3f" % (true_count / (4.0 * step)))
        except Exception as e:  # noqa: BLE001 - the tutorial's own pattern
            coord.request_stop(e)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "eval"])
    p.add_argument("files", nargs="+")
    p.add_argument("--max-steps", type=int, default=5)
    args = p.parse_args()
    train(args) if args.mode == "train" else evaluate(args)
