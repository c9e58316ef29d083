"""In the pattern of im2txt's input ops: parallel readers into a values queue of the
program's own (add_queue_runner), batch_join with dynamic_pad, a finalized graph."""

import argparse

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--readers", type=int, default=2)
    args = p.parse_args()
    filename_queue = tf.train.string_input_producer(args.files, num_epochs=1, shuffle=False)
    values_queue = tf.FIFOQueue(capacity=32, dtypes=[tf.string], name="fifo_input_queue")
    enqueue_ops = []
    for _ in range(args.readers):
        _, value = tf.TFRecordReader().read(filename_queue)
        enqueue_ops.append(values_queue.enqueue([value]))
    tf.train.queue_runner.add_queue_runner(
        tf.train.queue_runner.QueueRunner(values_queue, enqueue_ops))
    serialized = values_queue.dequeue()
    features = tf.parse_single_example(serialized, {
        "image_raw": tf.FixedLenFeature([], tf.string),
        "label": tf.FixedLenFeature([], tf.int64)})
    caption = tf.decode_raw(features["image_raw"], tf.uint8)[: 1 + features["label"]]
    length = tf.shape(caption)[0]
    captions, lengths = tf.train.batch_join([[caption, length]], batch_size=3,
                                            dynamic_pad=True, allow_smaller_final_batch=True)
    total = tf.reduce_sum(tf.cast(captions, tf.int64))
    init = tf.local_variables_initializer()
    tf.get_default_graph().finalize()
    with tf.Session() as sess:
        sess.run(init)
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        grand, words = 0, 0
        try:
            while True:
                t, n = sess.run([total, lengths])
                grand += int(t)
                words += int(n.sum())
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
            coord.join(threads)
        print("words %d sum %d" % (words, grand))


if __name__ == "__main__":
    main()
