"""Builders on real files: exactly-once delivery, formats, shapes, errors, MonitoredSession."""

import itertools
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import queuekit as qk
from queuekit.graph_keys import GraphKeys
from queuekit.pipelines import batching, builders
from queuekit.pipelines.image_folders import TF_IMAGE_EXTENSIONS
from tests.helpers import (
    filename_ids,
    patience,
    records_per_read,
    v1,
    write_id_records,
    write_image_records,
)
from tests.imagefactory import make_mixed_folder, rgb
from tests.seed import makeTFRec


def _ids(batches):
    return sorted(int(f[2:]) for b in batches for f in b["filename"].astype(str))


GRID = list(itertools.product([1, 3], [1, 2], [None, 16], [False, True]))


@pytest.mark.parametrize("readers,threads,read_many,shuffle", GRID)
def test_each_record_exactly_once(id_files, readers, threads, read_many, shuffle):
    """num_epochs=1 delivers each of 148 records once, whatever the readers, threads, shuffle."""
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, num_readers=readers,
                                num_threads=threads, read_many=read_many, shuffle=shuffle,
                                seed=1)
        assert _ids(qs.iterate(b)) == list(range(148))


def test_one_machine_graph_holds_no_op_for_features_not_asked_for(id_files):
    """On one machine a builder adds no device probe or work-queue op; under a device function
    (replica_device_setter) its input ops are pinned to the worker."""
    graph = tf.Graph()
    with graph.as_default():
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1)
    names = [op.name for op in graph.get_operations()]
    assert not [n for n in names if "probe" in n or "work_queue" in n]
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            ps_tasks=1, worker_device="/job:worker/task:1")):
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1)
    readers = [op for op in graph.get_operations() if op.type.startswith("TFRecordReader")]
    assert readers and {op.device for op in readers} == {"/job:worker/task:1"}


def test_cluster_options_are_objects_and_the_earlier_keywords_still_work(id_files):
    """source=Shard(i, n, by="record") and the earlier shard=(i, n), shard_by="record" read
    the same records (the earlier with a DeprecationWarning naming the new spelling); each
    shard its share, together every record once; mixed spellings and unknown keywords are
    errors."""
    def ids(**kw):
        with qk.QueueSession() as qs:
            return _ids(qs.iterate(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1,
                                                       **kw)))

    new = [ids(source=qk.cluster.Shard(i, 2, by="record")) for i in range(2)]
    with pytest.warns(DeprecationWarning, match=r"\) is now source=qk.Shard"):
        old = [ids(shard=(i, 2), shard_by="record") for i in range(2)]
    assert new == old and sorted(new[0] + new[1]) == list(range(148))
    assert new[0] and new[1]
    with tf.Graph().as_default(), pytest.warns(DeprecationWarning):
        with pytest.raises(ValueError, match="not both"):
            qk.tfrecord_batches(id_files, source=qk.cluster.Shard(0, 2), shard_by="record")
        with pytest.raises(ValueError, match="not both"):
            qk.tfrecord_batches(id_files, work_queue=qk.cluster.WorkQueueInput("/job:ps/task:0"),
                                on_lost="raise")
        with pytest.raises(ValueError, match="not both"):
            qk.tfrecord_batches(id_files, source=(0, 2), shard=(1, 2))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="on_lost"):
            qk.cluster.WorkQueueInput("/job:ps/task:0", on_lost="ignore")
        with pytest.raises(ValueError, match="0 <= index < count"):
            qk.cluster.Shard(2, 2)
        with pytest.raises(TypeError, match="bogus"):
            qk.tfrecord_batches(id_files, bogus=True)


def test_decode_options_are_one_object_and_the_earlier_keywords_still_work(id_files):
    """decode=qk.Decode(schema=..., image_shape=...) and the earlier flat keywords build the
    same pipeline (the earlier with a warning raised at the caller's line); both at once,
    or a decode with a parse_fn, are errors."""
    def first(**kw):
        with qk.QueueSession() as qs:
            return qs.run(qk.tfrecord_batches(id_files, batch_size=5, num_epochs=1, **kw))

    new = first(decode=qk.Decode(schema="queuekit", image_shape=(4, 6, 3)))
    with pytest.warns(DeprecationWarning, match=r"is now decode=qk.Decode\(") as caught:
        old = first(schema="queuekit", image_shape=(4, 6, 3))
    assert {w.filename for w in caught} == {__file__}
    assert filename_ids(new) == filename_ids(old) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(new["image"], old["image"])
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning):
            qk.tfrecord_batches(id_files, decode=qk.Decode(), schema="queuekit")
        with pytest.raises(ValueError, match="parse_fn, not both"):
            qk.tfrecord_batches(id_files, decode=qk.Decode(image_size=8),
                                parse_fn=lambda s: {"s": s})
        with pytest.raises(TypeError, match="queuekit.Decode"):
            qk.tfrecord_batches(id_files, decode={"schema": "queuekit"})


