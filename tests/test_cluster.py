"""On TF's gRPC runtime: 1 ps + 2 worker servers as processes on loopback, shared by the tests.

Each worker's session runs in a thread of this process against its worker's
server (``target=grpc://...``), so the readers, queues and epoch counters run in
the worker processes, and killing one kills that worker's half of the job.
"""

import collections
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
from tests.cluster_jobs import parse, work_batches, worker_graph
from tests.helpers import default_signals, patience, write_id_records

v1 = tf.compat.v1
SERVER = os.path.join(os.path.dirname(__file__), "cluster_server.py")
WORKER = os.path.join(os.path.dirname(__file__), "cluster_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.slow]


def _wait_ready(proc):
    line = proc.stdout.readline()
    assert line.strip() == b"ready", f"a server did not start: {line!r}"


@pytest.fixture(scope="module")
def cluster():
    """1 ps and 2 worker servers; a third worker slot for a test's own worker process."""
    c = qk.LocalCluster([sys.executable, SERVER], workers=3, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, preexec_fn=default_signals)
    try:
        for job, i in (("ps", 0), ("worker", 0), ("worker", 1)):
            _wait_ready(c.start_task(job, i))
        yield c
    finally:
        c.close()
    assert all(p.poll() is not None for p in c.processes.values()), "a task outlived close"
    for addresses in c.cluster.values():  # no port stays bound
        for address in addresses:
            with socket.socket() as s:  # REUSEADDR: a closed server's TIME_WAIT is no listener
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))


def _ids(tmp_path, n_files=8, per_file=25):
    return [str(write_id_records(tmp_path / f"{k}.tfrecords", per_file, start=per_file * k))
            for k in range(n_files)]


def _graph(c, i, scope, build):
    return worker_graph(c.cluster, i, scope, build)


def _filters(i):
    """What start_server's sessions get: worker 2 may be absent (not started, or killed)."""
    return v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{i}"])


def _target(c, i):
    return "grpc://" + c.cluster["worker"][i]


