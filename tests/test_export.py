"""TFRecord -> images, inspection, corruption reports, and compatibility with the seed script."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import queuekit as qk
from queuekit.cli import main
from queuekit.records.example import make_example
from queuekit.records.tfrecord import scan_records
from tests.helpers import patience
from tests.imagefactory import make_mixed_folder, rgb
from tests.seed import makeTFRec, seed_read_all


@pytest.fixture
def made(tmp_path):
    make_mixed_folder(tmp_path / "src")
    return qk.write_tfrecords(tmp_path / "src", tmp_path / "d.tfrecords", progress=False)


def _bytes_at(path, offset, value=None):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0xFF if value is None else value
    open(path, "wb").write(bytes(data))


def test_round_trip_png_export_keeps_the_pixels(tmp_path, made):
    """folder -> TFRecord -> png export gives exactly the pixels stored in the records."""
    report = qk.export_images(made.outputs, tmp_path / "out", format="png", progress=False)
    assert report.count == made.written
    assert sorted(os.listdir(tmp_path / "out")) == [".queuekit-export.json", "bird",
                                                    "classes.json", "dog", "猫"]
    seed_view = seed_read_all(made.outputs[0])  # the seed's own reader
    for i, (pixels, label) in enumerate(seed_view):
        name = made.class_names[label]
        exported = np.asarray(Image.open(tmp_path / "out" / name / f"{i}.png"))
        assert (exported == pixels).all()


def test_seed_reader_reads_queuekit_files(made):
    """The seed's read_and_decode graph reads a queuekit raw file unchanged."""
    got = seed_read_all(made.outputs[0])
    assert len(got) == made.written
    assert all(img.shape == (256, 256, 3) for img, _ in got)


def test_queuekit_reads_seed_files(tmp_path):
    """Files written by the seed's makeTFRec (label + img_raw only) export and inspect."""
    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.jpg"
        Image.fromarray(rgb(300, 200, seed=i)).save(p)
        paths.append(str(p))
    seed_file = str(tmp_path / "mydata.tfrecords")
    makeTFRec(paths, [0, 1, 0, 1], out=seed_file)
    report = qk.inspect_tfrecords(seed_file)
    assert report.records == 4 and not report.corrupt
    assert report.labels == {"0": 2, "1": 2}
    assert set(report.features) == {"label", "img_raw"}
    exp = qk.export_images(seed_file, tmp_path / "out", format="png", progress=False)
    assert exp.count == 4 and sorted(exp.per_label) == ["0", "1"]
    first = np.asarray(Image.open(tmp_path / "out" / "0" / "0.png"))
    expected = np.asarray(Image.open(paths[0]).resize((256, 256)))
    assert (first == expected).all()


def test_inspect_reports_features_shapes_and_labels(made):
    """inspect lists records, feature types, image shapes and a label histogram."""
    r = qk.inspect_tfrecords(made.outputs)
    assert r.records == made.written and r.corrupt == []
    assert r.features["img_raw"]["type"] == "bytes"
    assert r.features["label"]["type"] == "int64"
    assert r.shapes == {"256x256x3 raw": made.written}
    assert sum(r.labels.values()) == made.written and "2 猫" in r.labels
    assert json.loads(r.to_json())["records"] == made.written


@pytest.mark.parametrize("where,reason", [("length_crc", "bad length CRC"),
                                          ("data", "bad data CRC"),
                                          ("cut", "truncated")])
def test_inspect_finds_each_kind_of_corruption(tmp_path, made, where, reason):
    """Bad length CRC, bad data CRC and truncation are reported with index and offset."""
    path = made.outputs[0]
    offsets = [r.offset for r in scan_records(path)]
    if where == "length_crc":
        _bytes_at(path, offsets[3] + 9)
    elif where == "data":
        _bytes_at(path, offsets[3] + 100)
    else:
        data = open(path, "rb").read()
        open(path, "wb").write(data[: offsets[3] + 50])
    report = qk.inspect_tfrecords(path)
    (bad_path, bad), *rest = report.corrupt
    assert (bad_path, bad.index, bad.offset) == (path, 3, offsets[3])
    assert reason in bad.reason
    if where == "data":
        assert report.records == made.written - 1  # the scan goes on after a bad data CRC


