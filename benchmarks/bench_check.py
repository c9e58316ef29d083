"""Cost of the builders' framing check (walking every record header), per GB of records.

    python benchmarks/bench_check.py [--gb 1] [--repeat 5]

Writes --gb of records of two sizes (196,608 bytes: a 256x256x3 raw image; and
1,024 bytes), then times ``check_framing`` over them (page cache warm, as after
writing; a cold read adds the disk's seek time per large record), median of
--repeat runs, against reading every byte of the same files.
"""

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from queuekit.records.tfrecord import check_framing, frame  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402


def write(path, record_bytes, total):
    record = frame(os.urandom(record_bytes))
    with open(path, "wb") as f:
        for _ in range(total // len(record)):
            f.write(record)
    return os.path.getsize(path)


def timed(fn, repeat):
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def read_all(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = smoke.parse(parser, gb=0.002, repeat=1)
    with tempfile.TemporaryDirectory() as tmp:
        for record_bytes in (196_608, 1_024):
            path = os.path.join(tmp, f"r{record_bytes}.tfrecords")
            size = write(path, record_bytes, int(args.gb * 1e9))
            check = timed(functools.partial(check_framing, path), args.repeat)
            read = timed(functools.partial(read_all, path), args.repeat)
            records = size // (record_bytes + 16)
            print(f"{record_bytes:>8,} B records: {records:>9,} records, {size / 1e9:.2f} GB: "
                  f"check {check:.3f} s ({check / size * 1e9:.3f} s/GB), "
                  f"reading every byte {read:.3f} s")


if __name__ == "__main__":
    main()
