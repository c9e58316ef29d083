"""num_readers="auto": the tuner's moves on a producer whose speed the test sets, and the
guarantees (exactly once, errors, Ctrl-C, no thread left) while threads are paused."""

import os
import signal
import threading
import time

import pytest
import tensorflow as tf

import queuekit as qk
from queuekit.graph_keys import GraphKeys
from queuekit.session import tuner
from queuekit.session.queue_ops import records_per_enqueue
from tests.helpers import run_script, signal_when_ready, write_id_records, write_image_records


class Producer:
    """A parse_fn whose per-record cost (a sleep in a py_function) the test sets."""

    def __init__(self, delay: float, poison: int | None = None):
        self.delay = delay
        self.poison = poison

    def _work(self, record_id):
        if self.delay:
            time.sleep(self.delay)  # the simulated decode cost, not an ordering device
        if self.poison is not None and int(record_id) == self.poison:
            raise ValueError(f"poison record {int(record_id)}")
        return record_id

    def __call__(self, serialized):
        ident = tf.io.parse_single_example(
            serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"]
        out = tf.py_function(self._work, [ident], tf.int64)
        out.set_shape([])
        return {"id": out}


def _files(tmp_path, n_files=4, per_file=150):
    return [write_id_records(tmp_path / f"{k}.tfrecords", per_file, start=per_file * k)
            for k in range(n_files)]


def _until(qs, predicate, what, seconds=30.0):
    """Wait (bounded) for the tuner to reach a state; the waiting never orders threads."""
    deadline = time.monotonic() + seconds
    done = threading.Event()
    while not predicate(_state(qs)):
        if time.monotonic() > deadline:
            pytest.fail(f"the tuner did not {what} in {seconds} s: {_state(qs)}")
        done.wait(0.05)


def _grew(times):
    return lambda state: sum(d.reason == "more input needed" for d in state.history) >= times


def _gave_back(state):
    return any(d.to_count < d.from_count and d.reason == "queue full" for d in state.history)


def _readers(graph) -> int:
    return len([op for op in graph.get_operations() if op.type == "TFRecordReaderV2"])


def _state(qs):
    (state,) = qs.tuning().values()
    return state


def _consume_until(qs, batch, predicate, what, seconds=30.0):
    """Run batches (a fast consumer) until the tuner reaches a state; the ids seen."""
    ids = []
    deadline = time.monotonic() + seconds
    qs.start()
    while not predicate(_state(qs)):
        if time.monotonic() > deadline:
            pytest.fail(f"the tuner did not {what} in {seconds} s: {_state(qs)}")
        ids += qs.run(batch)["id"].tolist()
    return ids


def test_fixed_counts_get_no_tuner(tmp_path):
    """Fixed reader counts get no tuner thread and no tuning report."""
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(_files(tmp_path, 2, 10), batch_size=4, num_readers=2,
                                num_epochs=1, parse_fn=Producer(0))
        qs.run(b)
        assert qs.tuning() == {}
        assert not [t for t in threading.enumerate() if t.name.startswith("queuekit-tuner")]


def _half(total, **_):
    """The tuner's start for tests of its climb: a parse_fn's threads start all running."""
    return max(1, total // 2)


def test_slow_producer_gets_threads_and_a_stopped_consumer_gives_them_back(tmp_path,
                                                                             monkeypatch):
    """Starved queue: more active threads; full queue (the step is the slow side): fewer.
    Then every record still arrives exactly once, paused threads finishing their reads.
    A parse_fn's records are one reader's: its threads are tuned (its parse is the work)."""
    monkeypatch.setattr(tuner, "first_count", _half)  # from half: room to climb
    producer = Producer(0.01)
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(_files(tmp_path, 4, 600), batch_size=8, num_epochs=1,
                                num_readers="auto", max_readers=4, parse_fn=producer,
                                capacity=64)
        assert _readers(qs.graph) == 1
        seen = _consume_until(qs, b, _grew(1), "add threads")
        assert _state(qs).maximum == 4  # one reader's 4 threads
        producer.delay = 0.0  # the producer is now fast, and nobody consumes: the queue fills
        _until(qs, _gave_back, "give threads back")
        seen += [i for x in qs.iterate(b) for i in x["id"].tolist()]
    assert sorted(seen) == list(range(2400))


class Pipeline:
    """What a tuner reads of a pipeline whose rate, CPU per record and fill the test sets
    as functions of the active count: a consumer-bound queue, without the machine's noise."""

    def __init__(self, gate, *, rate, cpu_per_record, fill):
        self.gate, self._rate, self._cpu_of, self._fill = gate, rate, cpu_per_record, fill
        self._lock = threading.Lock()
        self._t, self._k, self._n, self._cpu = time.monotonic(), gate.active, 0.0, 0.0
        self.seconds: dict[int, float] = {}  # how long each count ran (to the last reading)

    def _advance(self):
        with self._lock:  # the time since the last reading ran at the count seen then
            now = time.monotonic()
            self.seconds[self._k] = self.seconds.get(self._k, 0.0) + now - self._t
            n = self._rate(self._k) * (now - self._t)
            self._n += n
            self._cpu += n * self._cpu_of(self._k)
            self._t, self._k = now, self.gate.active

    def enqueues(self):
        self._advance()
        return int(self._n)

    def cpu(self):
        self._advance()
        return self._cpu

    def fill(self):
        self._advance()
        return self._fill(self.gate.active)


def _tune(*args, **kwargs):
    """A tuner on a Pipeline (:func:`_tunes`' first); its history."""
    return _tunes(*args, **kwargs)[0]


def _tunes(cpu_per_record, until, what, total=6, fill=lambda k: 1.0, rate=lambda k: 1000.0,
           cores=(2,)):
    """Tuners on a Pipeline each (consumer-bound unless ``fill`` says otherwise), one per
    count of ``cores``, started together; their histories once ``until`` holds for the
    first's."""
    coord = tf.compat.v1.train.Coordinator()
    tuners = []
    for n in cores:
        gate = tuner.Gate(total, tuner.first_count(total))
        pipe = Pipeline(gate, rate=rate, cpu_per_record=cpu_per_record, fill=fill)
        tuners.append(tuner.Tuner("q", gate, coord, pipe.enqueues, pipe.fill, cpu=pipe.cpu,
                                  cores=n))
    for t in tuners:
        t.thread.start()
    try:
        deadline = time.monotonic() + 30
        while not until(tuners[0].history):
            if time.monotonic() > deadline:
                pytest.fail(f"the tuner did not {what} in 30 s: {tuners[0].history}")
            threading.Event().wait(0.05)
    finally:
        coord.request_stop()
        for t in tuners:
            t.thread.join(5)
    assert not any(t.thread.is_alive() for t in tuners)
    assert all(t.gate.opened for t in tuners)  # a stopped tuner lets every thread run
    return [list(t.history) for t in tuners]


def test_a_full_queue_gives_back_threads_that_cost_cpu():
    """Consumer-bound, each thread's records costing more CPU: one fewer at a time, to one."""
    history = _tune(lambda k: 1e-4 * k, lambda h: h and h[-1].to_count == 1,
                    "give every thread back")
    assert [(d.from_count, d.to_count) for d in history] == [(3, 2), (2, 1)]
    assert {d.reason for d in history} == {"queue full"}
    assert history[-1].cpu_ms == pytest.approx(0.1, rel=0.01)


def test_a_full_queue_gives_back_threads_that_cost_no_more_cpu_within_a_bound():
    """Consumer-bound, each thread fewer costing 3% more CPU per record: threads blocked on
    a full queue are given back while the CPU stays within 5% of the least seen, so the
    small rises do not add up: 3 -> 2 (+3%) is kept, 2 -> 1 (+6% of the least) undone."""
    history = _tune(lambda k: 1e-4 * 1.03 ** (3 - k),
                    lambda h: any(d.reason.startswith("undo") for d in h), "undo a move")
    kept = [(d.from_count, d.to_count) for d in history if not d.reason.startswith("undo")]
    assert kept == [(3, 2)]
    assert (history[-1].from_count, history[-1].to_count) == (1, 2)  # the undone 2 -> 1


def test_a_full_queue_keeps_threads_whose_records_cost_less_cpu():
    """Consumer-bound, CPU per record falling with threads (TF's pools spin between one
    thread's steps): a give-back is tried and undone, more threads are kept."""
    history = _tune(lambda k: 1e-4 / k, lambda h: h and h[-1].to_count == 6, "add threads")
    assert history[0].reason.startswith("undo") and history[0].to_count == 3
    assert [(d.from_count, d.to_count) for d in history if not d.reason.startswith("undo")][
        :1] == [(3, 4)]
    assert "queue full, less CPU per record" in {d.reason for d in history}


def test_a_queue_still_filling_gets_no_threads_until_its_fill_stops_rising():
    """A low fill that rises is readers ahead of the step (every queue starts empty): no
    growth then; once it holds low, the queue is starving and gets a thread."""
    start = time.monotonic()
    filled_at = 1.6  # the fill rises 0.15 a second (0.07 a window) to 0.24, then holds

    def fill(k):
        return 0.15 * min(time.monotonic() - start, filled_at)

    history = _tune(lambda k: 1e-4, lambda h: h, "add a thread", fill=fill,
                    rate=lambda k: 1000.0 * k)
    assert (history[0].from_count, history[0].to_count) == (3, 4)
    assert history[0].reason == "more input needed"
    # The move was measured for a window: it began after the fill (almost) stopped rising.
    began = history[0].at - tuner.SETTLE_SECS - tuner.WINDOW_SECS
    assert began > filled_at - 0.3, history


def test_a_starved_queue_gets_no_thread_while_the_cores_are_busy():
    """Starved, the rate rising with threads, 0.7 ms CPU per record: the process uses 2.1
    CPU seconds a second at 3 threads. On 4 cores the tuner adds threads; on 2 (over 0.9 of
    them busy) it adds none: a thread more there only takes turns on the same cores."""
    four, two = _tunes(lambda k: 7e-4, lambda h: len(h) >= 2, "add two threads",
                       fill=lambda k: 0.0, rate=lambda k: 1000.0 * k, cores=(4, 2))
    assert [(d.from_count, d.to_count) for d in four[:2]] == [(3, 4), (4, 5)]
    assert two == []  # the same windows, on 2 cores: no move


def _first_move(gate, pipe, **kwargs):
    """A tuner (8 cores) on a simulated ``pipe``: its first decision, and its history then."""
    coord = tf.compat.v1.train.Coordinator()
    tune = tuner.Tuner("q", gate, coord, pipe.enqueues, pipe.fill, cpu=pipe.cpu, cores=8,
                       **kwargs)
    tune.thread.start()
    try:
        deadline = time.monotonic() + 30
        while not tune.history and time.monotonic() < deadline:
            threading.Event().wait(0.05)
    finally:
        coord.request_stop()
        tune.thread.join(5)
    assert not tune.thread.is_alive()
    assert tune.history, "the tuner made no move in 30 s"
    return tune.history[0], list(tune.history)


@pytest.mark.parametrize("rate_at_4", [600.0, 960.0])
def test_a_thread_that_plainly_lowers_the_rate_is_undone_in_half_a_window(rate_at_4):
    """Starved at 3 threads (1,000 records/s). A fourth that gives out 600/s is undone once
    half a window shows it; one that gives out 960/s (within the noise that a half window
    cannot tell) is measured the whole window, and undone then."""
    gate = tuner.Gate(6, tuner.first_count(6))
    pipe = Pipeline(gate, rate=lambda k: 1000.0 if k <= 3 else rate_at_4,
                    cpu_per_record=lambda k: 1e-4, fill=lambda k: 0.0)
    first, history = _first_move(gate, pipe)
    assert (first.from_count, first.to_count) == (4, 3), history
    assert first.rate == pytest.approx(rate_at_4, rel=0.05)
    # Counted from the window's first reading (its settling counts to 3): a whole window is
    # at least WINDOW_SECS; half of one ends at the first reading past its middle.
    if rate_at_4 < 900:
        assert pipe.seconds[4] < tuner.WINDOW_SECS, pipe.seconds
    else:
        assert pipe.seconds[4] >= tuner.WINDOW_SECS, pipe.seconds


class StockedPipeline:
    """A queue of ``span`` records between readers making ``produce(k)`` records a second
    and a consumer taking ``consume(k)``: a window's enqueues include what went into the
    queue's stock, as in a real queue."""

    def __init__(self, gate, *, produce, consume, span):
        self.gate, self._produce, self._consume, self.span = gate, produce, consume, span
        self._lock = threading.Lock()
        self._t, self._k, self._n, self._stock = time.monotonic(), gate.active, 0.0, 0.0

    def _advance(self):
        with self._lock:
            now = time.monotonic()
            made = self._produce(self._k) * (now - self._t)
            stock = self._stock + made - self._consume(self._k) * (now - self._t)
            if stock > self.span:  # readers blocked on a full queue
                made -= stock - self.span
            self._stock = min(self.span, max(0.0, stock))  # an empty queue: the step waits
            self._n += made
            self._t, self._k = now, self.gate.active

    def enqueues(self):
        self._advance()
        return self._n

    def cpu(self):
        self._advance()
        return self._n * 1e-4

    def fill(self):
        self._advance()
        return self._stock / self.span


@pytest.mark.parametrize("drained_at_4", [850.0, 1000.0])
def test_a_thread_is_judged_by_the_records_drained_not_those_stocked(drained_at_4):
    """Starved at 3 threads (900 records/s made, the step could take 1,000). A fourth makes
    1,200/s, the excess filling the queue through the window after the move: kept when the
    step then takes 1,000/s, undone when the fourth slows the step to 850/s (it shares the
    cores), although 1,200 enqueues/s were counted in both."""
    gate = tuner.Gate(6, tuner.first_count(6))
    pipe = StockedPipeline(gate, produce=lambda k: 300.0 * k, span=1000.0,
                           consume=lambda k: 1000.0 if k <= 3 else drained_at_4)
    first, history = _first_move(gate, pipe, per_fill=pipe.span)
    if drained_at_4 < 900:
        assert (first.from_count, first.to_count) == (4, 3), history  # undone
        assert first.reason.startswith("undo")
        assert first.rate == pytest.approx(850, rel=0.05)
    else:
        assert (first.from_count, first.to_count, first.reason) == (3, 4, "more input needed")
        assert first.rate == pytest.approx(1000, rel=0.05)


@pytest.mark.parametrize("read_many", [None, 16, "batch"])
def test_the_tuner_knows_the_records_of_one_enqueue(tmp_path, read_many):
    """One record, the read's count (a queue's stock in enqueues is its size over it), or
    one whole batch per enqueue."""
    with qk.QueueSession() as qs:
        qk.tfrecord_batches(_files(tmp_path, 2, 10), batch_size=4, num_epochs=1,
                            num_readers="auto", max_readers=2, read_many=read_many,
                            parse_fn=_parse_ids)
        (name,) = qs.graph.get_collection(GraphKeys.AUTOTUNE)
        (runner,) = [r for r in qs.graph.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
                     if r.queue.queue_ref.op.name == name]
        assert records_per_enqueue(runner.enqueue_ops[0]) == (16 if read_many == 16 else 1)


def _parse_ids(serialized):
    """The ids of one record or of a vector of them."""
    parse = tf.io.parse_example if serialized.shape.rank else tf.io.parse_single_example
    return {"id": parse(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"]}


@pytest.mark.parametrize("read_many", [None, 16, "batch"])
def test_reads_of_many_records_start_at_one_thread(tmp_path, monkeypatch, read_many):
    """A parse_fn given one record a read starts every thread (one reader's: its parse is
    the work); given many records (or whole batches) one, climbing while the queue
    starves."""
    monkeypatch.setattr(tuner, "SETTLE_SECS", 600.0)  # the tuner's first window never ends
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(_files(tmp_path, 4, 40), batch_size=8, num_epochs=1,
                                num_readers="auto", max_readers=8, read_many=read_many,
                                parse_fn=_parse_ids)
        qs.start()
        state = _state(qs)
        ids = [i for x in qs.iterate(b) for i in x["id"].tolist()]
    assert state.maximum == 8  # 8 threads: of one reader, or of 8
    assert state.active == (8 if read_many is None else 1)
    assert _readers(qs.graph) == (1 if read_many is None else 8)
    assert sorted(ids) == list(range(160))


def test_auto_builds_two_readers_per_core_and_starts_at_one_per_core(tmp_path, monkeypatch):
    """By default "auto" builds two readers per core (4 to 16): every reader built costs
    its ops and its start, paused or not; the tuner starts one per core (raw images, one
    record a read)."""
    state, graph, names = _at_start(monkeypatch, tmp_path, "raw", read_many=0)
    built = max(4, min(2 * (os.cpu_count() or 1), 16))
    assert (state.maximum, state.active) == (built, built // 2)
    assert _readers(graph) == built
    assert sorted(names) == sorted(f"id{i}" for i in range(80))


def test_auto_over_small_raw_records_read_many_builds_one_reader_per_core(tmp_path,
                                                                          monkeypatch):
    """72-byte raw images are read 64 a run under "auto": it builds one reader per core (2
    to 16) rather than two, and starts at one; a max_readers given is kept. Every record
    is still read once."""
    state, graph, names = _at_start(monkeypatch, tmp_path, "raw")
    built = max(2, min(os.cpu_count() or 1, 16))
    assert (state.maximum, state.active) == (built, 1)
    assert _readers(graph) == built
    assert sorted(names) == sorted(f"id{i}" for i in range(80))
    (tmp_path / "given").mkdir()
    state, graph, _ = _at_start(monkeypatch, tmp_path / "given", "raw", max_readers=5)
    assert (state.maximum, _readers(graph)) == (5, 5)


def _at_start(monkeypatch, tmp_path, fmt, **kwargs):
    """(the tuner's state at its start, the graph, every record's name) of "auto" readers
    of 4 files of 20 images."""
    monkeypatch.setattr(tuner, "SETTLE_SECS", 600.0)  # the tuner's first window never ends
    files = [write_image_records(tmp_path / f"{k}.tfrecords", range(20 * k, 20 * k + 20),
                                 fmt=fmt) for k in range(4)]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=8, num_epochs=1, num_readers="auto",
                                **kwargs)
        qs.start()
        state = _state(qs)
        names = [x.decode() for y in qs.iterate(b) for x in y["filename"].tolist()]
    return state, qs.graph, names


def test_reads_of_many_images_to_decode_start_at_every_thread(tmp_path, monkeypatch):
    """PNG records are read 64 a step under "auto", but each costs a decode: the tuner
    starts them at every thread (a full queue tries fewer), not at one or half."""
    state, graph, names = _at_start(monkeypatch, tmp_path, "png", max_readers=8)
    assert graph.get_collection(GraphKeys.DECODING)
    assert state.maximum == 8
    assert state.active == 8
    assert sorted(names) == sorted(f"id{i}" for i in range(80))


@pytest.mark.parametrize("max_readers", [1, 2, 4])
def test_each_record_exactly_once_while_the_tuner_moves(tmp_path, monkeypatch, max_readers):
    """Every record is delivered once while the tuner pauses and resumes reader threads."""
    monkeypatch.setattr(tuner, "first_count", _half)  # from half: room to climb
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(_files(tmp_path, 20, 60), batch_size=7, num_epochs=1,
                                num_readers="auto", max_readers=max_readers, shuffle=True,
                                seed=3, parse_fn=Producer(0.01))
        ids = [i for x in qs.iterate(b) for i in x["id"].tolist()]
        moves = qs.tuning()
    assert sorted(ids) == list(range(1200))
    if max_readers == 1:
        assert moves == {}  # one thread: nothing to tune
    else:
        assert _only(moves).history, "the tuner never moved during the epoch"


def _only(moves):
    (state,) = moves.values()
    return state


def test_a_runner_error_while_threads_are_paused_is_raised(tmp_path, monkeypatch):
    """A runner's error raised while other threads are paused reaches the caller."""
    monkeypatch.setattr(tuner, "first_count", _half)  # from half: room to climb
    producer = Producer(0.01, poison=None)
    with pytest.raises(tf.errors.InvalidArgumentError, match="poison record"):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(_files(tmp_path, 4, 600), batch_size=8, num_epochs=1,
                                    num_readers="auto", max_readers=4, parse_fn=producer,
                                    capacity=32)
            _consume_until(qs, b, _grew(1), "add readers")
            producer.delay = 0.0
            _until(qs, _gave_back, "pause a reader")
            producer.poison = 2399  # the last record of the last file: read after a resume
            for _ in qs.iterate(b):
                pass


def test_image_folder_batches_auto_threads(tmp_path):
    """image_folder_batches(num_threads="auto") is tuned and delivers every image once."""
    from tests.imagefactory import make_mixed_folder

    make_mixed_folder(tmp_path / "src", n_per_class=4)
    with qk.QueueSession() as qs:
        b = qk.image_folder_batches(tmp_path / "src", image_size=8, batch_size=4, num_epochs=1,
                                    num_threads="auto", max_threads=3)
        names = [n for x in qs.iterate(b) for n in x["filename"].tolist()]
        assert _only(qs.tuning()).maximum == 3
    assert len(names) == len(set(names)) == len(qk.scan_image_folder(
        tmp_path / "src", extensions=(".jpg", ".jpeg", ".png", ".gif", ".bmp")).paths)


@pytest.mark.parametrize("bad", [0, -1, "many", 2.5])
def test_bad_counts_are_refused(tmp_path, bad):
    """num_readers that is neither a positive int nor "auto" is refused at build time."""
    with tf.Graph().as_default(), pytest.raises(ValueError, match="num_readers"):
        qk.tfrecord_batches(_files(tmp_path, 1, 2), num_readers=bad)


@pytest.mark.slow
def test_ctrl_c_while_readers_are_paused_exits_promptly(tmp_path):
    """Ctrl-C while some reader threads are paused ends the program promptly."""
    files = _files(tmp_path, 4, 300)
    child = run_script(f"""
import time, threading
import tensorflow as tf
import queuekit as qk
import queuekit.session.tuner as tuner
tuner.first_count = lambda total, **_: max(1, total // 2)  # from half: room to climb
delay = [0.01]
def work(i):
    time.sleep(delay[0])  # a slow producer first, so the tuner grows
    return i
def parse(s):
    i = tf.io.parse_single_example(s, {{"id": tf.io.FixedLenFeature([], tf.int64)}})["id"]
    out = tf.py_function(work, [i], tf.int64)
    out.set_shape([])
    return {{"id": out}}
def moved(down):
    reason = "queue full" if down else "more input needed"
    return any(d.reason == reason for t in qs.tuning().values() for d in t.history)
with qk.QueueSession(stall_timeout_secs=None) as qs:
    b = qk.tfrecord_batches({files!r}, batch_size=8, num_readers="auto", max_readers=4,
                            parse_fn=parse, capacity=32)
    blocked = tf.queue.FIFOQueue(1, tf.int64).dequeue()
    deadline = time.monotonic() + 60
    while not moved(False):
        assert time.monotonic() < deadline, qs.tuning()
        qs.run(b)
    delay[0] = 0.0  # fast now, and nobody consumes: the queue fills, readers pause
    while not moved(True):
        assert time.monotonic() < deadline, qs.tuning()
        threading.Event().wait(0.05)
    print("paused", flush=True)
    qs.run(blocked)
""")
    _, err, took = signal_when_ready(child, signal.SIGINT, ready="paused")
    assert err.strip().splitlines()[-1] == "KeyboardInterrupt", err[-2000:]
    assert took < 8, f"took {took:.1f} s"


@pytest.mark.parametrize("fmt", ["png", None])
def test_auto_with_one_reader_at_most_builds_no_tuner(tmp_path, fmt):
    """max_readers=1 leaves nothing to tune: PNG records (read many to decode) and a
    parse_fn's records build one reader and no tuner (PNGs raised IndexError before)."""
    files = [write_image_records(tmp_path / f"{k}.tfrecords", range(5 * k, 5 * k + 5),
                                 fmt=fmt or "raw") for k in range(2)]
    parse = None if fmt else (lambda s: tf.io.parse_single_example(
        s, {"filename": tf.io.FixedLenFeature([], tf.string)}))
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=4, num_epochs=1, num_readers="auto",
                                max_readers=1, parse_fn=parse)
        names = [x.decode() for y in qs.iterate(b) for x in y["filename"].tolist()]
        assert qs.tuning() == {}
        assert not qs.graph.get_collection(GraphKeys.DECODING)
    assert sorted(names) == sorted(f"id{i}" for i in range(10))
