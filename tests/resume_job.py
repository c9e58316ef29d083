"""A training job for the run-with-breaks tests (tests/test_resume.py), run as a process.

argv[1] is a JSON config. Every step is logged as ``<run> <global step> <ids...>`` by a
hook that runs before the checkpoint hook, so a checkpoint never includes a step whose
line is not on disk. Prints each step, then ``done``.
"""

import json
import os
import signal
import sys

import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import queuekit as qk  # noqa: E402
from queuekit.resume import tally as position  # noqa: E402

v1 = tf.compat.v1
cfg = json.loads(sys.argv[1])
ckdir = cfg["ckdir"]

if cfg.get("crash_after_input_state"):
    # The failure injected between the two writes: the input position of checkpoint N is
    # on disk, its model files never will be.
    saves = [0]
    original = position.InputPositions.save

    def save_then_die(self, prefix):
        original(self, prefix)
        saves[0] += 1
        if saves[0] == cfg["crash_after_input_state"]:
            os.kill(os.getpid(), signal.SIGKILL)

    position.InputPositions.save = save_then_die

graph = tf.Graph()
with graph.as_default():
    if cfg.get("fixed"):
        batch = qk.fixed_length_batches(cfg["files"], record_bytes=8, batch_size=cfg["batch"],
                                        num_epochs=cfg["epochs"], shuffle=cfg["shuffle"],
                                        seed=cfg.get("seed"), num_readers=cfg["readers"],
                                        read_many=cfg.get("read_many"),
                                        parse_fn=lambda v: {
                                            "id": tf.io.decode_raw(v, tf.int64)[..., 0]})
    else:
        batch = qk.prefetched(qk.tfrecord_batches(
            cfg["files"], batch_size=cfg["batch"], num_epochs=cfg["epochs"],
            shuffle=cfg["shuffle"], seed=cfg.get("seed"), num_readers=cfg["readers"],
            num_threads=cfg.get("threads", 1), read_many=cfg.get("read_many"),
            source=qk.cluster.WorkQueueInput("") if cfg.get("work_queue") else None,
            parse_fn=lambda s: tf.io.parse_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})
            if cfg.get("read_many") else tf.io.parse_single_example(
                s, {"id": tf.io.FixedLenFeature([], tf.int64)})), cfg.get("prefetch", 0))
    step = v1.train.get_or_create_global_step()
    with tf.control_dependencies([batch["id"]]):
        train = step.assign_add(1)
    saver = v1.train.Saver(max_to_keep=1000)

log = open(cfg["log"], "a")


class Log(v1.train.SessionRunHook):
    def before_run(self, run_context):
        return v1.train.SessionRunArgs([train, batch["id"]])

    def after_run(self, run_context, run_values):
        s, ids = run_values.results
        log.write(f"{cfg['run']} {s} {' '.join(str(i) for i in ids.tolist())}\n")
        log.flush()


hooks = [Log()]
if cfg.get("preempt"):
    hooks.append(qk.PreemptionCheckpointHook(ckdir, saver=saver, checkpoint_basename="model"))
if cfg["save"] == "hook":
    hooks.append(v1.train.CheckpointSaverHook(ckdir, save_steps=cfg["every"], saver=saver))
with qk.QueueSession(graph, checkpoint_dir=ckdir, hooks=hooks) as qs:
    print("ready", flush=True)
    while True:
        try:
            s, _ = qs.run([train, batch["id"]])
        except qk.EndOfData:
            break
        if cfg["save"] == "saver" and s % cfg["every"] == 0:
            saver.save(qs, os.path.join(ckdir, "model"), global_step=s)
        print(s, flush=True)
print("done", flush=True)
