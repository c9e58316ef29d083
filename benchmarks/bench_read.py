"""Reading records/s: queuekit configurations vs tf.data vs the seed-style pipeline, one run.

    python benchmarks/bench_read.py [--records 4000] [--seconds 3] [--repeat 3] [--rounds 3]

Writes --records 256x256x3 raw records with `make` (as the issue asks), then
runs `qk.benchmark` (one process per configuration, medians of --repeat
windows) --rounds times over the whole grid, so that a slow spell of this
shared machine hits every configuration alike; a row's rate is the median of
its rounds. Prints the table with ratios: the best configuration against
tf.data and the seed-style pipeline, and readers=1 threads=1 against the same
graph driven by a hand-written Session/Coordinator loop (the wrapper's cost).
"""

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import queuekit as qk  # noqa: E402
from queuekit.demo import generate_images  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402

GRID = dict(readers=(1, 2, 4), threads=(1, 2), read_many=(None, 64),
            compare=("tfdata", "seed", "hand"))


def merge(reports):
    """One report whose rows hold the median over rounds (failed rounds left out)."""
    rows = []
    for same in zip(*(r.rows for r in reports), strict=True):
        ok = [r for r in same if r.records_per_s]
        if not ok:
            rows.append(same[0])
            continue
        rates = [r.records_per_s for r in ok]
        mid = sorted(ok, key=lambda r: r.records_per_s)[len(ok) // 2]
        rows.append(dataclasses.replace(
            mid, records_per_s=statistics.median(rates),
            runs=[round(x) for x in rates]))
    return qk.BenchReport(rows, reports[0].machine, planned=len(rows),
                          spinning=reports[0].spinning)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = smoke.parse(ap, records=16, seconds=0.2, repeat=1, rounds=1, grid=dict(
        readers=(1,), threads=(1,), read_many=(None,), compare=("tfdata", "hand")))
    grid = getattr(args, "grid", GRID)
    with tempfile.TemporaryDirectory() as tmp:
        generate_images(os.path.join(tmp, "img"), args.records)
        made = qk.write_tfrecords(os.path.join(tmp, "img"), os.path.join(tmp, "d.tfrecords"),
                                  shards=4, progress=False)
        reports = [qk.benchmark(made.outputs, **grid, seconds=args.seconds,
                                repeat=args.repeat, progress=True)
                   for _ in range(args.rounds)]
    report = merge(reports)
    print(report.table())
    print("rounds (rec/s):")
    for row in report.rows:
        print(f"  {row.label:34s} {row.runs}")
    one = next((r for r in report.rows if r.kind == "queuekit" and r.readers == 1
                and r.threads == 1 and not r.read_many and r.records_per_s), None)
    hand = report.reference("hand-written")
    if one and hand:
        print(f"wrapper: queuekit readers=1 threads=1 at "
              f"{one.records_per_s / hand.records_per_s:.3f}x the same graph run by hand")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(report.to_json())


if __name__ == "__main__":
    main()
