"""Image folder -> TFRecord: scanning, image modes, bad input, atomic writes, shards."""

import multiprocessing
import os

import numpy as np
import pytest
from PIL import Image

import queuekit as qk
from queuekit.records import images
from queuekit.records.example import decode_example
from queuekit.records.files import expand_files
from queuekit.records.make import writer
from queuekit.records.make.workers import copy_bytes
from queuekit.records.tfrecord import Record, scan_records
from tests.helpers import patience
from tests.imagefactory import bad_files, exif_rotated_jpeg, make_mixed_folder, rgb


def _records(path):
    return [decode_example(r.data, where=path) for r in scan_records(path)
            if isinstance(r, Record)]


def test_scan_labels_by_first_level_folder_and_skips_junk(tmp_path):
    """Classes are sorted first-level folders; nested images belong to them; junk is counted."""
    make_mixed_folder(tmp_path)
    folder = qk.scan_image_folder(tmp_path)
    assert folder.class_names == ["bird", "dog", "猫"]
    nested = [i for i, p in enumerate(folder.paths) if "nested" in p]
    assert nested and all(folder.class_names[folder.labels[i]] == "bird" for i in nested)
    assert folder.skipped == {"file directly in root": 1, "hidden": 1,
                              "not an image extension": 1}
    assert len(folder) == 3 * 3 + 5 + 2


def test_scan_shuffle_with_seed_is_deterministic(tmp_path):
    """shuffle=True with a seed gives the same order every time, and a different one than sorted."""
    make_mixed_folder(tmp_path)
    a = qk.scan_image_folder(tmp_path, shuffle=True, seed=3)
    b = qk.scan_image_folder(tmp_path, shuffle=True, seed=3)
    plain = qk.scan_image_folder(tmp_path)
    assert a.paths == b.paths and a.paths != plain.paths
    assert sorted(zip(a.paths, a.labels)) == sorted(zip(plain.paths, plain.labels))


@pytest.mark.parametrize("layout", ["missing", "no_classes", "no_images"])
def test_bad_roots_are_clear_errors_and_create_nothing(tmp_path, layout):
    """A missing root, a root without class folders, or no images: error naming the path."""
    root = tmp_path / "root"
    if layout != "missing":
        root.mkdir()
        (root / "loose.jpg").write_bytes(b"x")
    if layout == "no_images":
        (root / "cls").mkdir()
        (root / "cls" / "a.txt").write_text("x")
    out = tmp_path / "out.tfrecords"
    with pytest.raises((qk.InputNotFound, qk.DatasetError), match=str(root)):
        qk.write_tfrecords(root, out, progress=False)
    assert os.listdir(tmp_path) == ["root"] or not root.exists()
    assert not out.exists()


def test_every_mode_becomes_rgb_of_the_target_size(tmp_path):
    """Gray, gray+alpha, palette, RGBA, CMYK, 16-bit and animated images all become HxWx3."""
    make_mixed_folder(tmp_path / "src")
    report = qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=(24, 32),
                                progress=False, workers=1)
    assert report.skipped == [] and report.written == 16
    recs = _records(report.outputs[0])
    assert all(r.image.shape == (24, 32, 3) for r in recs)
    by_name = {r.filename: r for r in recs}
    gray = by_name["dog/gray.png"].image
    assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()
    sixteen = by_name["bird/nested/sixteen.png"].image
    assert sixteen.max() > 100  # 16-bit scaled to 8-bit, not clipped to 255 or to 0


def test_alpha_is_composited_on_white():
    """A fully transparent pixel becomes the documented white background."""
    im = Image.new("RGBA", (4, 4), (10, 20, 30, 0))
    assert tuple(images._to_rgb(im).getpixel((0, 0))) == images.BACKGROUND


def test_exif_orientation_is_applied(tmp_path):
    """A JPEG with EXIF orientation 6 is rotated: its left (red) half ends on top."""
    p = tmp_path / "rot.jpg"
    exif_rotated_jpeg(p)
    a = images.load_rgb(str(p), (40, 20))
    assert a.shape == (40, 20, 3)
    assert a[2, 10, 0] > 200 and a[2, 10, 2] < 60
    assert a[37, 10, 2] > 200 and a[37, 10, 0] < 60


