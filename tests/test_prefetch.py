"""qk.prefetched: batches made ready ahead of the step by one more runner thread. Every
record once and in order, the last smaller batch kept, the step's run takes only the ready
batch, a batch in the ready queue is not consumed (a restore delivers it), a builder's own
ready stage replaced, any batch of tensors wrapped, bad counts refused; the builders'
earlier ``prefetch=`` still works, with a DeprecationWarning."""

import collections
import time

import numpy as np
import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.graph_keys import GraphKeys
from queuekit.pipelines.image_folders import TF_IMAGE_EXTENSIONS
from queuekit.session import profile
from queuekit.session.reads import queues_read
from tests.helpers import (
    ID_PER_FILE,
    filename_ids,
    v1,
    write_id_binaries,
    write_id_records,
)
from tests.imagefactory import make_mixed_folder

PER_FILE = ID_PER_FILE  # of the id_files fixture's records


def test_one_reader_delivers_every_record_once_in_order_and_the_last_smaller_batch(id_files):
    """One reader, no shuffle, batch 10, two ready batches: the records in file order, the
    epoch's last batch of 8 kept, the image normalised (float32) and its shape static."""
    with qk.QueueSession() as qs:
        b = qk.prefetched(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1), 2)
        assert b["image"].dtype == tf.float32
        assert b["image"].shape.as_list() == [None, 4, 6, 3]
        batches = [filename_ids(x) for x in qs.iterate(b)]
    assert [i for ids in batches for i in ids] == list(range(4 * PER_FILE))
    assert [len(ids) for ids in batches] == [10] * 14 + [8]


@pytest.mark.parametrize("readers,read_many,shuffle", [
    (3, None, True), ("auto", 16, False), (2, "batch", False)])
def test_parallel_readers_deliver_every_record_once_per_epoch(id_files, readers, read_many,
                                                               shuffle):
    with qk.QueueSession() as qs:
        b = qk.prefetched(qk.tfrecord_batches(
            id_files, batch_size=10, num_epochs=2, num_readers=readers, read_many=read_many,
            shuffle=shuffle, seed=3), 3)
        got = [i for x in qs.iterate(b) for i in filename_ids(x)]
    assert collections.Counter(got) == collections.Counter(list(range(4 * PER_FILE)) * 2)


def test_the_step_takes_from_the_ready_queue_only(id_files):
    """What the step's run dequeues is the ready queue, once; the batch queue is the ready
    stage's runner's to take from."""
    with tf.Graph().as_default() as graph:
        b = qk.prefetched(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1), 2)
        read = queues_read([t.op for t in b.values()])
        runners = graph.get_collection(v1.GraphKeys.QUEUE_RUNNERS)
    ready = runners[-1]
    assert list(read) == [ready.queue.queue_ref.op.name]
    assert ready.queue.queue_ref.op.name == "tfrecord_batches/prefetched"
    assert len(ready.enqueue_ops) == 1


def test_a_batch_made_ready_but_not_taken_is_not_consumed(tmp_path, id_files):
    """saver.save after 5 batches, with the ready queue full behind them: a restore delivers
    every record the five did not, once (the ready batches among them)."""
    prefix = str(tmp_path / "ck" / "model")

    def build():
        v1.train.get_or_create_global_step().assign_add(1)  # a training graph: it resumes
        return qk.prefetched(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1,
                                                 num_readers=2, shuffle=True, seed=5), 2)

    with qk.QueueSession() as qs:
        b = build()
        first = [i for _ in range(5) for i in filename_ids(qs.run(b))]
        _wait_until_ready_queue_is_full(qs)
        v1.train.Saver().save(qs, prefix)
    with qk.QueueSession() as qs:
        b = build()
        v1.train.Saver().restore(qs, prefix)
        rest = [i for x in qs.iterate(b) for i in filename_ids(x)]
    assert len(first) == 50
    assert sorted(first + rest) == list(range(4 * PER_FILE))


