"""read_many="batch": each read a whole batch, queued as it is. Every record once, a batch one
reader's records of one file in order, what it refuses, its resume and its input report."""

import argparse
import collections

import numpy as np
import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.cli.arguments import read_counts
from queuekit.session import profile
from tests.helpers import (
    ID_PER_FILE,
    filename_ids,
    v1,
    write_id_binaries,
    write_image_records,
)

PER_FILE = ID_PER_FILE  # of the id_files fixture's records


@pytest.mark.parametrize("readers,threads", [(1, 1), (3, 2), ("auto", 1)])
def test_every_record_once_per_epoch_in_batches_of_one_file_in_order(id_files, readers,
                                                                     threads):
    """Two epochs over 4 files of 37 records, batch 10: every record twice; each batch is
    consecutive records of one file; a file gives 3 full batches and one of 7."""
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(id_files, batch_size=10, num_epochs=2, num_readers=readers,
                                num_threads=threads, read_many="batch")
        assert b["image"].shape.as_list() == [None, 4, 6, 3]
        batches = [filename_ids(x) for x in qs.iterate(b)]
    assert collections.Counter(i for ids in batches for i in ids) == collections.Counter(
        list(range(4 * PER_FILE)) * 2)
    for ids in batches:
        assert ids == list(range(ids[0], ids[0] + len(ids)))  # in order, one reader's
        assert len({i // PER_FILE for i in ids}) == 1  # one file's
    assert sorted(collections.Counter(len(ids) for ids in batches).items()) == [(7, 8), (10, 24)]


def test_fixed_length_records_in_whole_batches(tmp_path):
    """fixed_length_batches with read_many="batch": every record once."""
    paths = write_id_binaries(tmp_path, 3, 20)
    with qk.QueueSession() as qs:
        b = qk.fixed_length_batches(paths, record_bytes=8, batch_size=8, num_epochs=1,
                                    num_readers=2, read_many="batch", parse_fn=lambda v: {
                                        "id": tf.io.decode_raw(v, tf.int64)[..., 0]})
        got = [i for x in qs.iterate(b) for i in x["id"].tolist()]
    assert sorted(got) == list(range(60))


@pytest.mark.parametrize("kw,says", [
    (dict(shuffle=True), "shuffle needs read_many as an int"),
    (dict(allow_smaller_final_batch=False), "allow_smaller_final_batch=False"),
    (dict(read_many="batches"), "'batch': a batch per read"),
])
def test_what_whole_batches_refuse_is_named(id_files, kw, says):
    with tf.Graph().as_default(), pytest.raises(ValueError, match=says):
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1,
                            **dict(dict(read_many="batch"), **kw))


def test_a_saved_position_resumes_whole_batches_exactly(tmp_path, id_files):
    """saver.save after 5 batches of 2 readers (some may be a file's smaller last one), then
    a restore: the rest of the epoch is every record not consumed before, once."""
    prefix = str(tmp_path / "ck" / "model")

    def build():
        v1.train.get_or_create_global_step().assign_add(1)  # a training graph: it resumes
        return qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, num_readers=2,
                                   read_many="batch")

    with qk.QueueSession() as qs:
        b = build()
        saver = v1.train.Saver()
        first = [i for _ in range(5) for i in filename_ids(qs.run(b))]
        saver.save(qs, prefix)
    with qk.QueueSession() as qs:
        b = build()
        v1.train.Saver().restore(qs, prefix)
        rest = [i for x in qs.iterate(b) for i in filename_ids(x)]
    assert 0 < len(first) < 4 * PER_FILE  # a file's last batch may be among the five
    assert sorted(first + rest) == list(range(4 * PER_FILE))


def test_the_input_report_counts_a_whole_batch_per_dequeue(tmp_path, monkeypatch):
    """A single dequeue of a whole-batch queue takes a batch: records per step is the batch
    size (files of 40 records, batch 10: every batch full), not one."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.0)
    files = [write_image_records(tmp_path / f"f{k}.tfrecords", range(40 * k, 40 * (k + 1)))
             for k in range(2)]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=10, num_epochs=1, read_many="batch")
        steps = sum(1 for _ in qs.iterate(b["label"]))
        (report,) = qs.input_report()
    assert steps == 8
    assert report.records_per_step == 10.0


def test_bench_reads_batch_in_its_read_many_list():
    assert read_counts("0,batch,64") == [0, 64, "batch"]
    assert read_counts("batch") == ["batch"]
    for bad in ("", "batches", "-1,batch"):
        with pytest.raises(argparse.ArgumentTypeError, match="or batch"):
            read_counts(bad)


def test_inception_jpegs_with_boxes_in_whole_batches_match_the_usual_path(tmp_path):
    """Inception's JPEG records with bounding boxes (SparseTensors, queued as their three
    parts), decoded and resized in the readers: the same batches as read_many=0."""
    from tests.test_formats import write_inception

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
              for h, w in [(40, 60), (64, 48), (33, 33), (50, 70), (45, 45), (60, 40)]]
    labels = [0, 1, 0, 1, 0, 1]
    path = write_inception(tmp_path / "imagenet", images, labels,
                           [f"{i}.jpg" for i in range(6)], ["a", "b"] * 3, bbox=True)

    def batches(read_many):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(path, batch_size=4, num_epochs=1,
                                    read_many=read_many,
                                    decode=qk.Decode(image_size=(32, 24)))
            return list(qs.iterate(b))

    whole, usual = batches("batch"), batches(0)
    assert [len(x["label"]) for x in whole] == [len(x["label"]) for x in usual] == [4, 2]
    for got, want in zip(whole, usual, strict=True):
        np.testing.assert_array_equal(got["image"], want["image"])
        assert list(got["label"]) == list(want["label"])
        for part in ("indices", "values", "dense_shape"):
            np.testing.assert_array_equal(getattr(got["bbox_xmin"], part),
                                          getattr(want["bbox_xmin"], part))
