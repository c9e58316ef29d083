"""Preemption-safe input, in the style of tf.data's checkpoint tests: an epoch run with breaks
(the job SIGKILLed at random steps, restarted from its last checkpoint each time) against
the same epoch unbroken. The records consumed by the steps of the final model's history
(each run's steps up to the checkpoint the next run restored, and all of the last run) are
every record once per epoch."""

import collections
import json
import os
import random
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import default_signals, write_id_records

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resume_job.py")
N_FILES, PER_FILE = 4, 30


@pytest.fixture
def files(tmp_path):
    return [write_id_records(tmp_path / f"part{k}.tfrecords", PER_FILE, start=PER_FILE * k)
            for k in range(N_FILES)]


def _latest_step(ckdir) -> int:
    """The global step of the checkpoint the checkpoint index names (0: none)."""
    try:
        with open(os.path.join(ckdir, "checkpoint")) as f:
            match = re.search(r'model_checkpoint_path: ".*-(\d+)"', f.read())
    except FileNotFoundError:
        return 0
    return int(match.group(1)) if match else 0


def _job(cfg, run):
    return subprocess.Popen([sys.executable, JOB, json.dumps(dict(cfg, run=run))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)


def run_with_breaks(tmp_path, cfg, breaks, seed=0, name="broken"):
    """Run the job to its end, SIGKILLed ``breaks`` times at random steps; the ids each step
    of the final history consumed, in order, and how each run ended."""
    rng = random.Random(seed)
    cfg = dict(cfg, ckdir=str(tmp_path / name), log=str(tmp_path / f"{name}.log"))
    restored = [0]  # the checkpoint step each run started from
    ends = []
    for run in range(breaks + 1):
        child = _job(cfg, run)
        try:
            if run < breaks:
                for _ in range(rng.randint(1, 3 * cfg["every"])):
                    line = child.stdout.readline()
                    if not line or line.strip() == "done":
                        break
                child.kill()
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        ends.append(child.returncode)
        assert child.returncode in (0, -signal.SIGKILL), err[-3000:]
        restored.append(_latest_step(cfg["ckdir"]))
    assert ends[-1] == 0
    lines = collections.defaultdict(list)
    with open(cfg["log"]) as f:
        for line in f:
            run, step, *ids = (int(v) for v in line.split())
            lines[run].append((step, ids))
    history = []
    for run in range(breaks + 1):
        last = restored[run + 1] if run < breaks else None
        history += [ids for step, ids in lines[run] if last is None or step <= last]
    return [i for ids in history for i in ids], ends


BASE = dict(batch=4, epochs=1, readers=1, shuffle=False, seed=7, save="saver", every=3)


def test_one_reader_in_order_resumes_at_the_next_record_with_the_same_sequence(tmp_path,
                                                                               files):
    """One reader, no shuffle, checkpoints by saver.save: with three breaks the history is the
    unbroken run's sequence exactly, every record once."""
    cfg = dict(BASE, files=files)
    unbroken, _ = run_with_breaks(tmp_path, cfg, 0, name="unbroken")
    broken, ends = run_with_breaks(tmp_path, cfg, 3, seed=1)
    assert ends.count(-signal.SIGKILL) == 3
    assert unbroken == list(range(N_FILES * PER_FILE))
    assert broken == unbroken


@pytest.mark.parametrize("readers,read_many,save", [(4, None, "hook"), (2, 8, "saver")])
def test_shuffled_parallel_two_epochs_every_record_once_per_epoch(tmp_path, files, readers,
                                                                 read_many, save):
    """Shuffle with a seed, 4 readers (or 2 reading 8 per step), num_epochs=2, checkpoints by
    CheckpointSaverHook or saver.save, four breaks (some across the epoch boundary): every
    record exactly twice."""
    cfg = dict(BASE, files=files, readers=readers, read_many=read_many, shuffle=True,
               epochs=2, save=save)
    broken, ends = run_with_breaks(tmp_path, cfg, 4, seed=readers)
    assert ends.count(-signal.SIGKILL) == 4
    assert collections.Counter(broken) == collections.Counter(
        list(range(N_FILES * PER_FILE)) * 2)


def test_fixed_length_records_resume(tmp_path):
    """fixed_length_batches (keys number records, not bytes) resumes exactly too."""
    paths = []
    for k in range(3):
        path = tmp_path / f"data_{k}.bin"
        path.write_bytes(np.arange(40 * k, 40 * (k + 1), dtype=np.int64).tobytes())
        paths.append(str(path))
    cfg = dict(BASE, files=paths, fixed=True, readers=2, read_many=4, shuffle=True)
    broken, _ = run_with_breaks(tmp_path, cfg, 2, seed=5)
    assert sorted(broken) == list(range(120))


def test_a_crash_between_the_input_state_and_the_model_leaves_them_consistent(tmp_path,
                                                                              files):
    """The job dies right after writing checkpoint 6's input position, before its model
    files: the index still names checkpoint 3, whose own input position the restart uses;
    the history is the epoch in order, every record once."""
    cfg = dict(BASE, files=files, ckdir=str(tmp_path / "ck"), log=str(tmp_path / "log"))
    first = _job(dict(cfg, crash_after_input_state=2), 0)
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL
    ckdir = tmp_path / "ck"
    assert _latest_step(ckdir) == 3
    assert (ckdir / "model-6.queuekit-input").exists()
    assert not (ckdir / "model-6.index").exists()
    second = _job(cfg, 1)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-3000:]
    lines = [[int(v) for v in line.split()] for line in open(tmp_path / "log")]
    history = [i for run, step, *ids in lines if run == 1 or step <= 3 for i in ids]
    assert history == list(range(N_FILES * PER_FILE))


def test_a_changed_dataset_is_named_not_mixed(tmp_path, files):
    """A file that grew since the checkpoint: the restart fails naming it."""
    cfg = dict(BASE, files=files, ckdir=str(tmp_path / "ck"), log=str(tmp_path / "log"))
    child = _job(cfg, 0)
    for _ in range(7):
        child.stdout.readline()
    child.kill()
    child.communicate(timeout=60)
    write_id_records(files[2], PER_FILE + 5, start=PER_FILE * 2)
    again = _job(cfg, 1)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 1, err[-2000:]
    assert f"{files[2]} changed since the checkpoint" in err
