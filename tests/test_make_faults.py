"""`make` under faults and hostile input: signals, dead parents, odd names, unreadable folders."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from PIL import Image

import queuekit as qk
from queuekit.records import commit as commit_module
from queuekit.records.example import decode_example
from queuekit.records.files import expand_files
from queuekit.records.labels import read_labels
from queuekit.records.tfrecord import scan_records
from tests.helpers import default_signals, descendants, gone
from tests.imagefactory import make_mixed_folder, rgb


def _photos(root, n, size=400, unique=240):
    """``n`` images, ``unique`` of them written and the rest hard links to those: a folder
    that keeps make busy for seconds (a signal must find it mid-write) and is quick to make."""
    for i in range(n):
        d = os.path.join(root, f"c{i % 2}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{i}.png")
        if i < unique:
            Image.fromarray(rgb(size, size, seed=i)).save(path)
        else:
            os.link(os.path.join(root, f"c{i % 2}", f"{i % unique}.png"), path)


def _start_make(src, out, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "queuekit", "make", str(src), str(out), "--workers", "2",
         "--quiet", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals)


def _wait_for_workers(proc, out_dir):
    """Block until the parent has two worker processes and a spool folder (or fail)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spool = [e for e in os.listdir(out_dir) if e.startswith(".queuekit-make-")] if \
            os.path.isdir(out_dir) else []
        workers = descendants(proc.pid)
        if spool and len(workers) >= 4:  # 2 workers, the fork server, the resource tracker
            return workers
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("make never started its workers")


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_leave_nothing_behind(tmp_path, sig, code):
    """SIGTERM/SIGHUP mid-write exit 128+n with no output, temp, spool folder or worker left."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords", "--shards", "2")
    workers = _wait_for_workers(proc, out_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    assert os.listdir(out_dir) == []
    assert gone(workers), "worker processes outlived make"


def test_workers_die_with_a_killed_parent_and_the_next_run_cleans_up(tmp_path, caplog):
    """SIGKILL of make: its workers exit; the next make removes the dead run's temp files."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords")
    workers = _wait_for_workers(proc, out_dir)
    proc.kill()
    proc.communicate(timeout=30)
    assert gone(workers), "workers outlived their killed parent"
    left = os.listdir(out_dir)
    assert left, "SIGKILL should have left the temp files this test is about"
    report = qk.write_tfrecords(tmp_path / "src", out_dir / "d.tfrecords", image_size=32,
                                workers=2, progress=False)
    assert sorted(os.listdir(out_dir)) == sorted(
        os.path.basename(p) for p in report.outputs + [report.labels_path]
        + [str(out_dir / "d.tfrecords.manifest.json")])
    assert sum("no longer runs" in r.getMessage() for r in caplog.records) == len(left)


def test_non_utf8_file_and_class_names_are_kept_byte_for_byte(tmp_path):
    """A file and a class folder whose names are not UTF-8 are written, their bytes intact."""
    root = tmp_path / "src"
    cls = os.path.join(os.fsencode(root), b"caf\xe9")  # Latin-1 bytes: not UTF-8
    os.makedirs(cls)
    Image.fromarray(rgb(20, 20)).save(os.fsdecode(os.path.join(cls, b"im\xff.png")))
    Image.fromarray(rgb(20, 20, seed=1)).save(os.fsdecode(os.path.join(cls, b"ok.png")))
    report = qk.write_tfrecords(root, tmp_path / "o.tfrecords", image_size=8, progress=False,
                                strict=True)
    assert report.written == 2 and not report.skipped
    recs = [decode_example(r.data, where="") for r in scan_records(report.outputs[0])]
    assert {os.fsencode(r.filename) for r in recs} == {b"caf\xe9/im\xff.png", b"caf\xe9/ok.png"}
    assert [os.fsencode(n) for n in read_labels(report.labels_path)] == [b"caf\xe9"]


def test_class_names_with_newlines_round_trip_through_the_labels_file(tmp_path):
    """A newline or backslash in a class name is escaped: one line per class, names read back."""
    names = ["a\nb", "back\\slash", "plain"]
    for i, name in enumerate(names):
        os.makedirs(tmp_path / "src" / name)
        Image.fromarray(rgb(8, 8, seed=i)).save(tmp_path / "src" / name / "x.png")
    report = qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=8,
                                progress=False)
    assert len(open(report.labels_path, "rb").read().splitlines()) == 3
    assert read_labels(report.labels_path) == sorted(names)


