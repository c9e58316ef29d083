"""``queuekit bench``: records/s of reader/thread configurations, beside tf.data and the seed.

Each configuration runs in a fresh process (fresh TF thread pools, an honest
peak RSS), builds a fresh graph, discards ``warmup`` batches, then measures
``repeat`` windows of ``seconds`` each; rows report medians. The batch is
consumed in the graph (a sum, like a training step would) so that no
configuration pays for copying images out to numpy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from queuekit.errors import MissingDependencyError

log = logging.getLogger(__name__)


def _tf():
    import tensorflow as tf

    return tf


# --compare names -> the reference rows they add.
REFERENCES = {
    "tfdata": "tf.data",  # TFRecordDataset -> map(parse) -> batch -> prefetch, all AUTOTUNE
    "seed": "seed-style",  # the seed's read_and_decode: 1 reader, normalise, batch(capacity=20)
    "hand": "hand-written",  # queuekit's 1 reader x 1 thread graph, driven by a plain
                             # Session + Coordinator + start_queue_runners: the wrapper's cost
}


@dataclasses.dataclass
class BenchRow:
    kind: str  # "queuekit" or one of REFERENCES' values
    readers: int | None
    threads: int | None
    read_many: int | None
    records_per_s: float | None = None
    mb_per_s: float | None = None
    batches_per_s: float | None = None
    queue_fill: float | None = None
    cpu_percent: float | None = None
    peak_rss_mb: float | None = None
    runs: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def label(self) -> str:
        if self.kind != "queuekit":
            return self.kind
        return f"readers={self.readers} threads={self.threads} read-many={self.read_many or 0}"


@dataclasses.dataclass
class BenchReport:
    """The rows of one :func:`benchmark` run; ``interrupted`` when Ctrl-C cut it short."""

    rows: list[BenchRow]
    machine: dict
    planned: int = 0  # configurations asked for; more than len(rows) when interrupted
    interrupted: bool = False

    @property
    def best(self) -> BenchRow | None:
        ok = [r for r in self.rows if r.kind == "queuekit" and r.records_per_s]
        return max(ok, key=lambda r: r.records_per_s) if ok else None

    def reference(self, kind: str) -> BenchRow | None:
        return next((r for r in self.rows if r.kind == kind and r.records_per_s), None)

    def summary(self) -> str:
        best = self.best
        if best is None:
            return "best: no configuration ran"
        ratios = [f"{best.records_per_s / ref.records_per_s:.2f}x {kind}"
                  for kind in ("tf.data", "seed-style") if (ref := self.reference(kind))]
        extra = f"  ({', '.join(ratios)})" if ratios else ""
        return f"best: {best.label}  {best.records_per_s:,.0f} rec/s{extra}"

    def table(self) -> str:
        head = ["configuration", "rec/s", "MB/s", "batch/s", "fill", "cpu%", "rss MB"]
        lines = []
        best = self.best
        for r in self.rows:
            if r.error:
                cells = [r.label, f"failed: {r.error}"]
            else:
                cells = [r.label, _f(r.records_per_s, 0), _f(r.mb_per_s, 1),
                         _f(r.batches_per_s, 1), _f(r.queue_fill, 2), _f(r.cpu_percent, 0),
                         _f(r.peak_rss_mb, 0)]
            lines.append(("* " if r is best else "  ", cells))
        widths = [max(len(c[i]) if i < len(c) else 0 for _, c in lines + [("", head)])
                  for i in range(len(head))]
        out = ["  " + "  ".join(h.rjust(w) if i else h.ljust(w)
                                for i, (h, w) in enumerate(zip(head, widths)))]
        for mark, cells in lines:
            out.append(mark + "  ".join(c.rjust(w) if i else c.ljust(w)
                                        for i, (c, w) in enumerate(zip(cells, widths))))
        tail = [self.summary()]
        if self.interrupted:
            tail.append(f"interrupted: {len(self.rows)} of {self.planned} configurations ran")
        return "\n".join(out + tail)

    def to_json(self) -> str:
        return json.dumps({"machine": self.machine, "rows": [dataclasses.asdict(r) | {
            "label": r.label} for r in self.rows], "summary": self.summary(),
            "interrupted": self.interrupted}, indent=2)

    def plot(self, path) -> None:
        """A PNG: records/s against readers (one line per threads/read-many), queue fill below.

        Reference rows (tf.data, seed-style, hand-written) are horizontal lines.
        Needs matplotlib (``pip install 'queuekit[plot]'``).
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as e:
            raise MissingDependencyError(
                "plotting needs matplotlib: pip install 'queuekit[plot]'") from e
        # Figure + Agg canvas, not pyplot: no global backend or figure state is touched.
        fig = Figure(figsize=(8, 6.5), layout="constrained")
        FigureCanvasAgg(fig)
        speed, fill = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
        lines: dict[tuple, list[BenchRow]] = {}
        for r in self.rows:
            if r.kind == "queuekit" and r.records_per_s:
                lines.setdefault((r.threads, r.read_many or 0), []).append(r)
        for (threads, many), rows in sorted(lines.items()):
            rows.sort(key=lambda r: r.readers)
            readers = [r.readers for r in rows]
            label = f"threads={threads} read-many={many}"
            drawn = speed.plot(readers, [r.records_per_s for r in rows], "o-", label=label)
            fill.plot(readers, [r.queue_fill if r.queue_fill is not None else float("nan")
                                for r in rows], "o-", color=drawn[0].get_color())
        for kind, style in (("tf.data", "--"), ("seed-style", ":"), ("hand-written", "-.")):
            ref = self.reference(kind)
            if ref:
                speed.axhline(ref.records_per_s, color="gray", linestyle=style,
                              label=f"{kind} {ref.records_per_s:,.0f}")
        speed.set_ylabel("records/s")
        speed.set_ylim(bottom=0)
        speed.legend(fontsize="small")
        speed.set_title(f"queuekit bench: {self.machine.get('cores')} cores, "
                        f"TF {self.machine.get('tensorflow')}")
        fill.set_ylabel("queue fill")
        fill.set_ylim(-0.05, 1.05)
        fill.set_xlabel("readers")
        fill.set_xticks(sorted({r.readers for rows in lines.values() for r in rows}))
        fig.savefig(os.fspath(path), dpi=100)


