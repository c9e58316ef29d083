"""What a queuekit session adds to every step, on a large graph: a recurrent net unrolled in
a while loop (as ``dynamic_rnn`` builds it), trained on batches from a queue runner.

    python benchmarks/bench_large_graph.py [--rounds 5] [--steps 60] [--time-steps 300]
                                           [--cases plain,queuekit,...,run,run_report]

Each step runs the forward and backward loops: about ``4 x time-steps`` loop iterations of
a dozen ops, a million node statistics in a traced run. Cases, each the same graph and the
same number of steps:

- ``plain``: ``tf.compat.v1.Session`` + ``Coordinator`` + ``start_queue_runners``;
- ``queuekit``: ``qk.QueueSession()`` as it comes (the input report on);
- ``report_off``: ``qk.QueueSession(input_report=False)``;
- ``monitored``: ``qk.monitored_training_session()``;
- ``slim``: ``qk.slim.train(..., number_of_steps=N)`` (no checkpoint, no summaries);
- ``run``: ``plain`` with queuekit installed (what ``queuekit run`` does to a program);
- ``run_report``: the same with its input report (``queuekit run --report``).

Each measurement runs in its own process (``--one-process``: all in this one, for less
spread), the cases in an order drawn per round; the steps after ``--warmup`` are timed.
Prints each round's steps/s per case and the median
of each case's per-round ratio to ``plain``. ``--one CASE`` runs one in this process.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402

CASES = ("plain", "queuekit", "report_off", "monitored", "slim", "run", "run_report")
BATCH, FEATURES, UNITS = 16, 32, 64


def _model(time_steps: int):
    """(train_op, the batch queue's size): a tanh RNN over ``time_steps`` in a while loop, its
    input a [BATCH, time_steps, FEATURES] batch made by a runner thread."""
    import tensorflow as tf

    v1 = tf.compat.v1
    q = tf.queue.FIFOQueue(8, tf.float32, shapes=[[time_steps, FEATURES]], name="sequences")
    v1.train.add_queue_runner(v1.train.QueueRunner(
        q, [q.enqueue_many([tf.random.normal([BATCH, time_steps, FEATURES])])]))
    x = tf.transpose(q.dequeue_many(BATCH), [1, 0, 2])  # time major
    w = v1.get_variable("w", [FEATURES, UNITS])
    u = v1.get_variable("u", [UNITS, UNITS], initializer=v1.orthogonal_initializer())
    b = v1.get_variable("b", [UNITS], initializer=v1.zeros_initializer())

    def body(t, h):
        return t + 1, tf.tanh(tf.matmul(x[t], w) + tf.matmul(h, u) + b)

    _, h = tf.while_loop(lambda t, h: t < time_steps, body,
                         [tf.constant(0), tf.zeros([BATCH, UNITS])])
    loss = tf.reduce_mean(tf.square(h))
    step = v1.train.get_or_create_global_step()
    return v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)


def one(case: str, steps: int, warmup: int, time_steps: int) -> float:
    """Steps per second of ``case`` after ``warmup`` steps, in this process."""
    import tensorflow as tf

    import queuekit as qk
    import queuekit.slim as qslim
    from queuekit.session.profile import profile_of

    with tf.Graph().as_default():
        train_op = _model(time_steps)
        if case == "slim":
            times = []
            with tempfile.TemporaryDirectory() as logdir:
                def step_fn(sess, op, global_step, kwargs):
                    times.append(time.perf_counter())
                    return qslim.train_step(sess, op, global_step, kwargs)

                qslim.train(train_op, logdir, number_of_steps=warmup + steps + 1,
                            train_step_fn=step_fn, summary_op=None,
                            save_summaries_secs=1e9, save_interval_secs=1e9,
                            log_every_n_steps=10**9)
            return steps / (times[warmup + steps] - times[warmup])
        if case == "plain":
            return _plain(train_op, steps, warmup)
        if case in ("run", "run_report"):  # the plain program under `queuekit run`
            with qk.installed(report=case == "run_report"):
                return _plain(train_op, steps, warmup)
        if case == "monitored":
            with qk.monitored_training_session() as sess:
                return _timed(sess.run, train_op, steps, warmup)
        with qk.QueueSession(input_report=case != "report_off") as qs:
            rate = _timed(qs.run, train_op, steps, warmup)
            seen = profile_of(qs.coordinator)
            if seen is not None and seen.traced_runs:
                # What the profile measured itself: traced runs' cost beyond untraced ones.
                print(f"{case}: {seen.traced_runs} traced runs cost {seen.trace_secs:.3f} s, "
                      f"{seen.trace_secs * rate / (steps + warmup):.2%} of the loop",
                      file=sys.stderr)
            return rate


def _plain(train_op, steps: int, warmup: int) -> float:
    import tensorflow as tf

    v1 = tf.compat.v1
    sess = v1.Session()
    sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
    coord = v1.train.Coordinator()
    threads = v1.train.start_queue_runners(sess, coord)
    try:
        return _timed(sess.run, train_op, steps, warmup)
    finally:
        coord.request_stop()
        sess.run(v1.get_collection(v1.GraphKeys.QUEUE_RUNNERS)[0].queue.close(
            cancel_pending_enqueues=True))
        coord.join(threads)
        sess.close()


def _timed(run, op, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        run(op)
    started = time.perf_counter()
    for _ in range(steps):
        run(op)
    return steps / (time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--time-steps", type=int, default=300)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--one-process", action="store_true",
                        help="every measurement in this process (TensorFlow's thread pools "
                             "made once): less spread between rounds")
    parser.add_argument("--one", choices=CASES, help=argparse.SUPPRESS)
    args = smoke.parse(parser, argv, rounds=1, steps=3, warmup=1, time_steps=10,
                       one_process=True)
    if args.one:
        print(json.dumps(one(args.one, args.steps, args.warmup, args.time_steps)))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    if "plain" not in cases:
        parser.error("--cases needs plain: the ratios are to it")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    rates: dict[str, list[float]] = {c: [] for c in cases}
    for r in range(args.rounds):
        order = random.sample(cases, len(cases))
        for case in order:
            if args.one_process:
                rates[case].append(one(case, args.steps, args.warmup, args.time_steps))
                continue
            done = subprocess.run(
                [sys.executable, __file__, "--one", case, "--steps", str(args.steps),
                 "--warmup", str(args.warmup), "--time-steps", str(args.time_steps)],
                capture_output=True, text=True, env=env, check=False)
            if done.returncode:
                sys.exit(f"{case} failed:\n{done.stderr[-3000:]}")
            rates[case].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}: " + ", ".join(f"{c} {rates[c][-1]:.2f}" for c in cases),
              flush=True)
    print(f"\nsteps/s of a {args.time_steps}-step while-loop RNN, {args.rounds} rounds, "
          f"median of each round's ratio to plain:")
    for case in cases:
        ratios = [a / b for a, b in zip(rates[case], rates["plain"], strict=True)]
        print(f"  {case:11s} {statistics.median(rates[case]):8.2f} steps/s   "
              f"ratio {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-"
              f"{max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
