"""TensorFlow's thread pools spinning while idle, on and off: an input-bound loop and two
step-bound models without input.

    python benchmarks/bench_spinning.py [--rounds 3] [--seconds 6] [--cases s,cnn,mlp]

(s) is workload (s) of docs/benchmarks.rst (4,000 images made at 64x64, 12 KB
records), read by 2 readers in whole batches of 32 and summed in the graph; cnn
is a training step of a 2-layer CNN on 32 64x64x3 images held in a variable; mlp
a training step of 20 dense layers of 64 units on 32 rows. Each measurement runs in
its own process (the session's pools are the process's, made once with the first
session's config), spinning on and off alternated in an order drawn per round.
Prints each round's off/on ratio and their median, per case. ``--one CASE on|off
FILES_JSON`` runs one measurement in this process, for a profiler (FILES_JSON: the
record files of (s), a JSON list; ``[]`` for the models).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _graph(case, files):
    import tensorflow as tf

    import queuekit as qk

    v1 = tf.compat.v1
    if case == "s":
        batch = qk.tfrecord_batches(files, batch_size=32, num_readers=2, read_many="batch")
        return [tf.reduce_sum(batch["image"]), tf.shape(batch["label"])[0]]
    if case == "cnn":
        h = v1.get_variable("x", [32, 64, 64, 3], trainable=False)
        for i, (c_in, c_out) in enumerate(((3, 32), (32, 64))):
            w = v1.get_variable(f"w{i}", [3, 3, c_in, c_out])
            h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, w, 1, "SAME")), 2, 2, "VALID")
        h = tf.matmul(tf.reshape(h, [32, -1]), v1.get_variable("out", [16 * 16 * 64, 10]))
    else:
        h = v1.get_variable("x", [32, 64], trainable=False)
        for i in range(20):
            h = tf.nn.relu(tf.matmul(h, v1.get_variable(f"w{i}", [64, 64]))
                           + v1.get_variable(f"b{i}", [64]))
    step = v1.train.GradientDescentOptimizer(1e-4).minimize(tf.reduce_mean(tf.square(h)))
    return [step, tf.constant(1)]


def one(case: str, spinning: bool, seconds: float, files: list[str]) -> float:
    """Records (s) or steps (models) per second of one case, in this process."""
    import tensorflow as tf

    import queuekit as qk

    config = tf.compat.v1.ConfigProto()
    config.experimental.disable_thread_spinning = not spinning
    graph = tf.Graph()
    with graph.as_default():
        fetch = _graph(case, files)
    with qk.QueueSession(graph, config=config) as qs:
        for _ in range(30):
            qs.run(fetch)
        done, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            done += int(qs.run(fetch)[1])
        return done / (time.monotonic() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--cases", default="s,cnn,mlp")
    ap.add_argument("--one", nargs=3, metavar=("CASE", "SPINNING", "FILES_JSON"),
                    help="one measurement in this process (for a profiler)")
    args = smoke.parse(ap, rounds=1, seconds=0.3, cases="mlp")
    sys.path.insert(0, ROOT)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.one:
        case, spinning, files = args.one
        print(json.dumps(one(case, spinning == "on", args.seconds, json.loads(files))))
        return
    import queuekit as qk
    from queuekit.demo import generate_images

    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        if "s" in cases:
            generate_images(os.path.join(tmp, "big"), 4000)
            files = qk.write_tfrecords(os.path.join(tmp, "big"), os.path.join(tmp, "s.tfrecords"),
                                       image_size=(64, 64), shards=4, progress=False).outputs
        ratios: dict[str, list[float]] = {c: [] for c in cases}
        for r in range(args.rounds):
            for case in cases:
                rate = {}
                for side in random.sample(["on", "off"], 2):
                    out = subprocess.run(
                        [sys.executable, __file__, "--seconds", str(args.seconds), "--one",
                         case, side, json.dumps(files)],
                        capture_output=True, text=True, check=True)
                    rate[side] = json.loads(out.stdout.strip().splitlines()[-1])
                ratios[case].append(rate["off"] / rate["on"])
                print(f"round {r + 1} {case}: on {rate['on']:,.1f}/s, off {rate['off']:,.1f}/s,"
                      f" off/on {ratios[case][-1]:.3f}", flush=True)
        for case in cases:
            print(f"{case}: off/on median {statistics.median(ratios[case]):.3f} "
                  f"[{', '.join(f'{x:.2f}' for x in ratios[case])}]")


if __name__ == "__main__":
    main()
