"""`make` under faults and hostile input: signals, dead parents, odd names, unreadable folders."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from PIL import Image

import queuekit as qk
from queuekit.records.example import decode_example
from queuekit.records.files import expand_files
from queuekit.records.make import commit as commit_module
from queuekit.records.make.labels import read_labels
from queuekit.records.tfrecord import scan_records
from queuekit.signals import first_signal_ends
from tests.helpers import default_signals, descendants, gone, patience, run_script
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
        spool = [e for e in os.listdir(out_dir) if ".queuekit-spool-" in e] if \
            os.path.isdir(out_dir) else []
        workers = descendants(proc.pid)
        if spool and len(workers) >= 4:  # 2 workers, the fork server, the resource tracker
            return workers
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("make never started its workers")


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_leave_nothing_behind(tmp_path, sig, code):
    """SIGTERM/SIGHUP mid-write exit 128+n with no output, temp, spool folder or worker left."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords", "--shards", "2")
    workers = _wait_for_workers(proc, out_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=patience(60))
    assert proc.returncode == code, err[-2000:]
    assert os.listdir(out_dir) == []
    assert gone(workers), "worker processes outlived make"


@pytest.mark.slow
def test_workers_die_with_a_killed_parent_and_the_next_run_cleans_up(tmp_path, caplog):
    """SIGKILL of make: its workers exit; the next make removes the dead run's temp files."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords")
    workers = _wait_for_workers(proc, out_dir)
    proc.kill()
    proc.communicate(timeout=patience(30))
    assert gone(workers), "workers outlived their killed parent"
    left = os.listdir(out_dir)
    assert left, "SIGKILL should have left the temp files this test is about"
    report = qk.write_tfrecords(tmp_path / "src", out_dir / "d.tfrecords", image_size=32,
                                workers=2, progress=False)
    assert sorted(os.listdir(out_dir)) == sorted(
        os.path.basename(p) for p in report.outputs + [report.labels_path]
        + [str(out_dir / "d.tfrecords.manifest.json")])
    # The killed run's lock file is taken over and removed by the next run, not logged.
    stale = [e for e in left if e != ".d.tfrecords.queuekit-lock"]
    assert sum("was killed" in r.getMessage() for r in caplog.records) == len(stale)


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
         code], capture_output=True, text=True, timeout=patience(120))


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
    assert strict.returncode == 1 and str(locked) in strict.stderr, strict.stderr[-2000:]
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
    from queuekit.records.make import writer

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


@pytest.mark.parametrize("workers", [1, 2])
def test_a_real_write_error_names_the_file_it_was_writing(tmp_path, workers):
    """make in a process whose files may not grow past 2 KiB (RLIMIT_FSIZE: the write fails
    as on a full disk, an OSError that names no file): the error names the file being written
    (it was "[Errno 28] No space left on device" alone), exit 1, nothing left behind."""
    make_mixed_folder(tmp_path / "src")
    code = (
        "import resource, signal, sys, queuekit as qk\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))\n"
        "try:\n"
        f"    qk.write_tfrecords({str(tmp_path / 'src')!r}, {str(tmp_path / 'o.tfrecords')!r},\n"
        f"                       image_size=48, encoding='png', workers={workers},\n"
        "                       progress=False)\n"
        "except OSError as e:\n"
        "    print(e.errno, e.filename)\n"
        "    print(e)\n"
        "    sys.exit(1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=patience(120), preexec_fn=default_signals)
    assert done.returncode == 1, done.stderr[-2000:]
    errno_, filename = done.stdout.splitlines()[0].split(" ", 1)
    assert int(errno_) == 27 and filename.startswith(str(tmp_path)), done.stdout
    assert filename in done.stdout.splitlines()[1]
    assert sorted(os.listdir(tmp_path)) == ["src"]


@pytest.mark.slow
def test_a_second_make_to_the_same_output_fails_and_the_first_finishes_whole(tmp_path):
    """Two makes to one output: the second fails at once naming the lock, and removes nothing of
    the first (whose spool it would have called stale); the first writes its dataset whole."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    first = _start_make(tmp_path / "src", out_dir / "d.tfrecords")
    workers = _wait_for_workers(first, out_dir)
    spool = [e for e in os.listdir(out_dir) if ".queuekit-spool-" in e]
    with pytest.raises(qk.OutputBusyError, match="d.tfrecords"):
        qk.write_tfrecords(tmp_path / "src", out_dir / "d.tfrecords", image_size=8,
                           workers=1, progress=False)
    with pytest.raises(qk.OutputBusyError):  # --overwrite does not take it either
        qk.write_tfrecords(tmp_path / "src", out_dir / "d.tfrecords", image_size=8,
                           overwrite=True, workers=1, progress=False)
    assert all((out_dir / s).is_dir() for s in spool)
    out, err = first.communicate(timeout=patience(120))
    assert first.returncode == 0, err[-2000:]
    assert gone(workers)
    assert sum(1 for _ in scan_records(str(out_dir / "d.tfrecords"))) == 1200
    assert sorted(os.listdir(out_dir)) == ["d.tfrecords", "d.tfrecords.labels.txt",
                                           "d.tfrecords.manifest.json"]


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_overwrite_never_replaces_what_is_not_a_regular_file(tmp_path, kind):
    """A FIFO (as /dev/null is a device) or a link at the output path is refused, and kept."""
    make_mixed_folder(tmp_path / "src")
    out = tmp_path / "d.tfrecords"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        (tmp_path / "theirs").write_text("someone's data")
        out.symlink_to(tmp_path / "theirs")
    with pytest.raises(qk.OutputExistsError, match="not a regular file"):
        qk.write_tfrecords(tmp_path / "src", out, image_size=8, overwrite=True, progress=False)
    assert os.path.lexists(out)
    assert (out.is_fifo() if kind == "fifo" else out.is_symlink())
    assert sorted(os.listdir(tmp_path)) == sorted(["src", "d.tfrecords"]
                                                  + (["theirs"] if kind == "link" else []))


