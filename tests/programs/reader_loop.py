"""In the pattern of TF's reading_data/fully_connected_reader.py: string_input_producer with
num_epochs, a Coordinator, a loop ended by OutOfRangeError, then request_stop and join."""

import argparse

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()


def inputs(files, batch_size, num_epochs):
    with tf.name_scope("input"):
        filename_queue = tf.train.string_input_producer(files, num_epochs=num_epochs,
                                                        shuffle=False)
        reader = tf.TFRecordReader()
        _, serialized = reader.read(filename_queue)
        features = tf.parse_single_example(serialized, features={
            "image_raw": tf.FixedLenFeature([], tf.string),
            "label": tf.FixedLenFeature([], tf.int64)})
        image = tf.cast(tf.decode_raw(features["image_raw"], tf.uint8), tf.float32)
        image.set_shape([16])
        label = tf.cast(features["label"], tf.int32)
        return tf.train.batch([image, label], batch_size=batch_size, num_threads=1,
                              capacity=4 * batch_size)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    images, labels = inputs(args.files, args.batch, args.epochs)
    total = tf.Variable(0.0, name="total")
    train_op = tf.assign_add(total, tf.reduce_sum(images) + tf.cast(tf.reduce_sum(labels),
                                                                    tf.float32))
    init_op = tf.group(tf.global_variables_initializer(), tf.local_variables_initializer())
    sess = tf.Session()
    sess.run(init_op)
    coord = tf.train.Coordinator()
    threads = tf.train.start_queue_runners(sess=sess, coord=coord)
    step = 0
    try:
        while not coord.should_stop():
            sess.run(train_op)
            step += 1
    except tf.errors.OutOfRangeError:
        print("Done training for %d epochs, %d steps." % (args.epochs, step))
    finally:
        coord.request_stop()
    coord.join(threads)
    print("total %.1f" % sess.run(total))
    sess.close()


if __name__ == "__main__":
    main()
