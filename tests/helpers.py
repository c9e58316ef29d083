"""Small builders shared by the tests."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from queuekit.records import images
from queuekit.records.example import make_example

v1 = tf.compat.v1
MAX_PATIENCE = 10.0


def patience(seconds: float) -> float:
    """``seconds`` stretched by how loaded the machine is now (runnable tasks per core over
    the last minute, at least 1, at most :data:`MAX_PATIENCE`): a bound on a wait that holds
    on a busy machine as on a quiet one. Only ever a bound: no test waits it out."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return seconds * min(MAX_PATIENCE, max(1.0, load))


def write_id_records(path, n, *, start=0):
    """A TFRecord file of n records whose ``id`` feature is start..start+n-1."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(start, start + n):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "payload": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x" * 100])),
            }))
            w.write(ex.SerializeToString())
    return str(path)


def id_reader_batch(files, *, batch_size=8, num_threads=1, num_epochs=1):
    """The hand-written TF1 pipeline: producer -> TFRecordReader -> parse -> batch."""
    fq = v1.train.string_input_producer(files, num_epochs=num_epochs, shuffle=False)
    _, ser = v1.TFRecordReader().read(fq)
    feats = tf.io.parse_single_example(ser, {"id": tf.io.FixedLenFeature([], tf.int64)})
    return v1.train.batch([feats["id"]], batch_size=batch_size, num_threads=num_threads,
                          allow_smaller_final_batch=True)


def default_signals():
    """In a child: SIGINT, SIGHUP and SIGTERM at their defaults (a shell, CI or nohup may
    have left one ignored, and a child inherits that)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def run_script(code, *args, **kw):
    """Run ``code`` in a fresh Python with the usual signals at their defaults."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_signals,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)


def signal_when_ready(child, sig, *, ready="ready", grace=0.0):
    """Wait for ``child`` to print ``ready``, send ``sig`` after a tiny ``grace`` (so its main
    thread is inside the loop or the blocking run), and wait for it to end.

    Returns (stdout, stderr, seconds from the signal to the exit). The child is killed
    if it is still alive when this returns or fails.
    """
    try:
        line = child.stdout.readline().strip()
        assert line == ready, child.communicate(timeout=patience(30))[1][-2000:]
        if grace:
            time.sleep(grace)
        sent = time.monotonic()
        child.send_signal(sig)
        out, err = child.communicate(timeout=patience(30))
        return out, err, time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def signal_when(child, ready, sig, *, within=90.0, poll=0.01):
    """Poll ``ready()`` while ``child`` runs (at most ``within`` s), then send ``sig`` and wait
    for the end. Returns (stdout, stderr, what ``ready()`` returned); the child is killed if
    it is still alive when this returns or fails."""
    try:
        deadline = time.monotonic() + patience(within)
        while not (found := ready()):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(poll)
        child.send_signal(sig)
        out, err = child.communicate(timeout=patience(60))
        return out, err, found
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def descendants(pid):
    """Every live descendant of ``pid`` (from /proc): workers, fork server, resource tracker."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out += kids
        todo += kids
    return out


def gone(pids, within=10.0):
    """True once none of ``pids`` is alive (zombies count as gone), within ``within`` s."""
    deadline = time.monotonic() + patience(within)
    while time.monotonic() < deadline:
        alive = [p for p in pids if os.path.exists(f"/proc/{p}")
                 and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def without_module(name: str) -> str:
    """Python source that makes ``name`` (and its submodules) impossible to import: run it
    first in a ``python -c`` to see what a machine without that package does."""
    return ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name == {name!r} or name.startswith({name + '.'!r}):\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Block())\n")


def write_id_binaries(folder, files, per_file):
    """Fixed-length files of int64 ids (8 bytes a record), ``per_file`` a file, in order."""
    paths = []
    for k in range(files):
        path = folder / f"data_{k}.bin"
        path.write_bytes(np.arange(per_file * k, per_file * (k + 1), dtype=np.int64).tobytes())
        paths.append(str(path))
    return paths


def records_per_read(graph):
    """The read_many of the graph's readers (empty: one record per read); not the skipping
    read beside a read of one record, which only a resumed runner runs."""
    import tensorflow as tf

    counts = [tf.get_static_value(op.inputs[2]) for op in graph.get_operations()
              if op.type == "ReaderReadUpToV2"]
    return {int(c) for c in counts if c is not None}


ID_PER_FILE = 37  # records per file of id_image_files (the conftest fixture id_files)


def id_image_files(folder, files=4, per_file=ID_PER_FILE):
    """``files`` TFRecord files of ``per_file`` image records each, ids 0, 1, ... in order
    (:func:`write_image_records`; :func:`filename_ids` reads a batch's ids back)."""
    return [write_image_records(folder / f"p{k}.tfrecords", range(per_file * k, per_file * (k + 1)))
            for k in range(files)]


def filename_ids(batch):
    """The ids of a fetched batch of :func:`write_image_records` records, in batch order."""
    return [int(f[2:]) for f in batch["filename"].astype(str)]


def write_image_records(path, ids, *, shape=(4, 6, 3), fmt="raw", raw_len=None):
    """queuekit records (raw, or ``fmt`` "jpeg"/"png") whose ``filename`` is ``id<i>`` and
    whose pixels encode i; ``raw_len`` cuts each image's bytes (a wrong-size record)."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in ids:
            pixels = np.full(shape, i % 251, np.uint8)
            if fmt == "raw":
                data = pixels.tobytes()[:raw_len]
            else:
                data = images.encode(pixels, fmt)
            w.write(make_example(data, label=i % 3, height=shape[0], width=shape[1],
                                 fmt=fmt, label_text=f"c{i % 3}", filename=f"id{i}"))
    return str(path)
