"""Where the CPU goes, per thread: queuekit's rows against tf.data vectorised, one run.

    python benchmarks/experiments/bench_threads.py [--size 256] [--records 2000] [--seconds 4]
        [--rounds 3]

Writes --records raw images of --size x --size x 3 (``make``'s records), then
runs each configuration in its own process: warm up, then read every thread's
CPU time (``/proc/self/task/*/stat``: user + system) before and after a window
of --seconds while the loop takes batches (summed in the graph, like a step).
Threads are grouped by name: TensorFlow names its pools (``tf_Compute``,
``tf_data_private_threadpool``...), Python threads are named by ``threading``
(queuekit's runner threads ``queuekit-runner-<queue>-<n>``; the loop is
``MainThread``). Threads nobody named carry the process's name ("unnamed"
here): in queuekit's rows mostly the single-thread pool each TF reader
kernel (``ReaderRead``, ``ReaderReadUpTo``) runs its reads on. Prints, per
configuration, records/s and each group's CPU in microseconds per record and
% of one core (medians over rounds): which threads do the work, and how much.
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIGS = {
    "queuekit readers=2 read_many=0": {"kind": "queuekit", "readers": 2, "read_many": None},
    "queuekit readers=2 read_many=64": {"kind": "queuekit", "readers": 2, "read_many": 64},
    "queuekit readers=2 read_many=batch": {"kind": "queuekit", "readers": 2,
                                           "read_many": "batch"},
    "tf.data vectorised": {"kind": "tf.data batch-then-parse", "readers": None,
                           "read_many": None},
}
TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[int, tuple[str, float]]:
    """{thread id: (name, CPU seconds)} of this process's threads."""
    py = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # ended between the listing and the read
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (py.get(int(tid), comm), (int(fields[11]) + int(fields[12])) / TICK)
    return out


def group(name: str) -> str:
    """A thread's group: its name without numbers; runner threads by their queue, without
    the pipeline's scope; "unnamed" for threads neither TF nor Python named (they carry
    the process's name, "python")."""
    if name.startswith("queuekit-runner-"):
        name = "runner " + name.removeprefix("queuekit-runner-").split("/", 1)[-1]
    if name == "python":
        return "unnamed"
    return re.sub(r"[-_]?\d+$", "", re.sub(r"_\d+", "", name)) or name


def child(spec: dict) -> dict:
    from queuekit.bench.child import _graph, _session

    graph, fetch, _ = _graph(spec)
    with _session(spec["kind"], graph) as (run, *_):
        for _ in range(20):
            run(fetch)
        before, n, t0 = thread_cpu(), 0, time.perf_counter()
        while time.perf_counter() - t0 < spec["seconds"]:
            n += int(run(fetch)[1])
        after, wall = thread_cpu(), time.perf_counter() - t0
    used: dict[str, float] = collections.Counter()
    for tid, (name, cpu) in after.items():
        used[group(name)] += cpu - before.get(tid, (name, 0.0))[1]
    return {"records": n, "wall": wall, "cpu": dict(used)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    import queuekit as qk
    from queuekit.demo import generate_images

    results = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        generate_images(os.path.join(tmp, "img"), args.records)
        files = qk.write_tfrecords(os.path.join(tmp, "img"), os.path.join(tmp, "r.tfrecords"),
                                   image_size=(args.size, args.size), shards=4,
                                   progress=False).outputs
        for _ in range(args.rounds):
            for label, config in CONFIGS.items():
                spec = {**config, "files": files, "batch_size": 32, "shuffle": False,
                        "threads": 1, "seconds": args.seconds}
                out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                                     capture_output=True, text=True, check=True).stdout
                results[label].append(json.loads(out.splitlines()[-1]))
    print(f"{args.size}x{args.size}x3 raw records; CPU per record (µs) and % of one core "
          f"by thread group, medians over {args.rounds} rounds")
    for label, runs in results.items():
        rate = statistics.median(r["records"] / r["wall"] for r in runs)
        groups = sorted({g for r in runs for g in r["cpu"]},
                        key=lambda g: -statistics.median(r["cpu"].get(g, 0.0) for r in runs))
        print(f"\n{label}: {rate:,.0f} rec/s")
        for g in groups:
            us = statistics.median(1e6 * r["cpu"].get(g, 0.0) / r["records"] for r in runs)
            pct = statistics.median(100 * r["cpu"].get(g, 0.0) / r["wall"] for r in runs)
            if pct >= 0.5:
                print(f"  {g:40s} {us:8.1f} µs/rec  {pct:6.1f}%")
        us = statistics.median(1e6 * sum(r["cpu"].values()) / r["records"] for r in runs)
        pct = statistics.median(100 * sum(r["cpu"].values()) / r["wall"] for r in runs)
        print(f"  {'all threads':40s} {us:8.1f} µs/rec  {pct:6.1f}%")


if __name__ == "__main__":
    main()
