"""What the tuner's probes cost on 12 KB records read 64 a step: the fixed row against
``auto`` and against the same ``auto`` graph with its tuner held where it starts.

    python benchmarks/experiments/bench_probe.py [--rounds 8] [--seconds 2] [--repeat 2]

Workload (s) of ``bench_autotune.py`` (4,000 images made at 64x64), one reader
thread of 64 records a read, ``prefetch=2``; each configuration in its own
process, the rounds interleaved (the order reversed every other round). Prints
each run's rate and the tuner's moves, then per configuration the median rate
and the median of its per-round ratios to the fixed row.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIGS = {
    "fixed 1 reader": {"readers": 1},
    "auto": {"readers": "auto"},
    "auto, tuner held": {"readers": "auto", "held": True},
}


def _child(spec):
    from queuekit.bench import child
    from queuekit.session import tuner

    if spec.pop("held"):
        tuner.SETTLE_SECS = 1e9  # the first window never begins: no move is ever made
    row = child._measure(spec)
    print(json.dumps({"rate": row.records_per_s, "tuned": row.tuned, "moves": row.tuning}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(json.loads(args.child))
    import queuekit as qk
    from queuekit.demo import generate_images

    with tempfile.TemporaryDirectory() as tmp:
        generate_images(os.path.join(tmp, "big"), 4000)
        files = qk.write_tfrecords(os.path.join(tmp, "big"), os.path.join(tmp, "s.tfrecords"),
                                   image_size=(64, 64), shards=4, progress=False).outputs
        base = dict(kind="queuekit", threads=1, batch_size=32, shuffle=False, files=files,
                    step_ms=0.0, seconds=args.seconds, repeat=args.repeat, warmup_batches=20,
                    consume="graph", prefetch=2, read_many=64, held=False)
        rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
        for r in range(args.rounds):
            order = list(CONFIGS.items())
            for name, config in order if r % 2 == 0 else order[::-1]:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", json.dumps({**base, **config})],
                    capture_output=True, text=True, check=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                rates[name].append(result["rate"])
                print(f"round {r} {name}: {result['rate']:,.0f} rec/s, at {result['tuned']}, "
                      f"moves {result['moves']}", flush=True)
    fixed = rates["fixed 1 reader"]
    for name, runs in rates.items():
        ratios = [a / b for a, b in zip(runs, fixed, strict=True)]
        print(f"{name}: {statistics.median(runs):,.0f} rec/s, median of per-round ratios "
              f"{statistics.median(ratios):.3f} {[round(x, 2) for x in ratios]}")


if __name__ == "__main__":
    main()
