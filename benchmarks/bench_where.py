"""Where a queuekit pipeline's time goes, per op: the step's side and the readers' side.

    python benchmarks/bench_where.py [--records 2000] [--runs 60]

Workload (a) of docs/benchmarks.rst (256x256x3 raw records written by `make`,
batches of 32 consumed in the graph), with 2 readers one record per read and
with 1 reader reading 64 at a time. While the runner threads run, TensorFlow's
step statistics (``RunOptions.FULL_TRACE``) of ``--runs`` runs of the step, and
of as many runs of one reader's enqueue op made from the main thread (the same
op its runner thread runs), summed per op type: the mean microseconds a run
spends in each (ops of one run may overlap) and the run's mean wall time.
"""

import argparse
import collections
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402
from workloads import ROOT, workload_a  # noqa: E402


def traced(sess, fetch, runs: int):
    """(mean wall us of a run, {op type: mean us per run}) over ``runs`` traced runs."""
    import tensorflow as tf

    v1 = tf.compat.v1
    per_type: collections.Counter = collections.Counter()
    wall = 0.0
    for _ in range(runs):
        metadata = v1.RunMetadata()
        start = time.perf_counter()
        sess.run(fetch, options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE,
                                              timeout_in_ms=60_000), run_metadata=metadata)
        wall += time.perf_counter() - start
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                kind = node.timeline_label.split("(")[0].split("=")[-1].strip() or node.node_name
                per_type[kind] += node.all_end_rel_micros
    return wall / runs * 1e6, {k: v / runs for k, v in per_type.items()}


def _consume(sess, step, done) -> None:
    while not done.is_set():
        sess.run(step)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=60)
    args = smoke.parse(ap, records=64, runs=3)
    sys.path.insert(0, ROOT)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import queuekit as qk

    with tempfile.TemporaryDirectory() as tmp:
        files = workload_a(tmp, args.records)
        for readers, read_many in ((2, None), (1, 64)):
            with qk.QueueSession() as qs:
                batch = qk.tfrecord_batches(files, batch_size=32, num_readers=readers,
                                            read_many=read_many)
                step = tf.reduce_sum(tf.cast(batch["label"], tf.float32)) + tf.reduce_sum(
                    batch["image"][:, 0, 0])
                for _ in range(20):
                    qs.run(step)
                # The batch queue's runner: its enqueue ops are the readers' read, parse, enqueue.
                runner = next(qr for qr in tf.compat.v1.get_collection(
                    tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
                    if qr.queue.name.split("/")[-2].startswith(("batch", "shuffle_batch")))
                sides = {"step": traced(qs.session, step, args.runs)}
                # The queue is full by now: a step in another thread makes room for our
                # enqueues (the runner threads compete for it, as they do for each other).
                done = threading.Event()
                consumer = threading.Thread(target=_consume, args=(qs.session, step, done))
                consumer.start()
                try:
                    sides["a reader's enqueue"] = traced(qs.session, runner.enqueue_ops[0],
                                                         args.runs)
                finally:
                    done.set()
                    consumer.join()
            print(f"readers={readers} read_many={read_many or 0}")
            for side, (wall, ops) in sides.items():
                # A queue op's time is mostly waiting: for a batch (the step's dequeue), for
                # room (an enqueue into a full queue): shown apart from the work.
                waits = {k: v for k, v in ops.items() if k.startswith("QueueEnqueue")
                         or k.startswith("QueueDequeue")}
                print(f"  {side}: {wall:,.0f} us a run (traced); in queue ops (waiting and "
                      f"copying): " + ", ".join(f"{k} {v:,.0f} us" for k, v in waits.items()))
                work = sorted(((k, v) for k, v in ops.items() if k not in waits),
                              key=lambda kv: -kv[1])
                for kind, us in work[:8]:
                    print(f"    {us:9,.0f} us  {kind}")


if __name__ == "__main__":
    main()
