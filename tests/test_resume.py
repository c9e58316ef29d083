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

from tests.helpers import default_signals, patience, write_id_binaries, write_id_records

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


def run_with_breaks(tmp_path, cfg, breaks, seed=0, name="broken", restores=None):
    """Run the job to its end, SIGKILLed ``breaks`` times at random steps; the ids each step
    of the final history consumed, in order, and how each run ended. ``restores``: a list
    that gets the checkpoint step each run started from."""
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
            out, err = child.communicate(timeout=patience(120))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        ends.append(child.returncode)
        assert child.returncode in (0, -signal.SIGKILL), err[-3000:]
        restored.append(_latest_step(cfg["ckdir"]))
    assert ends[-1] == 0
    if restores is not None:
        restores += restored[:-1]
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


@pytest.mark.slow  # starts job processes
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


@pytest.mark.slow  # starts job processes
def test_ready_batches_resume_with_the_same_sequence(tmp_path, files):
    """prefetch=2 (batches made ready ahead, not consumed until a step takes them), one
    reader, checkpoints by hook, three breaks: the unbroken run's sequence exactly."""
    cfg = dict(BASE, files=files, prefetch=2, save="hook")
    unbroken, _ = run_with_breaks(tmp_path, cfg, 0, name="unbroken")
    broken, ends = run_with_breaks(tmp_path, cfg, 3, seed=2)
    assert ends.count(-signal.SIGKILL) == 3
    assert unbroken == list(range(N_FILES * PER_FILE))
    assert broken == unbroken


@pytest.mark.slow  # starts job processes
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


@pytest.mark.slow  # starts job processes
def test_whole_batches_two_epochs_every_record_once_per_epoch(tmp_path, files):
    """read_many="batch" (a read is a batch, queued whole), 2 readers of 2 threads,
    num_epochs=2, three breaks: every record exactly twice."""
    cfg = dict(BASE, files=files, readers=2, threads=2, read_many="batch", epochs=2)
    broken, ends = run_with_breaks(tmp_path, cfg, 3, seed=3)
    assert ends.count(-signal.SIGKILL) == 3
    assert collections.Counter(broken) == collections.Counter(
        list(range(N_FILES * PER_FILE)) * 2)


@pytest.mark.slow  # starts job processes
def test_fixed_length_records_resume(tmp_path):
    """fixed_length_batches (keys number records, not bytes) resumes exactly too."""
    paths = write_id_binaries(tmp_path, 3, 40)
    cfg = dict(BASE, files=paths, fixed=True, readers=2, read_many=4, shuffle=True)
    broken, _ = run_with_breaks(tmp_path, cfg, 2, seed=5)
    assert sorted(broken) == list(range(120))


