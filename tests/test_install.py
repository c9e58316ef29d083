"""qk.installed(): TF1 programs as they are, in this process, with queuekit installed.

Each test is a program written as TF1 programs are (no queuekit in it) run inside
``qk.installed()``; the whole programs under ``queuekit run`` are tests/test_run.py.
"""

import logging
import os
import threading

import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.session import install
from tests.helpers import patience, write_id_records

v1 = tf.compat.v1


def corrupt(path, at=200):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return path


def reader_batch(files, *, batch_size=4, num_epochs=1, allow_smaller=True, capacity=None):
    fq = v1.train.string_input_producer(files, num_epochs=num_epochs, shuffle=False)
    _, ser = v1.TFRecordReader().read(fq)
    feats = tf.io.parse_single_example(ser, {"id": tf.io.FixedLenFeature([], tf.int64)})
    return v1.train.batch([feats["id"]], batch_size=batch_size, num_threads=1,
                          capacity=capacity or 4 * batch_size,
                          allow_smaller_final_batch=allow_smaller)


def coordinator_loop(batch, *, join=True, swallow=False):
    """fully_connected_reader's loop: until OutOfRangeError, then request_stop and join."""
    ids = []
    with v1.Session() as sess:
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while not coord.should_stop():
                ids.extend(sess.run(batch).tolist())
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        if join:
            try:
                coord.join(threads)
            except Exception:
                if not swallow:
                    raise
    return ids


@pytest.fixture
def two_files(tmp_path):
    return [write_id_records(tmp_path / "a.tfrecords", 10),
            write_id_records(tmp_path / "b.tfrecords", 10, start=10)]


def test_a_program_reads_what_it_reads_plain_and_queuekit_adds_no_op(two_files):
    with tf.Graph().as_default() as g:
        plain = coordinator_loop(reader_batch(two_files))
        plain_ops = [op.name for op in g.get_operations()]
    with tf.Graph().as_default() as g, qk.installed():
        ids = coordinator_loop(reader_batch(two_files))
        assert [op.name for op in g.get_operations()] == plain_ops
    assert ids == plain == list(range(20))
    assert v1.train.QueueRunner._run is install._ORIGINAL["_run"]
    assert v1.Session.run is install._ORIGINAL["run"]


def test_a_runner_error_is_named_and_raised_by_join_where_tensorflow_raises_it(two_files, capsys):
    corrupt(two_files[1])
    with tf.Graph().as_default():
        with pytest.raises(tf.errors.DataLossError) as raised, qk.installed():
            coordinator_loop(reader_batch(two_files))
    notes = "\n".join(raised.value.__notes__)
    assert f"{two_files[1]}: record 1 at byte offset" in notes
    assert "did not end the program" not in capsys.readouterr().err  # it did end it


def test_a_swallowed_runner_error_is_reported_at_the_end(two_files, capsys):
    corrupt(two_files[1])
    with tf.Graph().as_default(), qk.installed() as guard:
        coordinator_loop(reader_batch(two_files), swallow=True)
    err = capsys.readouterr().err
    assert "an input error did not end the program" in err
    assert "DataLossError" in err and two_files[1] in err
    assert [type(f.exception) for f in guard.failures] == [tf.errors.DataLossError]


def test_an_error_with_no_coordinator_is_raised_by_the_next_run_not_a_hang(two_files):
    """The early cifar10 tutorial: start_queue_runners(sess) alone. TF logs the runner's
    error and the next dequeue blocks for good; here the run raises it."""
    corrupt(two_files[0], at=60)
    with tf.Graph().as_default(), qk.installed():
        batch = reader_batch(two_files, num_epochs=None)
        with v1.Session() as sess:
            v1.train.start_queue_runners(sess=sess)
            with pytest.raises(tf.errors.DataLossError) as raised:
                for _ in range(20):
                    sess.run(batch)
    assert any(two_files[0] in n for n in raised.value.__notes__)


def test_an_input_of_empty_files_is_an_error_naming_them_not_an_endless_spin(tmp_path):
    files = [write_id_records(tmp_path / f"{i}.tfrecords", 0) for i in range(2)]
    with tf.Graph().as_default(), qk.installed():
        batch = reader_batch(files, num_epochs=None)  # plain: the readers spin for good
        with pytest.raises(qk.DatasetError, match="holds no record") as raised:
            coordinator_loop(batch)
    assert files[0] in str(raised.value)


def test_a_run_that_gets_no_input_raises_pipeline_stalled_naming_the_queue(tmp_path):
    files = [write_id_records(tmp_path / f"{i}.tfrecords", 0) for i in range(2)]
    # Unchecked, a reader of empty files spins for good (num_epochs=None) and the batch
    # queue gets nothing, while the filename queue keeps moving.
    with tf.Graph().as_default(), qk.installed(stall_timeout_secs=0.3, check_inputs=False):
        with pytest.raises(qk.PipelineStalled, match="batch/fifo_queue") as raised:
            coordinator_loop(reader_batch(files, num_epochs=None))
    assert raised.value.seconds >= 0.3
    assert "they hold no record" in str(raised.value) and files[0] in str(raised.value)


