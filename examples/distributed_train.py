"""The TF1 example trained with between-graph replication on TF's gRPC runtime (ps/worker).

    python examples/distributed_train.py --local-cluster 2 [--workdir DIR] [--epochs 2] [--sync]

``--local-cluster N`` makes the data, then starts 1 parameter server and N
workers as processes on loopback (one ``TF_CONFIG`` each) and waits for them.
On real hosts run the same script on each host with that host's ``TF_CONFIG``
and a ``--workdir`` every host can read (the chief writes checkpoints there)::

    TF_CONFIG='{"cluster": {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]},
                "task": {"type": "worker", "index": 0}}' \\
        python examples/distributed_train.py --workdir /shared/run

The variables and the global step live on the ps (``replica_device_setter``);
each worker's input is pinned to it by ``tfrecord_batches`` and takes files
from a work queue on the ps, so a fast worker reads more files and every file is
read once per epoch across the workers; the chief (worker 0) restores and
checkpoints through ``qk.monitored_training_session``. Each worker prints one
JSON line: its task, the records and batches it trained on and the global step it
saw last.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

import tensorflow as tf

import queuekit as qk

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_tf1 import make_splits, model  # noqa: E402

v1 = tf.compat.v1


def run_task(task: qk.ClusterTask, args) -> dict | None:
    """Serve (a ps: until killed) or train (a worker) as ``task``."""
    server = qk.start_server(task)
    if task.job == "ps":
        server.join()  # parameter servers never end on their own: the launcher ends them
        return None
    files = sorted(os.path.join(args.workdir, "data", f)
                   for f in os.listdir(os.path.join(args.workdir, "data"))
                   if f.startswith("train") and f.endswith(".tfrecords"))
    with open(os.path.join(args.workdir, "classes")) as f:
        classes = int(f.read())
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=task.spec, worker_device=task.device)):
        batch = qk.tfrecord_batches(
            files, batch_size=args.batch_size, num_epochs=args.epochs, shuffle=True, seed=0,
            source=qk.cluster.WorkQueueInput("/job:ps/task:0", lost_after_secs=10.0))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=batch["label"], logits=model(batch["image"], classes)))
        global_step = v1.train.get_or_create_global_step()
        optimizer = v1.train.AdamOptimizer(2e-3)
        hooks = []
        if args.sync:
            workers = len(task.cluster["worker"])
            optimizer = v1.train.SyncReplicasOptimizer(optimizer, workers, workers)
            hooks.append(optimizer.make_session_run_hook(task.is_chief))
        train_op = optimizer.minimize(loss, global_step=global_step)
        records = tf.shape(batch["label"])[0]
    seen = step = batches = 0
    with graph.as_default(), qk.monitored_training_session(
            master=server.target, is_chief=task.is_chief, hooks=hooks,
            checkpoint_dir=os.path.join(args.workdir, "model") if task.is_chief else None,
            save_checkpoint_secs=None, save_checkpoint_steps=50, save_summaries_steps=None,
            log_step_count_steps=0) as sess:
        while not sess.should_stop():
            _, n, step = sess.run([train_op, records, global_step])
            seen, batches = seen + int(n), batches + 1
    result = {"task": task.device, "records": seen, "batches": batches,
              "global_step": int(step)}
    print(json.dumps(result), flush=True)
    return result


def launch(args) -> int:
    """Make the data, run 1 ps + N workers on loopback, wait for the workers."""
    # Several train files, so that the work queue has something to share out.
    train, _, classes = make_splits(args.workdir, args.images, shards=8)
    with open(os.path.join(args.workdir, "classes"), "w") as f:
        f.write(str(classes))
    rest = ["--workdir", args.workdir, "--epochs", str(args.epochs),
            "--batch-size", str(args.batch_size)] + (["--sync"] if args.sync else []) + (
            ["--verbose"] if args.verbose else [])
    trained = 0
    with qk.LocalCluster([sys.executable, os.path.abspath(__file__), *rest],
                         workers=args.local_cluster, stdout=subprocess.PIPE, text=True) as cluster:
        codes = cluster.wait_workers()
        for device, proc in cluster.processes.items():
            if "/job:worker/" in device:
                out = proc.stdout.read()
                sys.stdout.write(out)
                trained += sum(json.loads(line)["records"] for line in out.splitlines()
                               if line.startswith("{"))
    # Every record once per epoch is the aim; say it plainly when the job fell short.
    expected = args.epochs * qk.inspect_tfrecords(train).records
    print(json.dumps({"trained": trained, "expected": expected}), flush=True)
    if trained < expected:
        print(f"distributed_train: trained {trained} of {expected} records: "
              f"{expected - trained} were read and never trained"
              + (" (SyncReplicasOptimizer: the job ends when the chief's input does; batches "
                 "dequeued for steps that got no token are dropped)" if args.sync else ""),
              file=sys.stderr, flush=True)
    print(json.dumps({"exit_codes": codes}), flush=True)
    return max(codes.values(), default=0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local-cluster", type=int, default=0, metavar="N")
    ap.add_argument("--workdir", default="queuekit-distributed")
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--sync", action="store_true", help="SyncReplicasOptimizer")
    ap.add_argument("--verbose", action="store_true", help="log queuekit's decisions")
    args = ap.parse_args(argv)
    if args.verbose:
        logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("queuekit").setLevel(logging.DEBUG)
    if args.local_cluster:
        return launch(args)
    if os.environ.get(qk.LocalCluster.PARENT_ENV):
        qk.exit_with_parent()
    task = qk.cluster_from_env()
    if task is None:
        ap.error("set TF_CONFIG (one per host), or try --local-cluster N")
    run_task(task, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