def test_make_to_a_device_is_refused(tmp_path, capsys):
    """make imgs <a character device> --overwrite (as /dev/null is): exit 2 naming it, and it
    stays a device. A clone of /dev/null in tmp_path, so that a regression cannot replace the
    machine's own."""
    import stat as stat_module

    from queuekit.cli import main

    make_mixed_folder(tmp_path / "src")
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat_module.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot create a device node here (not root)")
    assert main(["make", str(tmp_path / "src"), str(device), "--overwrite", "--quiet"]) == 2
    assert f"{device} is not a regular file" in capsys.readouterr().err
    assert stat_module.S_ISCHR(os.lstat(device).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null", "src"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fifo_named_like_an_image_is_skipped_by_name(tmp_path, workers, caplog):
    """A FIFO called x.jpg in a class folder is skipped with its name; make does not block."""
    make_mixed_folder(tmp_path / "src")
    fifo = tmp_path / "src" / "dog" / "x.jpg"
    os.mkfifo(fifo)
    report = qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=8,
                                workers=workers, progress=False)
    assert report.written > 0
    assert any(str(fifo) in r.getMessage() and "not a regular file" in r.getMessage()
               for r in caplog.records)


def test_an_image_replaced_by_a_fifo_after_the_listing_is_skipped():
    """The loader itself refuses a FIFO (the listing and the read are apart in time)."""
    import tempfile

    from queuekit.records.make.workers import encode_example

    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "x.png")
        os.mkfifo(fifo)
        data, reason = encode_example((fifo, (8, 8), "raw", 0, "c", "x.png", "queuekit"))
    assert data is None and "not a regular file" in reason


def test_a_png_in_the_decompression_bomb_warning_band_is_skipped(tmp_path):
    """A 10000x10000 PNG header (over Pillow's limit, under twice it) is skipped, not fatal."""
    from tests.imagefactory import bomb_png

    make_mixed_folder(tmp_path / "src")
    bomb = tmp_path / "src" / "dog" / "bomb.png"
    bomb_png(bomb, side=10000)
    report = qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=8,
                                workers=1, progress=False)
    assert [(p, r.split(":")[0]) for p, r in report.skipped] == [(str(bomb),
                                                                  "decompression bomb")]


@pytest.mark.slow
def test_two_quick_ctrl_c_during_make_exit_130_leaving_nothing(tmp_path):
    """SIGINT twice, 30 ms apart, mid-write: exit 130 within the bound, no file or worker left."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords")
    workers = _wait_for_workers(proc, out_dir)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.03)  # the gap between two key presses: the second lands in the clean-up
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=patience(60))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    assert os.listdir(out_dir) == []
    assert gone(workers)


def test_a_second_ctrl_c_cannot_cut_the_clean_up_of_the_first():
    """make and export run under first_signal_ends: the first Ctrl-C raises, one that lands
    in the clean-up (outside any deferred block) is dropped, and Python's handler is back
    after."""
    cleaned = []
    with pytest.raises(KeyboardInterrupt):
        with first_signal_ends():
            try:
                signal.raise_signal(signal.SIGINT)  # its handler runs on return, here
            finally:
                signal.raise_signal(signal.SIGINT)
                cleaned.append(True)
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_program_s_own_ctrl_c_handler_still_gets_every_signal_during_make():
    """A handler that does not raise ("stop after this epoch") ends nothing: it is not
    muted after its first call."""
    calls = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        with first_signal_ends():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == [signal.SIGINT, signal.SIGINT]


@pytest.mark.slow
def test_a_ctrl_c_after_the_command_ended_does_not_change_its_exit(tmp_path):
    """A second Ctrl-C once make said "interrupted" (its process still exiting: the pool's
    thread joined, the fork server stopped) leaves exit 130; it was killed by SIGINT."""
    _photos(tmp_path / "src", 1200)
    out_dir = tmp_path / "out"
    proc = _start_make(tmp_path / "src", out_dir / "d.tfrecords")
    workers = _wait_for_workers(proc, out_dir)
    proc.send_signal(signal.SIGINT)
    try:
        said = proc.stderr.readline()
        ignored = _signal_mask(proc.pid, "SigIgn")  # exiting: tens of ms left to read it
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=patience(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert said == "queuekit make: interrupted\n", said + err
    assert ignored & (1 << (signal.SIGINT - 1)), "a later Ctrl-C is not ignored"
    assert proc.returncode == 130, err[-2000:]
    assert os.listdir(out_dir) == []
    assert gone(workers)


_CTRL_C_IN_A_WORKER_START = """
import multiprocessing, os, sys
import queuekit as qk
from queuekit.signals import descendants

