"""read_many="batch" (each read a whole batch, queued as it is) against the best
``read_many`` row, ``tf.data`` vectorised and the seed-style pipeline, on raw records
of two sizes, in interleaved rounds.

    python benchmarks/bench_whole.py [--rounds 3] [--seconds 2]

Workloads: (a) 2,000 images made at 256x256 (196 KB records), (s) 4,000 made at 64x64
(12 KB records). Each round runs the grid (1 and 2 readers, 2 threads each, read_many
32 and "batch") and the references, one process per configuration (``qk.benchmark``);
a row's rate is the median of its rounds. Prints the table and, per round, the best
"batch" row over tf.data vectorised and over the best read_many=32 row.
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402
from bench_read import merge  # noqa: E402

import queuekit as qk  # noqa: E402
from queuekit.demo import generate_images  # noqa: E402


def _data(tmp: str, names, scale: float = 1.0) -> dict[str, list[str]]:
    out = {}
    for name, count, size in (("a", 2000, 256), ("s", 4000, 64)):
        if name not in names:
            continue
        generate_images(os.path.join(tmp, name), max(8, int(count * scale)))
        out[name] = qk.write_tfrecords(os.path.join(tmp, name),
                                       os.path.join(tmp, f"{name}.tfrecords"),
                                       image_size=(size, size), shards=4,
                                       progress=False).outputs
    return out


def _best(report, many):
    rows = [r for r in report.rows if r.kind == "queuekit" and r.read_many == many
            and r.records_per_s]
    return max(rows, key=lambda r: r.records_per_s, default=None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--workloads", default="a,s")
    args = smoke.parse(ap, rounds=1, seconds=0.2, workloads="s", scale=0.004,
                       grid=dict(readers=(2,), compare=("tfdata-batched",)))
    grid = getattr(args, "grid", dict(readers=(1, 2), compare=("tfdata-batched", "seed")))
    with tempfile.TemporaryDirectory() as tmp:
        data = _data(tmp, args.workloads.split(","), getattr(args, "scale", 1.0))
        for name in args.workloads.split(","):
            reports = [qk.benchmark(data[name], **grid, threads=(2,),
                                    read_many=(32, "batch"), seconds=args.seconds,
                                    progress=True)
                       for _ in range(args.rounds)]
            print(f"\n== workload ({name})")
            print(merge(reports).table())
            vs_tfdata, vs_many = [], []
            for rep in reports:
                whole, many = _best(rep, "batch"), _best(rep, 32)
                tfdata = rep.reference("tf.data batch-then-parse")
                if whole and tfdata and tfdata.records_per_s:
                    vs_tfdata.append(whole.records_per_s / tfdata.records_per_s)
                if whole and many:
                    vs_many.append(whole.records_per_s / many.records_per_s)
            print(f"best read_many=batch / tf.data vectorised: median "
                  f"{statistics.median(vs_tfdata):.2f}x, rounds "
                  f"{[round(x, 2) for x in vs_tfdata]}")
            print(f"best read_many=batch / best read_many=32: median "
                  f"{statistics.median(vs_many):.2f}x, rounds {[round(x, 2) for x in vs_many]}")


if __name__ == "__main__":
    main()
