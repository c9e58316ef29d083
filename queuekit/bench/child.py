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

from queuekit.bench.report import FAILED, BenchRow
from queuekit.cluster.launch import exit_with_parent


def _tf():
    import tensorflow as tf

    return tf


def _graph(spec):
    """(graph, fetch, layout) for one configuration; ``fetch[1]`` counts its records."""
    tf = _tf()
    from queuekit.pipelines.decode import DecodeOptions
    from queuekit.pipelines.layout import record_layout

    graph = tf.Graph()
    with graph.as_default():
        size = spec.get("image_size")
        layout = record_layout(spec["files"], decode=DecodeOptions(size and tuple(size)))
        b = _BUILD[spec["kind"]](spec, layout)
        if spec.get("consume", "graph") == "numpy":  # a loop that calls sess.run(batch)
            fetch = [b["image"], tf.shape(b["label"])[0]]
        else:  # a step that uses the batch in the graph
            fetch = [tf.reduce_sum(b["image"]), tf.shape(b["label"])[0]]
    return graph, fetch, layout


def _queuekit(spec, layout):
    from queuekit.pipelines.builders import tfrecord_batches
    from queuekit.pipelines.options import Decode
    from queuekit.pipelines.prefetch import prefetched

    batch = tfrecord_batches(spec["files"], batch_size=spec["batch_size"],
                             shuffle=spec["shuffle"], num_readers=spec["readers"],
                             num_threads=spec["threads"], read_many=spec["read_many"],
                             decode=Decode(image_size=spec.get("image_size")),
                             **_epochs(spec))
    return batch if spec.get("prefetch") is None else prefetched(batch, spec["prefetch"])


def _epochs(spec) -> dict:
    """A builder's epoch arguments: ``spec["epochs"]`` passes, every record kept; else endless."""
    if not spec.get("epochs"):
        return {}
    return {"num_epochs": spec["epochs"], "allow_smaller_final_batch": True}


def _repeat(ds, spec):
    return ds.repeat(spec["epochs"]) if spec.get("epochs") else ds.repeat()


def _compression(spec) -> str:
    """The files' compression ("", GZIP, ZLIB): every row reads them as they are written."""
    from queuekit.records.files import compression_of_all

    return compression_of_all(spec["files"])


def _records(tf, spec):
    return tf.data.TFRecordDataset(spec["files"], compression_type=_compression(spec),
                                   num_parallel_reads=tf.data.AUTOTUNE)


def _dataset(spec, parse, *, normalise_batch: bool):
    """TFRecordDataset -> map(parse) -> batch -> [one Dequantize pass] -> prefetch, AUTOTUNE."""
    tf = _tf()
    from queuekit.pipelines.delivery import normalized

    ds = _repeat(_records(tf, spec), spec)
    if spec["shuffle"]:
        ds = ds.shuffle(1000)
    ds = ds.map(parse, tf.data.AUTOTUNE).batch(spec["batch_size"])
    if normalise_batch:
        ds = ds.map(lambda b: {**b, "image": normalized(b["image"])}, tf.data.AUTOTUNE)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


def _tfdata(spec, layout):
    """Equal terms: the builders' parse and decode in map, their after-batch normalisation."""
    from queuekit.pipelines.layout import parse_records

    def parse(ser):
        f = parse_records(ser, "", layout)
        return {"image": f["image"], "label": f["label"]}
    return _dataset(spec, parse, normalise_batch=True)


