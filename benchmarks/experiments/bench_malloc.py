"""Workload (a) under glibc malloc's default and with its thresholds set in the
environment, one process per measurement, interleaved.

    python benchmarks/experiments/bench_malloc.py [--rounds 3] [--configs 1:64,2:0]

glibc serves an allocation above its mmap threshold (128 KiB at start, raised as
large blocks are freed) with fresh pages from the kernel, faulted in on first
touch; a pipeline of large tensors can pay that for every batch for the whole life
of the process. The rows: the default; ``MALLOC_TRIM_THRESHOLD_`` alone (which also
freezes the mmap threshold at 128 KiB); both thresholds set (256 MiB and 1 GiB:
freed blocks stay in the heap for the next batch). Prints each row's median
records/s and CPU microseconds per record, with the rounds.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

from bench_ab import _configs
from bench_resume import CHILD, ROOT, workload_a

ENVS = {
    "default": {},
    "trim only": {"MALLOC_TRIM_THRESHOLD_": str(2**30)},
    "mmap 256 MiB + trim 1 GiB": {"MALLOC_MMAP_THRESHOLD_": str(256 * 2**20),
                                  "MALLOC_TRIM_THRESHOLD_": str(2**30)},
}


def run(env, cfg):
    out = subprocess.run([sys.executable, "-c", CHILD, ROOT, json.dumps(cfg)], check=True,
                         capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--configs", type=_configs, default=_configs("1:64,2:0"))
    args = ap.parse_args()
    rows: dict[tuple, list] = {}
    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        for _ in range(args.rounds):
            for readers, many in args.configs:
                names = list(ENVS)
                rng.shuffle(names)
                for name in names:
                    cfg = dict(files=files, readers=readers, read_many=many, seconds=4)
                    rows.setdefault((readers, many, name), []).append(run(ENVS[name], cfg))
    for (readers, many, name), got in rows.items():
        print(f"readers={readers} read_many={many or 0} {name}: "
              f"{statistics.median(g[0] for g in got):,.0f} rec/s, "
              f"{statistics.median(g[1] for g in got):.0f} us CPU/record "
              f"(rounds {[round(g[0]) for g in got]})")


if __name__ == "__main__":
    main()
