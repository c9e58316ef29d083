"""What the input profile's counts say: :class:`InputReport`, the figures and a one-line
verdict for one pipeline (``profile.py`` counts; loaded when a report is asked for)."""

from __future__ import annotations

import dataclasses

INPUT_BOUND = 0.5  # a step waiting this fraction of its time or more is input-bound
PARTLY = 0.1  # ... at least this fraction: partly


@dataclasses.dataclass(frozen=True)
class InputReport:
    """Where one pipeline's steps spent their time, over a window of the loop.

    Attributes:
        queue: the queue the steps take their batches from.
        steps: steps counted; ``seconds``: the time they covered, start to start, in
            ``intervals`` (one fewer than the steps in the first window).
        wait_fraction: the share of a step's time spent waiting for its batch
            (from sampled runs; None before a sample).
        fill: the queue's mean fill at the samples, 0 to 1 (None if unknown).
        records_per_step: records a sampled step took (its batch size).
        tuned: the queue's readers are ``num_readers="auto"``.
        ready: the queue holds batches made ready ahead of the step (``prefetch``).
        reads_many: its readers read many records a run (``read_many``, or ``"auto"``'s
            choice for small records), so each parse takes a vector of records.
    """

    queue: str
    steps: int
    seconds: float
    intervals: int
    wait_fraction: float | None
    fill: float | None
    records_per_step: float | None
    tuned: bool
    ready: bool = False
    reads_many: bool = False

    @property
    def records_per_sec(self) -> float | None:
        """Records the steps took per second: what the readers delivered to them."""
        if not self.records_per_step or self.seconds <= 0:
            return None
        return self.records_per_step * self.intervals / self.seconds

    @property
    def step_capacity(self) -> float | None:
        """Records per second the steps would take if every batch were ready."""
        rate = self.records_per_sec
        if rate is None or self.wait_fraction is None or self.wait_fraction >= 1:
            return None
        return rate / (1 - self.wait_fraction)

    @property
    def bound(self) -> str:
        """"input-bound", "partly input-bound", "step-bound" or "unknown"."""
        if self.wait_fraction is None:
            return "unknown"
        if self.wait_fraction >= INPUT_BOUND:
            return "input-bound"
        return "partly input-bound" if self.wait_fraction >= PARTLY else "step-bound"

    def scalars(self) -> dict[str, float]:
        """The figures as TensorBoard scalars, ``input/<queue>/<figure>``."""
        figures = {"wait_fraction": self.wait_fraction, "queue_fill": self.fill,
                   "records_per_sec": self.records_per_sec,
                   "step_capacity_records_per_sec": self.step_capacity}
        return {f"input/{self.queue}/{k}": float(v) for k, v in figures.items() if v is not None}

    def figures(self) -> str:
        """The verdict and its figures, with no advice."""
        if self.wait_fraction is None:
            return f"{self.queue}: no step sampled yet ({self.steps} steps)"
        fill = "" if self.fill is None else f", queue {self.fill:.0%} full"
        head = (f"{self.queue}: {self.bound}: steps waited for input {self.wait_fraction:.0%} "
                f"of their time{fill}")
        rate, capacity = self.records_per_sec, self.step_capacity
        if rate is None:
            return head
        if self.bound == "step-bound":
            return f"{head}; the steps take {rate:,.0f} rec/s and the readers keep up"
        return head + f"; the readers deliver {rate:,.0f} rec/s" + (
            "" if capacity is None else f", the steps could take {capacity:,.0f}")

    def __str__(self) -> str:
        text = self.figures()
        if self.wait_fraction is None or self.records_per_sec is None:
            return text
        if self.bound == "step-bound":
            return text + ("" if self.ready else "; qk.prefetched(batch, 2) takes the batch "
                           "out of its queue while the step runs")
        if not self.tuned:
            return text + "; try num_readers='auto' or more reader threads"
        if self.reads_many:  # nothing per record is left to batch: the parse is the work
            return text + ("; the readers are tuned ('auto') and read many records a run: "
                           "what is left is their parse and decode (records cheaper to "
                           "decode, or more cores)")
        return text + ("; the readers are tuned ('auto') and read one record a run: try "
                       "read_many=64 (a parse_fn then gets a vector of records: "
                       "tf.io.parse_example, tf.io.parse_sequence_example)")