def _tfdata_batched(spec, layout):
    """tf.data vectorised, as its guide advises: batch the records, then parse them together
    (what ``read_many`` does in the queues), the same after-batch normalisation."""
    tf = _tf()
    from queuekit.pipelines.delivery import normalized
    from queuekit.pipelines.layout import parse_records

    def parse(ser):
        f = parse_records(ser, tf.fill(tf.shape(ser), ""), layout, many=True)
        return {"image": normalized(f["image"]), "label": f["label"]}

    ds = _repeat(_records(tf, spec), spec)
    if spec["shuffle"]:
        ds = ds.shuffle(1000)
    ds = ds.batch(spec["batch_size"]).map(parse, tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


def _tfdata_map(spec, layout):
    """The usual tf.data port of the seed: normalise every record in map (three float passes)."""
    def parse(ser):
        img, label = _parse_normalised(ser, layout)
        return {"image": img, "label": label}
    return _dataset(spec, parse, normalise_batch=False)


def _seed(spec, layout):
    """The seed's read_and_decode(flag='train'), with its normalise-before-batch."""
    tf = _tf()
    v1 = tf.compat.v1
    from queuekit.pipelines.builders import quiet_deprecations

    with quiet_deprecations():
        fq = v1.train.string_input_producer(spec["files"], num_epochs=spec.get("epochs"))
        compression = _compression(spec)
        key, ser = v1.TFRecordReader(options=tf.io.TFRecordOptions(
            compression_type=compression) if compression else None).read(fq)
        im, lab = v1.train.batch(list(_parse_normalised(ser, layout, key)),
                                 batch_size=spec["batch_size"], capacity=20,
                                 allow_smaller_final_batch=bool(spec.get("epochs")))
    return {"image": im, "label": lab}


def _read_ceiling(spec, layout):
    """The files' bytes alone (TFRecordDataset, no parse): the read rate no pipeline beats."""
    tf = _tf()
    ds = _repeat(_records(tf, spec), spec)
    ser = tf.compat.v1.data.make_one_shot_iterator(
        ds.batch(spec["batch_size"]).prefetch(tf.data.AUTOTUNE)).get_next()
    return {"image": tf.strings.length(ser), "label": ser}


def _normalise_ceiling(spec, layout):
    """Normalising one in-memory uint8 batch: the step's share no input pipeline avoids."""
    if spec.get("epochs"):
        raise ValueError("an in-memory batch has no end of data to time a whole run by")
    tf = _tf()
    from queuekit.pipelines.delivery import normalized

    shape = [spec["batch_size"], *layout.shape]
    pixels = tf.Variable(tf.zeros(shape, tf.uint8), trainable=False,
                         collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
    return {"image": normalized(pixels.read_value()),
            "label": tf.zeros([spec["batch_size"]], tf.int32)}


def _parse_normalised(serialized, layout, key=""):
    """The builders' parse of one record, then the seed's normalise (float32 image, int32 label)."""
    from queuekit.pipelines.layout import parse_records

    f = parse_records(serialized, key, layout)
    return tf_cast_normalise(f["image"]), f["label"]


def tf_cast_normalise(image):
    """The seed's ``image * (1 / 255) - 0.5`` as three float passes, per record."""
    tf = _tf()
    return tf.cast(image, tf.float32) * (1.0 / 255) - 0.5


_BUILD = {"queuekit": _queuekit, "hand-written": _queuekit, "tf.data": _tfdata,
          "tf.data batch-then-parse": _tfdata_batched,
          "tf.data normalise-in-map": _tfdata_map, "seed-style": _seed,
          "ceiling: read bytes": _read_ceiling, "ceiling: normalise a batch": _normalise_ceiling}


@contextlib.contextmanager
def _session(kind, graph, spinning=True):
    """(run, queue_stats, tuning, input_report) of a QueueSession, or of the hand-written
    choreography; ``spinning`` False turns the thread pools' spinning off."""
    from queuekit.session.queue_session import QueueSession

    config = None
    if not spinning:
        config = _tf().compat.v1.ConfigProto()
        config.experimental.disable_thread_spinning = True
    if kind != "hand-written":
        with QueueSession(graph, config=config, stall_timeout_secs=120) as qs:
            yield qs.run, qs.queue_stats, qs.tuning, qs.input_report
        return
    v1 = _tf().compat.v1
    with graph.as_default(), v1.Session(graph=graph, config=config) as sess:
        sess.run(v1.local_variables_initializer())
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            yield sess.run, list, dict, list
        finally:
            coord.request_stop()
            coord.join(threads)


def _records_per_read(graph) -> int | str | None:
    """The ``read_many`` of the graph's readers; None for one record per read."""
    tf = _tf()
    from queuekit.graph_keys import GraphKeys

    if graph.get_collection(GraphKeys.WHOLE_BATCHES):
        return "batch"
    # Not a resumed runner's skipping read beside a read of one record: its count is fed.
    counts = [tf.get_static_value(op.inputs[2]) for op in graph.get_operations()
              if op.type == "ReaderReadUpToV2"]
    counts = [c for c in counts if c is not None]
    return int(counts[0]) if counts else None


def _ready_batches(graph) -> int:
    """The capacity of the graph's queue of batches made ready ahead (``prefetch``); 0: none."""
    from queuekit.graph_keys import GraphKeys

    names = graph.get_collection(GraphKeys.READY_BATCHES)
    return int(graph.get_operation_by_name(names[0]).get_attr("capacity")) if names else 0


def _whole_run(run, fetch, step: float, started: tuple[float, float],
               cpu: list) -> tuple[int, float]:
    """(records, their rate) from the graph's build to the end of its data (a short job's
    rate: what a tuner spends finding its configuration counts), its CPU into ``cpu``."""
    tf = _tf()
    n = 0
    try:
        while True:
            n += int(run(fetch)[1])
            if step:
                time.sleep(step)  # a simulated training step, on the consumer side
    except tf.errors.OutOfRangeError:
        pass
    wall = time.perf_counter() - started[0]
    cpu.append(100 * (time.process_time() - started[1]) / wall)
    return n, n / wall


def _measure(spec) -> BenchRow:
    _tf()  # imported before the clock starts: a whole run's time is its pipeline's
    import queuekit.pipelines.builders  # noqa: F401

    # And what a session loads (its features by name, at start): where Python writes no
    # bytecode, compiling them was up to 40 ms of a whole run's clock, on queuekit's rows
    # only (the tuner's on "auto"'s only).
    import queuekit.resume.keys  # noqa: F401
    import queuekit.resume.tally  # noqa: F401
    import queuekit.session.checks  # noqa: F401
    import queuekit.session.profile  # noqa: F401
    import queuekit.session.queue_session  # noqa: F401
    import queuekit.session.tuner  # noqa: F401
    started = time.perf_counter(), time.process_time()
    graph, fetch, layout = _graph(spec)
    row = BenchRow(spec["kind"], spec["readers"], spec["threads"], spec["read_many"],
                   consume=spec.get("consume", "graph"))
    if spec["kind"] == "queuekit":  # what ran: "auto" readers choose read_many and prefetch
        row.read_many = _records_per_read(graph)
        row.prefetch = _ready_batches(graph)
    rates: list[float] = []
    fills: list[float] = []
    cpu: list[float] = []
    step = spec["step_ms"] / 1000.0
    with _session(spec["kind"], graph, spec.get("spinning", True)) as (
            run, queue_stats, tuning, input_report):
        if spec.get("epochs"):  # the whole run: build, start, every pass, end of data
            row.records, rate = _whole_run(run, fetch, step, started, cpu)
            rates.append(rate)
        else:
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
        reports = input_report()  # the warm-up too: a small part of the time
        if reports:
            row.input_wait = reports[-1].wait_fraction
        for state in tuning().values():
            row.tuned = state.active
            row.tuning = [[d.at, d.from_count, d.to_count, round(d.rate), d.reason]
                          for d in state.history]
    row.runs = rates
    row.records_per_s = statistics.median(rates)
    row.mb_per_s = row.records_per_s * layout.image_bytes / 1e6
    row.queue_fill = statistics.mean(fills) if fills else None
    row.cpu_percent = statistics.median(cpu)
    row.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


if __name__ == "__main__":  # one configuration, in its own process
    # Ends with the bench that started it, even one stopped while this process was
    # still starting (before subprocess.run could kill it).
    exit_with_parent()
    try:
        result = _measure(json.loads(sys.argv[1]))
    except Exception as error:  # noqa: BLE001 - the row's reason, said by the parent
        # The error itself, on a line of its own: the last line of stderr may be a
        # traceback frame, a note or a TensorFlow log line.
        from queuekit.session.policy import useful_lines

        first = (useful_lines(getattr(error, "message", None) or str(error)) or [""])[0]
        print(f"{FAILED}{type(error).__name__}: {first}", flush=True)
        raise
    print(json.dumps(dataclasses.asdict(result)))
