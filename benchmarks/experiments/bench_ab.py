"""Records/s of workload (a) on several checkouts of queuekit, interleaved: what a change
costs, or what one part of it costs (a copy of the code with that part switched off).

    python benchmarks/experiments/bench_ab.py NAME=PATH NAME=PATH... [--rounds 5] [--seconds 4]
                                  [--size 256] [--configs 2:0,1:64]

Each PATH is a checkout (``git worktree add --detach PATH REV``, edited or not);
the first is the baseline. The configurations are READERS:READ_MANY (by default
2 readers one record per read, and 1 reader with ``read_many=64``; ``2:batch``
is 2 readers of whole batches, two threads each; ``auto:64`` is ``num_readers="auto"``
reading 64 at a time); ``--size 64`` makes the
records 64x64x3 rather than workload (a)'s 256x256x3; ``--step-ms 30`` sleeps that long after
each batch, as workload (c)'s step. One process per measurement, the order of
the checkouts drawn anew in each round; prints each one's median records/s
and the median of its per-round ratios to the baseline, with the rounds; the same for
the process's CPU time per record (the machine is CPU-bound: what a change costs in
work, less exposed than records/s to other tenants' load).
"""

import argparse
import random
import statistics
import tempfile

from bench_resume import measure_cpu, workload_a


def _configs(text):
    out = []
    for part in text.split(","):
        readers, many = part.split(":")
        out.append((readers if readers == "auto" else int(readers),
                    None if many == "0" else many if many == "batch" else int(many)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+", help="NAME=PATH, the baseline first")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="a simulated training step after each batch (workload (c): 30)")
    ap.add_argument("--configs", type=_configs, default=_configs("2:0,1:64"))
    args = ap.parse_args()
    roots = dict(r.split("=", 1) for r in args.roots)
    rows: dict[tuple, list[float]] = {}
    cpus: dict[tuple, list[float]] = {}  # the process's CPU microseconds per record
    order = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records, args.size)
        for _ in range(args.rounds):
            for readers, read_many in args.configs:
                names = list(roots)
                order.shuffle(names)
                for name in names:
                    cfg = dict(files=files, readers=readers, read_many=read_many,
                               threads=2 if read_many == "batch" else 1,
                               seconds=args.seconds, step_ms=args.step_ms)
                    rate, cpu = measure_cpu(roots[name], cfg)
                    rows.setdefault((readers, read_many, name), []).append(rate)
                    cpus.setdefault((readers, read_many, name), []).append(cpu)
    base = next(iter(roots))
    for readers, read_many in args.configs:
        for name in roots:
            got = rows[(readers, read_many, name)]
            ratios = [x / y for x, y in zip(got, rows[(readers, read_many, base)], strict=True)]
            cpu = cpus[(readers, read_many, name)]
            cpu_ratios = [x / y for x, y in zip(cpu, cpus[(readers, read_many, base)],
                                                strict=True)]
            print(f"readers={readers} read_many={read_many or 0} {name}: "
                  f"{statistics.median(got):,.0f} rec/s, ratio {statistics.median(ratios):.3f} "
                  f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}); "
                  f"CPU {statistics.median(cpu):.0f} us/record, ratio "
                  f"{statistics.median(cpu_ratios):.3f} "
                  f"(rounds: {', '.join(f'{r:.3f}' for r in cpu_ratios)})")


if __name__ == "__main__":
    main()