@pytest.mark.slow  # starts job processes
def test_a_work_queue_resumes_from_the_chief_s_books_skipping_the_files_done(tmp_path):
    """A work queue's job (the chief's books; here on one machine) with two breaks: every
    record in the history at least once, and no file done at a restored checkpoint read again
    after it (before, the restarted job read the whole epoch again)."""
    files = [str(write_id_records(tmp_path / f"w{k}.tfrecords", 8, start=8 * k))
             for k in range(8)]
    cfg = dict(BASE, files=files, work_queue=True, every=2)
    restores: list[int] = []
    broken, _ = run_with_breaks(tmp_path, cfg, 2, seed=3, restores=restores)
    assert set(broken) == set(range(64))
    runs = collections.defaultdict(list)
    for line in open(tmp_path / "broken.log"):
        run, _, *ids = (int(v) for v in line.split())
        runs[run] += ids
    states = sorted((tmp_path / "broken").glob("*.queuekit-input"),
                    key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    skipped = 0
    for run, restored in enumerate(restores):
        if not restored:
            continue
        (books,) = json.loads(
            (tmp_path / "broken" / f"model-{restored}.queuekit-input").read_text())["work_queues"]
        unfinished = {e.split("\t", 1)[1] for e in books["unfinished"]}
        done = {k for k, f in enumerate(files) if f not in unfinished}
        skipped += len(done)
        again = {i for i in runs[run] if i // 8 in done}
        assert not again, (run, sorted(done), sorted(again))
    assert states and skipped, "no restore skipped a file: the test saw nothing resume"


@pytest.mark.slow  # starts job processes
def test_a_crash_between_the_input_state_and_the_model_leaves_them_consistent(tmp_path,
                                                                              files):
    """The job dies right after writing checkpoint 6's input position, before its model
    files: the index still names checkpoint 3, whose own input position the restart uses;
    the history is the epoch in order, every record once."""
    cfg = dict(BASE, files=files, ckdir=str(tmp_path / "ck"), log=str(tmp_path / "log"))
    first = _job(dict(cfg, crash_after_input_state=2), 0)
    first.communicate(timeout=patience(120))
    assert first.returncode == -signal.SIGKILL
    ckdir = tmp_path / "ck"
    assert _latest_step(ckdir) == 3
    assert (ckdir / "model-6.queuekit-input").exists()
    assert not (ckdir / "model-6.index").exists()
    second = _job(cfg, 1)
    _, err = second.communicate(timeout=patience(120))
    assert second.returncode == 0, err[-3000:]
    lines = [[int(v) for v in line.split()] for line in open(tmp_path / "log")]
    history = [i for run, step, *ids in lines if run == 1 or step <= 3 for i in ids]
    assert history == list(range(N_FILES * PER_FILE))


@pytest.mark.slow  # starts job processes
def test_sigterm_with_preemption_on_saves_the_step_exits_143_and_resumes_exactly(tmp_path,
                                                                               files):
    """SIGTERM mid-run (PreemptionCheckpointHook): the step in progress finishes, a checkpoint
    at that step is written with its input position, the job exits 143; the restart
    continues with the next record (one reader: the unbroken sequence)."""
    cfg = dict(BASE, files=files, ckdir=str(tmp_path / "ck"), log=str(tmp_path / "log"),
               every=1000, preempt=True)
    child = _job(cfg, 0)
    for _ in range(8):  # "ready" and 7 steps
        child.stdout.readline()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=patience(60))
    assert child.returncode == 143, err[-3000:]
    lines = [[int(v) for v in line.split()] for line in open(tmp_path / "log")]
    last = max(step for run, step, *ids in lines)
    assert last >= 7 and _latest_step(tmp_path / "ck") == last
    assert (tmp_path / "ck" / f"model-{last}.queuekit-input").exists()
    again = _job(cfg, 1)
    _, err = again.communicate(timeout=patience(120))
    assert again.returncode == 0, err[-3000:]
    lines = [[int(v) for v in line.split()] for line in open(tmp_path / "log")]
    assert [i for run, step, *ids in lines for i in ids] == list(range(N_FILES * PER_FILE))


@pytest.mark.slow  # starts job processes
def test_a_changed_dataset_is_named_not_mixed(tmp_path, files):
    """A file that grew since the checkpoint: the restart fails naming it."""
    cfg = dict(BASE, files=files, ckdir=str(tmp_path / "ck"), log=str(tmp_path / "log"))
    child = _job(cfg, 0)
    for _ in range(7):
        child.stdout.readline()
    child.kill()
    child.communicate(timeout=patience(60))
    write_id_records(files[2], PER_FILE + 5, start=PER_FILE * 2)
    again = _job(cfg, 1)
    out, err = again.communicate(timeout=patience(120))
    assert again.returncode == 1, err[-2000:]
    assert f"{files[2]} changed since the checkpoint" in err


# -- in this process: how a session finds, applies and refuses an input position ----------
import logging  # noqa: E402

import tensorflow as tf  # noqa: E402

import queuekit as qk  # noqa: E402
from tests.helpers import v1  # noqa: E402


def _ids_batch(files, **kw):
    # A model for the Saver to save, and a training graph (it increments its global step):
    # a restore into it resumes the input.
    v1.train.get_or_create_global_step().assign_add(1)
    kw.setdefault("num_readers", 1)  # records in file order
    return qk.tfrecord_batches(files, batch_size=5, num_epochs=1, parse_fn=lambda s: (
        tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})), **kw)


