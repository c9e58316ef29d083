"""make --runner beam: the local writer's dataset from a Beam pipeline on the DirectRunner.

Skipped where Apache Beam is not installed (``pip install 'queuekit[beam]'``). The tests
that start a process come first (see conftest: processes started after a Beam job).
"""

import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys

import pytest
from PIL import Image

import queuekit as qk
from queuekit.cli import main
from queuekit.records.files import expand_files
from queuekit.records.folder import ImageFolder
from queuekit.records.tfrecord import Record, scan_records
from tests.helpers import (
    default_signals,
    descendants,
    gone,
    patience,
    signal_when,
    signal_when_ready,
    without_module,
)
from tests.imagefactory import bad_files, make_mixed_folder, rgb

pytestmark = [pytest.mark.beam, pytest.mark.slow]
pytest.importorskip("apache_beam")

from queuekit.records.beam.launch import write_tfrecords_beam  # noqa: E402


@pytest.fixture(autouse=True)
def no_worker_left():
    """Fail a test that leaves a Beam worker process (or any other child) running, or a
    signal handler changed."""
    before = set(descendants(os.getpid()))
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    yield
    left = set(descendants(os.getpid())) - before
    assert not left, f"child processes left: {sorted(left)}"
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    """Every image mode, nested folders, junk files and the local tests' bad images."""
    root = tmp_path_factory.mktemp("messy") / "root"
    make_mixed_folder(root)
    bad = bad_files(root / "dog")
    for i in range(6):
        Image.fromarray(rgb(40, 50, seed=i)).save(root / "bird" / f"more{i}.png")
    return root, bad


