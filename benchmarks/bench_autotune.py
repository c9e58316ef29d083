"""num_readers="auto" against the best fixed row of the grid, on three workloads, one run.

    python benchmarks/bench_autotune.py [--seconds 2] [--repeat 3] [--rounds 3]
                                        [--consume graph|numpy] [--workloads a,b,c]

Workloads (the issue's): (a) 4,000 records of 256x256x3 raw, no step; (b) the
demo's data (600 images made at 96x96); (c) (a)'s records with a 30 ms
simulated step per batch. Each runs the grid 1,2,4 readers x 1,2 threads, the
``auto`` row and the equal-terms ``tf.data`` row (plus, on (a), the ceilings),
each configuration in its own process, the whole list ``--rounds`` times in
turn; a row's rate is the median of its rounds. Prints per workload: the
table, auto / best fixed row, auto's CPU against the 4-reader row's, and when
auto made its last move.
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from bench_read import merge  # noqa: E402

import queuekit as qk  # noqa: E402
from queuekit.demo import generate_images  # noqa: E402


def _data(tmp: str) -> dict[str, list[str]]:
    generate_images(os.path.join(tmp, "big"), 4000)
    big = qk.write_tfrecords(os.path.join(tmp, "big"), os.path.join(tmp, "a.tfrecords"),
                             shards=4, progress=False).outputs
    generate_images(os.path.join(tmp, "demo"), 600)
    demo = qk.write_tfrecords(os.path.join(tmp, "demo"), os.path.join(tmp, "b.tfrecords"),
                              image_size=(96, 96), shards=2, progress=False).outputs
    return {"a": big, "b": demo, "c": big}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--consume", default="graph")
    ap.add_argument("--workloads", default="a,b,c")
    ap.add_argument("--readers", default="1,2,4,auto")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--compare", default=None,
                    help="reference rows (bench --compare); default tfdata, and ceilings on (a)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = _data(tmp)
        for name in args.workloads.split(","):
            compare = (("tfdata", "ceilings") if name == "a" else ("tfdata",)
                       ) if args.compare is None else tuple(filter(None, args.compare.split(",")))
            readers = [r if r == "auto" else int(r) for r in args.readers.split(",")]
            threads = [int(t) for t in args.threads.split(",")]
            reports = [qk.benchmark(data[name], readers=readers, threads=threads,
                                    read_many=(None,), seconds=args.seconds,
                                    repeat=args.repeat, step_ms=30.0 if name == "c" else 0.0,
                                    compare=compare, consume=args.consume, progress=True)
                       for _ in range(args.rounds)]
            report = merge(reports)
            print(f"\n== workload ({name}), consume={args.consume}")
            print(report.table())
            rows = [r for r in report.rows if r.records_per_s]
            best = report.best
            autos = [r for r in rows if r.readers == "auto"]
            for auto in autos:
                print(f"{auto.label}: {auto.records_per_s / best.records_per_s:.3f}x the best "
                      f"fixed row ({best.label}); rounds {auto.runs}")
                four = [r for r in rows if r.readers == 4 and r.threads == auto.threads]
                if four:
                    print(f"  cpu: auto {auto.cpu_percent:.0f}% vs readers=4 "
                          f"{four[0].cpu_percent:.0f}%")
            for r in reports:
                for row in r.rows:
                    if row.readers == "auto" and row.tuning:
                        last = row.tuning[-1][0]
                        print(f"  {row.label}: last move at {last:.1f} s "
                              f"({len(row.tuning)} moves: {row.tuning})")
            tfdata = report.reference("tf.data")
            if tfdata and best:
                print(f"best fixed / tf.data: {best.records_per_s / tfdata.records_per_s:.3f}x; "
                      f"median over rounds of tf.data: {statistics.median(tfdata.runs):.0f}")


if __name__ == "__main__":
    main()