def _f(v, digits):
    return "-" if v is None else f"{v:,.{digits}f}"


def machine_info() -> dict:
    tf = _tf()
    return {"cores": os.cpu_count(), "tensorflow": tf.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def benchmark(files, *, readers=(1, 2, 4), threads=(1,), read_many=(None,), batch_size=32,
              shuffle=False, seconds=5.0, warmup_batches=20, repeat=3, step_ms=0.0,
              compare=("tfdata", "seed"), progress=False, on_row=None) -> BenchReport:
    """Measure every configuration of the grid, each in its own process.

    Args:
        files: TFRecord files (path, glob, directory or list).
        readers, threads, read_many: the grid; every combination is one row.
        batch_size, shuffle: as in :func:`~queuekit.tfrecord_batches`.
        seconds, repeat: ``repeat`` windows of ``seconds``; rows report medians.
        warmup_batches: batches discarded before measuring.
        step_ms: a simulated training step per batch (a sleep on the consumer side).
        compare: reference rows, keys of :data:`REFERENCES`.
        progress: a tqdm bar over the configurations on stderr.
        on_row: called with each :class:`BenchRow` as it finishes.

    A configuration that fails is reported in its row (``error``); the others
    still run. Ctrl-C stops the run and returns the rows finished so far, with
    ``interrupted`` set.
    """
    from tqdm import tqdm

    from queuekit.export import expand_files

    files = expand_files(files)
    configs = [("queuekit", r, t, k or None)
               for r, t, k in itertools.product(readers, threads, read_many)]
    for c in compare:
        one = 1 if c == "hand" else None  # the hand-written row runs queuekit's 1x1 graph
        configs.append((REFERENCES[c], one, one, None))
    report = BenchReport([], machine_info(), planned=len(configs))
    try:
        for kind, r, t, k in tqdm(configs, desc="bench", disable=not progress, file=sys.stderr):
            spec = dict(kind=kind, readers=r, threads=t, read_many=k, files=files,
                        batch_size=batch_size, shuffle=shuffle, seconds=seconds,
                        warmup_batches=warmup_batches, repeat=repeat, step_ms=step_ms)
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


def _in_child(spec) -> BenchRow:
    row = BenchRow(spec["kind"], spec["readers"], spec["threads"], spec["read_many"])
    try:
        proc = subprocess.run([sys.executable, "-m", "queuekit.bench", json.dumps(spec)],
                              capture_output=True, text=True, check=False,
                              timeout=120 + spec["repeat"] * spec["seconds"] * 3)
    except subprocess.TimeoutExpired:
        row.error = "timed out"
        return row
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode != 0 or not last:
        err = [line for line in proc.stderr.splitlines() if line.strip()]
        row.error = (err[-1] if err else f"exit code {proc.returncode}")[:200]
        return row
    return BenchRow(**json.loads(last[0]))


def _graph(spec):
    """(graph, fetch, batch-queue name or None, session kind) for one configuration."""
    tf = _tf()
    v1 = tf.compat.v1
    import queuekit as qk

    graph = tf.Graph()
    with graph.as_default():
        files, bs = spec["files"], spec["batch_size"]
        shape = qk.pipeline._record_layout(files, None)[0]
        if spec["kind"] in ("queuekit", "hand-written"):
            b = qk.tfrecord_batches(files, batch_size=bs, shuffle=spec["shuffle"],
                                    num_readers=spec["readers"], num_threads=spec["threads"],
                                    read_many=spec["read_many"])
        elif spec["kind"] == "tf.data":
            def parse(ser):
                img, label = _parse_normalised(ser, shape)
                return {"image": img, "label": label}
            ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).repeat()
            if spec["shuffle"]:
                ds = ds.shuffle(1000)
            ds = ds.map(parse, tf.data.AUTOTUNE).batch(bs).prefetch(tf.data.AUTOTUNE)
            b = v1.data.make_one_shot_iterator(ds).get_next()
        else:  # the seed's read_and_decode(flag='train'), with its normalise-before-batch
            with qk.pipeline._quiet_deprecations():
                fq = v1.train.string_input_producer(files)
                _, ser = v1.TFRecordReader().read(fq)
                im, lab = v1.train.batch(list(_parse_normalised(ser, shape)), batch_size=bs,
                                         capacity=20)
                b = {"image": im, "label": lab}
        fetch = [tf.reduce_sum(b["image"]), tf.shape(b["label"])[0]]
    return graph, fetch, shape