def _no_dac(code):
    """Run ``code`` as root without the capabilities that bypass file permissions."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not available: cannot drop root's permission override")
    return subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c",
         code], capture_output=True, text=True, timeout=120)


def test_an_unreadable_class_folder_is_reported_and_strict_fails(tmp_path):
    """A sub-folder that cannot be listed is warned about; with --strict, make fails."""
    make_mixed_folder(tmp_path / "src")
    locked = tmp_path / "src" / "dog" / "locked"
    locked.mkdir()
    Image.fromarray(rgb(8, 8)).save(locked / "x.png")
    locked.chmod(0)
    try:
        code = ("import sys; from queuekit.cli import main; "
                "sys.exit(main(sys.argv[1:]))")
        lax = _no_dac(code.replace("sys.argv[1:]", repr(
            ["make", str(tmp_path / "src"), str(tmp_path / "a.tfrecords"), "--size", "8",
             "--quiet"])))
        strict = _no_dac(code.replace("sys.argv[1:]", repr(
            ["make", str(tmp_path / "src"), str(tmp_path / "b.tfrecords"), "--size", "8",
             "--quiet", "--strict"])))
    finally:
        locked.chmod(0o755)
    if "Permission denied" not in lax.stderr:
        pytest.skip("permissions are not enforced here: " + lax.stderr[-300:])
    assert lax.returncode == 0 and f"cannot list {locked}" in lax.stderr, lax.stderr[-2000:]
    assert strict.returncode != 0 and str(locked) in strict.stderr, strict.stderr[-2000:]
    assert not (tmp_path / "b.tfrecords").exists()


def test_overwrite_with_fewer_shards_removes_the_old_ones(tmp_path):
    """--shards 3 then --shards 2 --overwrite: the folder holds one dataset of 2 shards."""
    make_mixed_folder(tmp_path / "src")
    out = tmp_path / "out" / "d.tfrecords"
    first = qk.write_tfrecords(tmp_path / "src", out, image_size=8, shards=3, progress=False)
    with pytest.raises(qk.OutputExistsError):
        qk.write_tfrecords(tmp_path / "src", out, image_size=8, shards=2, progress=False)
    second = qk.write_tfrecords(tmp_path / "src", out, image_size=8, shards=2,
                                overwrite=True, progress=False)
    assert sorted(os.listdir(out.parent)) == sorted(
        ["d-00000-of-00002.tfrecords", "d-00001-of-00002.tfrecords", "d.tfrecords.labels.txt",
         "d.tfrecords.manifest.json"])
    counted = sum(1 for p in expand_files(str(out.parent))
                  for _ in scan_records(p))
    assert counted == first.written == second.written


def test_a_failure_while_committing_keeps_the_previous_dataset_whole(tmp_path, monkeypatch):
    """A rename failing half-way through the commit restores the old shards and labels."""
    make_mixed_folder(tmp_path / "src")
    out = tmp_path / "out" / "d.tfrecords"
    qk.write_tfrecords(tmp_path / "src", out, image_size=8, shards=3, progress=False)
    before = {p: open(out.parent / p, "rb").read() for p in os.listdir(out.parent)}
    real = os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        if not os.path.basename(src).endswith(".old") and ".tmp" in os.path.basename(src):
            calls["n"] += 1
            if calls["n"] == 2:  # the second new file to go in
                raise OSError(5, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(commit_module.os, "replace", flaky)
    with pytest.raises(OSError, match="Input/output"):
        qk.write_tfrecords(tmp_path / "src", out, image_size=16, shards=2, overwrite=True,
                           progress=False)
    monkeypatch.undo()
    after = {p: open(out.parent / p, "rb").read() for p in os.listdir(out.parent)}
    assert after == before


@pytest.mark.parametrize("output,message", [
    ("out/", "is a folder"),
    ("adir", "is a folder"),
    ("afile/x.tfrecords", "is a file"),
])
def test_bad_output_paths_fail_before_any_work(tmp_path, output, message):
    """An output that is a folder, or under a file, fails at once, leaving nothing anywhere."""
    make_mixed_folder(tmp_path / "src")
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(qk.DatasetError, match=message):
        qk.write_tfrecords(tmp_path / "src", os.path.join(str(tmp_path), output),
                           progress=False)
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(tmp_path / "adir") == []


def test_a_huge_size_is_refused_up_front(tmp_path):
    """--size 100000x100000 is an error naming the size, before any worker starts."""
    make_mixed_folder(tmp_path / "src")
    with pytest.raises(qk.DatasetError, match="100000x100000"):
        qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords",
                           image_size=(100000, 100000), progress=False)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_disk_full_names_the_output(tmp_path, monkeypatch):
    """A write error names the output file it was writing."""
    from queuekit.records import writer

    make_mixed_folder(tmp_path / "src")

    def full(src, dst, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "copy_bytes", full)
    with pytest.raises(OSError) as info:
        qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=8,
                           workers=1, progress=False)
    assert info.value.filename == str(tmp_path / "o.tfrecords")
    assert "No space left" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["src"]
