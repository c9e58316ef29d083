"""examples/train_tf1.py: a legacy TF1 training loop on queuekit, for a few steps."""

import importlib.util
import pathlib

import numpy as np
import tensorflow as tf

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