def test_two_epochs_deliver_each_record_twice(id_files):
    """num_epochs=2 delivers every record exactly twice."""
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(id_files, batch_size=32, num_epochs=2, num_readers=2)
        assert _ids(qs.iterate(b)) == sorted(list(range(148)) * 2)


def test_final_partial_batch_arrives(id_files):
    """148 records in batches of 32 end with a batch of 20 (the seed dropped it)."""
    with qk.QueueSession() as qs:
        sizes = [len(b["label"]) for b in qs.iterate(
            qk.tfrecord_batches(id_files, batch_size=32, num_epochs=1))]
    assert sizes == [32, 32, 32, 32, 20]


@pytest.mark.parametrize("fmt", ["raw", "jpeg", "png"])
def test_formats_decode_to_uint8_and_normalise(tmp_path, fmt):
    """raw, jpeg and png records decode to the declared shape; normalize gives [-0.5, 0.5]."""
    path = write_image_records(tmp_path / "f.tfrecords", range(10), shape=(8, 8, 3), fmt=fmt)
    with qk.QueueSession() as qs:
        raw = qk.tfrecord_batches(path, batch_size=10, num_epochs=1, normalize=False)
        norm = qk.tfrecord_batches(path, batch_size=10, num_epochs=1)
        a = qs.run(raw)
        b = qs.run(norm)
    assert a["image"].dtype == np.uint8 and a["image"].shape == (10, 8, 8, 3)
    assert b["image"].dtype == np.float32
    assert np.allclose(b["image"], a["image"] / 255.0 - 0.5, atol=1e-6)
    assert b["label"].dtype == np.int32
    if fmt != "jpeg":
        assert (a["image"][:, 0, 0, 0] == np.arange(10)).all()


@pytest.mark.parametrize("bad", [{"num_readers": 0}, {"num_threads": 0}, {"batch_size": 0}])
def test_counts_below_one_are_errors_at_build_time(id_files, bad):
    """0 readers, threads or batch size is a ValueError naming the argument, not a silent 1."""
    name, value = next(iter(bad.items()))
    with tf.Graph().as_default(), pytest.raises(ValueError, match=f"{name} must be at least 1"):
        qk.tfrecord_batches(id_files, **bad)


def test_normalisation_is_the_seeds_formula_bit_for_bit():
    """The one-pass normalisation equals the seed's cast * (1/255) - 0.5 for every uint8 value."""
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=3)
    with tf.Graph().as_default(), v1.Session() as sess:
        x = tf.constant(pixels)
        ours, seed = sess.run([builders.normalized(x),
                               tf.cast(x, tf.float32) * (1. / 255) - 0.5])
    assert ours.dtype == np.float32 and ours.shape == pixels.shape
    assert np.array_equal(ours, seed)


def test_seed_files_use_the_seed_shape(tmp_path):
    """Files from the seed's makeTFRec (label + img_raw) read as 256x256x3."""
    paths = []
    for i in range(3):
        Image.fromarray(rgb(100, 120, seed=i)).save(tmp_path / f"{i}.png")
        paths.append(str(tmp_path / f"{i}.png"))
    makeTFRec(paths, [0, 1, 2], out=str(tmp_path / "mydata.tfrecords"))
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(str(tmp_path / "mydata.tfrecords"), batch_size=2, num_epochs=1)
        out = list(qs.iterate(b))
    assert [len(x["label"]) for x in out] == [2, 1]
    assert out[0]["image"].shape == (2, 256, 256, 3) and set(out[0]) == {"image", "label"}


def test_queuekit_made_files_carry_their_features(tmp_path):
    """Files from write_tfrecords give label_text and filename too."""
    make_mixed_folder(tmp_path / "src")
    made = qk.write_tfrecords(tmp_path / "src", tmp_path / "d.tfrecords", image_size=(16, 16),
                              progress=False)
    with qk.QueueSession() as qs:
        got = list(qs.iterate(qk.tfrecord_batches(made.outputs, batch_size=8, num_epochs=1)))
    assert sum(len(b["label"]) for b in got) == made.written
    texts = {t.decode() for b in got for t in b["label_text"]}
    assert texts == {"bird", "dog", "猫"}


