"""The input position's file and what identifies a dataset: a dataset moved, reached by another
path, renamed or rewritten; a pipeline renamed; positions that lie; what a session may delete.
Each restart's records are counted by id: every record once per epoch, or a DatasetError."""

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.resume import file as position_file
from tests.helpers import v1, write_id_records

N_FILES, PER_FILE = 4, 30
ALL = list(range(N_FILES * PER_FILE))


def _files(folder):
    os.makedirs(folder, exist_ok=True)
    return [write_id_records(os.path.join(folder, f"part{k}.tfrecords"), PER_FILE,
                             start=PER_FILE * k) for k in range(N_FILES)]


def _batch(files, name=None):
    """A training graph's pipeline (its global step incremented), one reader, in order."""
    v1.train.get_or_create_global_step().assign_add(1)
    return qk.tfrecord_batches(files, batch_size=5, num_epochs=1, num_readers=1, name=name,
                               parse_fn=lambda s: tf.io.parse_single_example(
                                   s, {"id": tf.io.FixedLenFeature([], tf.int64)}))


def _ids(qs, batch, steps=None):
    if steps is None:
        return [i for b in qs.iterate(batch) for i in b["id"].tolist()]
    return [i for _ in range(steps) for i in qs.run(batch)["id"].tolist()]


def _checkpoint(files, ckdir, steps=7, name=None):
    """The ids a first job consumed before its checkpoint at ``ckdir``/model."""
    with qk.QueueSession() as qs:
        first = _ids(qs, _batch(files, name), steps)
        v1.train.Saver().save(qs, os.path.join(ckdir, "model"))
    return first


@pytest.mark.parametrize("how", ["moved", "symlink"])
def test_a_dataset_moved_or_reached_by_another_path_resumes_exactly(tmp_path, how):
    """The dataset's folder renamed (a job moved to another mount), or reached through a link,
    between the checkpoint and the restart: the rest of the epoch, each record once (it was
    140 deliveries for 120 records, silently)."""
    files = _files(tmp_path / "data")
    first = _checkpoint(files, str(tmp_path / "ck"))
    if how == "moved":
        os.rename(tmp_path / "data", tmp_path / "moved")
        now = [str(tmp_path / "moved" / os.path.basename(f)) for f in files]
    else:
        os.symlink(tmp_path / "data", tmp_path / "link")
        now = [str(tmp_path / "link" / os.path.basename(f)) for f in files]
    with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
        rest = _ids(qs, _batch(now))
    assert sorted(first + rest) == ALL and len(first + rest) == len(ALL)


def test_shards_swapped_resume_by_content_and_a_rewritten_shard_is_refused(tmp_path):
    """Two shards' names swapped (same sizes): each is found by its content, the epoch ends
    exactly. A shard rewritten in another order under its name and size: a DatasetError
    naming it (20 records were never read and 20 twice, silently)."""
    files = _files(tmp_path / "data")
    first = _checkpoint(files, str(tmp_path / "ck"))
    os.rename(files[1], str(tmp_path / "t"))
    os.rename(files[2], files[1])
    os.rename(str(tmp_path / "t"), files[2])
    with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
        rest = _ids(qs, _batch(files))
    assert sorted(first + rest) == ALL and len(first + rest) == len(ALL)
    shutil.rmtree(tmp_path / "ck")
    _checkpoint(files, str(tmp_path / "ck"))
    records = list(tf.compat.v1.io.tf_record_iterator(files[3]))
    with tf.io.TFRecordWriter(files[3]) as w:  # the same records, in reverse order
        for record in reversed(records):
            w.write(record)
    with pytest.raises(qk.DatasetError, match=r"part3.tfrecords changed since the checkpoint "
                                              r"\(same size.*other content"):
        with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
            qs.run(_batch(files))


def test_a_renamed_pipeline_continues_the_checkpoint_s_pipeline_of_the_same_files(
        tmp_path, caplog):
    """The new script wraps its input in another name and builds a validation pipeline first:
    the training pipeline resumes by its files, with a warning naming both names; a
    checkpoint's pipeline that matches nothing is said (it was 160 deliveries for 120)."""
    files = _files(tmp_path / "data")
    other = [write_id_records(tmp_path / "valid.tfrecords", 10, start=1000)]
    first = _checkpoint(files, str(tmp_path / "ck"), name="train_input")
    with caplog.at_level(logging.WARNING, logger="queuekit"):
        with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
            valid = _batch(other, name="valid_input")
            with tf.name_scope("wrapped"):
                batch = _batch(files, name="train_input")
            assert sorted(_ids(qs, valid, 2)) == list(range(1000, 1010))
            rest = _ids(qs, batch)
    assert sorted(first + rest) == ALL and len(first + rest) == len(ALL)
    assert "continues the checkpoint's pipeline train_input" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="queuekit"):
        with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
            assert _ids(qs, _batch(other, name="valid_input"), 1) == [1000 + i for i in range(5)]
    assert "matched no pipeline of this graph" in caplog.text and "train_input" in caplog.text


