"""Every Python code block of the README and of docs/ runs, in the order a reader meets it.

A document's blocks run one after another in one namespace, in a fresh Python
(one per document) whose working folder holds the small dataset of SETUP:
``data/train.tfrecords`` (``queuekit make``'s, 32x32 raw images, two classes),
``data.tfrecords`` (the same records) and the helpers named there. A block
introduced by ``.. invisible-code-block: python`` (an RST comment, as Sybil
spells it) runs too but is not shown: it makes what the shown block takes
for granted (a model, a graph to run). A failure names the document and line.
"""

import ast
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import default_signals, patience

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.rst", *sorted((ROOT / "docs").glob("*.rst"))]
_START = re.compile(r"^\.\. (?:code-block:: python|invisible-code-block: python)\s*$")

SETUP = '''
import os
import shutil

import numpy as np
import tensorflow as tf
from PIL import Image

import queuekit as qk

v1 = tf.compat.v1
rng = np.random.default_rng(0)
for c, name in enumerate(["cat", "dog"]):
    os.makedirs(f"images/{name}")
    for i in range(20):
        pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) // (c + 1)
        Image.fromarray(pixels).save(f"images/{name}/{i}.png")
qk.write_tfrecords("images", "data/train.tfrecords", image_size=(32, 32), workers=1,
                   progress=False)
shutil.copy("data/train.tfrecords", "data.tfrecords")
DATA = files = eval_files = "data/*.tfrecords"


def write_records(path, records):
    """A TFRecord file of Examples from dicts of bytes, int or a list of floats."""
    def feature(value):
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(tf.train.Example(features=tf.train.Features(
                feature={k: feature(v) for k, v in r.items()})).SerializeToString())


def model(images):
    """Logits of a linear model over 32x32x3 images (the same variables every call)."""
    with v1.variable_scope("model", reuse=v1.AUTO_REUSE):
        w = v1.get_variable("w", [32 * 32 * 3, 2], initializer=v1.zeros_initializer())
    return tf.matmul(tf.reshape(images, [-1, 32 * 32 * 3]), w)


def train_graph(batch_size=8):
    """In the default graph: batches, the model, its loss and a train op with a global step."""
    batch = qk.tfrecord_batches(DATA, batch_size=batch_size)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch["label"], logits=model(batch["image"])))
    step = v1.train.get_or_create_global_step()
    return loss, v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
'''


def code_blocks(path):
    """(line of the code's first line, code) of every Python block of one document."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not _START.match(lines[i]):
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip().startswith(":"):  # directive options
            i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        first, body = i, []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
            body.append(lines[i])
            i += 1
        yield first + 1, textwrap.dedent("\n".join(body)).rstrip() + "\n"


def _script(path) -> str:
    blocks = [(line, code) for line, code in code_blocks(path)]
    return "\n".join([
        "ns = {'__name__': '__main__'}",
        f"exec(compile({SETUP!r}, '<setup>', 'exec'), ns)",
        *[f"exec(compile({chr(10) * (line - 1) + code!r}, {str(path)!r}, 'exec'), ns)"
          for line, code in blocks],
        "print('ok', flush=True)",
    ])


def test_the_block_finder_sees_shown_and_invisible_blocks(tmp_path):
    """Both kinds of block are found with their first line; other literal blocks are not."""
    doc = tmp_path / "x.rst"
    doc.write_text("Text::\n\n    not python\n\n.. code-block:: python\n\n    a = 1\n\n"
                   "    b = a\n\n.. invisible-code-block: python\n\n    c = b\n\nEnd.\n")
    assert list(code_blocks(doc)) == [(7, "a = 1\n\nb = a\n"), (13, "c = b\n")]


@pytest.mark.parametrize("path", [d for d in DOCS if list(code_blocks(d))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_block_runs(path, tmp_path):
    """The document's Python blocks run in order, on a real dataset, to the end."""
    child = subprocess.run([sys.executable, "-c", _script(path)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=patience(600),
                           preexec_fn=default_signals)
    assert child.returncode == 0 and child.stdout.rstrip().endswith("ok"), child.stderr[-4000:]


# A signature written in the docs: ``[qk.]name(a=1, *, b=2, ...)`` with three defaults or more.
_SIGNATURE = re.compile(r"``(?:qk\.)?(?P<name>[A-Za-z_]+)\((?P<params>[^`]*?)\)``", re.S)
_DOCUMENTED = {
    "QueueSession": "queuekit", "monitored_training_session": "queuekit",
    "tfrecord_batches": "queuekit", "image_folder_batches": "queuekit",
    "fixed_length_batches": "queuekit", "FixedLengthLayout": "queuekit",
    "scan_image_folder": "queuekit", "write_tfrecords": "queuekit", "benchmark": "queuekit",
}


def _written_signatures():
    for path in DOCS:
        for m in _SIGNATURE.finditer(path.read_text(encoding="utf-8")):
            params = m.group("params")
            # "benchmark(files, readers=..., ...)" names arguments, it is no signature.
            if m.group("name") in _DOCUMENTED and params.count("=") >= 3 and "=..." not in params:
                yield path, m.group("name"), params


def _top_level(params: str) -> list[str]:
    """``params`` split at the commas outside brackets and quotes, each stripped."""
    parts, depth, quote, current = [], 0, "", ""
    for c in params:
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += c
    return [*parts, current.strip()]


@pytest.mark.parametrize("path,name,params", list(_written_signatures()),
                         ids=lambda v: v.name if isinstance(v, pathlib.Path) else
                         (v if isinstance(v, str) and "=" not in v else ""))
def test_every_signature_written_in_the_docs_matches_the_code(path, name, params):
    """A signature the docs write out names the code's parameters, in its order, with its
    defaults; one that ends in "..." may leave the rest out (5 of 10 missed newer ones)."""
    import importlib
    import inspect

    target = getattr(importlib.import_module(_DOCUMENTED[name]), name)
    code = [p for p in inspect.signature(target).parameters.values()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    written = [w for w in _top_level(" ".join(params.split())) if w and w not in ("*", "...")]
    names = [w.split("=")[0].strip() for w in written]
    expected = [p.name for p in code]
    if "..." in params:
        assert names == expected[:len(names)], (path, name)
    else:
        assert names == expected, (path, name)
    for w, p in zip(written, code, strict=False):
        if "=" not in w or p.default is inspect.Parameter.empty:
            continue
        value = w.split("=", 1)[1].strip()
        try:
            assert ast.literal_eval(value) == p.default, (path, name, w, p.default)
        except ValueError:  # a name (USE_DEFAULT): the code's default is an object
            assert value.isidentifier() and not isinstance(p.default, (int, float, str)), (
                path, name, w, p.default)