def _consume(qs, batch, steps):
    return [i for _ in range(steps) for i in qs.run(batch)["id"].tolist()]


def _save_then_resume(files, prefix, steps):
    """(the ids of ``steps`` batches, saved then; the ids a second session restoring that
    checkpoint before its first run reads to the end)."""
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        saver = v1.train.Saver()
        first = _consume(qs, batch, steps)
        saver.save(qs, prefix)
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        v1.train.Saver().restore(qs, prefix)
        rest = [i for b in qs.iterate(batch) for i in b["id"].tolist()]
    return first, rest


def test_saver_restore_before_the_first_run_resumes_and_resume_input_false_starts_over(
        tmp_path, files):
    """saver.restore(qs, path) before any run applies the position; resume_input=False and a
    checkpoint written by a plain session (no position) start the epoch over."""
    prefix = str(tmp_path / "ck" / "model")
    first, rest = _save_then_resume(files, prefix, 4)
    assert first + rest == list(range(N_FILES * PER_FILE))
    with qk.QueueSession(resume_input=False) as qs:
        batch = _ids_batch(files)
        v1.train.Saver().restore(qs, prefix)
        assert _consume(qs, batch, 1) == [0, 1, 2, 3, 4]


def test_each_input_file_is_walked_once_per_process_and_opened_a_bounded_number_of_times(
        tmp_path, files, monkeypatch):
    """The build's framing check, its compression, the input position's record places and
    the next session's check share one walk of each file's headers; a save, a restore and a
    second session over the same files open each a bounded number of times (in Python)."""
    import builtins

    from queuekit.records import files as record_files
    walks, opens = collections.Counter(), collections.Counter()
    walk, open_, os_open = record_files.walk, builtins.open, os.open

    def counted_walk(path, *a, **k):
        walks[path] += 1
        return walk(path, *a, **k)

    def counted(real):
        def opened(path, *a, **k):
            if isinstance(path, str) and path in files:
                opens[path] += 1
            return real(path, *a, **k)
        return opened

    monkeypatch.setattr(record_files, "walk", counted_walk)
    monkeypatch.setattr(builtins, "open", counted(open_))
    monkeypatch.setattr(os, "open", counted(os_open))
    first, rest = _save_then_resume(files, str(tmp_path / "ck" / "model"), 2)
    assert first + rest == list(range(N_FILES * PER_FILE))
    assert walks == {f: 1 for f in files}
    # The walk; a content print at the save and at the restore; record 0 of the first file
    # at each build (does the input hold any record?).
    assert all(opens[f] <= 3 + 2 * (f == files[0]) for f in files), opens


def test_a_one_reader_pipeline_s_graph_stays_within_twice_the_hand_built_one(files):
    """The input position and the variable report add ops to every graph: this one was 287
    ops (6.2x) before the position's string splits and masks were rewritten, 164 (3.6x)
    after, 90 (1.96x) once the skipping read moved to the runner threads (3 ops of a read
    of many beside the read) and the key split to the tally's own graph; a hand-built
    string_input_producer -> reader -> parse -> batch of the same records is the measure
    (46 ops)."""
    def parse(s):
        return tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})

    with tf.Graph().as_default() as hand:
        producer = v1.train.string_input_producer(files, num_epochs=1, shuffle=False)
        _, serialized = v1.TFRecordReader().read(producer)
        v1.train.batch(parse(serialized), 5, allow_smaller_final_batch=True)
    with tf.Graph().as_default() as ours:
        qk.tfrecord_batches(files, batch_size=5, num_epochs=1, num_readers=1, parse_fn=parse)
    assert len(ours.get_operations()) <= 2 * len(hand.get_operations()), (
        len(ours.get_operations()), len(hand.get_operations()))


