"""What `queuekit run` costs an unmodified program: steps/s of an input-bound TF1 loop
(programs/input_bound.py), plain and under `queuekit run`, and the start-up cost.

    python benchmarks/bench_run.py [--records 40000] [--rounds 5]

Each round runs the program once each way (in alternating order), each in its own process;
steps/s is the loop's own (its first step to its last), start-up the process's wall time
less that. Medians over the rounds; the ratio is queuekit run / plain (>= 0.98 is #46's bar).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "input_bound.py")


def write(folder, records, files=4):
    import tensorflow as tf

    paths = []
    for k in range(files):
        path = os.path.join(folder, f"part-{k}.tfrecords")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(records // files):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "data": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[bytes([i % 256]) * 1024]))})).SerializeToString())
        paths.append(path)
    return paths


def once(files, queuekit):
    command = [sys.executable, *(["-m", "queuekit", "run"] if queuekit else []), PROGRAM,
               *files, "1"]
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}).stdout
    wall = time.perf_counter() - started
    _, steps, _, seconds = out.split()
    return int(steps) / float(seconds), wall - float(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = smoke.parse(parser, records=400, rounds=1)
    with tempfile.TemporaryDirectory() as folder:
        files = write(folder, args.records)
        runs = {False: [], True: []}
        for r in range(args.rounds):
            for queuekit in ((False, True) if r % 2 == 0 else (True, False)):
                runs[queuekit].append(once(files, queuekit))
    rate = {k: statistics.median(x[0] for x in v) for k, v in runs.items()}
    start = {k: statistics.median(x[1] for x in v) for k, v in runs.items()}
    print(f"records {args.records}, rounds {args.rounds} (medians)")
    print(f"plain          {rate[False]:8.1f} steps/s   start-up and exit {start[False]:.2f} s")
    print(f"queuekit run   {rate[True]:8.1f} steps/s   start-up and exit {start[True]:.2f} s")
    print(f"ratio {rate[True] / rate[False]:.3f}; "
          f"start-up cost {start[True] - start[False]:+.2f} s")


if __name__ == "__main__":
    main()
