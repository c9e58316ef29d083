"""The demo end to end, bench output, and every subcommand's --help and bad arguments."""

import json
import multiprocessing.util
import os
import signal
import tempfile

import pytest
import tensorflow as tf

from queuekit.cli import main
from tests.helpers import descendants, gone, patience, run_script, signal_when, write_image_records

SUBCOMMANDS = ["demo", "make", "export", "inspect", "bench"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command, capsys):
    """`queuekit <command> --help` exits 0 and shows the usage."""
    assert main([command, "--help"]) == 0
    assert f"usage: queuekit {command}" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["make"], ["export", "only_one"], ["inspect"],
                                  ["bench", "--readers", "x"], ["nosuch"], [],
                                  ["make", "a", "b", "--shards", "0"], ["bench"]])
def test_bad_arguments_exit_2(argv, capsys):
    """Usage errors exit 2 and say what is wrong on stderr."""
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_demo_runs_end_to_end(tmp_path, capsys):
    """The demo generates, makes, reads exactly once and exports, in a temp dir."""
    assert main(["demo", "--workdir", str(tmp_path), "--images", "40", "--no-bench",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "every record exactly once: yes" in out
    assert (tmp_path / "data" / "demo-00000-of-00002.tfrecords").exists()
    assert any((tmp_path / "export").iterdir())


@pytest.mark.slow
def test_bench_synthetic_json_has_every_row(tmp_path, capsys, monkeypatch):
    """bench --synthetic --json lists every configuration and reference, and plots them:
    an auto row with the count it settled on, every row consumed to numpy, the ceilings."""
    # multiprocessing's own folder (make's fork server socket) lives until the interpreter
    # exits: made before the tempdir is moved, so the check below sees only the bench's files
    # whichever test runs first.
    multiprocessing.util.get_temp_dir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "r.json"
    assert main(["bench", "--synthetic", "24", "--readers", "1,auto", "--threads", "1",
                 "--read-many", "0", "--seconds", "0.3", "--repeat", "1",
                 "--warmup-batches", "1", "--batch-size", "8", "--json", str(out),
                 "--consume", "numpy",
                 "--compare", "tfdata,tfdata-batched,tfdata-map,seed,ceilings",
                 "--plot", str(tmp_path / "p.png"), "--quiet"]) == 0
    table = capsys.readouterr().out
    report = json.loads(out.read_text())
    rows = {r["label"]: r for r in report["rows"]}
    auto = [label for label in rows if label.startswith("readers=auto(")]
    assert list(rows) == ["readers=1 threads=1 read-many=0", *auto, "tf.data",
                          "tf.data batch-then-parse", "tf.data normalise-in-map", "seed-style",
                          "ceiling: read bytes", "ceiling: normalise a batch"]
    assert rows[auto[0]]["tuned"] >= 1 and rows[auto[0]]["readers"] == "auto"
    for row in rows.values():
        assert row["error"] is None and row["records_per_s"] > 0 and row["cpu_percent"]
        assert row["consume"] == "numpy"
    assert "best:" in table and "x tf.data" in report["summary"] and "auto:" in table
    assert report["machine"]["cores"] >= 1 and report["machine"]["tensorflow"]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path / "tmp") == []  # the synthetic data is cleaned up


@pytest.mark.parametrize("bad", [
    ["--readers", "0"], ["--threads", "0"], ["--step-ms", "-10"], ["--seconds", "-5"],
    ["--seconds", "nan"], ["--warmup-batches", "-1"], ["--json", "/nonexistent/dir/r.json"],
])
def test_bench_refuses_bad_arguments_before_running(tmp_path, capsys, bad):
    """Invalid counts, times or output paths exit 2 at once, naming the argument."""
    path = write_image_records(tmp_path / "b.tfrecords", range(16), shape=(8, 8, 3))
    assert main(["bench", path, "--compare", "none", "--quiet", *bad]) == 2
    err = capsys.readouterr().err
    assert bad[0] in err or "/nonexistent/dir" in err, err


@pytest.mark.parametrize("content", [b"", b"not records at all", None])
def test_bench_on_bad_files_exits_non_zero(tmp_path, capsys, content):
    """Empty, non-TFRecord and non-Example files are errors, not "best: no configuration ran"."""
    path = tmp_path / "f.tfrecords"
    if content is None:
        with tf.io.TFRecordWriter(str(path)) as w:
            w.write(b"\xff\xfe not an Example")
    else:
        path.write_bytes(content)
    # Bad data exits 1 (corrupt framing, records that are not Examples); no records at all 2.
    assert main(["bench", str(path), "--compare", "none", "--quiet"]) == (
        2 if content == b"" else 1)
    assert str(path) in capsys.readouterr().err


@pytest.mark.slow
def test_bench_ctrl_c_prints_finished_rows_and_exits_130(tmp_path):
    """SIGINT while the second configuration runs: the first row is printed, exit code 130."""
    path = write_image_records(tmp_path / "b.tfrecords", range(64), shape=(8, 8, 3))
    proc = run_script("import sys; from queuekit.cli import main; sys.exit(main(sys.argv[1:]))",
                      "-v", "bench", path, "--readers", "1,2", "--threads", "1",
                      "--read-many", "0", "--compare", "none", "--seconds", "0.3",
                      "--repeat", "1", "--warmup-batches", "1", "--batch-size", "8", "--quiet")
    err = []
    for line in proc.stderr:  # wait for the first row, then press Ctrl-C
        err.append(line)
        if "bench row done: readers=1" in line:
            proc.send_signal(signal.SIGINT)
            break
    out, rest = proc.communicate(timeout=patience(60))
    assert proc.returncode == 130, "".join(err) + rest
    assert "readers=1 threads=1 read-many=0" in out
    assert "readers=2" not in out
    assert "interrupted: 1 of 2 configurations ran" in out


@pytest.mark.slow
def test_bench_sigterm_exits_143_and_takes_its_child_along(tmp_path):
    """SIGTERM to `queuekit bench` while a configuration runs: exit 143, no child left running."""

    path = write_image_records(tmp_path / "b.tfrecords", range(64), shape=(8, 8, 3))
    proc = run_script("import sys; from queuekit.cli import main; sys.exit(main(sys.argv[1:]))",
                      "bench", path, "--readers", "1", "--threads", "1", "--read-many", "0",
                      "--compare", "none", "--seconds", "30", "--repeat", "1",
                      "--warmup-batches", "1", "--batch-size", "8", "--quiet")
    # once a configuration has started
    _, err, children = signal_when(proc, lambda: _bench_children(proc.pid), signal.SIGTERM)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM" in err
    assert gone(children), "the configuration's process outlived bench"


def _bench_children(pid):
    """Children of ``pid`` running a bench configuration (not a transient helper process)."""
    found = []
    for child in descendants(pid):
        try:
            cmdline = open(f"/proc/{child}/cmdline", "rb").read()
        except OSError:
            continue
        if b"queuekit.bench.child" in cmdline:
            found.append(child)
    return found


def test_a_double_dash_outside_make_runner_keeps_its_argparse_meaning(tmp_path, capsys):
    """`inspect -- -x.tfrecords` reads a file named -x.tfrecords (only make --runner passes
    what follows -- to Beam)."""
    missing = str(tmp_path / "-x.tfrecords")
    assert main(["inspect", "--", missing]) == 2
    err = capsys.readouterr().err
    assert missing in err and "Beam" not in err


def _cli(*args, env=None, **kw):
    import subprocess
    import sys

    from tests.helpers import default_signals

    return subprocess.Popen([sys.executable, "-m", "queuekit", *args], preexec_fn=default_signals,
                            env={**os.environ, **(env or {})}, **kw)


def test_a_name_that_is_not_utf8_prints_on_a_strict_utf8_stdout(tmp_path):
    """PYTHONIOENCODING=utf-8:strict, output d\xff.tfrecords: make and inspect exit 0 and print
    the name's own bytes (it was: committed, then a UnicodeEncodeError and exit 1)."""
    import subprocess

    from tests.imagefactory import make_mixed_folder

    make_mixed_folder(tmp_path / "src")
    out = os.path.join(os.fsencode(tmp_path), b"d\xff.tfrecords")
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    make = _cli("make", str(tmp_path / "src"), os.fsdecode(out), "--size", "8", "--quiet",
                env=strict, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = make.communicate(timeout=patience(120))
    assert make.returncode == 0, stderr[-2000:]
    assert stdout.strip() == out
    inspect = _cli("inspect", os.fsdecode(out), env=strict, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
    stdout, stderr = inspect.communicate(timeout=patience(120))
    assert inspect.returncode == 0, stderr[-2000:]
    assert out in stdout


def test_a_closed_pipe_ends_inspect_quietly(tmp_path):
    """`queuekit inspect f | head -1`: the reader gone, inspect exits 141 with nothing on stderr."""
    import subprocess

    path = write_image_records(tmp_path / "a.tfrecords", range(5))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before inspect writes a line
    proc = _cli("inspect", path, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, stderr = proc.communicate(timeout=patience(120))
    assert proc.returncode == 128 + signal.SIGPIPE
    assert b"Broken pipe" not in stderr and b"Traceback" not in stderr


def test_sigterm_while_tensorflow_imports_exits_143(tmp_path):
    """A SIGTERM that lands during TensorFlow's import ends the command with 143, no traceback."""
    path = write_image_records(tmp_path / "a.tfrecords", range(5))
    code = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def hook(name, *a, **k):\n"
        "    if name == 'tensorflow' and 'tensorflow' not in sys.modules:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)  # delivered inside the import\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = hook\n"
        "from queuekit.cli import main\n"
        "sys.exit(main(['bench', sys.argv[1], '--seconds', '0.1']))\n")
    child = run_script(code, path)
    _, err = child.communicate(timeout=patience(120))
    assert child.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "stopped by SIGTERM" in err