def test_a_file_consumed_whole_is_not_read_again_after_a_restore(tmp_path, files, caplog):
    """A checkpoint after 35 records (file 0 whole, 5 of file 1): the resumed epoch's producer
    leaves file 0 out (it is not read and skipped record by record, which a restart late in
    a long epoch would pay for all it consumed); only file 1's five records are skipped."""
    caplog.set_level("INFO", logger="queuekit.resume")
    prefix = str(tmp_path / "ck" / "model")
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        first = _consume(qs, batch, 7)
        v1.train.Saver().save(qs, prefix)
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        v1.train.Saver().restore(qs, prefix)
        rest = [i for b in qs.iterate(batch) for i in b["id"].tolist()]
    assert first + rest == list(range(N_FILES * PER_FILE))
    assert ("1 file(s) of it consumed whole before the checkpoint are left out, 5 record(s) "
            "skipped") in caplog.text


def test_a_checkpoint_without_a_position_or_of_other_files_starts_over(tmp_path, files,
                                                                       caplog):
    """A checkpoint saved through the raw session has no position (a warning); one whose
    pipeline of that name read other files (an eval graph restoring a training checkpoint)
    is another input: both start at the beginning."""
    ckdir = tmp_path / "ck"
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        _consume(qs, batch, 2)
        v1.train.Saver().save(qs.session, str(ckdir / "raw"))
    with caplog.at_level(logging.WARNING, logger="queuekit"):
        with qk.QueueSession(checkpoint_dir=str(ckdir)) as qs:
            assert _consume(qs, _ids_batch(files), 1) == [0, 1, 2, 3, 4]
    assert "has no input position" in caplog.text
    other = [write_id_records(tmp_path / "eval.tfrecords", 10, start=1000)]
    with qk.QueueSession() as qs:
        _consume(qs, _ids_batch(files), 3)
        v1.train.Saver().save(qs, str(ckdir / "model"))
    with qk.QueueSession(checkpoint_dir=str(ckdir)) as qs:
        assert _consume(qs, _ids_batch(other), 1) == [1000, 1001, 1002, 1003, 1004]


def test_a_file_added_since_the_checkpoint_is_named(tmp_path, files):
    """The checkpoint's pipeline read four files; the restarted one reads five: an error
    naming the added file, never a silent mix."""
    ckdir = tmp_path / "ck"
    with qk.QueueSession() as qs:
        _consume(qs, _ids_batch(files), 2)
        v1.train.Saver().save(qs, str(ckdir / "model"))
    extra = write_id_records(tmp_path / "part9.tfrecords", 3, start=900)
    with pytest.raises(qk.DatasetError, match="part9.tfrecords was added"):
        with qk.QueueSession(checkpoint_dir=str(ckdir)) as qs:
            qs.run(_ids_batch(files + [extra]))


def test_monitored_training_session_resumes_and_hand_built_inputs_are_named(tmp_path, files,
                                                                          caplog):
    """qk.monitored_training_session: its CheckpointSaverHook's checkpoints carry the
    position, the next one resumes there; a hand-built producer in the same graph is named
    as starting over."""
    ckdir = str(tmp_path / "train")
    seen = []
    for run in range(2):
        with tf.Graph().as_default():
            batch = _ids_batch(files)
            hand = v1.train.string_input_producer(files, num_epochs=1)
            step = v1.train.get_or_create_global_step()
            with tf.control_dependencies([batch["id"]]):
                train = step.assign_add(1)
            stop = v1.train.StopAtStepHook(last_step=5)
            with caplog.at_level(logging.WARNING, logger="queuekit"):
                with qk.monitored_training_session(checkpoint_dir=ckdir,
                                                   hooks=[stop] if run == 0 else []) as sess:
                    while not sess.should_stop():
                        try:
                            ids, _ = sess.run([batch["id"], train])
                        except qk.EndOfData:
                            break
                        seen += ids.tolist()
            assert hand is not None
    assert seen == list(range(N_FILES * PER_FILE))
    assert "input_producer" in caplog.text and "starts over" in caplog.text


