"""``queuekit bench``: records/s of reader/thread configurations, beside tf.data and the seed.

Each configuration runs in a fresh process (fresh TF thread pools, an honest
peak RSS), builds a fresh graph, discards ``warmup`` batches, then measures
``repeat`` windows of ``seconds`` each; rows report medians. The batch is
consumed in the graph (a sum, like a training step would) so that no
configuration pays for copying images out to numpy.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import platform
import subprocess
import sys

from queuekit.bench.report import FAILED, BenchReport, BenchRow
from queuekit.cluster.launch import PARENT_ENV

log = logging.getLogger(__name__)

# One core's worth of other work: a busy loop that ends when its parent is gone (also
# killed), polled every few milliseconds.
_BURN = ("import os\nparent = int(os.environ['" + PARENT_ENV + "'])\n"
         "while os.getppid() == parent:\n    for _ in range(200000):\n        pass\n")


# --compare names -> the reference rows they add.
REFERENCES = {
    # TFRecordDataset -> map(the builders' parse) -> batch -> one Dequantize -> prefetch:
    # the same work as queuekit's builders, all AUTOTUNE.
    "tfdata": "tf.data",
    # tf.data vectorised: batch, then parse the records together (as read_many does)
    "tfdata-batched": "tf.data batch-then-parse",
    # the usual tf.data port of the seed: normalise each record in map (three float passes)
    "tfdata-map": "tf.data normalise-in-map",
    "seed": "seed-style",  # the seed's read_and_decode: 1 reader, normalise, batch(capacity=20)
    "hand": "hand-written",  # queuekit's 1 reader x 1 thread graph, driven by a plain
                             # Session + Coordinator + start_queue_runners: the wrapper's cost
    # the machine's limits: the files' bytes read alone, and normalising an in-memory batch
    "ceilings": ("ceiling: read bytes", "ceiling: normalise a batch"),
}


def machine_info() -> dict:
    import tensorflow as tf

    return {"cores": os.cpu_count(), "tensorflow": tf.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def benchmark(files, *, readers=(1, 2, 4), threads=(1,), read_many=(None,), prefetch=(None,),
              batch_size=32,
              shuffle=False, seconds=5.0, warmup_batches=20, repeat=3, step_ms=0.0,
              compare=("tfdata-batched", "tfdata", "seed"), image_size=None,
              consume: str = "graph", spinning: bool = True, epochs: int | None = None,
              load: int = 0, progress=False, on_row=None) -> BenchReport:
    """Measure every configuration of the grid, each in its own process.

    Args:
        files: TFRecord files (path, glob, directory or list).
        readers, threads, read_many, prefetch: the grid; every combination is one
            row (``prefetch`` as in :func:`~queuekit.tfrecord_batches`; None,
            the default, is its default: 2 for ``"auto"`` readers, else 0).
            A reader count of ``"auto"`` is tuned while it runs; its row shows
            the count it settled on.
        batch_size, shuffle, image_size: as in :func:`~queuekit.tfrecord_batches`
            (``image_size`` for encoded images of different sizes: Inception's).
        seconds, repeat: ``repeat`` windows of ``seconds``; rows report medians.
        warmup_batches: batches discarded before measuring.
        step_ms: a simulated training step per batch (a sleep on the consumer side).
        compare: reference rows, keys of :data:`REFERENCES`.
        consume: ``"graph"`` (the batch summed in the graph, like a step) or
            ``"numpy"`` (fetched, like a loop calling ``sess.run(batch)``); every
            row of the run consumes the same way.
        spinning: False runs every row's session with its thread pools' spinning off
            (``ConfigProto.experimental.disable_thread_spinning``). On a machine with
            few cores, the pool threads that spin while idle take CPU from the readers
            of an input-bound loop (``docs/benchmarks-history.rst``); a step-bound model may
            run slower without it.
        epochs: each row is one whole run of this many passes over the files, timed
            from its graph's build to its end of data, as a short job sees it (a
            tuner's search counts; ``seconds``, ``repeat`` and ``warmup_batches``
            are then unused). None: the windows after the warm-up.
        load: this many other processes, each burning one core, run beside every
            row (a machine shared with other jobs, or a step that takes a core):
            how each configuration holds up when the cores are not all its own.
        progress: a tqdm bar over the configurations on stderr.
        on_row: called with each :class:`BenchRow` as it finishes.

    A configuration that fails is reported in its row (``error``); the others
    still run. Ctrl-C stops the run and returns the rows finished so far, with
    ``interrupted`` set.
    """
    from tqdm import tqdm

    from queuekit.records.files import expand_files

    files = expand_files(files)
    configs = [("queuekit", r, t, k or None, p)
               for r, t, k, p in itertools.product(readers, threads, read_many, prefetch)]
    if consume not in ("graph", "numpy"):
        raise ValueError(f"consume must be 'graph' or 'numpy', not {consume!r}")
    for c in compare:
        one = 1 if c == "hand" else None  # the hand-written row runs queuekit's 1x1 graph
        kinds = REFERENCES[c]
        for kind in (kinds,) if isinstance(kinds, str) else kinds:
            configs.append((kind, one, one, None, 0))
    if not isinstance(load, int) or load < 0:
        raise ValueError(f"load must be a count of processes (0 or more), not {load!r}")
    report = BenchReport([], machine_info(), planned=len(configs), spinning=spinning,
                         load=load)
    try:
        with _co_running(load):
            for kind, r, t, k, p in tqdm(configs, desc="bench", disable=not progress,
                                         file=sys.stderr):
                spec = dict(kind=kind, readers=r, threads=t, read_many=k, prefetch=p,
                            files=files, batch_size=batch_size, shuffle=shuffle,
                            seconds=seconds, warmup_batches=warmup_batches, repeat=repeat,
                            step_ms=step_ms, image_size=image_size, consume=consume,
                            spinning=spinning, epochs=epochs)
                row = _in_child(spec)
                report.rows.append(row)
                log.debug("bench row done: %s: %s", row.label, row.error or
                          f"{row.records_per_s:,.0f} rec/s")
                if on_row is not None:
                    on_row(row)
    except KeyboardInterrupt:
        # subprocess.run has already killed the configuration's child process.
        report.interrupted = True
    return report


@contextlib.contextmanager
def _co_running(load: int):
    """``load`` processes burning a core each while the rows run; killed and waited for
    on the way out, and each ends by itself when this process is gone (killed too)."""
    burners: list[subprocess.Popen] = []
    try:
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        for _ in range(load):
            burners.append(subprocess.Popen([sys.executable, "-c", _BURN], env=env,
                                            stdin=subprocess.DEVNULL))
        yield
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()


def _in_child(spec) -> BenchRow:
    row = BenchRow(spec["kind"], spec["readers"], spec["threads"], spec["read_many"],
                   consume=spec["consume"], prefetch=spec["prefetch"] or 0)
    try:
        proc = subprocess.run([sys.executable, "-m", "queuekit.bench.child", json.dumps(spec)],
                              capture_output=True, text=True, check=False,
                              env={**os.environ, PARENT_ENV: str(os.getpid())},
                              timeout=120 + spec["repeat"] * spec["seconds"] * 3)
    except subprocess.TimeoutExpired:
        row.error = "timed out"
        return row
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode != 0 or not last:
        said = [line[len(FAILED):] for line in proc.stdout.splitlines() if line.startswith(FAILED)]
        err = [line for line in proc.stderr.splitlines() if line.strip()]
        row.error = (said[-1] if said else err[-1] if err
                     else f"exit code {proc.returncode}")[:200]
        return row
    return BenchRow(**json.loads(last[0]))
