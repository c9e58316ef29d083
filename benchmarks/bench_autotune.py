"""num_readers="auto" against the best fixed row of the grid, on several workloads, one run.

    python benchmarks/bench_autotune.py [--seconds 2] [--repeat 3] [--rounds 3]
                                        [--consume graph|numpy] [--workloads a,b,c]
                                        [--read-many 0] [--images 4000] [--held-out 0]
                                        [--shards 4] [--epochs N] [--load N]

Workloads: (a) 4,000 records of 256x256x3 raw, no step; (b) the demo's data (600
images made at 96x96); (c) (a)'s records with a 30 ms simulated step per batch;
(s) the same 4,000 images made at 64x64 (12 KB records); (m) those 12 KB records
in files of 16; (o) the images at 128x128 (48 KB records) in one file; (j) 600
JPEGs of 200-500 px in Inception's layout, decoded and resized to 224x224 in the
readers (``bench_decode.py``'s data). (a), (c) and (s) are in ``--shards``
files. ``--epochs N`` times each row's whole run of N passes, from its graph's
build to its end of data (a short job: the tuner's search counts). ``--load N``
runs N other processes burning a core each beside every row (contention). Each runs the
grid 1,2,4 readers x 1,2 threads (x ``--read-many``: ``0,64`` puts the fixed
rows that read many records per step beside the one-record ones, ``0,64,batch``
adds whole batches), the ``auto`` row and the equal-terms ``tf.data`` row (plus,
on (a), the ceilings), each configuration in its own process, the whole list
``--rounds`` times in turn; a row's rate is the median of its rounds. Prints per
workload: the table, auto / best fixed row that does not read whole batches
(auto never does; the ratio of the medians, and the median of the ratios within
a round), auto's CPU against the 4-reader rows', and when its count last changed
(a move that was undone is not a change). ``--held-out N`` then measures auto
and that best row again, alone, side by side, in N new rounds (the grid's best
is the largest of a dozen noisy medians, biased up).
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


def _data(tmp: str, names: list[str], images: int, shards: int) -> dict[str, list[str]]:
    data: dict[str, list[str]] = {}
    if {"a", "c", "s", "m", "o"} & set(names):
        generate_images(os.path.join(tmp, "big"), images)
    if {"a", "c"} & set(names):
        data["a"] = data["c"] = qk.write_tfrecords(
            os.path.join(tmp, "big"), os.path.join(tmp, "a.tfrecords"), shards=shards,
            progress=False).outputs
    if "s" in names:
        data["s"] = qk.write_tfrecords(
            os.path.join(tmp, "big"), os.path.join(tmp, "s.tfrecords"), image_size=(64, 64),
            shards=shards, progress=False).outputs
    if "m" in names:  # many small files: 12 KB records, about 16 a file
        data["m"] = qk.write_tfrecords(
            os.path.join(tmp, "big"), os.path.join(tmp, "m.tfrecords"), image_size=(64, 64),
            shards=max(1, images // 16), progress=False).outputs
    if "o" in names:  # one big file of 48 KB records
        data["o"] = qk.write_tfrecords(
            os.path.join(tmp, "big"), os.path.join(tmp, "o.tfrecords"), image_size=(128, 128),
            shards=1, progress=False).outputs
    if "b" in names:
        generate_images(os.path.join(tmp, "demo"), 600)
        data["b"] = qk.write_tfrecords(
            os.path.join(tmp, "demo"), os.path.join(tmp, "b.tfrecords"), image_size=(96, 96),
            shards=2, progress=False).outputs
    if "j" in names:
        from bench_decode import write_dataset

        os.makedirs(os.path.join(tmp, "jpeg"))
        data["j"] = write_dataset(os.path.join(tmp, "jpeg"), 600)
    return data


def _joined(reports):
    """One round's reports (the fixed grid, then auto's row) as one."""
    rows = [row for r in reports for row in r.rows]
    return qk.BenchReport(rows, reports[0].machine, planned=len(rows),
                          spinning=reports[0].spinning)


def _same(report, row):
    """``row``'s configuration in another round's report."""
    return next((r for r in report.rows if (r.kind, r.readers, r.threads, r.read_many, r.prefetch)
                 == (row.kind, row.readers, row.threads, row.read_many, row.prefetch)), None)


def _auto_lines(report, reports) -> list[float]:
    """auto against the best fixed row that does not read whole batches: ratio of medians,
    and the median of the ratios within each round (the two ran minutes apart at most: the
    machine's slow spells cancel); CPU against the 4-reader rows; when its count last
    changed (undone probes aside). Returns each auto row's median of per-round ratios."""
    best = _best_fixed(report)
    medians = []
    for auto in (r for r in report.rows if r.readers == "auto" and r.records_per_s):
        paired = [a.records_per_s / b.records_per_s for rep in reports
                  if (a := _same(rep, auto)) and (b := _same(rep, best))
                  and a.records_per_s and b.records_per_s]
        medians.append(statistics.median(paired))
        print(f"{auto.label}: {auto.records_per_s / best.records_per_s:.3f}x the best fixed row "
              f"({best.label}); median of per-round ratios {statistics.median(paired):.3f} "
              f"{[round(x, 2) for x in paired]}; rounds {auto.runs}")
        for four in (r for r in report.rows if r.readers == 4 and r.records_per_s):
            cpus = [(a.cpu_percent, f.cpu_percent) for rep in reports
                    if (a := _same(rep, auto)) and (f := _same(rep, four)) and a.cpu_percent
                    and f.cpu_percent]
            print(f"  cpu: auto {statistics.median(c[0] for c in cpus):.1f}% vs {four.label} "
                  f"{statistics.median(c[1] for c in cpus):.1f}% (medians over rounds; "
                  f"auto lower in {sum(a < f for a, f in cpus)} of {len(cpus)})")
        for rep in reports:
            row = _same(rep, auto)
            moves = row.tuning if row else []
            kept = [m for m in moves if not m[4].startswith("undo")]
            changed = f"count last changed at {kept[-1][0]:.1f} s" if kept else "count kept"
            print(f"  {row.label if row else '?'}: {changed}; moves (at, from, to, rate) "
                  f"{[m[:4] for m in moves]}")
    return medians


def _best_fixed(report):
    """The best fixed row that does not read whole batches (auto never does: they change
    what a batch is); whole batches are shown beside it."""
    kept = [r for r in report.rows if r.readers != "auto" and r.kind == "queuekit"
            and r.read_many != "batch" and r.records_per_s]
    return max(kept, key=lambda r: r.records_per_s) if kept else report.best


def _held_out(best, auto: dict, rounds: int, run) -> float | None:
    """auto against ``best`` (chosen in the grid's rounds) in ``rounds`` new rounds of the
    two alone, side by side, in alternating order: the best of a dozen noisy medians is
    biased up (the largest draw wins), so the row is measured again on rounds that did
    not choose it, next to auto, and the machine's slow spells fall on both.
    ``auto`` is auto's grid, ``run(**grid)`` measures one configuration. Returns the
    median of the ratios."""
    fixed = dict(readers=[best.readers], threads=[best.threads],
                 read_many=[best.read_many], prefetch=[best.prefetch])
    ratios, labels = [], set()
    for i in range(rounds):
        pair = [("auto", auto), ("fixed", fixed)]
        rows = dict((name, run(**g)) for name, g in (pair if i % 2 == 0 else pair[::-1]))
        a, b = rows["auto"], rows["fixed"]
        if a and b and a.records_per_s and b.records_per_s:
            ratios.append(a.records_per_s / b.records_per_s)
            labels.add(a.label)
    if not ratios:
        return None
    median = statistics.median(ratios)
    print(f"held out: auto / {best.label} in {len(ratios)} new rounds side by side: median "
          f"{median:.3f} {[round(x, 2) for x in ratios]}; auto settled at {sorted(labels)}",
          flush=True)
    return median


def _reference_line(report, reports, kind: str) -> None:
    """The best fixed row and each auto row against ``kind`` (``tf.data`` vectorised or
    per record): the ratio of the medians, and the median of the ratios within a round,
    each round's best fixed row against the reference of that round."""
    ref = report.reference(kind)
    if ref is None or report.best is None:
        return
    per_round = [b.records_per_s / t.records_per_s for rep in reports
                 if (b := rep.best) and (t := rep.reference(kind))
                 and b.records_per_s and t.records_per_s]
    autos = [r for r in report.rows if r.readers == "auto" and r.records_per_s]
    print(f"best fixed / {kind}: {report.best.records_per_s / ref.records_per_s:.3f}x "
          f"(median of per-round ratios {statistics.median(per_round):.3f} "
          f"{[round(x, 2) for x in per_round]})"
          + "".join(f"; {a.label}: {a.records_per_s / ref.records_per_s:.3f}x" for a in autos)
          + f"; {kind}'s rounds {ref.runs}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--consume", default="graph")
    ap.add_argument("--workloads", default="a,b,c")
    ap.add_argument("--readers", default="1,2,4,auto")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--read-many", default="0",
                    help="the fixed rows' read_many values (auto rows choose their own)")
    ap.add_argument("--prefetch", default="0",
                    help="the fixed rows' prefetch values (auto rows choose their own)")
    ap.add_argument("--held-out", type=int, default=0,
                    help="after the grid's rounds, this many rounds of auto and the best "
                         "fixed row alone, side by side (the worst line then uses them)")
    ap.add_argument("--images", type=int, default=4000, help="images of (a), (c), (s), (m), (o)")
    ap.add_argument("--shards", type=int, default=4, help="files of (a), (c) and (s)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="each row one whole run of this many passes (not windows)")
    ap.add_argument("--no-spinning", dest="spinning", action="store_false",
                    help="every session with its thread pools' spinning off")
    ap.add_argument("--load", type=int, default=0,
                    help="processes burning a core each beside every row (contention)")
    ap.add_argument("--compare", default=None,
                    help="reference rows (bench --compare); default tfdata, and ceilings on (a)")
    args = smoke.parse(ap, seconds=0.2, repeat=1, rounds=1, workloads="a", readers="1,auto",
                       threads="1", images=16, compare="tfdata")
    names = args.workloads.split(",")
    worst: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = _data(tmp, names, args.images, args.shards)
        for name in names:
            compare = (("tfdata", "tfdata-batched", "ceilings") if name == "a"
                       else ("tfdata", "tfdata-batched")
                       ) if args.compare is None else tuple(filter(None, args.compare.split(",")))
            readers = [r if r == "auto" else int(r) for r in args.readers.split(",")]
            threads = [int(t) for t in args.threads.split(",")]
            many = [k if k == "batch" else int(k) or None for k in args.read_many.split(",")]
            grid = [dict(readers=[r for r in readers if r != "auto"], threads=threads,
                         read_many=many, prefetch=[int(p) for p in args.prefetch.split(",")])]
            if "auto" in readers:  # auto builds one graph whatever the threads and read_many
                grid.append(dict(readers=["auto"], threads=threads[:1], read_many=[None],
                                 prefetch=[None]))
            def run(compare=(), progress=True, data=data[name], name=name, **g):
                return qk.benchmark(
                    data, **g, seconds=args.seconds, repeat=args.repeat,
                    step_ms=30.0 if name == "c" else 0.0,
                    image_size=(224, 224) if name == "j" else None,
                    compare=compare, consume=args.consume, spinning=args.spinning,
                    epochs=args.epochs, load=args.load, progress=progress)

            reports = [_joined([run(**g, compare=compare if i == 0 else ())
                                for i, g in enumerate(grid)]) for _ in range(args.rounds)]
            report = merge(reports)
            print(f"\n== workload ({name}), consume={args.consume}", flush=True)
            print(report.table())
            medians = _auto_lines(report, reports)
            if medians:
                worst[name] = min(medians)
            for kind in ("tf.data batch-then-parse", "tf.data"):
                _reference_line(report, reports, kind)
            if args.held_out and medians:
                held = _held_out(_best_fixed(report), grid[-1], args.held_out,
                                 lambda **g: run(**g, progress=False).rows[0])
                if held is not None:
                    worst[name] = held
    if worst:
        name = min(worst, key=worst.get)
        print("\nauto / best fixed row, median of per-round ratios"
              + (" (held-out rounds)" if args.held_out else "") + ": "
              + ", ".join(f"({k}) {v:.3f}" for k, v in worst.items())
              + f"; worst ({name}) {worst[name]:.3f}")


if __name__ == "__main__":
    main()