def test_checkpoints_hold_no_skip_table_and_old_positions_go_with_their_checkpoints(tmp_path,
                                                                                  files):
    """The Saver saves the model only (no skip table); with max_to_keep=2 the positions of
    the checkpoints it deleted are deleted too, and nothing else in the folder, not even a
    position-named file this session did not write (another job's, a killed one's)."""
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    (ckdir / "notes.queuekit-input.txt").write_text("mine")
    (ckdir / "another-job-7.queuekit-input").write_text("{}")
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        saver = v1.train.Saver(max_to_keep=2)
        for k in range(4):
            _consume(qs, batch, 1)
            saver.save(qs, str(ckdir / "model"), global_step=k)
    names = sorted(n for n in os.listdir(ckdir) if "queuekit-input" in n)
    assert names == ["another-job-7.queuekit-input", "model-2.queuekit-input",
                     "model-3.queuekit-input", "notes.queuekit-input.txt"]
    reader = tf.train.load_checkpoint(str(ckdir / "model-3"))
    assert not [k for k in reader.get_variable_to_shape_map() if "skip" in k]


def test_every_step_is_counted_across_drains_and_a_plain_session_counts_nothing(
        tmp_path, files):
    """What the steps consumed is noted in the graph and drained now and then: nothing is
    lost across a drain; under a plain tf.Session (no queuekit) the graph's queue of
    consumed keys stays empty (nothing would ever drain it)."""
    from queuekit.graph_keys import GraphKeys, graph_objects
    from queuekit.resume import tally as session_position

    prefix = str(tmp_path / "ck" / "model")
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        saver = v1.train.Saver()
        ids = _consume(qs, batch, 3)
        session_position._DRAIN_RUNS, drain_runs = 2, session_position._DRAIN_RUNS
        try:
            ids += _consume(qs, batch, 3)  # drains in between
        finally:
            session_position._DRAIN_RUNS = drain_runs
        saver.save(qs, prefix)
    state = json.loads(open(prefix + ".queuekit-input").read())
    (pipeline,) = state["pipelines"]
    counted = sum(v * n for runs in pipeline["counts"] for v, n in runs)
    assert counted == len(ids) == 30
    graph = tf.Graph()
    with graph.as_default():
        batch = _ids_batch(files)
        (pos,) = graph_objects(graph, GraphKeys.INPUT_POSITIONS)
        with v1.Session() as sess:
            sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess, coord)
            for _ in range(3):
                sess.run(batch)
            assert sess.run(pos.consumed.size()) == 0  # nothing noted
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=10)


def test_files_named_with_colons_and_bytes_not_utf8_count_each_record_consumed(tmp_path):
    """A reader key is ``<file>:<offset>``, split at its last colon, byte-wise: files whose
    names hold colons and a byte that is not UTF-8 count exactly the records consumed."""
    files = []
    for k, name in enumerate((b"a:b:7", b"c\xff:1 x")):
        plain = write_id_records(tmp_path / f"p{k}", PER_FILE, start=PER_FILE * k)
        odd = os.path.join(os.fsencode(tmp_path), name + b".tfrecords")
        os.rename(plain, odd)
        files.append(os.fsdecode(odd))
    prefix = str(tmp_path / "ck" / "model")
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        saver = v1.train.Saver()
        ids = set(_consume(qs, batch, 9))  # 45 of 60: into the second file
        saver.save(qs, prefix)
    (pipeline,) = json.loads(open(prefix + ".queuekit-input").read())["pipelines"]
    assert [os.fsencode(f) for f, *_ in pipeline["files"]] == [os.fsencode(f) for f in files]
    for k, runs in enumerate(pipeline["counts"]):
        counts = [v for v, n in runs for _ in range(n)]
        assert counts == [int(PER_FILE * k + j in ids) for j in range(PER_FILE)]
    assert len(ids) == 45