@pytest.mark.parametrize("read_many,readers", [(None, 1), (4, 1), ("batch", 1),
                                               (None, "auto")])
def test_wrong_raw_size_names_record_and_sizes(tmp_path, read_many, readers):
    """A raw record shorter than its shape fails naming file:byte offset and both sizes."""
    path = write_image_records(tmp_path / "short.tfrecords", range(5), raw_len=50)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.tfrecord_batches(path, batch_size=2, num_epochs=1,
                                                    read_many=read_many, num_readers=readers,
                                                    max_readers=2)):
                pass
    msg = str(info.value)
    assert "expected 72 bytes" in msg and "short.tfrecords:0" in msg and "50" in msg


@pytest.mark.parametrize("read_many", [4, "batch"])
def test_one_wrong_raw_size_among_many_read_together_is_the_one_named(tmp_path, read_many):
    """Three records read at once, the third short: the error names it alone."""
    good = write_image_records(tmp_path / "good.tfrecords", range(2))
    short = write_image_records(tmp_path / "short.tfrecords", [2], raw_len=50)
    path = tmp_path / "mixed.tfrecords"
    first_two = open(good, "rb").read()
    path.write_bytes(first_two + open(short, "rb").read())
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.tfrecord_batches(str(path), batch_size=3, num_epochs=1,
                                                    read_many=read_many, num_readers=1)):
                pass
    msg = str(info.value)
    # The key is the record's file:byte offset: the third starts where the first two end.
    assert f"mixed.tfrecords:{len(first_two)}]" in msg and "[50]" in msg, msg
    assert "mixed.tfrecords:0" not in msg, msg


def test_missing_and_empty_inputs_fail_at_build_time(tmp_path):
    """A missing path or glob is a FileNotFoundError naming it; no records is a DatasetError."""
    with qk.QueueSession():
        with pytest.raises(FileNotFoundError, match="nope.tfrecords"):
            qk.tfrecord_batches(str(tmp_path / "nope.tfrecords"))
        with pytest.raises(FileNotFoundError, match=r"\*.tfrecords"):
            qk.tfrecord_batches(str(tmp_path / "*.tfrecords"))
        (tmp_path / "empty.tfrecords").write_bytes(b"")
        with pytest.raises(qk.DatasetError, match="no records"):
            qk.tfrecord_batches(str(tmp_path / "empty.tfrecords"))


def test_image_folder_batches_reads_mixed_modes(tmp_path):
    """Gray, alpha, palette, animated and 16-bit images come out as HxWx3 batches, once each."""
    make_mixed_folder(tmp_path / "src")
    (tmp_path / "src" / "dog" / "cmyk.jpg").unlink()  # a format TensorFlow cannot decode
    folder = qk.scan_image_folder(tmp_path / "src", extensions=TF_IMAGE_EXTENSIONS)
    with qk.QueueSession() as qs:
        b = qk.image_folder_batches(tmp_path / "src", image_size=(20, 24), batch_size=4,
                                    num_epochs=1, num_threads=2)
        got = list(qs.iterate(b))
    names = sorted(f.decode() for x in got for f in x["filename"])
    assert names == sorted(folder.relative(i) for i in range(len(folder)))
    assert all(x["image"].shape[1:] == (20, 24, 3) for x in got)


def test_image_folder_bad_file_names_it(tmp_path):
    """A junk file with an image extension fails the run with its path."""
    make_mixed_folder(tmp_path / "src")
    (tmp_path / "src" / "dog" / "cmyk.jpg").unlink()
    (tmp_path / "src" / "dog" / "junk.jpg").write_bytes(b"nope")
    with pytest.raises(tf.errors.InvalidArgumentError, match="junk.jpg"):
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.image_folder_batches(tmp_path / "src", image_size=8,
                                                        batch_size=2, num_epochs=1)):
                pass


def test_works_under_monitored_training_session(id_files):
    """The builders are ordinary queue runners: MonitoredTrainingSession runs them too."""
    with tf.Graph().as_default():
        b = qk.tfrecord_batches(id_files, batch_size=16, num_epochs=1, num_readers=2)
        got = []
        with v1.train.MonitoredTrainingSession() as sess:
            while not sess.should_stop():
                got.append(sess.run(b))
    assert _ids(got) == list(range(148))


def test_works_with_a_hand_written_coordinator_loop(id_files):
    """The classic Session + Coordinator + start_queue_runners loop reads every record."""
    with tf.Graph().as_default():
        b = qk.tfrecord_batches(id_files, batch_size=16, num_epochs=1)
        got = []
        with v1.Session() as sess:
            sess.run(v1.local_variables_initializer())
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess=sess, coord=coord)
            try:
                while not coord.should_stop():
                    got.append(sess.run(b))
            except tf.errors.OutOfRangeError:
                pass
            finally:
                coord.request_stop()
                coord.join(threads)
    assert _ids(got) == list(range(148))


