"""The graphs of the cluster tests, shared by the test process and its worker processes."""

import tensorflow as tf

import queuekit as qk

v1 = tf.compat.v1


def parse(serialized):
    return tf.io.parse_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})


def worker_graph(cluster, i, scope, build):
    """Worker ``i``'s graph: a step counter on the ps, the input ``build()`` on the worker."""
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{i}")):
        with v1.variable_scope(scope):  # a fresh name on the shared ps for every test
            step = v1.get_variable("step", [], tf.int64, v1.zeros_initializer(),
                                   trainable=False)
        batch = build()
        # After the dequeue, as a training step would be: without the dependency the last
        # run's increment could land although its dequeue ended the input (CI saw step 21
        # after 20 batches).
        with tf.control_dependencies(tf.nest.flatten(batch)):
            count = step.assign_add(1)
    return graph, batch, count


def work_batches(files, name, **kw):
    """Two epochs of ids from a work queue on the ps."""
    kw = {"num_epochs": 2, "capacity": 20, **kw}
    lost = {k: kw.pop(k) for k in ("lost_after_secs", "on_lost") if k in kw}
    return qk.tfrecord_batches(files, batch_size=10, parse_fn=parse, read_many=8,
                               source=qk.cluster.WorkQueueInput("/job:ps/task:0", **lost),
                               name=name, **kw)
