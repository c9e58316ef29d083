"""Where the time goes: the input profile's figures and verdict on real sessions built to be
input-bound or step-bound (by the work on each side, never by a clock threshold)."""

import logging
import os
import time

import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.session import profile
from tests.helpers import v1

BATCH = 4


@pytest.fixture(autouse=True)
def every_run_traced(monkeypatch):
    """Every run sampled, so a short loop's figures rest on all of its steps."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.0)


def _heavy(x, n=4):
    """Milliseconds of work that depends on ``x``: chained 400x400 matmuls. All of it after
    ``x``: a random matrix drawn beside the dequeue could run first and its time count as
    the step's wait (0.16 measured on a loaded machine)."""
    with tf.control_dependencies([x]):
        m = tf.random.normal([400, 400]) + tf.cast(tf.reduce_sum(x), tf.float32) * 0
    for _ in range(n):
        m = tf.matmul(m, m) / 400
    return tf.reduce_sum(m)


def _pipeline(*, slow_input: bool):
    """A runner's queue and a batch step: the element costs the work when ``slow_input``,
    else the step does (after a dequeue of BATCH)."""
    element = _heavy(tf.constant(1.0)) if slow_input else tf.constant(1.0)
    q = tf.queue.FIFOQueue(100, tf.float32, shapes=[[]], name="input")
    v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(element)]))
    batch = q.dequeue_many(BATCH)
    # The step's work is twice the producer's: a full queue's dequeue is then well under the
    # 10% of a step that the verdict calls partly input-bound, even on a loaded machine.
    return tf.reduce_sum(batch) if slow_input else _heavy(batch, n=8)


@pytest.mark.parametrize("slow_input", [True, False])
def test_the_verdict_follows_the_side_that_does_the_work(slow_input):
    """Input made by a slow producer: input-bound, the queue near empty, the steps could
    take more than the readers deliver. Work in the step: step-bound, the queue full."""
    steps = 40
    with qk.QueueSession() as qs:
        step = _pipeline(slow_input=slow_input)
        started = time.perf_counter()
        for _ in range(steps):
            qs.run(step)
        elapsed = time.perf_counter() - started
        qs.run(tf.constant(0))  # takes no batch
        (report,) = qs.input_report()
    assert report.queue == "input"
    assert report.steps == steps  # the last run took no batch: not counted
    assert 0 < report.seconds <= elapsed  # start to start: one interval fewer than steps
    assert report.records_per_step == BATCH
    assert report.intervals == steps - 1
    assert report.records_per_sec == pytest.approx(BATCH * (steps - 1) / report.seconds)
    assert report.step_capacity >= report.records_per_sec
    if slow_input:
        assert report.bound == "input-bound" and report.wait_fraction > 0.5, report
        assert report.fill < 0.5
        assert "input-bound" in str(report) and "num_readers='auto'" in str(report)
    else:
        assert report.bound == "step-bound" and report.wait_fraction < 0.1, report
        assert report.fill > 0.5
        assert "step-bound" in str(report) and "keep up" in str(report)
        assert "qk.prefetched(batch, 2)" in str(report)  # a batch queue the step takes from


def test_a_builders_auto_readers_are_named_in_the_advice(tmp_path):
    """A tfrecord_batches pipeline with num_readers="auto": its report says the readers are
    tuned, and counts records of every batch, the smaller last one too."""
    from tests.helpers import write_id_records

    path = write_id_records(tmp_path / "ids.tfrecords", 50)
    with qk.QueueSession() as qs:
        batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, num_readers="auto",
                                    parse_fn=lambda r: tf.io.parse_single_example(
                                        r, {"id": tf.io.FixedLenFeature([], tf.int64)}),
                                    allow_smaller_final_batch=True)
        sizes = [len(b["id"]) for b in qs.iterate(batch)]
        (report,) = qs.input_report()
    assert sizes[-1] == 2 and report.tuned
    assert report.steps == len(sizes) + 1  # the run that met the end of the input too
    assert report.records_per_step == pytest.approx(50 / len(sizes), rel=0.3)
    if report.bound != "step-bound":
        assert "tuned ('auto')" in str(report)


@pytest.mark.parametrize("case", ["parse_fn", "parse_fn, read_many=16", "images"])
def test_the_report_knows_whether_the_readers_read_many(tmp_path, case):
    """On "auto": a parse_fn's readers read one record a run by default, a vector of them
    with read_many; small image records are read many at a time, into a batch made ready
    by one more stage. The report of the queue the steps take from says which, and an
    input-bound verdict's advice follows it."""
    import dataclasses

    from tests.helpers import write_id_records, write_image_records

    spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
    with qk.QueueSession() as qs:
        if case == "images":
            path = write_image_records(tmp_path / "img.tfrecords", range(64))
            batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, num_readers="auto",
                                        allow_smaller_final_batch=True)
        else:
            path = write_id_records(tmp_path / "ids.tfrecords", 64)
            many = 16 if "read_many" in case else None
            parse = tf.io.parse_example if many else tf.io.parse_single_example
            batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, num_readers="auto",
                                        read_many=many, parse_fn=lambda r: parse(r, spec),
                                        allow_smaller_final_batch=True)
        n = sum(len(b["label" if case == "images" else "id"]) for b in qs.iterate(batch))
        (report,) = qs.input_report()
    assert n == 64
    many = case != "parse_fn"
    assert report.tuned and report.reads_many == many and report.ready == (case == "images")
    starved = dataclasses.replace(report, wait_fraction=0.8)  # the verdict, made input-bound
    assert "input-bound" in str(starved)
    assert ("try read_many=64" in str(starved)) == (not many)
    assert ("what is left is their parse" in str(starved)) == many


