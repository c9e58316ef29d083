"""On TF's gRPC runtime: 1 ps + 2 worker servers as processes on loopback, shared by the tests.

Each worker's session runs in a thread of this process against its worker's
server (``target=grpc://...``), so the readers, queues and epoch counters run in
the worker processes, and killing one kills that worker's half of the job.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

import queuekit as qk
from tests.helpers import default_signals, write_id_records

v1 = tf.compat.v1
SERVER = os.path.join(os.path.dirname(__file__), "cluster_server.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.timeout(120) if hasattr(pytest.mark, "timeout") else []


def _wait_ready(proc):
    line = proc.stdout.readline()
    assert line.strip() == b"ready", f"a server did not start: {line!r}"


@pytest.fixture(scope="module")
def cluster():
    c = qk.LocalCluster([sys.executable, SERVER], workers=2, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, preexec_fn=default_signals)
    with c:
        for proc in c.processes.values():
            _wait_ready(proc)
        yield c
    assert all(p.poll() is not None for p in c.processes.values()), "a task outlived close"
    for addresses in c.cluster.values():  # no port stays bound
        for address in addresses:
            with socket.socket() as s:  # REUSEADDR: a closed server's TIME_WAIT is no listener
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))


def _ids(tmp_path, n_files=8, per_file=25):
    return [str(write_id_records(tmp_path / f"{k}.tfrecords", per_file, start=per_file * k))
            for k in range(n_files)]


def _parse(serialized):
    return tf.io.parse_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})


def _graph(c, i, scope, build):
    """Worker ``i``'s graph: a step counter on the ps, the input ``build()`` on the worker."""
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=c.cluster, worker_device=f"/job:worker/task:{i}")):
        with v1.variable_scope(scope):  # a fresh name on the shared ps for every test
            step = v1.get_variable("step", [], tf.int64, v1.zeros_initializer(),
                                   trainable=False)
        batch = build()
        count = step.assign_add(1)
    return graph, batch, count


def _target(c, i):
    return "grpc://" + c.cluster["worker"][i]


def _run(c, i, graph, batch, count, out, *, after_batch=None, **kw):
    """Worker ``i``: read every batch, counting steps on the ps; ids into ``out[i]``."""
    ids, steps = [], 0
    try:
        with qk.QueueSession(graph, target=_target(c, i), is_chief=i == 0,
                             stall_timeout_secs=30, **kw) as qs:
            for x, step in qs.iterate([batch, count]):
                ids, steps = ids + x["id"].tolist(), step
                if after_batch:
                    after_batch(len(ids))
    except Exception as e:  # noqa: BLE001 - handed to the test
        out[f"error{i}"] = e
    out[i], out[f"steps{i}"] = ids, steps


