"""`queuekit run`: whole TF1 programs, unmodified (tests/programs/), plain and under queuekit.

The programs are written in the patterns of public TF1 programs (TF's reading_data and
cifar10 tutorials, MonitoredTrainingSession with hooks, Supervisor with init_fn, tf-slim's
train and evaluate_once, im2txt's input ops). Each is run as ``python prog.py`` and as
``queuekit run prog.py``: the same output; then with bad input and signals.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import default_signals, descendants, patience

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).parent / "programs"


def write_records(path, start, n):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(start, start + n):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[bytes([i % 256]) * 16])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
            })).SerializeToString())
    return str(path)


@pytest.fixture
def records(tmp_path):
    return [write_records(tmp_path / f"part-{k}.tfrecords", 10 * k, 10) for k in range(2)]


@pytest.fixture
def binaries(tmp_path):
    files = []
    for k in range(2):
        path = tmp_path / f"data_batch_{k}.bin"
        path.write_bytes(b"".join(bytes([i % 10]) + bytes([i]) * 16
                                  for i in range(10 * k, 10 * k + 10)))
        files.append(str(path))
    return files


def start(argv, *, queuekit=True, cwd=None):
    command = ([sys.executable, "-m", "queuekit", "run", *argv] if queuekit
               else [sys.executable, *argv])
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, preexec_fn=default_signals,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run(argv, **kw):
    child = start(argv, **kw)
    try:
        out, err = child.communicate(timeout=patience(120))
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert not descendants(child.pid)
    return child.returncode, out, err


def corrupt(path, at=200):
    data = bytearray(Path(path).read_bytes())
    data[at] ^= 0xFF
    Path(path).write_bytes(bytes(data))


CASES = {
    "reading_data": lambda d, f, b: ["reader_loop.py", *f, "--epochs", "2"],
    "cifar10_train": lambda d, f, b: ["cifar10.py", "train", *b, "--max-steps", "6"],
    "cifar10_eval": lambda d, f, b: ["cifar10.py", "eval", *b, "--max-steps", "4"],
    "monitored": lambda d, f, b: ["monitored_loop.py", str(d / "mts"), *f],
    "supervisor": lambda d, f, b: ["supervisor_loop.py", str(d / "sv"), *f],
    "slim": lambda d, f, b: ["slim_train_eval.py", str(d / "slim"), *f],
    "im2txt": lambda d, f, b: ["im2txt_reader.py", *f],
}


@pytest.mark.parametrize("case", CASES)
def test_a_program_computes_under_queuekit_run_what_it_computes_plain(case, tmp_path, records,
                                                                      binaries):
    outputs = []
    for queuekit in (False, True):
        work = tmp_path / ("queuekit" if queuekit else "plain")
        work.mkdir()
        argv = CASES[case](work, records, binaries)
        status, out, err = run([str(PROGRAMS / argv[0]), *argv[1:]], queuekit=queuekit)
        assert status == 0, err[-3000:]
        assert "queuekit:" not in err
        outputs.append(out)
    assert outputs[0] == outputs[1] and outputs[0].strip()


@pytest.mark.parametrize("case", ["reading_data", "monitored", "cifar10_eval"])
def test_a_corrupt_record_ends_the_program_with_an_error_naming_the_file(case, tmp_path,
                                                                        records, binaries):
    corrupt(records[1])
    Path(binaries[1]).write_bytes(Path(binaries[1]).read_bytes()[:-5])  # cut
    argv = CASES[case](tmp_path, records, binaries)
    status, out, err = run([str(PROGRAMS / argv[0]), *argv[1:]])
    bad = binaries[1] if case.startswith("cifar") else records[1]
    assert status == 1, (out, err[-3000:])
    assert bad in err


def test_an_error_the_program_swallows_is_reported_and_the_exit_is_not_a_success(
        tmp_path, binaries):
    """cifar10's eval: `except Exception as e: coord.request_stop(e)`, then join: here the
    error never reaches join (a cut file is found when the runners start, the eval loop's
    first run ends it): plain exits 0 with a precision of nothing."""
    Path(binaries[0]).write_bytes(Path(binaries[0]).read_bytes()[:-5])
    argv = ["cifar10.py", "eval", *binaries]
    status, out, err = run([str(PROGRAMS / argv[0]), *argv[1:]])
    assert status != 0 and binaries[0] in err


def test_an_input_of_empty_files_ends_with_an_error_naming_them(tmp_path):
    empty = [write_records(tmp_path / f"{k}.tfrecords", 0, 0) for k in range(2)]
    status, out, err = run([str(PROGRAMS / "reader_loop.py"), *empty])
    assert status == 1 and "holds no record" in err and empty[0] in err


BLOCKED = """
import signal, sys
import tensorflow.compat.v1 as tf
tf.disable_eager_execution()
if sys.argv[2] == "handler":
    def stop(signum, frame):
        raise SystemExit("stopped by SIGTERM")
    signal.signal(signal.SIGTERM, stop)
