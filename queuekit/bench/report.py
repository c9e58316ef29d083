"""The rows of a benchmark run: a table, JSON and a plot."""

from __future__ import annotations

import dataclasses
import json
import os

from queuekit.errors import MissingDependencyError

FAILED = "queuekit-bench-failed: "  # a child's line on stdout that gives its row's failure


@dataclasses.dataclass
class BenchRow:
    kind: str  # "queuekit" or one of REFERENCES' values
    readers: int | str | None  # "auto": tuned while it ran
    threads: int | None
    read_many: int | str | None  # None: one record per read; "batch": whole batches
    records_per_s: float | None = None
    mb_per_s: float | None = None
    batches_per_s: float | None = None
    queue_fill: float | None = None
    input_wait: float | None = None  # the share of step time spent waiting for the batch
    cpu_percent: float | None = None
    peak_rss_mb: float | None = None
    runs: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None
    consume: str = "graph"  # "graph" (reduce_sum in the step) or "numpy" (fetched)
    tuned: int | None = None  # with readers="auto": the active count it settled on
    tuning: list = dataclasses.field(default_factory=list)  # [at, from, to, rate, reason]
    prefetch: int = 0  # batches made ready ahead of the step (tfrecord_batches' prefetch)
    records: int | None = None  # with epochs: the records the whole run took

    @property
    def label(self) -> str:
        if self.kind != "queuekit":
            return self.kind
        readers = (f"auto({self.tuned if self.tuned is not None else '?'})"
                   if self.readers == "auto" else self.readers)
        ready = f" prefetch={self.prefetch}" if self.prefetch else ""
        return (f"readers={readers} threads={self.threads} read-many={self.read_many or 0}"
                + ready)


