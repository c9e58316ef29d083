"""`make` images/s: the local writer against Beam's DirectRunner, on the same folder, in one run.

    python benchmarks/bench_beam.py [--images 1500] [--repeat 3]

Each configuration is a `queuekit make` process of its own (as a user runs it),
interleaved round by round: local with 2 worker processes, Beam with 2 worker
processes (multi_processing) and Beam in one process (in_memory). Prints the
median images/s as `make` reports it (from listing to commit) and the median
wall time of the whole command (with Python, TensorFlow and Beam start-up).
Needs the beam extra.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from benchmarks.bench_make import photos  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402

CONFIGS = {
    "local make, 2 workers": ["--workers", "2"],
    "beam, 2 workers (multi_processing)": ["--runner", "beam", "--workers", "2"],
    "beam, 1 worker (in_memory)": ["--runner", "beam", "--workers", "1"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--repeat", type=int, default=3)
    args = smoke.parse(ap, images=8, repeat=1)
    rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
    walls: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        photos(os.path.join(tmp, "img"), args.images)
        for r in range(args.repeat):
            for i, (name, flags) in enumerate(CONFIGS.items()):
                out = os.path.join(tmp, f"out{r}-{i}", "d.tfrecords")
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "queuekit", "make", os.path.join(tmp, "img"), out,
                     "--shards", "2", "--quiet", *flags],
                    capture_output=True, text=True, check=True)
                walls[name].append(time.perf_counter() - t)
                rate = re.search(r"wrote (\d+) images.* (\d+) images/s", done.stderr)
                assert rate and int(rate.group(1)) == args.images, done.stderr
                rates[name].append(float(rate.group(2)))
    base = statistics.median(rates["local make, 2 workers"])
    print(f"{args.images} JPEGs (200-640 px) -> 256x256 raw, 2 shards, {os.cpu_count()} cores, "
          f"medians of {args.repeat} interleaved runs")
    for name in CONFIGS:
        rate, wall = statistics.median(rates[name]), statistics.median(walls[name])
        print(f"{name:36s} {rate:6.0f} images/s  ({rate / base:4.2f}x local)  "
              f"wall {wall:5.1f} s  runs {[round(x) for x in rates[name]]}")


if __name__ == "__main__":
    main()