def _run(c, i, graph, batch, count, out, *, after_batch=None, **kw):
    """Worker ``i``: read every batch, counting steps on the ps; ids into ``out[i]``."""
    ids, steps = [], 0
    try:
        with qk.QueueSession(graph, target=_target(c, i), is_chief=i == 0,
                             stall_timeout_secs=30, config=_filters(i), **kw) as qs:
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
    """Two workers with shard=(i, 2) read 200 records, each once, and count steps on the ps."""
    files, out = _ids(tmp_path), {}
    graphs = [_graph(cluster, i, "static", lambda i=i: qk.tfrecord_batches(
        files, batch_size=10, num_epochs=1, parse_fn=parse, read_many=8, source=(i, 2)))
        for i in range(2)]
    _threads(*[lambda i=i: _run(cluster, i, *graphs[i], out) for i in range(2)])
    assert "error0" not in out and "error1" not in out, out
    assert sorted(out[0] + out[1]) == list(range(200))
    assert set(out[0]).isdisjoint(out[1])
    batches = sum(-(-len(out[i]) // 10) for i in range(2))  # each worker's last may be short
    assert max(out["steps0"], out["steps1"]) == batches  # the global count on the ps


def test_a_corrupt_file_on_one_worker_is_named_there_and_the_other_finishes(cluster, tmp_path):
    """A bad record CRC in worker 1's shard (files 1 and 3): worker 1 raises DataLossError
    naming the file; worker 0 reads its whole shard."""
    files, out = _ids(tmp_path, n_files=4), {}
    data = bytearray(open(files[3], "rb").read())
    data[12 + 50] ^= 0xFF  # inside record 0's data: its CRC no longer matches
    open(files[3], "wb").write(bytes(data))
    graphs = [_graph(cluster, i, "corrupt", lambda i=i: qk.tfrecord_batches(
        files, batch_size=10, num_epochs=1, parse_fn=parse, read_many=8, source=(i, 2),
        name="corrupt"))  # queues live on the servers: not the static test's closed ones
        for i in range(2)]
    _threads(*[lambda i=i: _run(cluster, i, *graphs[i], out) for i in range(2)])
    assert "error0" not in out, out
    assert sorted(out[0]) == list(range(0, 25)) + list(range(50, 75))  # files 0 and 2
    error = out["error1"]
    assert isinstance(error, tf.errors.DataLossError)
    notes = " ".join(getattr(error, "__notes__", []))
    assert f"the corrupt record is in {files[3]}: record 0 at byte offset 0" in notes, notes
    assert "task:1" in str(error)  # TF's own part of the message: where the read failed


def test_a_work_queue_gives_each_file_once_and_a_late_worker_gets_work(cluster, tmp_path):
    """Files from the ps's work queue: each is read once across the workers, and a worker that
    starts late still gets files."""
    files, out = _ids(tmp_path, n_files=12), {}
    late_started, late_read = threading.Event(), threading.Event()

    def chief_paced(n):
        if n and not late_started.is_set():
            late_started.set()
            assert late_read.wait(60), "the late worker never got a file"

    graphs = [_graph(cluster, i, "work", lambda: work_batches(files, "work_once"))
              for i in range(2)]

    def late():
        assert late_started.wait(60)
        _run(cluster, 1, *graphs[1], out, after_batch=lambda n: late_read.set())

    _threads(lambda: _run(cluster, 0, *graphs[0], out, after_batch=chief_paced), late)
    assert "error0" not in out and "error1" not in out, out
    assert out[0] and out[1], {k: len(v) for k, v in out.items() if isinstance(k, int)}
    assert sorted(out[0] + out[1]) == sorted(list(range(300)) * 2)  # two epochs, once each


def _victim(c, files, name, options):
    """Worker 2 as its own process, holding its files after its first batch."""
    env = dict(os.environ, TF_CONFIG=json.dumps(
        {"cluster": c.cluster, "task": {"type": "worker", "index": 2}}),
        PYTHONPATH=ROOT, **{qk.LocalCluster.PARENT_ENV: str(os.getpid())})
    args = {"files": files, "name": name, "scope": name, "hold": True, "options": options}
    return subprocess.Popen([sys.executable, WORKER, json.dumps(args)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, preexec_fn=default_signals)


def _kill_mid_epoch(c, tmp_path, name, on_lost):
    """The chief, worker 1 and worker 2 (a process, SIGKILLed holding files) on one work
    queue; (what each survivor read, what the victim printed)."""
    files, out = _ids(tmp_path, n_files=12), {}
    options = {"lost_after_secs": 2.0, "on_lost": on_lost}
    graphs = [_graph(c, i, name, lambda: work_batches(files, name, **options))
              for i in range(2)]
    killed, victim_ids = threading.Event(), []
    victim = _victim(c, files, name, options)

    def kill_after_first_batch():
        line = victim.stdout.readline()  # after the chief filled the queue and started
        victim_ids.extend(json.loads(line) if line.startswith("[") else [])
        victim.kill()
        victim.wait(30)
        killed.set()

    def chief_paced(n):
        assert killed.wait(60), "the victim never read a batch"

    def second():
        assert killed.wait(60)
        _run(c, 1, *graphs[1], out)

    try:
        _threads(lambda: _run(c, 0, *graphs[0], out, after_batch=chief_paced), second,
                 kill_after_first_batch)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert victim_ids, "the victim read nothing before it was killed"
    return out, victim_ids


def test_a_killed_worker_s_files_are_read_again(cluster, tmp_path, caplog):
    """SIGKILL of a worker mid-epoch (on_lost="requeue"): its files are re-queued and the survivors
    deliver every record of both epochs once."""
    caplog.set_level("WARNING", logger="queuekit.cluster")
    out, victim_ids = _kill_mid_epoch(cluster, tmp_path, "killed_requeue", "requeue")
    assert "error0" not in out and "error1" not in out, out
    survivors = collections.Counter(out[0] + out[1])
    # The victim consumed one batch, less than a file: it finished none, so the survivors
    # read every one of its files again, and every file of both epochs exactly once.
    assert len(victim_ids) < 25
    assert survivors == collections.Counter(list(range(300)) * 2)
    assert "/job:worker/task:2" in caplog.text and "re-queued" in caplog.text


def test_a_killed_worker_s_files_are_named_on_the_chief(cluster, tmp_path):
    """SIGKILL of a worker mid-epoch (on_lost="raise"): the chief raises WorkLost naming the task
    and its files; nothing else is missing."""
    out, victim_ids = _kill_mid_epoch(cluster, tmp_path, "killed_raise", "raise")
    error = out.get("error0")
    assert isinstance(error, qk.WorkLost), (repr(error), out.get("error1"))
    # A file the victim was taking when it died has no task: "a task that died while taking".
    assert error.tasks[0] == "/job:worker/task:2" and error.files
    assert all("died while taking" in t for t in error.tasks[1:])
    assert all(f in str(error) for f in error.files)
    missing = collections.Counter(list(range(300)) * 2) - collections.Counter(out[0] + out[1])
    lost_ids = {int(os.path.basename(f).split(".")[0]) * 25 + j for f in error.files
                for j in range(25)}
    assert missing and set(missing) <= lost_ids  # nothing else is missing


def test_an_idle_worker_waiting_for_work_stops_at_once_and_takes_nothing(cluster, tmp_path):
    """Worker 1 closes while its relay waits in a take on the ps (the chief holds the only
    file): closing cancels that take; the chief still reads every record once."""
    files, out = _ids(tmp_path, n_files=1, per_file=100), {}  # more than the queues hold
    graphs = [_graph(cluster, i, "idle", lambda: work_batches(files, "idle", num_epochs=1))
              for i in range(2)]
    idle_done = threading.Event()

    def idle():
        with qk.QueueSession(graphs[1][0], target=_target(cluster, 1), is_chief=False,
                             config=_filters(1)) as qs:
            qs.start()  # its relay takes from the empty todo queue on the ps
        idle_done.set()  # closed without ShutdownTimeout

    def chief_paced(n):
        assert idle_done.wait(60), "the idle worker did not close"

    _threads(lambda: _run(cluster, 0, *graphs[0], out, after_batch=chief_paced), idle)
    assert "error0" not in out, out
    assert sorted(out[0]) == list(range(100))


def test_sync_replicas_training_ends_on_both_workers(cluster, tmp_path):
    """SyncReplicasOptimizer on static shards: every update waits for two gradients; when
    one worker's input ends both stop, none waits for a token or a gradient forever."""
    files, out = _ids(tmp_path, n_files=6), {}

    def build(i):
        graph = tf.Graph()
        with graph.as_default(), v1.device(v1.train.replica_device_setter(
                cluster=cluster.cluster, worker_device=f"/job:worker/task:{i}")):
            batch = qk.tfrecord_batches(files, batch_size=10, num_epochs=1, parse_fn=parse,
                                        read_many=8, source=(i, 2))
            w = v1.get_variable("w", [], tf.float32, v1.zeros_initializer())
            loss = tf.reduce_mean(tf.square(tf.cast(batch["id"], tf.float32) * 1e-3 - w))
            step = v1.train.get_or_create_global_step()
            opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2, 2)
            train = opt.minimize(loss, global_step=step)
        return graph, batch, train, step, opt.make_session_run_hook(i == 0)

    def worker(i):
        graph, batch, train, step, hook = build(i)
        ids, steps = [], 0
        try:
            with graph.as_default(), qk.monitored_training_session(
                    master=_target(cluster, i), is_chief=i == 0, hooks=[hook],
                    config=_filters(i), save_checkpoint_secs=None, save_summaries_steps=None,
                    log_step_count_steps=0, stop_grace_period_secs=5) as sess:
                while not sess.should_stop():
                    x, _, steps = sess.run([batch, train, step])
                    ids += x["id"].tolist()
        except Exception as e:  # noqa: BLE001 - handed to the test
            out[f"error{i}"] = e
        out[i], out[f"steps{i}"] = ids, steps

    _threads(lambda: worker(0), lambda: worker(1))
    assert "error0" not in out and "error1" not in out, out
    assert set(out[0]).isdisjoint(out[1])  # (a worker may get no token before the end:
    # every update takes any two gradients, the chief's own too)
    # The chief reads its whole shard: when worker 1 ends first it gives back the token it
    # held, and the chief goes on alone (without it, the chief's next step waits for a
    # token forever; had worker 1 closed the token queue, the chief's training would end
    # short). When the chief ends first, its closing the token queue ends worker 1's step.
    assert len(out[0]) == 75


def test_a_late_non_chief_never_reinitialises_and_leaves_shared_queues_open(cluster, tmp_path):
    """A non-chief that joins after the chief keeps the chief's variable values and does not close
    a queue shared on the ps."""
    graph = tf.Graph()
    with graph.as_default(), v1.device("/job:ps/task:0"):
        value = v1.get_variable("late_value", [], tf.int64, v1.zeros_initializer())
        shared = tf.queue.FIFOQueue(10, [tf.int64], [[]], shared_name="late_shared")
        bump, closed = value.assign_add(5), shared.is_closed()
        feed = shared.enqueue([value])
    with qk.QueueSession(graph, target=_target(cluster, 0), is_chief=True,
                         config=_filters(0)) as chief:
        chief.run(bump)
        with qk.QueueSession(graph, target=_target(cluster, 1), is_chief=False,
                             config=_filters(1)) as late:
            assert late.run(value) == 5  # the non-chief waited, and did not re-initialise
            late.run(feed)
        assert not chief.run(closed)  # the non-chief's shutdown left the shared queue open
        assert chief.run(bump) == 10


def test_cluster_from_env_reads_tf_config():
    """TF_CONFIG gives the task, its address, whether it is the chief and its device filters; a
    broken one is a ClusterError."""
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
    """A server whose port is taken fails with a ClusterError naming the port."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        task = qk.ClusterTask({"worker": [f"localhost:{port}"]}, "worker", 0)
        with pytest.raises(qk.ClusterError, match=f"port {port}"):
            qk.start_server(task)


def test_fewer_files_than_shards_is_an_error(tmp_path):
    """Fewer files than file shards is an error that points to Shard(..., by='record')."""
    files = _ids(tmp_path, n_files=2)
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError,
                                                  match=r"Shard\(\.\.\., by='record'\)"):
        qk.tfrecord_batches(files, source=(0, 3), parse_fn=parse, read_many=4)


def test_record_shards_split_every_file(tmp_path):
    """Record shards: three workers over two files read every record once, each some."""
    files, seen = _ids(tmp_path, n_files=2), []
    for i in range(3):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(files, batch_size=5, num_epochs=1, parse_fn=parse,
                                    read_many=4, source=qk.cluster.Shard(i, 3, by="record"))
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
    """A LocalCluster's servers die with their launcher, also when it is SIGKILLed."""
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


def test_sync_replicas_chief_trains_alone_after_a_worker_is_killed_between_steps(tmp_path):
    """SyncReplicasOptimizer, 2 worker processes, worker 1 SIGKILLed between steps (holding
    a token): the chief goes on alone and trains its whole shard."""
    files = _ids(tmp_path, n_files=4)
    script = os.path.join(os.path.dirname(__file__), "sync_worker.py")
    go = tmp_path / "go"
    args = json.dumps({"files": files, "stall": 20, "victim": 1, "go": str(go)})
    cluster = qk.LocalCluster([sys.executable, script, args], workers=2,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.PIPE, preexec_fn=default_signals,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        cluster.start_task("ps", 0)
        chief, victim = (cluster.start_task("worker", i) for i in range(2))
        assert victim.stdout.readline().strip() == b"ready"
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        go.write_text("")
        out, _ = chief.communicate(timeout=patience(60))
    finally:
        cluster.close()
    assert json.loads(out.decode().strip().splitlines()[-1]) == {"records": 50, "error": None}
    assert all(p.poll() is not None for p in cluster.processes.values())


@pytest.mark.parametrize("chief", [True, False])
def test_a_sync_token_stall_names_the_tasks_that_take_no_connection(chief):
    """A run waiting on SyncReplicasOptimizer's token queue, the other worker gone, stops at
    the stall bound with PipelineStalled naming that worker's task: at once on the chief
    (it closes the token queue); at close on worker 1, whose run the token it gives back
    lets end well."""
    from queuekit.cluster.launch import free_ports

    ports = free_ports(2)
    me, gone = (ports[0], ports[1]) if chief else (ports[1], ports[0])
    workers = [f"localhost:{p}" for p in ports]
    task = qk.ClusterTask({"worker": workers}, "worker", 0 if chief else 1)
    server = qk.start_server(task)
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        tokens = tf.queue.FIFOQueue(4, tf.int64, shapes=[], shared_name="sync_token_q",
                                    name="sync_token_q")
        token = tokens.dequeue()
        init = v1.global_variables_initializer()
    config = v1.ConfigProto(device_filters=[task.device])
    with v1.Session(server.target, graph=graph, config=config) as sess:
        sess.run(init)  # what the chief did before it died; the variable lives on the server
    other = 1 if chief else 0
    with pytest.raises(qk.PipelineStalled,
                       match=rf"take no connection: /job:worker/task:{other} \(localhost:{gone}"):
        with qk.QueueSession(graph, target=server.target, stall_timeout_secs=1,
                             config=config, is_chief=chief) as qs:
            assert qs.run(token) == 0  # only a non-chief gets here: the token it gave back
            assert qs.should_stop()
    assert step is not None


@pytest.mark.parametrize("behind", ["nothing", "another program"])
def test_a_ps_address_without_a_tensorflow_server_is_named_within_the_stall_bound(behind):
    """TF_CONFIG's ps address has nothing listening, or a program that accepts connections
    and says nothing (not a TensorFlow server): the first run fails within
    stall_timeout_secs with a ClusterError naming the ps task and address (it blocked for
    ever; with another program there the start probe, TCP only, let it through)."""
    from queuekit.cluster.launch import free_ports

    worker_port, ps_port = free_ports(2)
    other = None
    if behind == "another program":
        other = socket.socket()
        other.bind(("localhost", 0))
        other.listen(16)  # the kernel accepts; nobody reads or answers
        ps_port = other.getsockname()[1]
    why = "takes connections but does not answer" if other else ""
    try:
        task = qk.ClusterTask({"ps": [f"localhost:{ps_port}"],
                               "worker": [f"localhost:{worker_port}"]}, "worker", 0)
        server = qk.start_server(task)
        graph = tf.Graph()
        with graph.as_default(), tf.device("/job:ps/task:0"):
            weight = v1.get_variable("w", initializer=1.0)
        with pytest.raises(qk.ClusterError,
                           match=rf"/job:ps/task:0 \(localhost:{ps_port}: {why}"):
            with qk.QueueSession(graph, target=server.target, stall_timeout_secs=1,
                                 config=task.session_config()) as qs:
                qs.run(weight)
    finally:
        if other is not None:
            other.close()


_PS_KILLED = """
import json, sys, threading
sys.path.insert(0, {root!r})
import tensorflow as tf
import queuekit as qk
from tests.helpers import id_reader_batch, write_id_records
v1 = tf.compat.v1
task = qk.ClusterTask({cluster!r}, "worker", 0)
server = qk.start_server(task)
files = [write_id_records({tmp!r} + f"/{{k}}.tfrecords", 50, start=50 * k) for k in range(4)]
graph = tf.Graph()
with graph.as_default():
    with tf.device("/job:ps/task:0"):
        step = v1.train.get_or_create_global_step()
    with tf.device(task.device):
        batch = id_reader_batch(files, batch_size=5, num_epochs=None)
    train = tf.group(batch, v1.assign_add(step, 1))
error = None
try:
    with qk.QueueSession(graph, target=server.target, stall_timeout_secs=5,
                         config=task.session_config()) as qs:
        qs.run(train)
        print("ready", flush=True)
        sys.stdin.readline()  # the ps is killed meanwhile
        for _ in range(1000):
            qs.run(train)
except Exception as e:
    error = type(e).__name__
print(json.dumps({{"error": error}}), flush=True)
"""


def test_a_killed_ps_ends_the_worker_with_an_error_instead_of_a_hang(tmp_path):
    """SIGKILL of the ps mid-epoch: the worker's next step fails and its session closes within
    its bounds (TF's Session.close on a dead ps blocked for ever)."""
    ps = qk.LocalCluster([sys.executable, SERVER], workers=1, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, preexec_fn=default_signals)
    cluster = ps.cluster  # the worker's server runs in the worker process below
    worker = None
    try:
        _wait_ready(ps.start_task("ps", 0))
        worker = subprocess.Popen(
            [sys.executable, "-c", _PS_KILLED.format(root=ROOT, cluster=cluster,
                                                     tmp=str(tmp_path))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=default_signals)
        ready = worker.stdout.readline().strip()
        assert ready == "ready", worker.communicate(timeout=patience(30))[1]
        ps.processes["/job:ps/task:0"].kill()
        ps.processes["/job:ps/task:0"].wait(10)
        out, err = worker.communicate("go\n", timeout=patience(90))
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.communicate()
        ps.close()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["error"] is not None, err[-2000:]
