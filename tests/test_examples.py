"""The examples: a legacy TF1 training loop on queuekit, alone and on a loopback cluster."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import patience

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "train_tf1.py"


def _load():
    spec = importlib.util.spec_from_file_location("train_tf1", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_example_lowers_the_loss_and_writes_a_checkpoint(tmp_path, capsys):
    """40 steps: the loss falls, a checkpoint of step 40 exists, the held-out split is read once."""
    result = _load().main(["--workdir", str(tmp_path), "--images", "120", "--steps", "40"])
    losses = result["losses"]
    assert len(losses) == 40
    assert np.mean(losses[-10:]) < 0.9 * np.mean(losses[:10])
    assert tf.train.latest_checkpoint(result["model_dir"]).endswith("model.ckpt-40")
    assert result["evaluated"] == 24  # the 20% held out, each image exactly once
    assert 0.0 <= result["accuracy"] <= 1.0
    assert "held-out accuracy" in capsys.readouterr().out


DISTRIBUTED = EXAMPLE.parent / "distributed_train.py"


def _left_running(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the run's own folder)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found


def _distributed(tmp_path, *extra):
    done = subprocess.run([sys.executable, str(DISTRIBUTED), "--local-cluster", "2",
                           "--workdir", str(tmp_path), "--images", "400", "--epochs", "2",
                           *extra], capture_output=True, text=True, timeout=patience(170))
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert not _left_running(str(tmp_path)), "a task of the local cluster outlived it"
    return done, {line["task"]: line for line in lines if "task" in line}, lines[-1]


@pytest.mark.slow
def test_distributed_example_trains_every_record_once_per_epoch(tmp_path):
    """1 ps + 2 workers on a work queue: 320 training records x 2 epochs trained once each,
    the chief checkpoints the global step on the ps, every task exits."""
    done, tasks, codes = _distributed(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert codes == {"exit_codes": {"/job:worker/task:0": 0, "/job:worker/task:1": 0}}
    assert sum(t["records"] for t in tasks.values()) == 2 * 320
    step = tf.train.latest_checkpoint(str(tmp_path / "model"))
    # The global step, on the ps, counts both workers' batches: the chief's last checkpoint,
    # written when its own input ended, has at least its own and at most all of them (the
    # other worker may still be training its last files then).
    saved = int(step.rsplit("-", 1)[1]) if step else -1
    assert tasks["/job:worker/task:0"]["batches"] <= saved <= sum(
        t["batches"] for t in tasks.values())


@pytest.mark.slow
def test_distributed_example_with_sync_replicas_ends_on_every_worker(tmp_path):
    """SyncReplicasOptimizer on a work queue: both workers end, none waits for a token."""
    done, tasks, codes = _distributed(tmp_path, "--sync")
    assert done.returncode == 0, done.stderr[-3000:]
    assert codes == {"exit_codes": {"/job:worker/task:0": 0, "/job:worker/task:1": 0}}
    # The chief's input ends the training: batches worker 1 had dequeued for a step that
    # never got its token are not trained (SyncReplicasOptimizer's own rule), and said.
    trained = sum(t["records"] for t in tasks.values())
    assert 0 < trained <= 2 * 320
    summary = next(json.loads(line) for line in done.stdout.splitlines()
                   if line.startswith('{"trained"'))
    assert summary == {"trained": trained, "expected": 2 * 320}
    assert (f"trained {trained} of 640 records" in done.stderr) == (trained < 640)
