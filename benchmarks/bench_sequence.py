"""A SequenceExample pipeline with dynamic padding (magenta's melody_rnn input): the queuekit
port against the hand-built TF1 pipeline it replaces, whole runs, interleaved rounds.

    python benchmarks/bench_sequence.py [--records 3000] [--files 8] [--epochs 2]
                                        [--rounds 5] [--ports 1,4,auto]

The hand-built row is magenta's ``get_padded_batch``: ``string_input_producer`` ->
``TFRecordReader`` -> ``parse_single_sequence_example`` (``inputs`` [T, 38] floats,
``labels`` [T] ints, T from 32 to 256) -> ``tf.train.batch(dynamic_pad=True,
num_threads=4, capacity=500)``, run by a Session and a Coordinator. The ports are
``tfrecord_batches(parse_fn=...)`` at each ``--ports`` reader count ("default": the
builder's own default) in a ``QueueSession``. Each configuration runs in its own process;
a row's rate is its records per second from its graph's build to its end of data
(``--epochs`` passes, the last smaller batch kept); prints each row's median, its median
per-round ratio to the hand-built row, and the port's input report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402

INPUT_SIZE, BATCH = 38, 64


def _write(folder: str, records: int, files: int) -> list[str]:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    paths = [os.path.join(folder, f"melodies-{k}.tfrecords") for k in range(files)]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    for i in range(records):
        steps = int(rng.integers(32, 257))
        notes = rng.integers(0, INPUT_SIZE, steps)
        ex = tf.train.SequenceExample()
        inputs = ex.feature_lists.feature_list["inputs"]
        labels = ex.feature_lists.feature_list["labels"]
        for n in notes:
            inputs.feature.add().float_list.value.extend(np.eye(INPUT_SIZE)[n].tolist())
            labels.feature.add().int64_list.value.append(int(n))
        writers[i % files].write(ex.SerializeToString())
    for w in writers:
        w.close()
    return paths


def _parse(serialized):
    import tensorflow as tf

    _, seq = tf.io.parse_single_sequence_example(serialized, sequence_features={
        "inputs": tf.io.FixedLenSequenceFeature([INPUT_SIZE], tf.float32),
        "labels": tf.io.FixedLenSequenceFeature([], tf.int64)})
    return seq


def _child(config: str, files: list[str], epochs: int) -> dict:
    """One whole run: (records, seconds, the port's input report) as JSON."""
    import time

    import tensorflow as tf

    # The modules a builder and a session load, imported before the clock: its time is the
    # pipeline's.
    import queuekit as qk
    import queuekit.pipelines.builders  # noqa: F401
    import queuekit.session.queue_session  # noqa: F401

    v1 = tf.compat.v1
    t0 = time.perf_counter()
    graph = tf.Graph()
    with graph.as_default():
        if config == "hand":
            queue = v1.train.string_input_producer(files, num_epochs=epochs, shuffle=False)
            _, serialized = v1.TFRecordReader().read(queue)
            seq = _parse(serialized)
            inputs, labels, _ = v1.train.batch(
                [seq["inputs"], seq["labels"], tf.shape(seq["inputs"])[0]], batch_size=BATCH,
                capacity=500, num_threads=4, dynamic_pad=True, allow_smaller_final_batch=True)
        else:
            readers = None if config == "default" else config if config == "auto" else int(config)
            batch = qk.tfrecord_batches(files, parse_fn=_parse, batch_size=BATCH,
                                        num_epochs=epochs, num_readers=readers,
                                        allow_smaller_final_batch=True)
            inputs, labels = batch["inputs"], batch["labels"]
        fetch = [tf.reduce_sum(inputs), tf.shape(labels)[0]]
    n, report = 0, ""
    if config == "hand":
        with graph.as_default(), v1.Session(graph=graph) as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess, coord)
            try:
                while True:
                    n += int(sess.run(fetch)[1])
            except tf.errors.OutOfRangeError:
                pass
            finally:
                coord.request_stop()
                coord.join(threads)
    else:
        with qk.QueueSession(graph) as qs:
            try:
                while True:
                    n += int(qs.run(fetch)[1])
            except tf.errors.OutOfRangeError:
                pass
            reports = qs.input_report()
            report = str(reports[-1]) if reports else ""
    return {"records": n, "seconds": time.perf_counter() - t0, "report": report}


def _run(config: str, files: list[str], epochs: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", config, json.dumps(files),
                          str(epochs)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        print(json.dumps(_child(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ports", default="default,4,auto")
    args = smoke.parse(ap, argv, records=16, files=2, epochs=1, rounds=1, ports="auto")
    configs = ["hand", *args.ports.split(",")]
    rates: dict[str, list[float]] = {c: [] for c in configs}
    reports: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = _write(tmp, args.records, args.files)
        for r in range(args.rounds):
            for config in configs if r % 2 == 0 else configs[::-1]:
                got = _run(config, files, args.epochs)
                assert got["records"] == args.records * args.epochs, (config, got)
                rates[config].append(got["records"] / got["seconds"])
                reports[config] = got["report"]
                print(f"round {r} {config}: {rates[config][-1]:,.0f} records/s", flush=True)
    print(f"\n{args.records} SequenceExamples in {args.files} files, {args.epochs} passes, "
          f"batch {BATCH}, {args.rounds} rounds (records/s from build to end of data):")
    hand = rates["hand"]
    for config, got in rates.items():
        ratio = statistics.median(g / h for g, h in zip(got, hand, strict=True))
        print(f"  {config:8} {statistics.median(got):9,.0f}  {ratio:.3f}x hand-built "
              f"(per round {[round(g / h, 2) for g, h in zip(got, hand, strict=True)]})")
    for config, text in reports.items():
        if text:
            print(f"\nport {config}, input report of its last round:\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