def test_export_of_corrupt_file_keeps_what_came_before(tmp_path, made):
    """export writes every record before the corruption, then fails naming file, index, offset."""
    path = made.outputs[0]
    offsets = [r.offset for r in scan_records(path)]
    _bytes_at(path, offsets[5] + 200)
    with pytest.raises(qk.CorruptRecordError) as info:
        qk.export_images(path, tmp_path / "out", progress=False)
    err = info.value
    assert (err.path, err.index, err.offset) == (path, 5, offsets[5])
    assert f"record 5 at byte offset {offsets[5]}" in str(err)
    exported = [f for _, _, fs in os.walk(tmp_path / "out") for f in fs
                if f.endswith(".jpg")]
    assert sorted(exported) == sorted(f"{i}.jpg" for i in range(5))


def test_raw_record_of_wrong_size_names_file_and_sizes(tmp_path):
    """A raw record whose bytes do not match its declared shape is a clear error."""
    bad = tmp_path / "bad.tfrecords"
    with tf.io.TFRecordWriter(str(bad)) as w:
        w.write(make_example(b"\0" * 10, label=0, height=4, width=4))
    with pytest.raises(qk.DatasetError, match=r"bad.tfrecords: record 0.*10 bytes, expected 48"):
        qk.export_images(str(bad), tmp_path / "out", progress=False)


