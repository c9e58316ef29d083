"""A restart late in a big file: the time from a restore to the first batch, which skips
every record the checkpoint's steps consumed of that file.

    python benchmarks/bench_resume.py [--records 50000] [--consumed 40000] [--rounds 3]

One TFRecord file of ``--records`` small ``Example`` records; a training graph takes
``--consumed`` of them in batches of 100 and saves a checkpoint; each configuration then
restores it in a new graph (and session) and times its first batch. Configurations: one
record a read (a ``parse_fn``: the resumed runners skip with the read of many beside it)
and ``read_many=64`` (vectors). Each runs in its own process, ``--rounds`` times in turn;
prints each one's median and the records it skipped per second.
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

CONFIGS = {"one a read": {}, "read_many=64": {"read_many": 64}}


def _child(path: str, consumed: int, config: str, checkpoint: str) -> dict:
    import time

    import tensorflow as tf

    import queuekit as qk

    v1 = tf.compat.v1
    kw = CONFIGS[config]

    def build():
        step = v1.train.get_or_create_global_step().assign_add(1)  # a graph that trains
        if kw.get("read_many"):
            def parse(s):
                return tf.io.parse_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})
        else:
            def parse(s):
                return tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})
        return qk.tfrecord_batches([path], batch_size=100, num_epochs=1, num_readers=1,
                                   parse_fn=parse, **kw), step

    if not os.path.exists(checkpoint + ".index"):
        with tf.Graph().as_default():
            batch, step = build()
            with qk.QueueSession() as qs:
                for _ in range(consumed // 100):
                    qs.run([batch, step])
                v1.train.Saver().save(qs, checkpoint)
        return {}
    with tf.Graph().as_default():
        batch, step = build()
        with qk.QueueSession() as qs:
            v1.train.Saver().restore(qs, checkpoint)
            t = time.perf_counter()
            first = qs.run(batch)["id"]
            seconds = time.perf_counter() - t
    return {"seconds": seconds, "first": int(first[0])}


def _run(*args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *map(str, args)],
                         capture_output=True, text=True, check=True, timeout=900,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        path, consumed, config, checkpoint = sys.argv[2:6]
        print(json.dumps(_child(path, int(consumed), config, checkpoint)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--consumed", type=int, default=40000)
    ap.add_argument("--rounds", type=int, default=3)
    args = smoke.parse(ap, argv, records=300, consumed=200, rounds=1)
    import tensorflow as tf

    seconds: dict[str, list[float]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.tfrecords")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(args.records):
                w.write(tf.train.Example(features=tf.train.Features(feature={"id": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i]))})).SerializeToString())
        for config in CONFIGS:  # each configuration's own checkpoint (its pipeline's graph)
            _run(path, args.consumed, config, os.path.join(tmp, config.replace(" ", "_"), "ck"))
        for _ in range(args.rounds):
            for config in CONFIGS:
                got = _run(path, args.consumed, config,
                           os.path.join(tmp, config.replace(" ", "_"), "ck"))
                if got["first"] != args.consumed:
                    raise SystemExit(f"{config}: resumed at record {got['first']}, "
                                     f"not {args.consumed}")
                seconds[config].append(got["seconds"])
                print(f"{config}: first batch {got['seconds']:.3f} s after the restore",
                      flush=True)
    print(f"\n{args.records} records in one file, {args.consumed} consumed, "
          f"{args.rounds} rounds (median):")
    for config, s in seconds.items():
        m = statistics.median(s)
        print(f"  {config:14s} {m:.3f} s to the first batch, {args.consumed / m:,.0f} "
              f"records skipped/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