@pytest.mark.parametrize("workers", [1, 2])
def test_bad_files_are_skipped_with_reasons(tmp_path, workers):
    """Zero-byte, truncated, non-image and decompression-bomb files are skipped by name."""
    Image.fromarray(rgb(30, 30)).save(tmp_path / "ok.jpg")
    root = tmp_path / "root"
    bad = bad_files(root / "cls")
    for i in range(12):  # more than one chunk, so several worker processes take part
        Image.fromarray(rgb(30, 30)).save(root / "cls" / f"good{i:02d}.jpg")
    report = qk.write_tfrecords(root, tmp_path / "o.tfrecords", progress=False, workers=workers)
    assert report.written == 12
    assert [r.filename for r in _records(report.outputs[0])] == [
        f"cls/good{i:02d}.jpg" for i in range(12)]
    reasons = dict(report.skipped)
    assert set(reasons) == set(bad.values())
    assert "decompression bomb" in reasons[bad["bomb"]]
    assert "truncated" in reasons[bad["truncated"]]


def test_strict_fails_on_first_bad_file_and_writes_nothing(tmp_path):
    """strict=True makes a bad image an error naming it, and leaves no output or temp."""
    root = tmp_path / "root"
    bad_files(root / "cls")
    out = tmp_path / "o.tfrecords"
    with pytest.raises(qk.ImageDecodeError, match="bomb.png|text.png|truncated.jpg|zero.jpg"):
        qk.write_tfrecords(root, out, strict=True, progress=False, workers=1)
    assert sorted(os.listdir(tmp_path)) == ["root"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_interrupted_write_leaves_no_output_no_temp_no_worker(tmp_path, monkeypatch, workers,
                                                              error):
    """Disk full or Ctrl-C in the middle of writing removes every partial file and worker."""
    make_mixed_folder(tmp_path / "src")
    writes = {"n": 0}
    real_copy = copy_bytes

    def disk_fills_up(src, dst, length):  # the parent's append of one record to a shard
        writes["n"] += 1
        if writes["n"] == 5:
            raise error
        real_copy(src, dst, length)

    monkeypatch.setattr(writer, "copy_bytes", disk_fills_up)
    with pytest.raises(type(error)):
        qk.write_tfrecords(tmp_path / "src", tmp_path / "out" / "o.tfrecords", shards=2,
                           workers=workers, progress=False)
    assert writes["n"] == 5
    assert os.listdir(tmp_path / "out") == []
    assert multiprocessing.active_children() == []


def test_existing_output_is_never_overwritten_silently(tmp_path):
    """An existing output is refused without overwrite=True, and replaced with it."""
    make_mixed_folder(tmp_path / "src")
    out = tmp_path / "o.tfrecords"
    out.write_bytes(b"precious")
    with pytest.raises(qk.OutputExistsError, match="o.tfrecords"):
        qk.write_tfrecords(tmp_path / "src", out, progress=False)
    assert out.read_bytes() == b"precious"
    qk.write_tfrecords(tmp_path / "src", out, progress=False, overwrite=True)
    assert len(_records(str(out))) == 16


def test_shards_are_named_and_identical_whatever_the_workers(tmp_path):
    """Shard names follow name-0000i-of-0000n; bytes do not depend on the worker count."""
    make_mixed_folder(tmp_path / "src", n_per_class=6)
    one = qk.write_tfrecords(tmp_path / "src", tmp_path / "a" / "d.tfrecords", shards=3,
                             workers=1, progress=False)
    two = qk.write_tfrecords(tmp_path / "src", tmp_path / "b" / "d.tfrecords", shards=3,
                             workers=2, progress=False)
    assert [os.path.basename(p) for p in one.outputs] == [
        f"d-0000{i}-of-00003.tfrecords" for i in range(3)]
    for a, b in zip(one.outputs, two.outputs):
        assert open(a, "rb").read() == open(b, "rb").read()
    counts = [len(_records(p)) for p in one.outputs]
    assert sum(counts) == one.written and max(counts) - min(counts) <= 1
    assert expand_files(str(tmp_path / "a")) == one.outputs  # the labels file is not a shard


def test_labels_file_lists_classes_in_label_order(tmp_path):
    """<output>.labels.txt maps labels back to the class names."""
    make_mixed_folder(tmp_path / "src")
    report = qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", progress=False)
    names = open(report.labels_path, encoding="utf-8").read().splitlines()
    assert names == report.class_names == ["bird", "dog", "猫"]
    for r in _records(report.outputs[0]):
        assert names[r.label] == r.label_text


@pytest.mark.parametrize("encoding", ["jpeg", "png"])
def test_encoded_records_are_smaller_and_decode(tmp_path, encoding):
    """jpeg/png store encoded bytes with format saying so; png decodes to the raw pixels."""
    make_mixed_folder(tmp_path / "src")
    raw = qk.write_tfrecords(tmp_path / "src", tmp_path / "raw.tfrecords", progress=False)
    enc = qk.write_tfrecords(tmp_path / "src", tmp_path / "enc.tfrecords", encoding=encoding,
                             progress=False)
    assert enc.bytes < raw.bytes
    raws, encs = _records(raw.outputs[0]), _records(enc.outputs[0])
    assert all(r.fmt == encoding for r in encs)
    if encoding == "png":
        assert all((a.image == b.image).all() for a, b in zip(raws, encs))
    else:
        err = np.mean([np.abs(a.image.astype(int) - b.image).mean() for a, b in zip(raws, encs)])
        assert err < 8


def test_jpeg_draft_decode_matches_a_full_decode(tmp_path):
    """Draft-mode JPEG decoding gives nearly the same pixels as a full decode + resize."""
    p = tmp_path / "big.jpg"
    a = np.kron(rgb(40, 40), np.ones((16, 16, 1), np.uint8))  # 640x640 of smooth blocks
    Image.fromarray(a).save(p, quality=95)
    fast = images.load_rgb(str(p), (256, 256)).astype(int)
    full = np.asarray(Image.open(p).convert("RGB").resize((256, 256), Image.BICUBIC)).astype(int)
    assert np.abs(fast - full).mean() < 4


def test_hand_encoded_example_parses_as_protobufs_own():
    """The wire-format encoder gives protobuf's own Example: ints (negative, large), bytes."""
    import tensorflow as tf

    from queuekit.records.example import encode_example

    feats = {"label": 3, "neg": -5, "big": 2**62, "zero": 0, "img_raw": bytes(range(256)) * 300,
             "label_text": "猫".encode(), "empty": b""}

    def feature(v):
        if isinstance(v, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    expected = tf.train.Example(features=tf.train.Features(
        feature={k: feature(v) for k, v in feats.items()}))
    ours = encode_example(feats)
    assert tf.train.Example.FromString(ours) == expected
    assert encode_example(dict(reversed(feats.items()))) == ours  # order-independent bytes


@pytest.mark.parametrize("kernel_copy", ["works", "cross-device", "missing"])
def test_chunk_append_falls_back_to_read_and_write(tmp_path, monkeypatch, kernel_copy):
    """Records are appended byte for byte with copy_file_range, or without it (other OSes)."""
    import errno

    data = bytes(range(256)) * 5000  # 1.28 MB: more than one fallback read
    (tmp_path / "src").write_bytes(b"skip" + data)
    if kernel_copy == "cross-device":
        def refuse(*args):
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", refuse)
    elif kernel_copy == "missing":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        os.lseek(src, 4, os.SEEK_SET)
        copy_bytes(src, dst, len(data) - 10)
        copy_bytes(src, dst, 10)
        with pytest.raises(OSError, match="ended early: 1 bytes missing"):
            copy_bytes(src, dst, 1)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == data


def test_the_worker_module_imports_no_tensorflow():
    """make's workers (forkserver, spawn) import Pillow, numpy and the encoder, never TensorFlow."""
    import subprocess
    import sys

    code = "import sys, queuekit.records.make.workers; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_queuekit_make_runs_without_tensorflow(tmp_path):
    """`queuekit make` (two workers) on a Python where TensorFlow cannot be imported: exit 0, and
    the records read back; its errors load TensorFlow only when one that subclasses TF's is
    used (it took 3.5 s of a 4.7 s make)."""
    import subprocess
    import sys

    from tests.helpers import without_module

    make_mixed_folder(tmp_path / "src")
    code = (without_module("tensorflow")
            + "import sys\nfrom queuekit.cli import main\nrc = main(sys.argv[1:])\n"
            + "assert 'tensorflow' not in sys.modules\nsys.exit(rc)\n")
    out = subprocess.run([sys.executable, "-c", code, "make", str(tmp_path / "src"),
                          str(tmp_path / "o.tfrecords"), "--workers", "2", "--quiet"],
                         capture_output=True, text=True, timeout=patience(120))
    assert out.returncode == 0, out.stderr[-2000:]
    assert qk.inspect_tfrecords(str(tmp_path / "o.tfrecords")).records == 16


def test_export_and_inspect_run_without_tensorflow(tmp_path):
    """`queuekit inspect` and `queuekit export` read records with queuekit's own Example
    decoder: on a Python where TensorFlow cannot be imported both succeed, with the same
    answers as with it."""
    import json
    import subprocess
    import sys

    from tests.helpers import without_module

    make_mixed_folder(tmp_path / "src")
    qk.write_tfrecords(tmp_path / "src", tmp_path / "o.tfrecords", image_size=16, workers=1,
                       progress=False)
    code = (without_module("tensorflow")
            + "import sys\nfrom queuekit.cli import main\nrc = main(sys.argv[1:])\n"
            + "assert 'tensorflow' not in sys.modules\nsys.exit(rc)\n")
    record = str(tmp_path / "o.tfrecords")
    out = subprocess.run([sys.executable, "-c", code, "inspect", record, "--json"],
                         capture_output=True, text=True, timeout=patience(120))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["records"] == 16
    out = subprocess.run([sys.executable, "-c", code, "export", record, str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=patience(120))
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "x").rglob("*.jpg"))) == 16