def _threads(*targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive(), "a worker did not finish"


def test_static_shards_read_everything_once(cluster, tmp_path):
    files, out = _ids(tmp_path), {}
    graphs = [_graph(cluster, i, "static", lambda i=i: qk.tfrecord_batches(
        files, batch_size=10, num_epochs=1, parse_fn=_parse, read_many=8, shard=(i, 2)))
        for i in range(2)]
    _threads(*[lambda i=i: _run(cluster, i, *graphs[i], out) for i in range(2)])
    assert "error0" not in out and "error1" not in out, out
    assert sorted(out[0] + out[1]) == list(range(200))
    assert set(out[0]).isdisjoint(out[1])
    batches = sum(-(-len(out[i]) // 10) for i in range(2))  # each worker's last may be short
    assert max(out["steps0"], out["steps1"]) == batches  # the global count on the ps


def test_a_work_queue_gives_each_file_once_and_a_late_worker_gets_work(cluster, tmp_path):
    files, out = _ids(tmp_path, n_files=12), {}
    late_started, late_read = threading.Event(), threading.Event()

    def chief_paced(n):
        if n and not late_started.is_set():
            late_started.set()
            assert late_read.wait(60), "the late worker never got a file"

    graphs = [_graph(cluster, i, "work", lambda: qk.tfrecord_batches(
        files, batch_size=10, num_epochs=2, parse_fn=_parse, read_many=8,
        work_queue="/job:ps/task:0", name="work_once", capacity=20)) for i in range(2)]

    def late():
        assert late_started.wait(60)
        _run(cluster, 1, *graphs[1], out, after_batch=lambda n: late_read.set())

    _threads(lambda: _run(cluster, 0, *graphs[0], out, after_batch=chief_paced), late)
    assert "error0" not in out and "error1" not in out, out
    assert out[0] and out[1], {k: len(v) for k, v in out.items() if isinstance(k, int)}
    assert sorted(out[0] + out[1]) == sorted(list(range(300)) * 2)  # two epochs, once each


def test_a_late_non_chief_never_reinitialises_and_leaves_shared_queues_open(cluster, tmp_path):
    graph = tf.Graph()
    with graph.as_default(), v1.device("/job:ps/task:0"):
        value = v1.get_variable("late_value", [], tf.int64, v1.zeros_initializer())
        shared = tf.queue.FIFOQueue(10, [tf.int64], [[]], shared_name="late_shared")
        bump, closed = value.assign_add(5), shared.is_closed()
        feed = shared.enqueue([value])
    with qk.QueueSession(graph, target=_target(cluster, 0), is_chief=True) as chief:
        chief.run(bump)
        with qk.QueueSession(graph, target=_target(cluster, 1), is_chief=False) as late:
            assert late.run(value) == 5  # the non-chief waited, and did not re-initialise
            late.run(feed)
        assert not chief.run(closed)  # the non-chief's shutdown left the shared queue open
        assert chief.run(bump) == 10


def test_cluster_from_env_reads_tf_config():
    config = {"cluster": {"ps": ["a:1"], "worker": ["b:2", "c:3"]},
              "task": {"type": "worker", "index": 1}}
    task = qk.cluster_from_env({"TF_CONFIG": json.dumps(config)})
    assert (task.job, task.task, task.address, task.is_chief) == ("worker", 1, "c:3", False)
    assert task.device_filters() == ["/job:ps", "/job:worker/task:1"]
    assert qk.cluster_from_env({}) is None
    with pytest.raises(qk.ClusterError, match="TF_CONFIG"):
        qk.cluster_from_env({"TF_CONFIG": '{"cluster": {}}'})
    with pytest.raises(qk.ClusterError, match="task 5"):
        qk.ClusterTask(config["cluster"], "worker", 5)


def test_a_taken_port_is_named():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        task = qk.ClusterTask({"worker": [f"localhost:{port}"]}, "worker", 0)
        with pytest.raises(qk.ClusterError, match=f"port {port}"):
            qk.start_server(task)


def test_fewer_files_than_shards_is_an_error(tmp_path):
    files = _ids(tmp_path, n_files=2)
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError, match="shard_by='record'"):
        qk.tfrecord_batches(files, shard=(0, 3), parse_fn=_parse, read_many=4)


def test_record_shards_split_every_file(tmp_path):
    files, seen = _ids(tmp_path, n_files=2), []
    for i in range(3):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(files, batch_size=5, num_epochs=1, parse_fn=_parse,
                                    read_many=4, shard=(i, 3), shard_by="record")
            seen.append([j for x in qs.iterate(b) for j in x["id"].tolist()])
    assert sorted(sum(seen, [])) == list(range(50)) and all(seen)


def _running(pid):
    """Alive and not a zombie (a container's pid 1 may never reap an orphan)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_launcher_takes_its_servers_along(tmp_path):
    code = (f"import subprocess, sys; sys.path.insert(0, {ROOT!r}); import queuekit as qk\n"
            f"c = qk.LocalCluster([sys.executable, {SERVER!r}], workers=0, ps=1, "
            f"stdout=subprocess.PIPE).start()\n"
            f"(p,) = c.processes.values(); print(p.stdout.readline().decode().strip(), p.pid, "
            f"flush=True)\nimport threading; threading.Event().wait()\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                preexec_fn=default_signals)
    try:
        ready, pid = launcher.stdout.readline().split()
        assert ready == "ready"
        launcher.kill()
        launcher.wait(10)
        for _ in range(200):  # the kernel's parent-death signal: bounded wait for the ps
            if not _running(int(pid)):
                break
            threading.Event().wait(0.05)
        else:
            os.kill(int(pid), signal.SIGKILL)
            pytest.fail("the ps outlived its killed launcher")
    finally:
        if launcher.poll() is None:
            launcher.kill()