def test_whole_batches_are_reads_of_many(tmp_path):
    """read_many="batch": each read is a batch, queued whole; its report says so."""
    from tests.helpers import write_image_records

    path = write_image_records(tmp_path / "img.tfrecords", range(32))
    with qk.QueueSession() as qs:
        batch = qk.tfrecord_batches(path, batch_size=8, num_epochs=1, num_readers=2,
                                    read_many="batch")
        n = sum(len(b["label"]) for b in qs.iterate(batch))
        (report,) = qs.input_report()
    assert n == 32 and report.reads_many and not report.tuned


def test_the_hook_logs_each_window_and_writes_scalars(tmp_path, caplog):
    """InputReportHook(every_n_steps=5): a line per window in the log, the figures as
    scalars at the global step; the window's reports in `.last`."""
    hook = qk.InputReportHook(every_n_steps=5, output_dir=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="queuekit"):
        with tf.Graph().as_default():
            step = _pipeline(slow_input=True)
            global_step = v1.train.get_or_create_global_step()
            train = tf.group(step, global_step.assign_add(1))
            with qk.QueueSession(hooks=[hook]) as qs:
                for _ in range(10):
                    qs.run(train)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("input:")]
    assert len(lines) == 2 and all("input-bound" in line for line in lines)
    assert hook.last[0].steps == 5  # the second window alone
    tags = {}
    for name in os.listdir(tmp_path):
        for event in v1.train.summary_iterator(os.path.join(tmp_path, name)):
            for v in event.summary.value:
                tags.setdefault(v.tag, []).append(event.step)
    assert tags["input/input/wait_fraction"] == [5, 10]
    assert "input/input/records_per_sec" in tags and "input/input/queue_fill" in tags


def test_monitored_training_session_writes_the_figures_into_its_summary_dir(tmp_path):
    """report_input_secs: the chief's figures land beside its other summaries."""
    with tf.Graph().as_default():
        step = _pipeline(slow_input=True)
        train = tf.group(step, v1.train.get_or_create_global_step().assign_add(1))
        with qk.monitored_training_session(checkpoint_dir=str(tmp_path), report_input_secs=1e-9,
                                           save_checkpoint_secs=None) as sess:
            for _ in range(3):
                sess.run(train)
    tags = {v.tag for name in os.listdir(tmp_path) if name.startswith("events.")
            for e in v1.train.summary_iterator(os.path.join(tmp_path, name))
            for v in e.summary.value}
    assert "input/input/wait_fraction" in tags


def test_the_hook_on_tensorflows_own_session_warns_and_does_nothing(caplog):
    """Under TF's MonitoredSession there is no profile: one warning, no error."""
    with tf.Graph().as_default():
        step = _pipeline(slow_input=False)
        with caplog.at_level(logging.WARNING, logger="queuekit"):
            with v1.train.MonitoredSession(hooks=[qk.InputReportHook(every_n_steps=1)]) as sess:
                sess.run(step)
    assert any("not a queuekit session" in r.getMessage() for r in caplog.records)


def test_a_program_s_own_trace_request_is_kept():
    """A run the program traces itself keeps its options and gets its step statistics."""
    with qk.QueueSession() as qs:
        step = _pipeline(slow_input=False)
        metadata = v1.RunMetadata()
        qs.run(step, options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
        assert metadata.step_stats.dev_stats
        assert qs.input_report()[0].steps == 1


def test_a_single_dequeue_takes_one_record_whatever_its_shape():
    """q.dequeue() of [3]-vectors: one record per step (not the element's first dimension)."""
    with qk.QueueSession() as qs:
        q = tf.queue.FIFOQueue(10, tf.float32, shapes=[[3]], name="vectors")
        v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue(tf.ones([3]))]))
        element = q.dequeue()
        for _ in range(3):
            qs.run(element)
        (report,) = qs.input_report()
    assert report.queue == "vectors" and report.records_per_step == 1