def _wait_until_ready_queue_is_full(qs, within=30.0):
    """Bounded: the ready stage's runner fills its queue while the step does nothing."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready = [s for s in qs.queue_stats() if s.name.endswith("prefetched")]
        if ready and ready[0].size == ready[0].capacity:
            return
        time.sleep(0.01)
    raise AssertionError(f"the ready queue never filled: {qs.queue_stats()}")


def test_fixed_length_and_image_folder_batches_prefetch(tmp_path):
    paths = write_id_binaries(tmp_path, 3, 20)
    make_mixed_folder(tmp_path / "src")
    (tmp_path / "src" / "dog" / "cmyk.jpg").unlink()  # a format TensorFlow cannot decode
    folder = qk.scan_image_folder(tmp_path / "src", extensions=TF_IMAGE_EXTENSIONS)
    with qk.QueueSession() as qs:
        b = qk.prefetched(qk.fixed_length_batches(
            paths, record_bytes=8, batch_size=8, num_epochs=1,
            parse_fn=lambda v: {"id": tf.io.decode_raw(v, tf.int64)[..., 0]}), 2)
        got = [i for x in qs.iterate(b) for i in x["id"].tolist()]
    with qk.QueueSession() as qs:
        images = qk.prefetched(qk.image_folder_batches(
            tmp_path / "src", image_size=(20, 24), batch_size=4, num_epochs=1), 2)
        names = sorted(f.decode() for x in qs.iterate(images) for f in x["filename"])
    assert sorted(got) == list(range(60))  # a parse_fn: "auto" readers
    assert names == sorted(folder.relative(i) for i in range(len(folder)))


@pytest.mark.parametrize("readers,prefetch,ready", [
    ("auto", None, 2), ("auto", 0, 0), ("auto", 3, 3), (2, None, 0), (2, np.int64(1), 1)])
def test_auto_readers_make_two_batches_ready_unless_told(id_files, readers, prefetch, ready):
    """As tf.data's AUTOTUNE pipelines end in a prefetch: by default "auto" readers get a
    ready stage of 2 batches; fixed counts none; prefetched replaces the builder's stage
    (its runner is gone: it would take batches no step reads)."""
    with tf.Graph().as_default() as graph:
        b = qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, num_readers=readers)
        if prefetch is not None:
            b = qk.prefetched(b, prefetch)
        runners = graph.get_collection(v1.GraphKeys.QUEUE_RUNNERS)
    assert _ready_capacities(graph) == ([ready] if ready else [])
    named = graph.get_collection(GraphKeys.READY_BATCHES)
    assert sum(r.queue.queue_ref.op.name in named for r in runners) == (1 if ready else 0)
    assert sum(r.queue.queue_ref.op.name.endswith(("ready_batches", "prefetched"))
               for r in runners) == len(named)
    assert set(queues_read([t.op for t in b.values()])) <= {
        r.queue.queue_ref.op.name for r in runners}


def test_auto_makes_no_batch_ready_where_nothing_is_normalised(tmp_path, id_files):
    """A parse_fn's batch (or one not normalised) has no work after the batch queue: a
    ready stage would only copy it again, so "auto" builds none by default, and records
    are still delivered once each; qk.prefetched still adds one."""
    files = [write_id_records(tmp_path / "ids.tfrecords", 30)]

    def parse(serialized):
        return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})

    with tf.Graph().as_default() as graph:
        b = qk.tfrecord_batches(files, batch_size=8, num_epochs=1, num_readers="auto",
                                parse_fn=parse)
    assert _ready_capacities(graph) == []
    with qk.QueueSession(graph) as qs:
        assert sorted(i for batch in qs.iterate(b["id"]) for i in batch) == list(range(30))
    with tf.Graph().as_default() as graph:
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, num_readers="auto",
                            normalize=False)
    assert _ready_capacities(graph) == []
    with tf.Graph().as_default() as graph:
        qk.prefetched(qk.tfrecord_batches(files, batch_size=8, num_epochs=1,
                                          num_readers="auto", parse_fn=parse), 2)
    assert _ready_capacities(graph) == [2]


def test_image_folder_batches_auto_threads_make_two_batches_ready(tmp_path):
    make_mixed_folder(tmp_path / "src")
    built = {}
    for threads in ("auto", 2):
        with tf.Graph().as_default() as built[threads]:
            qk.image_folder_batches(tmp_path / "src", image_size=(8, 8), batch_size=4,
                                    num_threads=threads)
    assert _ready_capacities(built["auto"]) == [2]
    assert _ready_capacities(built[2]) == []


def _ready_capacities(graph) -> list[int]:
    return [graph.get_operation_by_name(name).get_attr("capacity")
            for name in graph.get_collection(GraphKeys.READY_BATCHES)]


@pytest.mark.parametrize("bad", [-1, -5, True, 1.5, "2"])
def test_a_negative_prefetch_is_refused(id_files, bad):
    with tf.Graph().as_default(), pytest.raises(ValueError, match="must be 0 or more"):
        qk.prefetched(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1), bad)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="must be 0 or more"), \
            pytest.warns(DeprecationWarning):
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, prefetch=bad)


def test_a_hand_built_batch_is_made_ready_in_its_own_structure(id_files):
    """A tuple from tf.train.batch comes back a tuple, every record once, in order."""
    with qk.QueueSession() as qs:
        producer = v1.train.string_input_producer(id_files, num_epochs=1, shuffle=False)
        _, serialized = v1.TFRecordReader().read(producer)
        name = tf.io.parse_single_example(
            serialized, {"filename": tf.io.FixedLenFeature([], tf.string)})["filename"]
        batch = v1.train.batch([name, tf.strings.length(name)], 10,
                               allow_smaller_final_batch=True)
        ready = qk.prefetched(tuple(batch), 3)
        assert isinstance(ready, tuple) and len(ready) == 2
        got = [(n, length) for names, lengths in qs.iterate(ready)
               for n, length in zip(names, lengths, strict=True)]
    assert [int(n[2:]) for n, _ in got] == list(range(4 * PER_FILE))
    assert all(length == len(n) for n, length in got)


def test_a_started_ready_stage_is_not_replaced(id_files):
    """After a session started the builder's ready stage, prefetched would strand the
    batches its thread keeps taking: it is refused, and the epoch stays whole."""
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, num_readers="auto")
        first = filename_ids(qs.run(b))
        with pytest.raises(ValueError, match="before the first run"):
            qk.prefetched(b, 4)
        rest = [i for x in qs.iterate(b) for i in filename_ids(x)]
    assert sorted(first + rest) == list(range(4 * PER_FILE))


def test_part_of_a_builder_s_batch_is_refused_and_the_old_spelling_warns(id_files):
    """prefetched takes a builder's batch whole (a part of it would be consumed when made
    ready, not when taken), and not one it replaced already; prefetch= on a builder builds
    the same stage, with a warning."""
    with tf.Graph().as_default():
        b = qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1)
        with pytest.raises(ValueError, match="whole"):
            qk.prefetched({"image": b["image"]}, 2)
        ready = qk.prefetched(b, 2)
        with pytest.raises(ValueError, match="replaced"):
            qk.prefetched(b, 3)  # its queue is fed no more
        assert qk.prefetched(ready, 3) is not ready
    with tf.Graph().as_default() as graph, pytest.warns(
            DeprecationWarning, match=r"qk.prefetched\(batch, 3\)"):
        qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1, prefetch=3)
    assert _ready_capacities(graph) == [3]


def test_the_input_report_takes_a_ready_batch_per_step_from_tuned_readers(id_files,
                                                                          monkeypatch):
    """The step's queue is the ready one: a dequeue takes a batch of 10, its readers are
    "auto" (the batch queue's), and the verdict does not advise the prefetch it has."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.0)
    with qk.QueueSession() as qs:
        b = qk.prefetched(qk.tfrecord_batches(id_files, batch_size=10, num_epochs=1,
                                              num_readers="auto",
                                              allow_smaller_final_batch=False), 2)
        steps = sum(1 for _ in qs.iterate(b["label"]))
        (report,) = qs.input_report()
    assert steps == 4 * PER_FILE // 10
    assert report.queue == "tfrecord_batches/prefetched"
    assert report.ready and report.tuned
    assert report.records_per_step == 10.0
    assert "qk.prefetched" not in str(report)