try:
    qk.write_tfrecords(sys.argv[1], sys.argv[2], image_size=8, workers=2, progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
# The fork server serves its requests in order: once this process has run, every worker
# start asked for before it has happened, and a worker the pool lost would be alive now.
probe = multiprocessing.get_context("forkserver").Process(target=os.getpid)
probe.start()
probe.join()
parent = {p: int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
          for p in descendants(os.getpid())}
# The fork server and the resource tracker are this process's children; workers, theirs.
print("workers", sum(pp != os.getpid() for pp in parent.values()), flush=True)
"""


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _waiting_on_a_pipe(pid: int) -> bool:
    """True while ``pid`` sleeps in a pipe read (where the kernel names its wait channel)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/wchan") as f:
            return state == "S" and "pipe_read" in f.read()
    except OSError:
        return False


def _signal_mask(pid: int, field: str) -> int:
    """A signal mask of ``pid`` from /proc (SigIgn, SigPnd, ShdPnd...)."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return int(fields[field], 16)


def _pending(pid: int, signum: int) -> bool:
    """True while ``signum`` sent to ``pid`` is not yet delivered to it."""
    mask = _signal_mask(pid, "ShdPnd") | _signal_mask(pid, "SigPnd")
    return bool(mask & (1 << (signum - 1)))


def test_a_ctrl_c_while_a_worker_starts_leaves_no_worker(tmp_path):
    """Ctrl-C while the pool waits for the fork server to start a worker: that worker is
    still stopped with the rest (it was left, unknown to the pool: a make hung at exit)."""
    make_mixed_folder(tmp_path / "src")
    proc = run_script(_CTRL_C_IN_A_WORKER_START, str(tmp_path / "src"),
                      str(tmp_path / "out" / "d.tfrecords"))
    server = None
    try:
        deadline = time.monotonic() + 60
        while server is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            server = next((p for p in descendants(proc.pid)
                           if b"forkserver" in _command_line(p)), None)
        assert server is not None, "the fork server never started"
        # The program asks the fork server for the first worker and reads its pid from a
        # pipe; the server still loads its modules (numpy, Pillow) and has not answered.
        # Stopped now, it cannot answer: the program waits inside that worker's start.
        while not _waiting_on_a_pipe(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "never waited"
            time.sleep(0.001)
        os.kill(server, signal.SIGSTOP)
        assert not descendants(server), "the fork server answered before it was stopped"
        proc.send_signal(signal.SIGINT)
        while _pending(proc.pid, signal.SIGINT):
            time.sleep(0.001)
        os.kill(server, signal.SIGCONT)
        out, err = proc.communicate(timeout=patience(60))
    finally:
        if server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    # Lost, the worker either waited for work forever or died starting, its queues gone.
    assert out.split() == ["interrupted", "workers", "0"], (out, err)
    assert "Traceback" not in err, err
    assert not (tmp_path / "out" / "d.tfrecords").exists()
    assert gone([server])


def test_a_script_without_the_main_guard_runs_its_top_level_once(tmp_path):
    """write_tfrecords at a script's top level with workers (the seed script's own shape):
    the workers never import the script, so its top level runs once (it ran 3 times, an
    ``rmtree`` of the output folder with it) and every image is written."""
    make_mixed_folder(tmp_path / "src")
    runs = tmp_path / "runs.txt"
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import os, multiprocessing, queuekit as qk\n"
        f"with open({str(runs)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        f"r = qk.write_tfrecords({str(tmp_path / 'src')!r}, {str(tmp_path / 'o.tfrecords')!r},\n"
        "                       image_size=8, workers=2, progress=False)\n"
        "print(r.written, len(multiprocessing.active_children()))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=patience(120), preexec_fn=default_signals)
    assert proc.returncode == 0, proc.stderr
    assert len(runs.read_text().split()) == 1
    expected = len(qk.scan_image_folder(tmp_path / "src"))
    assert proc.stdout.split() == [str(expected), "0"]
    assert len(list(scan_records(str(tmp_path / "o.tfrecords"), data=False))) == expected