def test_capacity_is_bounded_by_bytes(tmp_path):
    """The default batch-queue capacity holds about QUEUE_BYTES of images, at least 2 batches."""
    path = write_image_records(tmp_path / "big.tfrecords", range(3), shape=(256, 256, 3))
    with qk.QueueSession() as qs:
        qk.tfrecord_batches(path, batch_size=32, num_epochs=1)
        qs.run(tf.constant(0))
        cap = {s.name: s.capacity for s in qs.queue_stats()}["tfrecord_batches/batch/fifo_queue"]
    image = 256 * 256 * 3  # and a few small components (label, names, the record's key)
    assert batching.QUEUE_BYTES // (image + 512) <= cap <= batching.QUEUE_BYTES // image


@pytest.mark.parametrize("cut", range(1, 12))
@pytest.mark.parametrize("read_many", [None, 8])
def test_file_cut_inside_a_record_header_is_an_error_not_a_short_epoch(tmp_path, cut,
                                                                       read_many):
    """A file cut 1-11 bytes into a header names the file and record; TF alone drops it."""
    path = write_image_records(tmp_path / "cut.tfrecords", range(5))
    data = open(path, "rb").read()
    open(path, "wb").write(data + data[:cut])  # a sixth record's header, cut short
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError) as info:
        qk.tfrecord_batches(path, batch_size=2, num_epochs=1, read_many=read_many)
    err = info.value
    assert isinstance(err, tf.errors.DataLossError)
    assert (err.path, err.index, err.offset) == (path, 5, len(data))
    assert f"truncated: {cut} of 12 header bytes" in str(err)


def test_a_file_that_is_not_tfrecords_is_named_with_what_it_looks_like(tmp_path, id_files):
    """A README.json among the records is named, with what it looks like."""
    other = tmp_path / "zz-other"
    other.write_bytes(b'{\n  "name": "README"\n}\n')
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError) as info:
        qk.tfrecord_batches(id_files + [str(other)], batch_size=2)
    assert str(other) in str(info.value) and "JSON text" in str(info.value)


def test_a_gzip_file_among_plain_ones_is_named(tmp_path, id_files):
    """One reader reads one compression: a GZIP file among plain ones is named, not misread."""
    other = tmp_path / "zz-other"
    other.write_bytes(b"\x1f\x8b\x08\x00" + bytes(40))
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError) as info:
        qk.tfrecord_batches(id_files + [str(other)], batch_size=2)
    assert f"GZIP: {other}" in str(info.value) and "mix compressions" in str(info.value)


def test_a_broken_gzip_file_is_named(tmp_path):
    """A GZIP file whose stream is broken is a CorruptRecordError naming it, at build time."""
    other = tmp_path / "broken.tfrecords.gz"
    other.write_bytes(b"\x1f\x8b\x08\x00" + bytes(40))
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError) as info:
        qk.tfrecord_batches(str(other), batch_size=2)
    assert str(other) in str(info.value) and "GZIP-decompressed" in str(info.value)


def test_a_record_that_is_not_an_example_is_a_dataset_error(tmp_path):
    """A TFRecord file of non-Example records fails at build time naming the file, not protobuf."""
    path = str(tmp_path / "junk.tfrecords")
    with tf.io.TFRecordWriter(path) as w:
        w.write(b"\xff\xff\xff not a protobuf")
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError, match="not a tf.train.Example"):
        qk.tfrecord_batches(path, batch_size=2)


def test_image_folder_batches_names_an_image_that_fails_to_decode(tmp_path):
    """A JPEG with a valid header but broken data: the runner's error names the file."""
    d = tmp_path / "src" / "a"
    d.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(rgb(16, 16, seed=i)).save(d / f"{i}.jpg")
    good = (d / "0.jpg").read_bytes()
    broken = d / "1.jpg"
    broken.write_bytes(good[:200] + bytes(len(good) - 200))  # header intact, data zeroed
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.image_folder_batches(tmp_path / "src", image_size=8,
                                                        batch_size=1, num_epochs=1)):
                pass
    assert f"the image that failed to decode is {broken}" in " ".join(info.value.__notes__)


@pytest.mark.parametrize("shape,per_read", [((4, 6, 3), {64}), ((96, 96, 3), {37}),
                                            ((160, 160, 3), set())])