def test_input_report_false_traces_and_counts_nothing():
    """QueueSession(input_report=False): no run is traced (a caller's RunMetadata gets no step
    statistics it did not ask for) and there is no report; on, the same runs are traced."""
    for on in (False, True):
        with qk.QueueSession(input_report=on) as qs:
            step = _pipeline(slow_input=False)
            metadata = v1.RunMetadata()
            for _ in range(3):
                qs.run(step, run_metadata=metadata)
            assert bool(metadata.step_stats.dev_stats) is on
            assert bool(qs.input_report()) is on


def _rnn_step(time_steps):
    """A step of a recurrent net unrolled in a while loop (thousands of op executions, as
    dynamic_rnn's), on batches from a runner."""
    q = tf.queue.FIFOQueue(4, tf.float32, shapes=[[time_steps, 8]], name="sequences")
    v1.train.add_queue_runner(v1.train.QueueRunner(
        q, [q.enqueue(tf.random.normal([time_steps, 8]))]))
    x = q.dequeue()
    w = tf.random.normal([8, 8], seed=1)

    def body(t, h):
        return t + 1, tf.tanh(tf.matmul(h + x[t:t + 1], w))

    return tf.while_loop(lambda t, h: t < time_steps, body, [0, tf.zeros([1, 8])],
                         shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, 8])])[1]


def test_a_while_loop_graph_is_not_traced_before_the_loop_can_pay_for_it(monkeypatch):
    """A step with a while loop (its traced run's cost unknown: up to 20 untraced runs') is not
    traced until the loop ran long enough for that to be within the budget: none in a loop of
    a second or so (one run in 0.5 s was traced: a GRU's steps 10x slower)."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.5)
    with qk.QueueSession() as qs:
        step = _rnn_step(1000)
        started, runs = time.perf_counter(), 0
        while time.perf_counter() - started < 1.5 or runs < 10:
            qs.run(step)
            runs += 1
        seen = profile.profile_of(qs.coordinator)
        (report,) = qs.input_report()
    assert seen.traced_runs == 0 and report.wait_fraction is None
    assert report.steps == runs and "no step sampled yet" in str(report)


def test_traced_runs_cost_at_most_the_budget_of_the_loop(monkeypatch):
    """Once traced, a large graph's traced run costs far more than an untraced one; after
    each, the next is drawn far enough away that the measured extra cost of all traced runs
    stays within TRACE_BUDGET of the loop's time, but for about one traced run's."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.05)
    monkeypatch.setattr(profile, "LOOP_TRACE_RUNS", 0)  # the first trace as soon as it may
    with qk.QueueSession() as qs:
        step = _rnn_step(3000)
        started = time.perf_counter()
        runs = 0
        while time.perf_counter() - started < 3 or runs < 20:
            qs.run(step)
            runs += 1
        elapsed = time.perf_counter() - started
        seen = profile.profile_of(qs.coordinator)
    assert seen.traced_runs >= 1
    one = seen.trace_secs / seen.traced_runs
    assert seen.trace_secs <= profile.TRACE_BUDGET * elapsed + 2 * one, (
        seen.traced_runs, seen.trace_secs, elapsed, runs)
    assert seen.traced_runs < runs / 4  # most runs untraced


def test_the_wait_of_a_bursty_input_is_not_read_from_the_instant_runs(monkeypatch):
    """Records arriving in bursts (the step waits long, then takes 7 batches at once): the
    reported wait is the wait of all the runs, each traced by the test and measured as the
    profile measures one, within a margin. The traced run was the one starting when a
    sample fell due: always the instant one after a long wait (0.32 "partly input-bound"
    reported for a loop that waited nearly all of its time)."""
    monkeypatch.setattr(profile, "SAMPLE_SECS", 0.012)  # about one burst
    monkeypatch.setattr(profile, "TRACE_BUDGET", 1.0)  # the samples' cost is not the point
    traced = v1.RunOptions(trace_level=v1.RunOptions.SOFTWARE_TRACE)
    with qk.QueueSession() as qs:
        burst = tf.fill([7 * BATCH], _heavy(tf.constant(1.0), n=8))
        q = tf.queue.FIFOQueue(7 * BATCH, tf.float32, shapes=[[]], name="bursts")
        v1.train.add_queue_runner(v1.train.QueueRunner(q, [q.enqueue_many([burst])]))
        batch = q.dequeue_many(BATCH)
        step = tf.reduce_sum(batch)
        qs.run(step)
        waited, started = 0.0, time.perf_counter()
        for _ in range(2000):  # hundreds of samples: a low variance
            metadata = v1.RunMetadata()
            qs.run(step, options=traced, run_metadata=metadata)
            nodes = [n for d in metadata.step_stats.dev_stats for n in d.node_stats]
            first = min(n.all_start_micros for n in nodes)
            waited += max(n.all_start_micros + n.all_end_rel_micros - first
                          for n in nodes if n.node_name == batch.op.name) / 1e6
        measured = waited / (time.perf_counter() - started)
        (report,) = qs.input_report()
    assert measured > 0.3  # most of a burst's time is the long wait
    assert report.wait_fraction == pytest.approx(measured, abs=0.2), (report, measured)