def test_image_folder_batches_resume_by_file(tmp_path):
    """image_folder_batches: each image is a record; shuffled over two epochs, a checkpoint
    after 3 batches and a restart deliver every image exactly twice."""
    from tests.imagefactory import make_mixed_folder

    make_mixed_folder(tmp_path / "src", n_per_class=5)

    def build():
        v1.train.get_or_create_global_step().assign_add(1)  # a training graph
        return qk.image_folder_batches(tmp_path / "src", image_size=8, batch_size=4,
                                       num_epochs=2, shuffle=True, seed=1, num_threads=2)

    ckdir = str(tmp_path / "ck")
    with qk.QueueSession() as qs:
        batch = build()
        seen = [f for _ in range(3) for f in qs.run(batch)["filename"].tolist()]
        v1.train.Saver().save(qs, ckdir + "/model")
        qs.run(batch)  # lost with the job
    with qk.QueueSession(checkpoint_dir=ckdir) as qs:
        seen += [f for b in qs.iterate(build()) for f in b["filename"].tolist()]
    counts = collections.Counter(seen)
    assert len(counts) >= 10 and set(counts.values()) == {2}


def test_files_given_in_another_order_resume_and_a_tampered_position_is_refused(tmp_path,
                                                                             files):
    """The restarted pipeline lists the same files in another order: it resumes by name. A
    position whose counts do not fit the files (edited, or another dataset's) is a
    DatasetError, never an allocation of what it claims."""
    ckdir = tmp_path / "ck"
    with qk.QueueSession() as qs:
        first = _consume(qs, _ids_batch(files), 5)
        v1.train.Saver().save(qs, str(ckdir / "model"))
    with qk.QueueSession(checkpoint_dir=str(ckdir)) as qs:
        rest = [i for b in qs.iterate(_ids_batch(files[::-1])) for i in b["id"].tolist()]
    assert sorted(first + rest) == list(range(N_FILES * PER_FILE))
    state_path = ckdir / "model.queuekit-input"
    state = json.loads(state_path.read_text())
    state["pipelines"][0]["counts"][0] = [[1, 10**12]]
    state_path.write_text(json.dumps(state))
    with pytest.raises(qk.DatasetError, match="records for a file of 30"):
        with qk.QueueSession(checkpoint_dir=str(ckdir)) as qs:
            qs.run(_ids_batch(files))


def test_a_read_whose_records_were_all_consumed_never_reaches_parse_fn_empty(tmp_path):
    """read_many=4 after a checkpoint at record 8: the first two reads are skipped whole. The
    parse_fn (which cannot take an empty vector: decode_raw gives [0, 0]) gets the next read
    instead of nothing."""
    path = tmp_path / "data.bin"
    path.write_bytes(np.arange(40, dtype=np.int64).tobytes())

    def build():
        v1.train.get_or_create_global_step().assign_add(1)  # a training graph
        return qk.fixed_length_batches(
            str(path), record_bytes=8, batch_size=4, num_epochs=1, read_many=4, num_readers=1,
            parse_fn=lambda v: {"id": tf.io.decode_raw(v, tf.int64)[..., 0]})

    ckdir = str(tmp_path / "ck")
    with qk.QueueSession() as qs:
        batch = build()
        first = _consume(qs, batch, 2)
        v1.train.Saver().save(qs, ckdir + "/model")
    with qk.QueueSession(checkpoint_dir=ckdir) as qs:
        rest = [i for b in qs.iterate(build()) for i in b["id"].tolist()]
    assert first + rest == list(range(40))