def test_workers_need_no_tensorflow(tmp_path):
    """The workers' DoFn encodes an image in a process where TensorFlow cannot be imported."""
    image = tmp_path / "a.png"
    Image.fromarray(rgb(10, 10)).save(image)
    task = json.dumps([str(image), [8, 8], "raw", 0, "a", "a/a.png", "queuekit"])
    code = (without_module("tensorflow") +
            "from queuekit.records.beam.fn import EncodeImage\n"
            f"out = list(EncodeImage(False).process({task!r}))\n"
            "print(len(out), type(out[0]).__name__, len(out[0]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=patience(120))
    assert done.returncode == 0, done.stderr
    count, kind, size = done.stdout.split()
    assert (count, kind) == ("1", "bytes") and int(size) > 8 * 8 * 3


def test_without_beam_the_cli_names_the_extra(tmp_path, messy):
    """With apache_beam not importable, make --runner beam says which extra to install."""
    code = (without_module("apache_beam") +
            "from queuekit.cli import main\n"
            f"sys.exit(main(['make', {str(messy[0])!r}, {str(tmp_path / 'd.tfrecords')!r}, "
            "'--runner', 'beam']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=patience(120))
    assert done.returncode == 2, done.stderr
    assert "pip install 'queuekit[beam]'" in done.stderr
    assert os.listdir(tmp_path) == []


def test_sigterm_mid_job_leaves_no_dataset_no_staging_no_worker(tmp_path):
    """SIGTERM to make --runner beam while its 2 worker processes encode: exit 143, no output,
    no staging folder, no Beam worker left."""
    root = tmp_path / "root"
    for i in range(240):
        os.makedirs(root / f"c{i % 2}", exist_ok=True)
        Image.fromarray(rgb(200, 300, seed=i)).save(root / f"c{i % 2}" / f"{i:03d}.jpg")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "queuekit", "make", str(root),
                             str(out / "d.tfrecords"), "--runner", "beam", "--workers", "2",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_signals)
    # The sink's temp folder appears once the workers write: the job is under way, and its
    # worker processes (and their shells) exist.
    _, err, workers = signal_when(proc, lambda: list(out.glob(
        ".*.queuekit-spool-*/beam-temp-*")) and descendants(proc.pid), signal.SIGTERM)
    assert proc.returncode == 143, err
    assert gone(workers), "a Beam worker outlived the command"
    assert os.listdir(out) == []


def test_sigterm_while_the_workers_start_ends_the_command_and_them(tmp_path):
    """SIGTERM as soon as Beam's first worker process exists (still starting, not yet
    connected): the command ends (143) with every worker, where Beam's own clean-up waited
    forever for a worker that never connects (6 runs in 8 hung)."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beam_blocked_job.py")
    proc = subprocess.Popen([sys.executable, job, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    def starting():
        found = descendants(proc.pid)
        return found if any("sdk_worker_main" in _command_line(p) for p in found) else []

    try:
        _, err, workers = signal_when(proc, starting, signal.SIGTERM, poll=0.002)
    finally:
        for pid in descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-2000:]
    assert gone(workers), "a Beam worker outlived the command"


def test_a_worker_orphaned_after_the_signal_still_ends_with_the_command(tmp_path):
    """A worker whose parent exits after SIGTERM (Beam's ``sh -c`` killed between its fork and
    the next look) is not lost to init: the command adopts it and ends it."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "orphaned_worker_job.py")
    pid_file = tmp_path / "worker.pid"
    proc = subprocess.Popen([sys.executable, job, str(pid_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        _, err, _ = signal_when_ready(proc, signal.SIGTERM)
        assert proc.returncode == 143, err[-2000:]
        worker = int(pid_file.read_text())
        assert gone([worker], within=5.0), "the orphaned worker outlived the command"
    finally:
        if pid_file.exists() and os.path.exists(f"/proc/{pid_file.read_text()}"):
            with contextlib.suppress(OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _command_line(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        return ""


def _dataset(output, shards):
    """(records as a multiset, labels text, manifest without per-shard counts)."""
    names = ([output] if shards == 1 else
             [f"{output[:-10]}-{i:05d}-of-{shards:05d}.tfrecords" for i in range(shards)])
    records = collections.Counter(r.data for n in names for r in scan_records(n)
                                  if isinstance(r, Record))
    manifest = json.load(open(output + ".manifest.json"))
    assert sum(manifest.pop("records")) == manifest["total_records"] == sum(records.values())
    labels = open(output + ".labels.txt", "rb").read()
    return records, labels, manifest


@pytest.mark.parametrize("schema,encoding,shards,workers", [
    ("queuekit", "raw", 3, 2), ("inception", "jpeg", 1, 1), ("queuekit", "png", 2, 1)])
def test_records_labels_and_skips_equal_the_local_writer(tmp_path, messy, schema, encoding,
                                                         shards, workers):
    """Beam writes the local make's records (as a multiset), labels, manifest and skips."""
    root, bad = messy
    local = str(tmp_path / "local" / "d.tfrecords")
    beam = str(tmp_path / "beam" / "d.tfrecords")
    options = dict(image_size=(20, 24), schema=schema, encoding=encoding, shards=shards)
    want = qk.write_tfrecords(root, local, progress=False, workers=1, **options)
    got = write_tfrecords_beam(root, beam, workers=workers, **options)
    assert _dataset(beam, shards) == _dataset(local, shards)
    assert sorted(got.skipped) == sorted(want.skipped)
    assert {path for path, _ in got.skipped} == set(bad.values())
    assert (got.written, got.per_class, got.class_names) == (
        want.written, want.per_class, want.class_names)
    listed = [json.loads(line) for line in open(beam + ".skipped.jsonl")]
    assert sorted((d["path"], d["reason"]) for d in listed) == sorted(want.skipped)
    assert sorted(os.listdir(tmp_path / "beam")) == sorted(
        os.path.basename(p) for p in got.outputs + [beam + s for s in (
            ".labels.txt", ".manifest.json", ".skipped.jsonl")])
    # The folder given as input lists the shards alone, not the files beside them.
    assert expand_files([str(tmp_path / "beam")]) == sorted(got.outputs)


def test_multi_processing_delivers_every_record_run_after_run(tmp_path):
    """Three runs on two worker processes: every image is in the shards each time, once."""
    root = tmp_path / "root"
    for i in range(90):
        os.makedirs(root / f"c{i % 3}", exist_ok=True)
        Image.fromarray(rgb(16, 16, seed=i)).save(root / f"c{i % 3}" / f"{i:03d}.png")
    for run in range(3):
        out = str(tmp_path / f"run{run}" / "d.tfrecords")
        report = write_tfrecords_beam(root, out, image_size=8, shards=4, workers=2)
        records, _, manifest = _dataset(out, 4)
        assert report.written == manifest["total_records"] == 90
        names = {qk_filename(r) for r in records}
        assert len(names) == 90 and all(n == 1 for n in records.values())


def qk_filename(data):
    from queuekit.records.example import decode_example

    return decode_example(data, where="test").filename


@pytest.mark.parametrize("workers", [1, 2])
def test_strict_fails_and_leaves_the_previous_dataset_whole(tmp_path, messy, workers):
    """--strict: the job fails naming a bad image; the old dataset stays, nothing else is left."""
    root, bad = messy
    out = str(tmp_path / "d.tfrecords")
    good = tmp_path / "good"
    for i in range(3):
        os.makedirs(good / "a", exist_ok=True)
        Image.fromarray(rgb(10, 10, seed=i)).save(good / "a" / f"{i}.png")
    write_tfrecords_beam(good, out, image_size=8, workers=1)
    before = {n: open(tmp_path / n, "rb").read() for n in os.listdir(tmp_path) if n != "good"}
    with pytest.raises(qk.ImageDecodeError) as info:
        write_tfrecords_beam(root, out, image_size=8, strict=True, overwrite=True,
                             workers=workers)
    assert any(str(info.value).startswith(p + ": ") for p in bad.values()), info.value
    after = {n: open(tmp_path / n, "rb").read() for n in os.listdir(tmp_path) if n != "good"}
    assert after == before


def test_an_unexpected_failure_goes_to_the_dead_letter_list(tmp_path):
    """An image no file system can open is listed as skipped with its error; the rest is written."""
    root = tmp_path / "root"
    os.makedirs(root / "a")
    for i in range(3):
        Image.fromarray(rgb(10, 10, seed=i)).save(root / "a" / f"{i}.png")
    folder = qk.scan_image_folder(root)
    ghost = "nosuchfs://bucket/a/ghost.png"
    folder = ImageFolder(folder.root, folder.paths + [ghost], folder.labels + [0], ["a"])
    out = str(tmp_path / "out" / "d.tfrecords")
    report = write_tfrecords_beam(folder, out, image_size=8, workers=1)
    assert report.written == 3
    assert [p for p, _ in report.skipped] == [ghost]
    assert "ValueError" in report.skipped[0][1] and "nosuchfs" in report.skipped[0][1]


def test_multi_threading_is_refused(tmp_path, messy):
    """The threaded DirectRunner mode, seen losing records, is refused before any work."""
    with pytest.raises(qk.DatasetError, match="multi_threading"):
        write_tfrecords_beam(messy[0], str(tmp_path / "d.tfrecords"),
                             options=["--direct_running_mode=multi_threading"])
    assert os.listdir(tmp_path) == []


def test_cli_passes_beam_options_and_keeps_the_root_logger(tmp_path, messy, capsys):
    """The CLI runs Beam with flags after --, and leaves the root logger as it found it."""
    root_logger = logging.getLogger()
    handlers, level = root_logger.handlers[:], root_logger.level
    out = str(tmp_path / "d.tfrecords")
    rc = main(["make", str(messy[0]), out, "--runner", "beam", "--size", "8", "--shards", "2",
               "--beam-option", "direct_num_workers=1", "--", "--direct_running_mode=in_memory"])
    assert rc == 0
    assert root_logger.handlers == handlers and root_logger.level == level
    err = capsys.readouterr().err
    assert "skipped 4" in err
    assert main(["make", str(messy[0]), out, "--beam-option", "a=b"]) == 2


def test_paths_with_a_scheme_go_through_beams_file_systems(tmp_path, messy):
    """A scheme:// source and output (as gs:// would be) give the local make's dataset."""
    from tests.storefs import local, remote

    root, _ = messy
    options = dict(image_size=(20, 24), shards=2)
    want = qk.write_tfrecords(root, str(tmp_path / "local" / "d.tfrecords"), progress=False,
                              workers=1, **options)
    out = remote(str(tmp_path / "out" / "d.tfrecords"))
    got = write_tfrecords_beam(remote(str(root)), out, workers=1, **options)
    assert _dataset(local(out), 2) == _dataset(str(tmp_path / "local" / "d.tfrecords"), 2)
    assert sorted((local(p), why) for p, why in got.skipped) == sorted(want.skipped)
    with pytest.raises(qk.OutputExistsError):
        write_tfrecords_beam(remote(str(root)), out, workers=1, **options)
    write_tfrecords_beam(remote(str(root)), out, workers=1, overwrite=True, image_size=8)
    assert sorted(os.listdir(tmp_path / "out")) == [
        "d.tfrecords", "d.tfrecords.labels.txt", "d.tfrecords.manifest.json",
        "d.tfrecords.skipped.jsonl"]