def test_auto_readers_read_small_raw_records_many_per_step(tmp_path, shape, per_read):
    """"auto" reads about 1 MiB of small records per step (none over 64 KiB), each once."""
    files = [write_image_records(tmp_path / f"{k}.tfrecords", range(30 * k, 30 * k + 30),
                                 shape=shape) for k in range(2)]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=16, num_epochs=1, num_readers="auto",
                                max_readers=3, shuffle=True, seed=2)
        assert records_per_read(qs.graph) == per_read
        assert _ids(qs.iterate(b)) == list(range(60))
        assert qs.tuning()  # the tuner ran


def test_auto_readers_read_encoded_images_many_per_step(tmp_path):
    """Encoded images: "auto" reads 64 a step, decoded one by one in the step, each once."""
    files = [write_image_records(tmp_path / f"{k}.tfrecords", range(30 * k, 30 * k + 30),
                                 fmt="png") for k in range(2)]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=16, num_epochs=1, num_readers="auto",
                                max_readers=3, shuffle=True, seed=2)
        assert records_per_read(qs.graph) == {64}
        assert _ids(qs.iterate(b)) == list(range(60))


@pytest.mark.parametrize("how", ["read_many=0", "parse_fn", "fixed readers"])
def test_one_record_per_read_unless_auto_may_choose(tmp_path, how):
    """read_many=0, a parse_fn (it expects a scalar) and fixed readers keep one record per
    read."""
    path = write_image_records(tmp_path / "r.tfrecords", range(20))
    kw = dict(batch_size=8, num_epochs=1, num_readers="auto", max_readers=2)
    if how == "read_many=0":
        kw["read_many"] = 0
    elif how == "parse_fn":
        kw["parse_fn"] = lambda s: {"filename": tf.io.parse_single_example(
            s, {"filename": tf.io.FixedLenFeature([], tf.string)})["filename"]}
    elif how == "fixed readers":
        kw["num_readers"] = 2
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(path, **kw)
        assert records_per_read(qs.graph) == set()
        assert _ids(qs.iterate(b)) == list(range(20))


def test_image_folder_batches_reads_a_class_name_that_is_not_utf8(tmp_path):
    """A class folder named with Latin-1 bytes reads, its file names' bytes intact (it was a
    UnicodeEncodeError naming no path)."""
    from PIL import Image

    from tests.imagefactory import rgb

    root = os.fsencode(tmp_path / "src")
    for cls in (b"caf\xe9", b"plain"):
        os.makedirs(os.path.join(root, cls))
        Image.fromarray(rgb(10, 10)).save(os.fsdecode(os.path.join(root, cls, b"a.png")))
    with qk.QueueSession() as qs:
        got = list(qs.iterate(qk.image_folder_batches(os.fsdecode(root), image_size=8,
                                                      batch_size=2, num_epochs=1)))
    assert sorted(f for x in got for f in x["filename"]) == [b"caf\xe9/a.png", b"plain/a.png"]


def test_records_that_are_not_examples_in_a_later_file_are_named(tmp_path):
    """Good records, then a file of non-Example records: a BadRecordError naming that file and
    record (it was: UnicodeDecodeError "'utf-8' codec can't decode byte 0xff", no file)."""
    good = write_image_records(tmp_path / "a.tfrecords", range(6))
    junk = tmp_path / "b.tfrecords"
    with tf.io.TFRecordWriter(str(junk)) as w:
        for _ in range(3):
            w.write(b"\xff\xfe not a protobuf")
    with pytest.raises(qk.BadRecordError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.tfrecord_batches([good, str(junk)], batch_size=2,
                                                    num_epochs=1)):
                pass
    assert f"{junk}: record 0 at byte offset 0" in str(info.value)
    assert "not a tf.train.Example" in str(info.value)


def _jpegs_the_second_corrupt(folder) -> list[str]:
    """Three 16x16 JPEG files; the second's data past its first 20 bytes zeroed."""
    paths = []
    for i in range(3):
        path = folder / f"{i}.jpg"
        Image.fromarray(rgb(16, 16, seed=i)).save(path)
        paths.append(str(path))
    data = open(paths[1], "rb").read()
    open(paths[1], "wb").write(data[:20] + b"\0" * (len(data) - 20))
    return paths