fq = tf.train.string_input_producer([sys.argv[1]])
_, ser = tf.TFRecordReader().read(fq)
batch = tf.train.batch([ser], batch_size=2)
sess = tf.Session()
coord = tf.train.Coordinator()
threads = tf.train.start_queue_runners(sess, coord)
print("ready", flush=True)
sess.run(batch)  # an empty input: blocks for good
"""


@pytest.mark.parametrize("sig, mode, status", [
    (signal.SIGINT, "default", -signal.SIGINT),
    (signal.SIGTERM, "handler", 1),
])
def test_a_signal_ends_a_program_blocked_in_a_dequeue_within_two_seconds(
        tmp_path, sig, mode, status):
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED)
    empty = write_records(tmp_path / "empty.tfrecords", 0, 0)
    child = start(["--stall-timeout", "0", "--no-input-checks", str(script), empty, mode])
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # into the blocking run (a signal before it is handled as well)
        sent = time.monotonic()
        child.send_signal(sig)
        out, err = child.communicate(timeout=patience(30))
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == status, err[-2000:]
    assert took < patience(2.0) + 1.0
    assert not descendants(child.pid)


def test_run_m_runs_a_module_with_its_argv_relative_imports_and_exit_status(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("VALUE = 'from a relative import'\n")
    (package / "train.py").write_text(
        "import sys\nfrom .helper import VALUE\n"
        "print(__name__, VALUE, sys.argv[1:])\nsys.exit(3)\n")
    status, out, err = run(["-m", "pkg.train", "--lr", "0.1"], cwd=tmp_path)
    assert status == 3, err
    assert out.strip() == "__main__ from a relative import ['--lr', '0.1']"


@pytest.mark.parametrize("program", ["input_bound", "im2txt"])
def test_bench_program_prints_the_thread_count_table_of_the_program_s_own_pipeline(
        tmp_path, program):
    if program == "input_bound":
        files = []
        for k in range(2):
            import tensorflow as tf

            path = str(tmp_path / f"{k}.tfrecords")
            with tf.io.TFRecordWriter(path) as w:
                for i in range(200):
                    w.write(tf.train.Example(features=tf.train.Features(feature={
                        "data": tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[bytes([i % 256]) * 1024]))})).SerializeToString())
            files.append(path)
        command = [str(PROGRAMS.parent.parent / "benchmarks" / "programs" / "input_bound.py"),
                   *files, "1000"]
        own = "batch/fifo_queue: 2"
    else:
        files = [write_records(tmp_path / f"{k}.tfrecords", 3000 * k, 3000) for k in range(4)]
        command = [str(PROGRAMS / "im2txt_reader.py"), *files]
        own = "batch_join/padding_fifo_queue: 1"
    bench = subprocess.run(
        [sys.executable, "-m", "queuekit", "bench", "--program", " ".join(command),
         "--threads", "1,3", "--seconds", "1", "--warmup-secs", "0.5", "--repeat", "1"],
        capture_output=True, text=True, timeout=patience(300))
    assert bench.returncode == 0, bench.stderr[-3000:]
    lines = bench.stdout.splitlines()
    rows = {line.split()[0] if not line.strip().startswith("as written") else "as written":
            float(line.split()[2 if line.strip().startswith("as written") else 1].replace(",", ""))
            for line in lines[2:5]}
    assert set(rows) == {"as written", "1", "3"}, bench.stdout
    assert own in bench.stdout and "input_producer: a producer" in bench.stdout
    best = max(rows, key=rows.get)
    verdict = lines[-1]
    assert verdict.startswith("verdict: best " + ("as written" if best == "as written"
                                                   else f"{best} threads")), bench.stdout
