"""What "where the time goes" costs per step, and its verdict on an input-bound and a
step-bound loop.

    python benchmarks/experiments/bench_profile.py [--baseline REV] [--rounds 9] [--seconds 4]

Workload (a) of docs/benchmarks.rst (256x256x3 raw records written by `make`,
batches of 32 consumed in the graph). Three measurements:

1. the cost accounted directly, in one process: the time spent in the profile's
   per-run code, plus each traced run's extra time over an untraced run
   (medians), as a share of the loop's time;
2. records/s against queuekit at REV (default: the commit before the profile),
   checked out in a temporary worktree, rounds interleaved, which side first
   drawn per round (the machine's noise is a few percent per round: this
   bounds the cost, it cannot resolve 1%);
3. the verdict with no step (the readers are the slow side) and with a 30 ms
   step (the step is).
"""

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

from bench_resume import ROOT, arguments, measure, workload_a

ACCOUNT = r"""
import json, sys, time
import tensorflow as tf
sys.path.insert(0, sys.argv[1])
import queuekit as qk
from queuekit.session import profile
cfg = json.loads(sys.argv[2])
spent, runs = [0.0], 0
before, after = profile.InputProfile.before_step, profile.InputProfile.after_step

def timed_before(self, *a):
    t = time.perf_counter()
    out = before(self, *a)
    spent[0] += time.perf_counter() - t
    return out

def timed_after(self, *a):
    t = time.perf_counter()
    after(self, *a)
    spent[0] += time.perf_counter() - t

profile.InputProfile.before_step, profile.InputProfile.after_step = timed_before, timed_after
with qk.QueueSession() as qs:
    b = qk.tfrecord_batches(cfg["files"], batch_size=32, num_readers=2)
    step = tf.reduce_sum(tf.cast(b["label"], tf.float32)) + tf.reduce_sum(b["image"][:, 0, 0])
    for _ in range(20):
        qs.run(step)
    spent[0] = 0.0
    prof = profile.profile_of(qs.coordinator)
    since = prof.counts()  # the window after the warm-up
    traced, extra = prof.traced_runs, prof.trace_secs
    start = time.perf_counter()
    while time.perf_counter() - start < cfg["seconds"]:
        qs.run(step)
        runs += 1
        if cfg["step_ms"]:
            time.sleep(cfg["step_ms"] / 1000)
    total = time.perf_counter() - start
    report = prof.reports(since)[0]
    # What the profile measured itself: each traced run's time less an untraced run's.
    traced, extra = prof.traced_runs - traced, prof.trace_secs - extra
print(json.dumps({"python": spent[0] / total, "trace": extra / total,
                  "runs": runs, "traced": traced,
                  "verdict": str(report), "wait": report.wait_fraction}))
"""


def account(cfg):
    out = subprocess.run([sys.executable, "-c", ACCOUNT, ROOT, json.dumps(cfg)], check=True,
                         capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    args = arguments("9d23b71")  # the commit before the profile
    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        accounted = [account(dict(files=files, seconds=args.seconds, step_ms=0))
                     for _ in range(3)]
        verdicts = {ms: account(dict(files=files, seconds=args.seconds, step_ms=ms))
                    for ms in (0, 30)}
        base = os.path.join(tmp, "baseline")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", base,
                        args.baseline], check=True)
        try:
            rows = {"baseline": [], "profile": []}
            order = random.Random(0)
            cfg = dict(files=files, readers=2, read_many=None, seconds=args.seconds)
            for _ in range(args.rounds):
                pair = [("baseline", base), ("profile", ROOT)]
                order.shuffle(pair)
                for name, root in pair:
                    rows[name].append(measure(root, cfg))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base],
                           check=False)
    print(f"workload (a), {args.records} records, 2 readers, {args.seconds:g} s per run")
    for a in accounted:
        print(f"  accounted: profile's Python {a['python']:.2%} of the loop, traced runs' "
              f"extra time {a['trace']:.2%} ({a['traced']} of {a['runs']} runs traced)")
    ratios = [p / b for p, b in zip(rows["profile"], rows["baseline"], strict=True)]
    print(f"  against {args.baseline}: baseline {statistics.median(rows['baseline']):,.0f} "
          f"rec/s, with the profile {statistics.median(rows['profile']):,.0f} rec/s, ratio "
          f"{statistics.median(ratios):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
    for ms, v in verdicts.items():
        print(f"  step {ms} ms: {v['verdict']}")


if __name__ == "__main__":
    main()
