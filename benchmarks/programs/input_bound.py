"""An input-bound TF1 loop, as a program of its own (bench_run.py runs it plain and under
`queuekit run`): 1 KB records parsed one by one, batch of 32, a step that is one reduce.
Prints the loop's steps and seconds (first step to last), which a plain program would not."""

import sys
import time

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
files, epochs = sys.argv[1:-1], int(sys.argv[-1])
queue = tf.train.string_input_producer(files, num_epochs=epochs, shuffle=False)
_, serialized = tf.TFRecordReader().read(queue)
features = tf.parse_single_example(serialized, {"data": tf.FixedLenFeature([], tf.string)})
data = tf.cast(tf.decode_raw(features["data"], tf.uint8), tf.float32)
data.set_shape([1024])
batch = tf.train.batch([data], batch_size=32, num_threads=2, capacity=256)
total = tf.reduce_sum(batch)
sess = tf.Session()
sess.run(tf.local_variables_initializer())
coord = tf.train.Coordinator()
threads = tf.train.start_queue_runners(sess, coord)
steps, first = 0, None
try:
    while not coord.should_stop():
        sess.run(total)
        steps += 1
        if first is None:
            first = time.perf_counter()
except tf.errors.OutOfRangeError:
    pass
finally:
    coord.request_stop()
coord.join(threads)
print("steps %d seconds %.6f" % (steps - 1, time.perf_counter() - first))
