"""Records/s of workload (a) on several checkouts of queuekit, interleaved: what a change
costs, or what one part of it costs (a copy of the code with that part switched off).

    python benchmarks/bench_ab.py NAME=PATH NAME=PATH... [--rounds 5] [--seconds 4]

Each PATH is a checkout (``git worktree add --detach PATH REV``, edited or not);
the first is the baseline. Two configurations (2 readers one record per read;
1 reader with ``read_many=64``), one process per measurement, the order of
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

CONFIGS = ((2, None), (1, 64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+", help="NAME=PATH, the baseline first")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    roots = dict(r.split("=", 1) for r in args.roots)
    rows: dict[tuple, list[float]] = {}
    cpus: dict[tuple, list[float]] = {}  # the process's CPU microseconds per record
    order = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        for _ in range(args.rounds):
            for readers, read_many in CONFIGS:
                names = list(roots)
                order.shuffle(names)
                for name in names:
                    cfg = dict(files=files, readers=readers, read_many=read_many,
                               seconds=args.seconds)
                    rate, cpu = measure_cpu(roots[name], cfg)
                    rows.setdefault((readers, read_many, name), []).append(rate)
                    cpus.setdefault((readers, read_many, name), []).append(cpu)
    base = next(iter(roots))
    for readers, read_many in CONFIGS:
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