def test_a_file_cut_while_the_program_reads_it_is_an_error_at_the_end(tmp_path):
    first = write_id_records(tmp_path / "a.tfrecords", 2000)
    second = write_id_records(tmp_path / "b.tfrecords", 2000, start=2000)
    with tf.Graph().as_default(), qk.installed():
        batch = reader_batch([first, second], capacity=8)
        with v1.Session() as sess:
            sess.run(v1.local_variables_initializer())
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess=sess, coord=coord)
            sess.run(batch)  # the one reader is still in the first file
            os.truncate(second, os.path.getsize(second) // 2)
            with pytest.raises(qk.DatasetError, match="changed while the pipeline read it"):
                while True:
                    sess.run(batch)
            coord.request_stop()
            coord.join(threads)


def test_elements_a_full_batch_leaves_at_the_end_are_a_warning_naming_the_queue(
        two_files, caplog):
    with tf.Graph().as_default(), qk.installed(), caplog.at_level(logging.WARNING):
        ids = coordinator_loop(reader_batch(two_files, batch_size=8, allow_smaller=False))
    assert len(ids) == 16
    assert "4 elements" in caplog.text and "batch/fifo_queue" in caplog.text


def test_closing_a_session_stops_and_joins_runner_threads_nobody_stopped(two_files):
    with tf.Graph().as_default(), qk.installed():
        batch = reader_batch(two_files, num_epochs=None)
        sess = v1.Session()
        threads = v1.train.start_queue_runners(sess=sess, coord=v1.train.Coordinator(),
                                               daemon=False)
        sess.run(batch)
        sess.close()  # no request_stop, no join: non-daemon threads would hang the exit
        assert not [t.name for t in threads if t.is_alive()]


def test_a_session_dropped_unclosed_is_closed_without_waiting_on_queuekit_s_lock():
    """BaseSession.__del__ closes the session in whatever thread the collector runs, also
    inside a block of queuekit's that holds its lock (CI hung 160 s on that once)."""
    with tf.Graph().as_default(), qk.installed() as guard:
        done = threading.Event()

        def drop():
            with guard.lock:
                sess = v1.Session()
                del sess  # its __del__ closes it here, in this thread, under the lock
            done.set()

        t = threading.Thread(target=drop, daemon=True)
        t.start()
        assert done.wait(patience(30)), "closing a dropped session waited on the lock"
        t.join()


def test_ctrl_c_while_blocked_in_a_dequeue_ends_the_run_with_keyboard_interrupt(tmp_path):
    """A run blocked in C++ never sees Python's KeyboardInterrupt (TF issue 11303)."""
    files = [write_id_records(tmp_path / "empty.tfrecords", 0)]
    with tf.Graph().as_default(), qk.installed(stall_timeout_secs=None, check_inputs=False):
        batch = reader_batch(files, num_epochs=None)  # blocks for good
        with v1.Session() as sess:
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess=sess, coord=coord)
            state = install.current().sessions[id(sess)].state
            blocked = threading.Event()

            def interrupt():
                while not state.in_run:
                    blocked.wait(0.01)
                os.kill(os.getpid(), 2)

            t = threading.Thread(target=interrupt)
            t.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    sess.run(batch)
            finally:
                t.join()
                coord.request_stop()
                coord.join(threads)


def test_the_report_says_where_a_program_s_steps_spend_their_time(tmp_path, capsys):
    files = [write_id_records(tmp_path / f"{i}.tfrecords", 1000, start=1000 * i)
             for i in range(2)]
    with tf.Graph().as_default(), qk.installed(report_every_secs=0.05):
        ids = coordinator_loop(reader_batch(files, capacity=8))
    assert sorted(ids) == list(range(2000))
    report = capsys.readouterr().err
    assert report.count("queuekit: input report:") >= 2  # every 0.05 s, and at the close
    line = [line for line in report.splitlines() if "batch/fifo_queue:" in line][-1]  # close
    assert any(verdict in line for verdict in ("input-bound", "step-bound")), line
    assert "rec/s" in line


def test_threads_gives_the_batching_runners_that_many_threads_and_reads_the_same(two_files):
    with tf.Graph().as_default(), qk.installed(threads=3) as guard:
        batch = reader_batch(two_files)
        with v1.Session() as sess:
            sess.run(v1.local_variables_initializer())
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(sess=sess, coord=coord)
            enqueuers = [t.name for t in threads if "batch/fifo_queue-" in t.name
                         and "close_on_stop" not in t.name]
            ids = []
            try:
                while True:
                    ids.extend(sess.run(batch).tolist())
            except tf.errors.OutOfRangeError:
                pass
            coord.request_stop()
            coord.join(threads)
    assert len(enqueuers) == 3
    assert sorted(ids) == list(range(20))
    assert guard.varied == {"batch/fifo_queue": 1}
    assert "input_producer" in guard.fixed


def test_a_program_that_installs_queuekit_inside_an_install_shares_the_one_guard():
    with qk.installed() as outer:
        with qk.installed() as inner:
            assert inner is outer
        assert install.current() is outer  # the inner block does not uninstall it
    assert install.current() is None
