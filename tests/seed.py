"""The seed script's own writer and reader, copied (only the paths and eager toggle changed)."""

import numpy as np
import tensorflow as tf
from PIL import Image


def makeTFRec(filenames, labels, out="mydata.tfrecords"):
    writer = tf.io.TFRecordWriter(out)
    for i in range(0, len(labels)):
        img = Image.open(filenames[i])
        img = img.resize((256, 256))
        img_raw = img.tobytes()
        example = tf.train.Example(features=tf.train.Features(feature={
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[labels[i]])),
            'img_raw': tf.train.Feature(bytes_list=tf.train.BytesList(value=[img_raw]))
        }))
        writer.write(example.SerializeToString())
    writer.close()


def read_and_decode(filenames, flag='train', batch_size=3):
    if flag == 'train':
        filename_queue = tf.compat.v1.train.string_input_producer(filenames)
    else:
        filename_queue = tf.compat.v1.train.string_input_producer(filenames, num_epochs=1,
                                                                  shuffle=False)
    reader = tf.compat.v1.TFRecordReader()
    _, serialized_example = reader.read(filename_queue)
    features = tf.io.parse_single_example(serialized=serialized_example, features={
        'label': tf.io.FixedLenFeature([], tf.int64),
        'img_raw': tf.io.FixedLenFeature([], tf.string),
    })
    image = tf.io.decode_raw(features['img_raw'], tf.uint8)
    image = tf.reshape(image, [256, 256, 3])
    label = tf.cast(features['label'], tf.int32)
    if flag == 'train':
        image = tf.cast(image, tf.float32) * (1. / 255) - 0.5
        img_batch, label_batch = tf.compat.v1.train.batch([image, label],
                                                          batch_size=batch_size, capacity=20)
        return img_batch, label_batch
    return image, label


def seed_read_all(path):
    """The seed's __main__ loop (Session, Coordinator, start_queue_runners), fixed to join."""
    out = []
    with tf.Graph().as_default():
        image, label = read_and_decode([path], flag='test')
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            coord = tf.compat.v1.train.Coordinator()
            threads = tf.compat.v1.train.start_queue_runners(sess=sess, coord=coord)
            try:
                while True:
                    example, examplelab = sess.run([image, label])
                    out.append((np.array(example), int(examplelab)))
            except tf.errors.OutOfRangeError:
                pass
            finally:
                coord.request_stop()
                coord.join(threads)
    return out
