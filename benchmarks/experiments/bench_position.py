"""What the input position costs, in one process: workload (a) built with it and without
it, alternated for many rounds, so that a cost of a percent or two shows through this
machine's noise (a measurement's CPU per record spreads about 8% between runs of the same
code; one process per measurement adds its own malloc state to that).

    python benchmarks/experiments/bench_position.py [--rounds 100] [--seconds 3] [--configs 2:0]
    perf record -F 499 -- python benchmarks/experiments/bench_position.py --only on \
        --rounds 1 --seconds 15

Each round builds both pipelines, each in its own graph and ``QueueSession``, in an
order drawn anew, and measures the records/s and the process's CPU time per record of
the loop ``bench_resume.py`` runs (20 warm-up steps, batches of 32 consumed in the
graph). "off" is what ``position_off.py`` makes of the code, done here by swapping the
builders' parts for the run: ``string_input_producer`` for the epoch producer, the
plain read, no reader key carried through the queues, nothing noted in the step.
Prints the medians and the median of the per-round ratios, with their quartiles;
with ``--only``, each measurement of that side alone (for a profiler).
"""

import argparse
import random
import statistics
import sys
import tempfile
import time

from bench_ab import _configs
from bench_resume import ROOT, workload_a

sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402

import queuekit as qk  # noqa: E402
from queuekit.pipelines import batching  # noqa: E402
from queuekit.resume.graph import POSITION_KEY  # noqa: E402

_v1 = tf.compat.v1
_REAL = {name: getattr(batching, name)
         for name in ("epoch_files", "reads", "make_batch", "whole_batches")}


def _producer(files, num_epochs, shuffle, seed, **_):
    return _v1.train.string_input_producer(list(files), num_epochs=num_epochs,
                                           shuffle=shuffle, seed=seed), None


def _without_keys(name):
    def batch(readers, **kwargs):
        return _REAL[name]([{k: v for k, v in r.items() if k != POSITION_KEY}
                            for r in readers], **kwargs)
    return batch


# No position: deliver() then notes nothing.
_OFF = {"epoch_files": _producer, "reads": lambda position, next_read, many: next_read(),
        "make_batch": _without_keys("make_batch"),
        "whole_batches": _without_keys("whole_batches")}


def measure(files, position: bool, readers, read_many, seconds: float):
    """(records/s, CPU microseconds per record) of one loop, with or without the position."""
    for name, real in _REAL.items():
        setattr(batching, name, real if position else _OFF[name])
    try:
        with tf.Graph().as_default(), qk.QueueSession() as qs:
            b = qk.tfrecord_batches(files, batch_size=32, num_readers=readers,
                                    read_many=read_many,
                                    num_threads=2 if read_many == "batch" else 1)
            step = [tf.reduce_sum(tf.cast(b["label"], tf.float32))
                    + tf.reduce_sum(b["image"][:, 0, 0]), tf.shape(b["label"])[0]]
            for _ in range(20):
                qs.run(step)
            n, start, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds:
                n += int(qs.run(step)[1])
            return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6
    finally:
        for name, real in _REAL.items():
            setattr(batching, name, real)


def _quartiles(values):
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.3f}-{q[2]:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--configs", type=_configs, default=_configs("2:0"),
                    help="READERS:READ_MANY,... (bench_ab's)")
    ap.add_argument("--only", choices=("on", "off"), help="measure that side alone")
    args = ap.parse_args()
    configs = args.configs
    order = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        rows: dict[tuple, list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for readers, read_many in configs:
                sides = [True, False] if args.only is None else [args.only == "on"]
                order.shuffle(sides)
                for position in sides:
                    rows.setdefault((readers, read_many, position), []).append(
                        measure(files, position, readers, read_many, args.seconds))
                    if args.only:
                        rate, cpu = rows[(readers, read_many, position)][-1]
                        print(f"{args.only}: {rate:,.0f} rec/s, {cpu:.1f} us CPU/record")
    if args.only:
        return
    print(f"workload (a), {args.rounds} rounds of {args.seconds:g} s in one process")
    for readers, read_many in configs:
        on, off = rows[(readers, read_many, True)], rows[(readers, read_many, False)]
        rate = [a[0] / b[0] for a, b in zip(on, off, strict=True)]
        cpu = [a[1] / b[1] for a, b in zip(on, off, strict=True)]
        print(f"  readers={readers} read_many={read_many or 0}: "
              f"off {statistics.median(r for r, _ in off):,.0f} rec/s, "
              f"{statistics.median(c for _, c in off):.1f} us CPU/record; "
              f"on {statistics.median(r for r, _ in on):,.0f} rec/s, "
              f"{statistics.median(c for _, c in on):.1f} us; "
              f"rate ratio {statistics.median(rate):.3f} (quartiles {_quartiles(rate)}), "
              f"CPU per record ratio {statistics.median(cpu):.3f} "
              f"(quartiles {_quartiles(cpu)})")


if __name__ == "__main__":
    main()
