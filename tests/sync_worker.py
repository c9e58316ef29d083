"""A task of the SyncReplicasOptimizer loss test: the ps, the victim or the survivor.

The survivor, once the file ``args["go"]`` exists, trains its shard with a short
stall timeout and prints one JSON line: the records it trained on and the error
it ended with. The victim (worker
``args["victim"]``) trains one step, prints "ready" and waits on stdin (holding a
token) for the test to kill it.
"""

import json
import os
import sys
import time

import tensorflow as tf

import queuekit as qk
from tests.cluster_jobs import parse

v1 = tf.compat.v1
qk.exit_with_parent()
args = json.loads(sys.argv[1])
task = qk.cluster_from_env()
server = qk.start_server(task)
if task.job == "ps":
    server.join()
graph = tf.Graph()
with graph.as_default(), v1.device(v1.train.replica_device_setter(
        cluster=task.spec, worker_device=task.device)):
    batch = qk.tfrecord_batches(args["files"], batch_size=5, num_epochs=1, parse_fn=parse,
                                read_many=8, source=(task.task, 2))
    w = v1.get_variable("w", [], tf.float32, v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.cast(batch["id"], tf.float32) * 1e-3 - w))
    step = v1.train.get_or_create_global_step()
    opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2, 2)
    train = opt.minimize(loss, global_step=step)
records, error = 0, None
try:
    with graph.as_default(), qk.monitored_training_session(
            master=server.target, is_chief=task.is_chief,
            hooks=[opt.make_session_run_hook(task.is_chief)], save_checkpoint_secs=None,
            save_summaries_steps=None, log_step_count_steps=0, stop_grace_period_secs=5,
            stall_timeout_secs=args["stall"]) as sess:
        while task.task != args["victim"] and not os.path.exists(args["go"]):
            time.sleep(0.02)  # the survivor starts once the victim is dead
        while not sess.should_stop():
            x, _ = sess.run([batch, train])
            records += len(x["id"])
            if task.task == args["victim"]:
                print("ready", flush=True)
                sys.stdin.readline()
except Exception as e:  # noqa: BLE001 - reported to the test
    error = {"type": type(e).__name__, "message": str(e)}
print(json.dumps({"records": records, "error": error}), flush=True)