@dataclasses.dataclass
class BenchReport:
    """The rows of one :func:`benchmark` run; ``interrupted`` when Ctrl-C cut it short."""

    rows: list[BenchRow]
    machine: dict
    planned: int = 0  # configurations asked for; more than len(rows) when interrupted
    interrupted: bool = False
    spinning: bool = True  # the sessions' thread pools spun while idle (TensorFlow's default)
    load: int = 0  # processes burning a core each beside every row

    @property
    def best(self) -> BenchRow | None:
        """The fastest fixed-count queuekit row."""
        ok = [r for r in self.rows if r.kind == "queuekit" and r.records_per_s
              and r.readers != "auto"]
        return max(ok, key=lambda r: r.records_per_s or 0.0) if ok else None

    def reference(self, kind: str) -> BenchRow | None:
        return next((r for r in self.rows if r.kind == kind and r.records_per_s), None)

    def summary(self) -> str:
        best = self.best
        if best is None:
            return "best: no configuration ran"
        # Against tf.data at its best (vectorised: batch, then parse) when it ran: the
        # per-record form flatters a row that reads many records per step.
        ratios = [f"{(best.records_per_s or 0.0) / (ref.records_per_s or 1.0):.2f}x {kind}"
                  for kind in ("tf.data batch-then-parse", "tf.data", "seed-style")
                  if (ref := self.reference(kind))]
        extra = f"  ({', '.join(ratios)})" if ratios else ""
        lines = [f"best: {best.label}  {best.records_per_s:,.0f} rec/s{extra}"]
        for auto in (r for r in self.rows if r.readers == "auto" and r.records_per_s):
            lines.append(f"auto: {auto.label}  {auto.records_per_s:,.0f} rec/s  "
                         f"({(auto.records_per_s or 0.0) / (best.records_per_s or 1.0):.2f}x "
                         f"the best fixed row)")
        consumed = {r.consume for r in self.rows}
        lines.append("each batch is " + " or ".join(
            _CONSUMED.get(c, c) for c in sorted(consumed)))
        return "\n".join(lines)

    def table(self) -> str:
        head = ["configuration", "rec/s", "MB/s", "batch/s", "fill", "wait", "cpu%", "rss MB"]
        lines = []
        best = self.best
        for r in self.rows:
            if r.error:
                cells = [r.label, f"failed: {r.error}"]
            else:
                cells = [r.label, _f(r.records_per_s, 0), _f(r.mb_per_s, 1),
                         _f(r.batches_per_s, 1), _f(r.queue_fill, 2), _f(r.input_wait, 2),
                         _f(r.cpu_percent, 0),
                         _f(r.peak_rss_mb, 0)]
            lines.append(("* " if r is best else "  ", cells))
        widths = [max(len(c[i]) if i < len(c) else 0 for _, c in lines + [("", head)])
                  for i in range(len(head))]
        out = ["  " + "  ".join(h.rjust(w) if i else h.ljust(w)
                                for i, (h, w) in enumerate(zip(head, widths, strict=True)))]
        for mark, cells in lines:
            # A failed row has two cells: zip stops there.
            pairs = enumerate(zip(cells, widths, strict=False))
            out.append(mark + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs))
        tail = [_LEGEND, self.summary()]
        if not self.spinning:
            tail.append("every session ran with its thread pools' spinning off")
        if self.load:
            tail.append(f"under load: {self.load} other process(es) burning a core each "
                        f"beside every row ({self.machine.get('cores')} cores)")
        if self.interrupted:
            tail.append(f"interrupted: {len(self.rows)} of {self.planned} configurations ran")
        return "\n".join(out + tail)

    def to_json(self) -> str:
        return json.dumps({"machine": self.machine, "rows": [dataclasses.asdict(r) | {
            "label": r.label} for r in self.rows], "summary": self.summary(),
            "interrupted": self.interrupted, "spinning": self.spinning, "load": self.load},
            indent=2)

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
            if r.kind == "queuekit" and r.records_per_s and r.readers != "auto":
                lines.setdefault((r.threads, r.read_many or 0, r.prefetch), []).append(r)
        for (threads, many, ready), rows in sorted(lines.items(), key=lambda kv: str(kv[0])):
            rows.sort(key=lambda r: r.readers or 0)
            readers = [r.readers for r in rows]
            label = f"threads={threads} read-many={many}" + (f" prefetch={ready}" if ready else "")
            drawn = speed.plot(readers, [r.records_per_s for r in rows], "o-", label=label)
            fill.plot(readers, [r.queue_fill if r.queue_fill is not None else float("nan")
                                for r in rows], "o-", color=drawn[0].get_color())
        for kind, style in (("tf.data", "--"), ("seed-style", ":"), ("hand-written", "-.")):
            ref = self.reference(kind)
            if ref:
                speed.axhline(ref.records_per_s, color="gray", linestyle=style,
                              label=f"{kind} {ref.records_per_s:,.0f}")
        for r in self.rows:  # a tuned row has no reader count of its own: a line across
            if r.readers == "auto" and r.records_per_s:
                speed.axhline(r.records_per_s, color="green", linestyle="--",
                              label=f"{r.label} {r.records_per_s:,.0f}")
        speed.set_ylabel("records/s")
        speed.set_ylim(bottom=0)
        speed.legend(fontsize="small")
        speed.set_title(f"queuekit bench: {self.machine.get('cores')} cores, "
                        f"TF {self.machine.get('tensorflow')}")
        fill.set_ylabel("queue fill")
        fill.set_ylim(-0.05, 1.05)
        fill.set_xlabel("readers")
        fill.set_xticks(sorted({r.readers or 0 for rows in lines.values() for r in rows}))
        fig.savefig(os.fspath(path), dpi=100)


_CONSUMED = {"graph": "summed by the step in the graph (nothing fetched to Python)",
             "numpy": "fetched to numpy by the step"}
_LEGEND = """\
* the best fixed configuration: the most records per second
  rec/s, MB/s, batch/s: what the steps took; fill: the batch queue's mean fill (0 empty,
  1 full); wait: the share of a step's time spent waiting for its batch (these steps do
  no work, so near 1 is expected: the readers set the rate); cpu%: the process's CPU
  (100 = one core); rss MB: its peak memory"""


def _f(v, digits):
    return "-" if v is None else f"{v:,.{digits}f}"