def test_forkserver_workers_write_the_same_bytes_as_fork(tmp_path):
    """The start method does not change the output, byte for byte."""
    make_mixed_folder(tmp_path / "src")
    outs = {}
    for method in ("fork", "forkserver"):
        report = qk.write_tfrecords(tmp_path / "src", tmp_path / f"{method}.tfrecords",
                                    image_size=16, workers=2, start_method=method,
                                    progress=False)
        outs[method] = open(report.outputs[0], "rb").read()
    assert outs["fork"] == outs["forkserver"]
    assert multiprocessing.active_children() == []


def test_a_script_read_from_stdin_makes_its_records_with_its_workers(tmp_path):
    """``python - <<EOF``: the workers never import the program's main module ('<stdin>',
    which they could not open), so the script's records are made by its 2 workers."""
    import subprocess
    import sys

    make_mixed_folder(tmp_path / "src")
    script = ("import logging, multiprocessing, queuekit as qk\n"
              "logging.basicConfig()\n"
              f"r = qk.write_tfrecords({str(tmp_path / 'src')!r}, "
              f"{str(tmp_path / 'out.tfrecords')!r}, image_size=16, workers=2, progress=False)\n"
              "print(r.written, multiprocessing.active_children())\n")
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                         cwd=tmp_path, timeout=patience(300))
    assert out.returncode == 0, out.stderr
    assert "main module" not in out.stderr and "Traceback" not in out.stderr
    expected = len(qk.scan_image_folder(tmp_path / "src"))
    assert out.stdout.split() == [str(expected), "[]"]
    assert len(_records(str(tmp_path / "out.tfrecords"))) == expected
    assert sorted(os.listdir(tmp_path)) == ["out.tfrecords", "out.tfrecords.labels.txt",
                                           "out.tfrecords.manifest.json", "src"]


def test_a_listing_gives_the_walks_labels_order_and_skips(tmp_path):
    """folder_from_listing (object stores) labels and orders files as the folder walk does."""
    from queuekit.records.folder import folder_from_listing

    make_mixed_folder(tmp_path)
    os.makedirs(tmp_path / "dog" / ".cache")
    (tmp_path / "dog" / ".cache" / "x.jpg").write_bytes(b"x")
    walked = qk.scan_image_folder(tmp_path)
    listing = [os.path.relpath(os.path.join(d, f), tmp_path).replace(os.sep, "/")
               for d, _, files in os.walk(tmp_path) for f in files]
    listed = folder_from_listing(str(tmp_path), sorted(listing, reverse=True))
    assert [os.path.normpath(p) for p in listed.paths] == walked.paths
    assert (listed.labels, listed.class_names) == (walked.labels, walked.class_names)
    assert listed.skipped == walked.skipped
