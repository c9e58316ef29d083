"""The plug-in point of a session (queuekit.features): what the core calls, when, and that a
session loads only the features its graph asks for."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.features import Feature, install
from tests.helpers import patience, write_image_records

_v1 = tf.compat.v1
CALLS: list = []  # what Recorder saw, in order (one test at a time)


class Recorder(Feature):
    """A feature that notes every call the core makes to it."""

    name = "recorder"

    def created(self, restored):
        CALLS.append(("created", restored))

    def enqueue_for(self, op, enqueue, make_callable):
        CALLS.append(("enqueue_for", op.name))
        return enqueue

    def starting(self, runners):
        CALLS.append(("starting", len(runners)))
        return {}

    def observe(self, fetches, feed_dict):
        CALLS.append(("observe", fetches if isinstance(fetches, str) else None))

    def before_step(self, reads, options, run_metadata):
        return options, run_metadata, len(CALLS)

    def after_step(self, run_metadata, state):
        CALLS.append(("step", state))

    def end_of_data(self, end):
        CALLS.append(("end_of_data", type(end).__name__))

    def closing(self):
        CALLS.append(("closing",))


def _counting_graph(n: int):
    graph = tf.Graph()
    with graph.as_default():
        queue = _v1.FIFOQueue(4, tf.int64)
        values = tf.constant(np.arange(n, dtype=np.int64))
        producer = _v1.train.input_producer(values, num_epochs=1, shuffle=False)
        enqueue = queue.enqueue(producer.dequeue())
        _v1.train.add_queue_runner(_v1.train.QueueRunner(queue, [enqueue]))
        return graph, queue.dequeue()


def test_a_feature_installed_in_the_graph_is_called_at_each_point_in_order():
    """created, then per runner enqueue_for, starting, a step per run, the end of data, closing."""
    CALLS.clear()
    graph, take = _counting_graph(3)
    install(graph, "tests.test_features:Recorder")
    install(graph, "tests.test_features:Recorder")  # once per graph, however often asked
    with qk.QueueSession(graph) as qs:
        got = list(qs.iterate(take))
    assert sorted(got) == [0, 1, 2]
    kinds = [c[0] for c in CALLS]
    assert kinds[0] == "created" and CALLS[0] == ("created", None)
    assert kinds.index("starting") < kinds.index("step")
    assert kinds.count("step") == 3  # a failed run (the end) gets no after_step
    assert kinds.count("end_of_data") == 1 and kinds[-1] == "closing"
    assert ("enqueue_for", take.op.inputs[0].op.name) not in CALLS  # only enqueue ops
    assert {c[1] for c in CALLS if c[0] == "enqueue_for"} >= {
        op.name for qr in graph.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)
        for op in qr.enqueue_ops}


def test_a_feature_observes_a_saver_save_through_the_session_and_through_hooks(tmp_path):
    """observe sees what a Saver runs, from the program and from a hook's session."""
    CALLS.clear()
    graph, take = _counting_graph(40)
    with graph.as_default():
        step = _v1.train.get_or_create_global_step()
        saver = _v1.train.Saver()
    install(graph, "tests.test_features:Recorder")
    hook = _v1.train.CheckpointSaverHook(str(tmp_path / "hooked"), save_steps=1, saver=saver)
    with qk.QueueSession(graph, hooks=[hook]) as qs:
        qs.run(take)
        saver.save(qs, str(tmp_path / "ckpt"))
    saved = [c[1] for c in CALLS if c[0] == "observe" and c[1] == saver.saver_def.save_tensor_name]
    assert len(saved) >= 2  # the program's save, and the hook's (its begin and at end)
    assert step is not None


_LOADED = r"""
import json, sys
import tensorflow as tf
import queuekit as qk
with qk.QueueSession() as qs:
    batch = qk.tfrecord_batches(sys.argv[1], batch_size=2, num_readers=sys.argv[2] if
                                sys.argv[2] == "auto" else int(sys.argv[2]), num_epochs=1)
    qs.run(batch)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("queuekit"))))
"""


@pytest.mark.parametrize("readers", ["1", "auto"])
def test_a_local_pipeline_s_session_loads_no_feature_it_does_not_use(tmp_path, readers):
    """One reader: no tuner; nothing of the cluster (no work queue, books, tasks, shards);
    nothing only a restore, a variable-length output or a prefetch needs."""
    path = write_image_records(tmp_path / "a.tfrecords", range(8))
    out = subprocess.run([sys.executable, "-c", _LOADED, str(path), readers],
                         capture_output=True, text=True, timeout=patience(120), check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {"queuekit.session.checks", "queuekit.session.profile",
            "queuekit.resume.tally"} <= loaded
    assert "queuekit.session.work_queues" not in loaded
    # Nothing restored, nothing of variable length, no image decoded in Python: what only
    # those need is not loaded (the local path of #45).
    assert not loaded & {"queuekit.resume.restore", "queuekit.resume.file",
                         "queuekit.resume.skip", "queuekit.pipelines.varlen",
                         "queuekit.pipelines.prefetch", "queuekit.records.example",
                         "queuekit.records.encode"}
    assert not [m for m in loaded if m.startswith("queuekit.cluster")]
    assert ("queuekit.session.tuner" in loaded) == (readers == "auto")