def test_an_evaluation_of_the_training_files_from_a_training_checkpoint_reads_them_all(
        tmp_path, files):
    """The training pipeline (shuffled, no epoch limit) saved its position; an evaluation
    pipeline over the same files (num_epochs=1, in order) that restores that checkpoint is
    another input: it reads every record."""
    prefix = str(tmp_path / "ck" / "model")
    with qk.QueueSession() as qs:
        v1.train.get_or_create_global_step()
        train = qk.tfrecord_batches(files, batch_size=5, shuffle=True, seed=1, parse_fn=lambda s: (
            tf.io.parse_single_example(s, {"id": tf.io.FixedLenFeature([], tf.int64)})))
        _consume(qs, train, 30)  # past the end of the first epoch
        v1.train.Saver().save(qs, prefix)
    with qk.QueueSession() as qs:
        batch = _ids_batch(files)
        v1.train.Saver().restore(qs, prefix)
        assert sorted(i for b in qs.iterate(batch) for i in b["id"].tolist()) == list(
            range(N_FILES * PER_FILE))


def _eval_ids(files):
    """The training pipeline's builder with its settings (num_epochs=1, in order) in a graph
    that trains nothing: the global step only restored, never incremented."""
    v1.train.get_or_create_global_step()
    return qk.tfrecord_batches(files, batch_size=7, num_epochs=1, num_readers=1,
                               parse_fn=lambda s: tf.io.parse_single_example(
                                   s, {"id": tf.io.FixedLenFeature([], tf.int64)}))


@pytest.mark.parametrize("restore", ["saver", "checkpoint_dir"])
def test_an_evaluation_restoring_a_mid_epoch_training_checkpoint_counts_every_record(
        tmp_path, files, restore, caplog):
    """docs/migrating.rst's evaluation loop (saver.restore(qs, path), then every batch) and
    checkpoint_dir, over the training files with the training pipeline's own settings, from
    a checkpoint 35 records into the epoch: every record counted once (it counted 80 of
    120, or none). resume_input=True still resumes such a graph."""
    ckdir = tmp_path / "ck"
    with qk.QueueSession() as qs:
        _consume(qs, _ids_batch(files), 7)
        v1.train.Saver().save(qs, str(ckdir / "model"))
    caplog.set_level("INFO", logger="queuekit.resume")
    with qk.QueueSession(checkpoint_dir=str(ckdir) if restore == "checkpoint_dir" else None) as qs:
        batch = _eval_ids(files)
        if restore == "saver":
            v1.train.Saver().restore(qs, str(ckdir / "model"))
        seen = sorted(i for b in qs.iterate(batch) for i in b["id"].tolist())
    assert seen == list(range(N_FILES * PER_FILE))
    assert "trains nothing (an evaluation)" in caplog.text
    with qk.QueueSession(resume_input=True) as qs:
        batch = _eval_ids(files)
        v1.train.Saver().restore(qs, str(ckdir / "model"))
        assert len([i for b in qs.iterate(batch) for i in b["id"].tolist()]) == 120 - 35


def test_a_graph_trains_with_an_optimizer_or_a_global_step_increment():
    """What counts as training: an optimizer's update, or the global step incremented; a
    graph that only reads the step and computes a metric does not."""
    from queuekit.resume.restore import trains

    def graph(build):
        g = tf.Graph()
        with g.as_default():
            step = v1.train.get_or_create_global_step()
            w = v1.get_variable("w", [], initializer=v1.zeros_initializer())
            build(step, w)
        return g

    assert trains(graph(lambda step, w: v1.train.GradientDescentOptimizer(0.1).minimize(
        (w - 1.0) ** 2)))
    assert trains(graph(lambda step, w: step.assign_add(1)))
    assert not trains(graph(lambda step, w: v1.metrics.mean(w + tf.cast(step, tf.float32))))
    assert not trains(graph(lambda step, w: v1.train.Saver()))
