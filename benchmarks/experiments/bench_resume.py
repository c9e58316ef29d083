"""What the input position costs: records/s with it against queuekit before it, and the
size of the state a checkpoint carries.

    python benchmarks/experiments/bench_resume.py [--baseline REV] [--records 2000] [--rounds 9]

Workload (a) of docs/benchmarks.rst: 256x256x3 raw records written by `make`,
batches of 32 consumed in the graph (a reduce_sum, as a step would), one
process per measurement, configurations interleaved round by round. The
baseline is the same workload on queuekit at git revision REV (default: the
commit before the input position), checked out in a temporary worktree.
Then the state's size for 1,000 files with a 10,000-record shuffle buffer in
flight, through the code a session saves with.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHILD = r"""
import json, sys, time
import tensorflow as tf
sys.path.insert(0, sys.argv[1])
import queuekit as qk
cfg = json.loads(sys.argv[2])
with qk.QueueSession() as qs:
    b = qk.tfrecord_batches(cfg["files"], batch_size=32, num_readers=cfg["readers"],
                            read_many=cfg["read_many"], num_threads=cfg.get("threads", 1))
    step = [tf.reduce_sum(tf.cast(b["label"], tf.float32)) + tf.reduce_sum(b["image"][:, 0, 0]),
            tf.shape(b["label"])[0]]  # whole batches are smaller at the end of a file
    for _ in range(20):
        qs.run(step)
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < cfg["seconds"]:
        n += int(qs.run(step)[1])
        if cfg.get("step_ms"):
            time.sleep(cfg["step_ms"] / 1000)  # a training step of that length, off the CPU
    rate = n / (time.perf_counter() - start)
    print(json.dumps([rate, (time.process_time() - cpu) / n * 1e6]))
"""


def measure(root, cfg):
    """Records/s of one run of the child on the checkout ``root``."""
    return measure_cpu(root, cfg)[0]


def measure_cpu(root, cfg):
    """(records/s, the process's CPU microseconds per record) of one run of the child."""
    out = subprocess.run([sys.executable, "-c", CHILD, root, json.dumps(cfg)], check=True,
                         capture_output=True, text=True, env=dict(os.environ,
                                                                  TF_CPP_MIN_LOG_LEVEL="2"))
    rate, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(rate), float(cpu)


def state_size(n_files=1000, per_file=100, in_flight=10_000, seed=0):
    """Bytes of the saved state: 40% of the files consumed, 10,000 records read past that
    (the shuffle buffer) of which a random half consumed."""
    sys.path.insert(0, ROOT)
    from queuekit.resume.file import FORMAT, rle

    rng = np.random.default_rng(seed)
    counts = np.zeros(n_files * per_file, np.int64)
    done = int(0.4 * len(counts))
    counts[:done] = 1
    flight = np.arange(done, done + in_flight)
    counts[rng.choice(flight, in_flight // 2, replace=False)] = 1
    files = [f"/data/train/part-{k:05d}-of-{n_files:05d}.tfrecords" for k in range(n_files)]
    state = {"format": FORMAT, "pipelines": [{
        "name": "tfrecord_batches", "kind": "offset", "shuffle": True, "seed": 1,
        "num_epochs": None, "files": [[f, 200_000_000, per_file] for f in files],
        "counts": [rle(counts[k * per_file:(k + 1) * per_file]) for k in range(n_files)]}]}
    return len(json.dumps(state, separators=(",", ":")).encode())


def arguments(baseline: str):
    """The options of an A/B against queuekit at git revision ``baseline``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=baseline)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=4.0)
    return ap.parse_args()


def workload_a(tmp: str, records: int, size: int = 256) -> list[str]:
    """Workload (a)'s files in ``tmp``: ``records`` generated images written by `make`
    (at ``size`` x ``size``: 64 gives the small records of docs/benchmarks.rst)."""
    sys.path.insert(0, ROOT)
    import queuekit as qk
    from queuekit.demo import generate_images

    generate_images(os.path.join(tmp, "img"), records)
    return qk.write_tfrecords(os.path.join(tmp, "img"), os.path.join(tmp, "a.tfrecords"),
                              image_size=(size, size), shards=4, progress=False).outputs


def main():
    args = arguments("adefac7")  # the commit before the position
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        base = os.path.join(tmp, "baseline")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", base,
                        args.baseline], check=True)
        try:
            rows = {}
            order = random.Random(0)
            for _ in range(args.rounds):
                for readers, read_many in ((2, None), (1, 64)):
                    cfg = dict(files=files, readers=readers, read_many=read_many,
                               seconds=args.seconds)
                    pair = [("baseline", base), ("position", ROOT)]
                    order.shuffle(pair)  # which runs first in a round is no bias
                    for name, root in pair:
                        rows.setdefault((readers, read_many, name), []).append(
                            measure(root, cfg))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base],
                           check=False)
    print(f"workload (a), {args.records} records, medians of {args.rounds} interleaved "
          f"rounds of {args.seconds:g} s (baseline: {args.baseline})")
    for readers, read_many in ((2, None), (1, 64)):
        b, p = rows[(readers, read_many, "baseline")], rows[(readers, read_many, "position")]
        ratios = [x / y for x, y in zip(p, b, strict=True)]
        print(f"  readers={readers} read_many={read_many or 0}: baseline "
              f"{statistics.median(b):,.0f} rec/s, with position {statistics.median(p):,.0f} "
              f"rec/s, ratio {statistics.median(ratios):.3f} (rounds: "
              f"{', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"state for 1,000 files of 100 records, 10,000 in a shuffle buffer: "
          f"{state_size():,} bytes")


if __name__ == "__main__":
    main()