def test_a_corrupt_image_read_by_a_whole_file_reader_is_named(tmp_path):
    """A hand-built WholeFileReader -> decode_jpeg pipeline over a corrupt JPEG: the error
    names the image file (the note looked for it inside TFRecords)."""
    paths = _jpegs_the_second_corrupt(tmp_path)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            fq = v1.train.string_input_producer(paths, num_epochs=1, shuffle=False)
            _, contents = v1.WholeFileReader().read(fq)
            image = tf.image.decode_jpeg(contents, channels=3)
            image = tf.image.resize(image, (8, 8))
            batch = v1.train.batch([image], batch_size=1)
            for _ in qs.iterate(batch):
                pass
    notes = "".join(getattr(info.value, "__notes__", []))
    assert f"the image that failed to decode is {paths[1]}" in notes


@pytest.mark.slow
def test_a_corrupt_image_is_named_in_a_program_that_turned_eager_off(tmp_path):
    """The same pipeline in a TF1 program on TF2 (``disable_eager_execution()`` first, as
    pix2pix and every such program does): the image file is still named (the search was
    skipped when eager was off)."""
    import subprocess
    import sys

    paths = _jpegs_the_second_corrupt(tmp_path)
    script = (
        "import sys, tensorflow as tf, queuekit as qk\n"
        "v1 = tf.compat.v1\n"
        "v1.disable_eager_execution()\n"
        "with qk.QueueSession() as qs:\n"
        "    fq = v1.train.string_input_producer(sys.argv[1:], num_epochs=1, shuffle=False)\n"
        "    _, contents = v1.WholeFileReader().read(fq)\n"
        "    image = tf.image.resize(tf.image.decode_jpeg(contents, channels=3), (8, 8))\n"
        "    try:\n"
        "        for _ in qs.iterate(v1.train.batch([image], batch_size=1)):\n"
        "            pass\n"
        "    except tf.errors.InvalidArgumentError as e:\n"
        "        print(''.join(getattr(e, '__notes__', [])))  # Python 3.10 prints no notes\n"
        "        sys.exit(1)\n")
    done = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True,
                          text=True, timeout=patience(120))
    assert done.returncode == 1
    assert f"the image that failed to decode is {paths[1]}" in done.stdout, done.stderr[-2000:]


def test_pad_last_batch_gives_static_batches_and_every_record_once(tmp_path):
    """50 records in batches of 16: four batches of static shape [16, ...], the last padded;
    the mask marks exactly the 50 records, each once (without it the last 2 were dropped or
    the batch dimension was unknown)."""
    path = write_image_records(tmp_path / "a.tfrecords", range(50))
    with qk.QueueSession() as qs:
        batch = qk.pad_last_batch(qk.tfrecord_batches(path, batch_size=16, num_epochs=1), 16)
        assert batch["image"].shape.as_list()[0] == 16 and batch["valid"].shape == (16,)
        flat = tf.reshape(batch["image"], [16, -1])  # what a static-batch model does
        got = list(qs.iterate([batch, flat]))
    assert len(got) == 4 and all(f.shape[0] == 16 for _, f in got)
    names = [n for b, _ in got for n, ok in zip(b["filename"], b["valid"]) if ok]
    assert sorted(names) == sorted(f"id{i}".encode() for i in range(50))
    last = got[-1][0]
    assert last["valid"].sum() == 2 and not last["image"][2:].any()
    assert list(last["filename"][2:]) == [b""] * 14