@pytest.mark.parametrize("lie,match", [
    (lambda s: s["pipelines"][0]["counts"].__setitem__(0, [[3, PER_FILE]]),
     "consumed 3 times by a pipeline of 1 epoch"),
    (lambda s: s.__setitem__("pipelines", {"x": s["pipelines"][0]}), "'pipelines' is not a list"),
    (lambda s: s["pipelines"][0]["files"][0].__setitem__(1, 10**30), "a file entry"),
    (lambda s: s["pipelines"][0]["counts"].append([[1, 2]]), "files and counts do not pair"),
])
def test_a_position_that_lies_is_refused(tmp_path, lie, match):
    """A position edited to claim 3 passes of a one-epoch pipeline (its file's 30 records
    were skipped), pipelines as an object (ignored: the epoch read again), a huge size, an
    extra file: a DatasetError naming the position file."""
    files = _files(tmp_path / "data")
    _checkpoint(files, str(tmp_path / "ck"))
    path = tmp_path / "ck" / "model.queuekit-input"
    state = json.loads(path.read_text())
    lie(state)
    path.write_text(json.dumps(state))
    with pytest.raises(qk.DatasetError, match=match) as info:
        with qk.QueueSession(checkpoint_dir=str(tmp_path / "ck")) as qs:
            qs.run(_batch(files))
    assert "model.queuekit-input" in str(info.value) or "pipeline" in str(info.value)


@pytest.mark.parametrize("kind", ["fifo", "sparse", "nesting", "huge"])
def test_a_hostile_position_file_is_a_dataset_error_naming_it(tmp_path, kind):
    """A FIFO under a position's name (the restart hung), a sparse 1 GiB file (read whole),
    a nesting bomb (RecursionError), a number past int64 (OverflowError): each a DatasetError
    naming the file, read no further than the size cap."""
    path = str(tmp_path / "model.queuekit-input")
    if kind == "fifo":
        os.mkfifo(path)
        match = "not a regular file"
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(2**30)
        match = "over"
    elif kind == "nesting":
        with open(path, "w") as f:
            f.write("[" * 100_000 + "]" * 100_000)
        match = "not a queuekit input position"
    else:
        with open(path, "w") as f:
            json.dump({"format": 1, "pipelines": [{"name": "p", "files": [["a", 10**400, 1]],
                                                   "counts": [[[0, 1]]]}]}, f)
        match = "a file entry"
    with pytest.raises(qk.DatasetError, match=match) as info:
        position_file.read_position(path)
    assert path in str(info.value)


def test_pruning_never_removes_a_file_the_session_did_not_write(tmp_path):
    """The session's position of a checkpoint the Saver removed (max_to_keep) goes with it;
    one rewritten in place by someone else (same inode: an inode number is no identity)
    after the session wrote it, stays."""
    files = _files(tmp_path / "data")
    ckdir = tmp_path / "ck"
    with qk.QueueSession() as qs:
        batch = _batch(files)
        saver = v1.train.Saver(max_to_keep=1)
        for step in range(1, 4):
            qs.run(batch)
            saver.save(qs, str(ckdir / "model"), global_step=step)
            if step == 2:
                mine = ckdir / "model-2.queuekit-input"
                inode = os.stat(mine).st_ino
                with open(mine, "r+") as f:  # the user's own content, in the same inode
                    f.truncate(0)
                    f.write("the user's notes")
        qs.run(batch)  # the run after a save tidies
    names = sorted(os.listdir(ckdir))
    assert "model-1.queuekit-input" not in names  # the session's own, gone with model-1
    assert (ckdir / "model-2.queuekit-input").read_text() == "the user's notes"
    assert os.stat(ckdir / "model-2.queuekit-input").st_ino == inode
    assert "model-3.queuekit-input" in names


def test_a_killed_writer_s_temp_files_are_removed_and_no_other(tmp_path):
    """Temp files a SIGKILLed save left beside the checkpoints (``.model-N.queuekit-input
    .<pid>-<hex>.tmp``) are removed by the next session that saves there: only regular files
    of that name, of a process gone, older than a write; a live process's and any other
    name stay."""
    files = _files(tmp_path / "data")
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)
    names = {f".model-5.queuekit-input.{dead}-0badc0de.tmp": False,
             f".model-5.queuekit-input.{os.getpid()}-0badc0de.tmp": True,
             f".notes.{dead}-0badc0de.tmp": True}
    for name in names:
        (ckdir / name).write_text("x")
        os.utime(ckdir / name, (1, 1))
    os.symlink(ckdir / "elsewhere", ckdir / f".model-6.queuekit-input.{dead}-0badc0de.tmp")
    with qk.QueueSession() as qs:
        batch = _batch(files)
        qs.run(batch)
        v1.train.Saver().save(qs, str(ckdir / "model"), global_step=1)
        qs.run(batch)
    for name, stays in names.items():
        assert (ckdir / name).exists() is stays, name
    assert os.path.islink(ckdir / f".model-6.queuekit-input.{dead}-0badc0de.tmp")


def test_match_files_by_content_by_name_and_refusals():
    """The pure matching: content first (a move, a swap), by name for entries without a
    fingerprint (older positions, work queues), None for other files altogether."""
    match = position_file.match_files
    now = [("/b/x", 10, 2, "p1"), ("/b/y", 10, 2, "p2")]
    assert match([("/a/x", 10, 2, "p1"), ("/a/y", 10, 2, "p2")], now, "p") == {
        "/a/x": "/b/x", "/a/y": "/b/y"}
    assert match([("/b/x", 10, 2, "p2"), ("/b/y", 10, 2, "p1")], now, "p") == {
        "/b/x": "/b/y", "/b/y": "/b/x"}
    assert match([("/b/x", 10, 2, None), ("/b/y", 10, 2, None)], now, "p") == {
        "/b/x": "/b/x", "/b/y": "/b/y"}
    assert match([("/c/z", 10, 2, "p9")], now, "p") is None
    with pytest.raises(qk.DatasetError, match="/b/y was added"):
        match([("/b/x", 10, 2, "p1")], now, "p")
    with pytest.raises(qk.DatasetError, match="/b/x changed since the checkpoint \\(12 bytes"):
        match([("/b/x", 12, 2, None), ("/b/y", 10, 2, None)], now, "p")