def _parse_normalised(serialized, shape):
    """The seed's parse, decode and normalise of one record (float32 image, int32 label)."""
    tf = _tf()
    f = tf.io.parse_single_example(serialized, {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "img_raw": tf.io.FixedLenFeature([], tf.string)})
    img = tf.reshape(tf.io.decode_raw(f["img_raw"], tf.uint8), shape)
    return tf.cast(img, tf.float32) * (1.0 / 255) - 0.5, tf.cast(f["label"], tf.int32)


@contextlib.contextmanager
def _session(kind, graph):
    """(run, queue_stats) of a QueueSession, or of the usual hand-written choreography."""
    import queuekit as qk

    if kind != "hand-written":
        with qk.QueueSession(graph, stall_timeout_secs=120) as qs:
            yield qs.run, qs.queue_stats
        return
    v1 = _tf().compat.v1
    with graph.as_default(), v1.Session(graph=graph) as sess:
        sess.run(v1.local_variables_initializer())
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            yield sess.run, list
        finally:
            coord.request_stop()
            coord.join(threads)


def _measure(spec) -> BenchRow:
    graph, fetch, shape = _graph(spec)
    row = BenchRow(spec["kind"], spec["readers"], spec["threads"], spec["read_many"])
    rates, fills, cpu = [], [], []
    step = spec["step_ms"] / 1000.0
    with _session(spec["kind"], graph) as (run, queue_stats):
        for _ in range(spec["warmup_batches"]):
            run(fetch)
        for _ in range(spec["repeat"]):
            n = batches = 0
            t0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < spec["seconds"]:
                n += int(run(fetch)[1])
                batches += 1
                if step:
                    time.sleep(step)  # a simulated training step, on the consumer side
                if batches % 10 == 0:
                    stats = [s for s in queue_stats() if s.fill is not None]
                    if stats:
                        fills.append(stats[-1].fill)
            wall = time.perf_counter() - t0
            rates.append(n / wall)
            cpu.append(100 * (time.process_time() - c0) / wall)
            row.batches_per_s = batches / wall
    row.runs = rates
    row.records_per_s = statistics.median(rates)
    row.mb_per_s = row.records_per_s * shape[0] * shape[1] * shape[2] / 1e6
    row.queue_fill = statistics.mean(fills) if fills else None
    row.cpu_percent = statistics.median(cpu)
    row.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


if __name__ == "__main__":  # one configuration, in its own process
    result = _measure(json.loads(sys.argv[1]))
    print(json.dumps(dataclasses.asdict(result)))