def test_cli_make_export_inspect_in_process(tmp_path, capsys):
    """The CLI subcommands run in-process and return the documented exit codes."""
    make_mixed_folder(tmp_path / "src")
    out = str(tmp_path / "d.tfrecords")
    assert main(["make", str(tmp_path / "src"), out, "--size", "32x48", "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == out
    assert main(["make", str(tmp_path / "src"), out, "--quiet"]) == 2  # exists
    assert "--overwrite" in capsys.readouterr().err
    assert main(["inspect", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shapes"] == {"32x48x3 raw": 16}
    assert main(["export", out, str(tmp_path / "x"), "--format", "png"]) == 0
    assert "exported 16 images" in capsys.readouterr().out
    assert main(["make", str(tmp_path / "nope"), out, "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["make", str(tmp_path / "src"), out, "--size", "0"]) == 2
    assert main(["inspect", str(tmp_path / "missing.tfrecords")]) == 2
    offsets = [r.offset for r in scan_records(out)]
    _bytes_at(out, offsets[1] + 60)
    assert main(["inspect", out]) == 1
    assert "CORRUPT" in capsys.readouterr().out
    assert main(["export", out, str(tmp_path / "y")]) == 1


def test_cli_strict_exits_1(tmp_path, capsys):
    """--strict turns a skipped image into exit code 1, with the file named."""
    make_mixed_folder(tmp_path / "src")
    (tmp_path / "src" / "dog" / "broken.jpg").write_bytes(b"not a jpeg")
    args = ["make", str(tmp_path / "src"), str(tmp_path / "d.tfrecords"), "--quiet"]
    assert main(args + ["--strict"]) == 1
    assert "broken.jpg" in capsys.readouterr().err
    assert main(args) == 0


def _labelled(path, labels):
    """Records of 2x2 images whose label_text values are ``labels``."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, text in enumerate(labels):
            w.write(make_example(bytes([i]) * 12, label=labels.index(text), height=2, width=2,
                                 label_text=text))
    return str(path)


def test_export_refuses_a_non_empty_folder_and_overwrite_replaces_only_its_own(tmp_path):
    """A second export needs --overwrite, which removes the first's images; others are refused."""
    first = _labelled(tmp_path / "a.tfrecords", ["x"] * 4)
    second = _labelled(tmp_path / "b.tfrecords", ["y"] * 2)
    out = tmp_path / "out"
    qk.export_images(first, out, progress=False)
    with pytest.raises(qk.OutputExistsError, match="not empty"):
        qk.export_images(second, out, progress=False)
    qk.export_images(second, out, overwrite=True, progress=False)
    images = sorted(str(p.relative_to(out)) for p in out.rglob("*.jpg"))
    assert images == ["y/0.jpg", "y/1.jpg"]
    (out / "mine.txt").write_text("the user's own file")
    with pytest.raises(qk.OutputExistsError, match="mine.txt"):
        qk.export_images(first, out, overwrite=True, progress=False)
    assert (out / "mine.txt").exists() and (out / "y" / "0.jpg").exists()


def test_export_folder_names_are_distinct_short_enough_and_mapped(tmp_path):
    """a/b and a_b get distinct folders; a 300-character label fits; classes.json maps back."""
    labels = ["a/b", "a_b", "L" * 300, "new\nline"]
    path = _labelled(tmp_path / "l.tfrecords", labels)
    report = qk.export_images(path, tmp_path / "out", progress=False)
    assert report.count == 4 and len(report.per_label) == 4
    mapping = json.loads((tmp_path / "out" / "classes.json").read_text())
    assert sorted(v["label_text"] for v in mapping.values()) == sorted(labels)
    assert all(len(name.encode()) <= 255 and "/" not in name for name in mapping)
    for folder, v in mapping.items():
        assert os.listdir(tmp_path / "out" / folder) == [f"{v['label']}.jpg"]  # record i = label i


def test_inspect_fails_on_non_examples_and_escapes_control_characters(tmp_path, capsys):
    """inspect exits 1 for records that are not Examples; labels print without raw escapes."""
    junk = tmp_path / "junk.tfrecords"
    with tf.io.TFRecordWriter(str(junk)) as w:
        w.write(b"\xff\xfe not a protobuf")
    assert main(["inspect", str(junk)]) == 1
    assert "NOT EXAMPLES: 1" in capsys.readouterr().out
    evil = _labelled(tmp_path / "e.tfrecords", ["\x1b[31mred"])
    assert main(["inspect", evil]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31mred" in out


def test_export_of_a_negative_shape_is_a_bad_record_exit_1(tmp_path, capsys):
    """A record declaring a negative height is a named error with exit code 1, not a traceback."""
    bad = tmp_path / "neg.tfrecords"
    with tf.io.TFRecordWriter(str(bad)) as w:
        w.write(make_example(b"\0" * 12, label=0, height=-2, width=2))
    assert main(["export", str(bad), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "neg.tfrecords: record 0" in err and "invalid image shape" in err
    assert "Traceback" not in err


def _fake_manifest(out, files):
    out.mkdir(exist_ok=True)
    (out / ".queuekit-export.json").write_text(json.dumps(files))


@pytest.mark.parametrize("entry", ["../victim.txt", "ABSOLUTE", "a/../../victim.txt",
                                   {"path": "../victim.txt", "size": 6, "sha256": "x"}])
def test_overwrite_never_deletes_what_a_manifest_lists_outside_the_folder(tmp_path, entry,
                                                                           capsys):
    """A manifest naming ../victim.txt or an absolute path is refused, naming it; nothing goes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    entry = str(victim) if entry == "ABSOLUTE" else entry
    out = tmp_path / "out"
    _fake_manifest(out, {"files": [entry]})
    rec = _labelled(tmp_path / "a.tfrecords", ["x"])
    assert main(["export", rec, str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a manifest queuekit wrote" in err and "Traceback" not in err
    assert victim.read_text() == "keep me"
    assert sorted(os.listdir(out)) == [".queuekit-export.json"]


@pytest.mark.parametrize("manifest", [{"files": [1]}, None, [], {"files": "x"}, "{not json"])
def test_a_malformed_manifest_is_a_clear_error(tmp_path, manifest, capsys):
    """{"files":[1]}, null, [] or broken JSON: exit 2 naming the manifest, no traceback."""
    out = tmp_path / "out"
    out.mkdir()
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (out / ".queuekit-export.json").write_text(text)
    rec = _labelled(tmp_path / "a.tfrecords", ["x"])
    assert main(["export", rec, str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert ".queuekit-export.json is not a manifest queuekit wrote" in err
    assert "Traceback" not in err


def test_overwrite_does_not_follow_a_linked_class_folder(tmp_path):
    """out/x -> ../photos, listed in the manifest as x/0.jpg: refused, the photo behind it kept."""
    rec = _labelled(tmp_path / "a.tfrecords", ["x"])
    out = tmp_path / "out"
    qk.export_images(rec, out, progress=False)
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "0.jpg").write_bytes((out / "x" / "0.jpg").read_bytes())  # same bytes even
    for p in (out / "x").iterdir():
        p.unlink()
    (out / "x").rmdir()
    (out / "x").symlink_to(photos, target_is_directory=True)
    with pytest.raises(qk.OutputExistsError, match="link"):
        qk.export_images(rec, out, overwrite=True, progress=False)
    assert (photos / "0.jpg").exists()


def test_overwrite_keeps_a_file_changed_since_the_export(tmp_path):
    """A listed image whose bytes changed (the user edited it) is not deleted."""
    rec = _labelled(tmp_path / "a.tfrecords", ["x", "y"])
    out = tmp_path / "out"
    qk.export_images(rec, out, progress=False)
    (out / "y" / "1.jpg").write_bytes(b"the user's edit")
    with pytest.raises(qk.OutputExistsError, match="changed since the export"):
        qk.export_images(rec, out, overwrite=True, progress=False)
    assert (out / "y" / "1.jpg").read_bytes() == b"the user's edit"
    assert (out / "x" / "0.jpg").exists()


def test_overwrite_accepts_a_version_1_manifest_of_export_names_only(tmp_path):
    """An older export's manifest (plain names) is replaced; a plain name it could not have
    written is refused."""
    rec = _labelled(tmp_path / "a.tfrecords", ["x"])
    out = tmp_path / "out"
    qk.export_images(rec, out, progress=False)
    _fake_manifest(out, {"files": ["x/0.jpg", "classes.json"]})
    qk.export_images(rec, out, overwrite=True, progress=False)
    assert json.loads((out / ".queuekit-export.json").read_text())["version"] == 2
    _fake_manifest(out, {"files": ["x/0.jpg", "x/notes.txt", "classes.json"]})
    (out / "x" / "notes.txt").write_text("mine")
    with pytest.raises(qk.OutputExistsError, match="not a manifest"):
        qk.export_images(rec, out, overwrite=True, progress=False)
    assert (out / "x" / "notes.txt").exists()


def test_overwrite_with_a_corrupt_input_keeps_the_previous_export(tmp_path):
    """export --overwrite of a corrupt file fails and leaves the previous export whole."""
    good = _labelled(tmp_path / "a.tfrecords", ["x", "y"])
    out = tmp_path / "out"
    qk.export_images(good, out, progress=False)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = tmp_path / "bad.tfrecords"
    bad.write_bytes(open(good, "rb").read()[:-3])
    with pytest.raises(qk.CorruptRecordError) as info:
        qk.export_images(bad, out, overwrite=True, progress=False)
    assert "previous export" in "".join(getattr(info.value, "__notes__", []))
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_export_folders_differ_on_case_insensitive_normalising_file_systems(tmp_path):
    """Cat/cat and NFC/NFD café get folders that differ after case folding and NFC."""
    import unicodedata

    labels = ["Cat", "cat", "caf\u00e9", "cafe\u0301"]
    rec = _labelled(tmp_path / "l.tfrecords", labels)
    qk.export_images(rec, tmp_path / "out", progress=False)
    mapping = json.loads((tmp_path / "out" / "classes.json").read_text())
    folded = {unicodedata.normalize("NFC", name).casefold() for name in mapping}
    assert len(mapping) == 4 and len(folded) == 4


def test_a_second_export_to_a_folder_being_written_fails_clearly(tmp_path):
    """While another process holds the folder's lock, export fails naming it; nothing changes."""
    import fcntl

    rec = _labelled(tmp_path / "a.tfrecords", ["x"])
    out = tmp_path / "out"
    out.mkdir()
    holder = open(out / ".queuekit-export.lock", "w")  # another open file: another holder
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(qk.OutputBusyError, match="another queuekit process"):
            qk.export_images(rec, out, progress=False)
    finally:
        holder.close()
    assert os.listdir(out) == [".queuekit-export.lock"]
    qk.export_images(rec, out, progress=False)  # the lock released: it goes through
    assert sorted(os.listdir(out)) == [".queuekit-export.json", "classes.json", "x"]


def test_a_fifo_among_the_inputs_is_refused_by_name(tmp_path, capsys):
    """A glob or a path naming a FIFO: inspect, export and tfrecord_batches fail at once, naming
    it as a FIFO (it was: a hang, or "file not found" for a file that exists)."""
    good = _labelled(tmp_path / "a.tfrecords", ["x"])
    fifo = tmp_path / "b.tfrecords"
    os.mkfifo(fifo)
    assert main(["inspect", str(fifo)]) == 2
    assert f"{fifo} is a FIFO, not a regular file" in capsys.readouterr().err
    glob = str(tmp_path / "*.tfrecords")
    with pytest.raises(qk.InputNotFound, match="b.tfrecords is a FIFO"):
        qk.inspect_tfrecords(glob)
    with pytest.raises(qk.InputNotFound, match="b.tfrecords is a FIFO"):
        qk.export_images([good, str(fifo)], tmp_path / "out", progress=False)
    with tf.Graph().as_default(), pytest.raises(qk.InputNotFound, match="is a FIFO"):
        qk.tfrecord_batches(glob, batch_size=1, num_epochs=1)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def _huge_gzip_record(path, size):
    """A GZIP TFRecord file holding one record of ``size`` zero bytes, written in pieces."""
    import gzip
    import struct

    import google_crc32c

    def mask(crc):
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    length = struct.pack("<Q", size)
    crc, block = 0, bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(length + struct.pack("<I", mask(google_crc32c.value(length))))
        for _ in range(size >> 20):
            f.write(block)
            crc = google_crc32c.extend(crc, block)
        f.write(struct.pack("<I", mask(crc)))


def test_inspect_of_a_huge_record_keeps_memory_bounded(tmp_path):
    """One 256 MiB record: inspect checks its CRC and reports it unparsed, holding a few MiB of
    it at a time (it held two copies and more, and died under a memory limit)."""
    import tracemalloc

    path = str(tmp_path / "huge.tfrecords")
    _huge_gzip_record(path, 256 << 20)
    tracemalloc.start()
    try:
        report = qk.inspect_tfrecords(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.records == 1 and report.corrupt == []
    assert any("not parsed" in shape for shape in report.shapes)
    assert peak < 64 << 20, f"peak {peak >> 20} MiB"


def test_a_huge_record_with_a_bad_crc_is_still_found(tmp_path):
    """The streamed CRC check of a record too large to keep still reports a bad data CRC."""
    import gzip

    path = str(tmp_path / "huge.tfrecords")
    _huge_gzip_record(path, 80 << 20)
    data = bytearray(gzip.decompress(open(path, "rb").read()))
    data[1000] ^= 1
    open(path, "wb").write(gzip.compress(bytes(data), compresslevel=1))
    report = qk.inspect_tfrecords(path)
    assert [c.reason for _, c in report.corrupt] == ["bad data CRC"]


def test_two_quick_ctrl_c_during_export_keep_the_previous_export_whole(tmp_path):
    """SIGINT twice, 30 ms apart, mid-export over a previous export: exit 130, the previous
    export byte for byte, no staging folder, no lock left (it was: half-written images or
    no manifest)."""
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import default_signals

    rng = np.random.default_rng(0)
    big = tmp_path / "big.tfrecords"
    with tf.io.TFRecordWriter(str(big)) as w:
        for i in range(1500):
            w.write(make_example(rng.integers(0, 255, 64 * 64 * 3, np.uint8).tobytes(),
                                 label=i % 3, height=64, width=64, label_text=f"c{i % 3}"))
    out = tmp_path / "out"
    qk.export_images(_labelled(tmp_path / "small.tfrecords", ["x", "y"]), out, progress=False)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = subprocess.Popen([sys.executable, "-m", "queuekit", "export", str(big), str(out),
                             "--overwrite", "--format", "png", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 60
        while not any(len(list(d.rglob("*.png"))) > 20 for d in out.glob(".queuekit-export-*")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.03)  # the gap between two key presses: the second lands in the clean-up
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=patience(60))
    finally:
        if proc.poll() is None:
            proc.kill()
    # The second SIGINT may land after the clean-up, as the process exits: killed by it then.
    assert proc.returncode in (130, -signal.SIGINT), err[-2000:]
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(os.listdir(out)) == [".queuekit-export.json", "classes.json", "x", "y"]