def test_pad_last_batch_of_a_hand_built_batch_returns_the_mask_beside_it():
    """A hand-built tf.train.batch (one tensor) comes back as (padded, mask)."""
    with qk.QueueSession() as qs:
        x = v1.train.range_input_producer(10, num_epochs=1, shuffle=False).dequeue()
        padded, mask = qk.pad_last_batch(
            v1.train.batch([x], batch_size=4, allow_smaller_final_batch=True), 4)
        got = list(qs.iterate([padded, mask]))
    assert [v[m].tolist() for v, m in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert got[-1][0].tolist() == [8, 9, 0, 0]


def test_pad_last_batch_rows_reach_a_valid_conv_under_tf_default_options():
    """The padded last batch keeps its padded rows through a VALID Conv2D and a concat under
    TensorFlow's default CPU options (oneDNN's Pad+Conv rewrite dropped them: im2txt's
    ``ConcatOp [2,32] vs [4,32]``); the real rows equal the conv of the unpadded batch."""
    with qk.QueueSession() as qs:
        x = v1.train.range_input_producer(6, num_epochs=1, shuffle=False).dequeue()
        image = tf.fill([9, 9, 3], tf.cast(x, tf.float32) + 1.0)
        batch = v1.train.batch([image], batch_size=4, allow_smaller_final_batch=True)
        padded, mask = qk.pad_last_batch(batch, 4)
        kernel = tf.reshape(tf.range(54, dtype=tf.float32), [3, 3, 3, 2]) / 54.0
        conv = tf.nn.relu(tf.nn.conv2d(padded, kernel, strides=2, padding="VALID"))
        flat = tf.concat([tf.reshape(conv, [4, -1]), tf.zeros([4, 1])], axis=1)
        unpadded = tf.nn.conv2d(batch, kernel, strides=2, padding="VALID")
        got = list(qs.iterate([flat, tf.reshape(tf.nn.relu(unpadded), [-1, 32]), mask]))
    assert [f.shape for f, _, _ in got] == [(4, 33), (4, 33)]
    last_flat, last_real, last_mask = got[-1]
    assert last_mask.tolist() == [True, True, False, False]
    np.testing.assert_allclose(last_flat[:2, :32], last_real)
    assert not last_flat[2:].any()


def test_pad_last_batch_pads_strings_and_sparse_var_len_features(tmp_path):
    """A parse_fn giving a var-len feature (a SparseTensor, as Inception's bboxes) and a string
    pads: the sparse batch's dense shape becomes [batch_size, n] with no new value, the
    strings get empty rows (it was ``TypeError: Failed to convert elements of SparseTensor``)."""
    path = str(tmp_path / "v.tfrecords")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(5):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "box": tf.train.Feature(float_list=tf.train.FloatList(value=[i] * (i % 3))),
                "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"r%d" % i])),
            })).SerializeToString())

    def parse(serialized):
        return tf.io.parse_example(serialized, {
            "box": tf.io.VarLenFeature(tf.float32),
            "name": tf.io.FixedLenFeature([], tf.string)})

    with qk.QueueSession() as qs:
        batch = qk.tfrecord_batches(path, batch_size=4, num_epochs=1, parse_fn=parse,
                                    read_many="batch", num_readers=1)
        padded = qk.pad_last_batch(batch, 4)
        dense = tf.sparse.to_dense(padded["box"])
        got = list(qs.iterate([padded["name"], dense, padded["valid"], padded["box"].values]))
    assert [n.tolist() for n, _, _, _ in got] == [[b"r0", b"r1", b"r2", b"r3"],
                                                 [b"r4", b"", b"", b""]]
    assert got[1][1].shape[0] == 4 and not got[1][1][1:].any()
    assert got[1][2].tolist() == [True, False, False, False]
    assert got[1][3].tolist() == [4.0]


def _id_parse(serialized):
    return {"id": tf.io.parse_single_example(
        serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"]}


def test_a_builder_pipeline_runs_in_a_graph_finalized_before_the_session(tmp_path):
    """g.finalize() after building (im2txt's, TF's eval scripts) still initialises the
    pipeline's epoch counters: every record once (it was FailedPrecondition, uninitialized
    ``input_producer/epoch``, in a runner thread)."""
    path = write_id_records(tmp_path / "a.tfrecords", 30)
    graph = tf.Graph()
    with graph.as_default():
        batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, parse_fn=_id_parse,
                                    allow_smaller_final_batch=True)
        count = v1.train.get_or_create_global_step()
        init = v1.global_variables_initializer()  # the program's own, as im2txt's restore
    graph.finalize()
    with qk.QueueSession(graph) as qs:
        qs.run(init)
        got = [i for b in qs.iterate(batch) for i in b["id"].tolist()]
        assert qs.run(count) == 0
    assert sorted(got) == list(range(30))


def test_a_summary_made_in_parse_fn_never_reads_records_in_the_step(tmp_path, caplog):
    """An image summary inside parse_fn (im2txt's, Slim's, Inception's preprocessing) with
    merge_all() fetched by every step: every record delivered once (it was 0 of 40, no
    error: the summaries ran the readers in the step); the summaries are kept aside."""
    path = write_id_records(tmp_path / "a.tfrecords", 40)

    def parse(serialized):
        out = _id_parse(serialized)
        v1.summary.image("seen", tf.zeros([1, 2, 2, 1]) + tf.cast(out["id"], tf.float32))
        return out

    with caplog.at_level("INFO", logger="queuekit"):
        with qk.QueueSession() as qs:
            batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, parse_fn=parse,
                                        num_readers=3, allow_smaller_final_batch=True)
            v1.summary.scalar("mean_id", tf.reduce_mean(tf.cast(batch["id"], tf.float32)))
            merged = v1.summary.merge_all()
            got = [i for b, _ in qs.iterate([batch, merged]) for i in b["id"].tolist()]
        kept = qs.graph.get_collection(GraphKeys.READER_SUMMARIES)
    assert sorted(got) == list(range(40))
    assert [s.op.type for s in kept] == ["ImageSummary"] * 3  # one per reader, not merged
    assert "kept out of SUMMARIES" in caplog.text


