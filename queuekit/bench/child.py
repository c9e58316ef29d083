"""One benchmark configuration, measured in its own process.

    python -m queuekit.bench.child SPEC_JSON
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import resource
import statistics
import sys
import time

from queuekit.bench.report import BenchRow


def _tf():
    import tensorflow as tf

    return tf


def _graph(spec):
    """(graph, fetch, batch-queue name or None, session kind) for one configuration."""
    tf = _tf()
    v1 = tf.compat.v1
    from queuekit.pipelines.builders import quiet_deprecations, tfrecord_batches
    from queuekit.pipelines.decode import DecodeOptions
    from queuekit.pipelines.layout import record_layout

    graph = tf.Graph()
    with graph.as_default():
        files, bs = spec["files"], spec["batch_size"]
        size = spec.get("image_size")
        layout = record_layout(files, decode=DecodeOptions(size and tuple(size)))
        if spec["kind"] in ("queuekit", "hand-written"):
            b = tfrecord_batches(files, batch_size=bs, shuffle=spec["shuffle"],
                                 num_readers=spec["readers"], num_threads=spec["threads"],
                                 read_many=spec["read_many"], image_size=size)
        elif spec["kind"] == "tf.data":
            def parse(ser):
                img, label = _parse_normalised(ser, layout)
                return {"image": img, "label": label}
            ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).repeat()
            if spec["shuffle"]:
                ds = ds.shuffle(1000)
            ds = ds.map(parse, tf.data.AUTOTUNE).batch(bs).prefetch(tf.data.AUTOTUNE)
            b = v1.data.make_one_shot_iterator(ds).get_next()
        else:  # the seed's read_and_decode(flag='train'), with its normalise-before-batch
            with quiet_deprecations():
                fq = v1.train.string_input_producer(files)
                key, ser = v1.TFRecordReader().read(fq)
                im, lab = v1.train.batch(list(_parse_normalised(ser, layout, key)),
                                         batch_size=bs, capacity=20)
                b = {"image": im, "label": lab}
        fetch = [tf.reduce_sum(b["image"]), tf.shape(b["label"])[0]]
    return graph, fetch, layout


def _parse_normalised(serialized, layout, key=""):
    """The builders' parse of one record, then the seed's normalise (float32 image, int32 label)."""
    from queuekit.pipelines.layout import parse_records

    f = parse_records(serialized, key, layout)
    return tf_cast_normalise(f["image"]), f["label"]


def tf_cast_normalise(image):
    """The seed's ``image * (1 / 255) - 0.5`` as three float passes, per record."""
    tf = _tf()
    return tf.cast(image, tf.float32) * (1.0 / 255) - 0.5


@contextlib.contextmanager
def _session(kind, graph):
    """(run, queue_stats) of a QueueSession, or of the usual hand-written choreography."""
    from queuekit.session.queue_session import QueueSession

    if kind != "hand-written":
        with QueueSession(graph, stall_timeout_secs=120) as qs:
            yield qs.run, qs.queue_stats
        return
    v1 = _tf().compat.v1
    with graph.as_default(), v1.Session(graph=graph) as sess:
        sess.run(v1.local_variables_initializer())
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            yield sess.run, list
        finally:
            coord.request_stop()
            coord.join(threads)


def _measure(spec) -> BenchRow:
    graph, fetch, layout = _graph(spec)
    row = BenchRow(spec["kind"], spec["readers"], spec["threads"], spec["read_many"])
    rates, fills, cpu = [], [], []
    step = spec["step_ms"] / 1000.0
    with _session(spec["kind"], graph) as (run, queue_stats):
        for _ in range(spec["warmup_batches"]):
            run(fetch)
        for _ in range(spec["repeat"]):
            n = batches = 0
            t0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < spec["seconds"]:
                n += int(run(fetch)[1])
                batches += 1
                if step:
                    time.sleep(step)  # a simulated training step, on the consumer side
                if batches % 10 == 0:
                    stats = [s for s in queue_stats() if s.fill is not None]
                    if stats:
                        fills.append(stats[-1].fill)
            wall = time.perf_counter() - t0
            rates.append(n / wall)
            cpu.append(100 * (time.process_time() - c0) / wall)
            row.batches_per_s = batches / wall
    row.runs = rates
    row.records_per_s = statistics.median(rates)
    row.mb_per_s = row.records_per_s * layout.image_bytes / 1e6
    row.queue_fill = statistics.mean(fills) if fills else None
    row.cpu_percent = statistics.median(cpu)
    row.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


if __name__ == "__main__":  # one configuration, in its own process
    result = _measure(json.loads(sys.argv[1]))
    print(json.dumps(dataclasses.asdict(result)))