@pytest.mark.parametrize("make", ["tfrecord", "fixed_length"])
def test_an_endless_input_of_the_default_builder_gives_its_first_pass_as_one_pass(
        tmp_path, make):
    """num_epochs=None with a parse_fn and num_readers left to its default: the first
    records/batch_size batches hold every record once (with "auto" readers by default
    magenta's eval saw 19 distinct records of 48), as the program's one reader read them."""
    n = 48
    if make == "tfrecord":
        path = write_id_records(tmp_path / "a.tfrecords", n)
        batch = lambda: qk.tfrecord_batches(path, batch_size=8, parse_fn=_id_parse)  # noqa: E731
    else:
        path = str(tmp_path / "a.bin")
        with open(path, "wb") as f:
            f.write(np.arange(n, dtype=np.int64).tobytes())
        batch = lambda: qk.fixed_length_batches(  # noqa: E731
            path, record_bytes=8, batch_size=8,
            parse_fn=lambda v: {"id": tf.io.decode_raw(v, tf.int64)[0]})
    with qk.QueueSession() as qs:
        b = batch()
        got = [i for _ in range(n // 8) for i in qs.run(b["id"]).tolist()]
    assert sorted(got) == list(range(n))


@pytest.mark.slow
def test_a_read_of_sequence_examples_all_empty_does_not_kill_the_process(tmp_path):
    """read_many=4 over SequenceExamples whose 4 sequences are all empty: every record is
    delivered (the empty ones padded with zeros) and the process lives (TensorFlow's padding
    queue died with SIGSEGV on the empty read). In a child process: a crash must not take
    the test run with it."""
    import subprocess
    import sys

    path = str(tmp_path / "seq.tfrecords")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(8):
            n = 0 if i < 4 else i
            w.write(tf.train.SequenceExample(
                context=tf.train.Features(feature={"id": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i]))}),
                feature_lists=tf.train.FeatureLists(feature_list={"tokens": tf.train.FeatureList(
                    feature=[tf.train.Feature(int64_list=tf.train.Int64List(value=[7]))] * n)}),
            ).SerializeToString())
    script = (
        "import sys, tensorflow as tf, queuekit as qk\n"
        "def parse(s):\n"
        "    ctx, seq, _ = tf.io.parse_sequence_example(\n"
        "        s, context_features={'id': tf.io.FixedLenFeature([], tf.int64)},\n"
        "        sequence_features={'tokens': tf.io.FixedLenSequenceFeature([], tf.int64)})\n"
        "    return {'id': ctx['id'], 'tokens': seq['tokens']}\n"
        "with qk.QueueSession() as qs:\n"
        "    b = qk.tfrecord_batches(sys.argv[1], batch_size=4, num_epochs=1, read_many=4,\n"
        "                            num_readers=1, parse_fn=parse,\n"
        "                            allow_smaller_final_batch=True)\n"
        "    for x in qs.iterate(b):\n"
        "        print(x['id'].tolist(), int(x['tokens'].sum()))\n")
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                          timeout=patience(120))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[0, 1, 2, 3] 0", "[4, 5, 6, 7] 154"]


@pytest.mark.parametrize("alter,why", [
    ("float", "'label' holds float values, the parse expects int64"),
    ("missing", "no feature 'label'"),
    ("two", "'label' holds 2 values, the parse expects 1"),
])
def test_a_record_whose_label_does_not_fit_the_parse_is_named(tmp_path, alter, why):
    """Record 5 with a float label, no label, or two: the error names the file, the record
    and its offset and what is wrong (TensorFlow's InvalidArgumentError names the feature
    only)."""
    path = write_image_records(tmp_path / "a.tfrecords", range(12))
    records = list(tf.compat.v1.io.tf_record_iterator(path))
    example = tf.train.Example.FromString(records[5])
    label = example.features.feature["label"]
    if alter == "float":
        label.Clear()
        label.float_list.value.append(1.5)
    elif alter == "missing":
        del example.features.feature["label"]
    else:
        label.int64_list.value.append(3)
    records[5] = example.SerializeToString()
    with tf.io.TFRecordWriter(path) as w:
        for record in records:
            w.write(record)
    offset = sum(len(r) + 16 for r in records[:5])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.tfrecord_batches(path, batch_size=4, num_epochs=1)):
                pass
    notes = "".join(getattr(info.value, "__notes__", []))
    assert f"{path}: record 5 at byte offset {offset} ({why})" in notes, notes
