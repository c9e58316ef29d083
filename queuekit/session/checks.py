"""The input checks of every session: the files its readers read, checked at start and at
the end of the input, whoever built the pipeline.

TensorFlow's readers end a file quietly at a record cut short, so a cut file
would be a short epoch. At start (and when runners are added) every TFRecord
file's framing is walked and every fixed-length file's size checked; their
sizes are noted, and at the end of the input a file whose size changed while
it was read is an error naming it. A stall on a reader whose files hold no
record is said so.
"""

from __future__ import annotations

from queuekit.errors import DatasetError
from queuekit.features import Feature
from queuekit.graph_keys import GraphKeys, graph_objects
from queuekit.records.files import check_files, check_sizes, resized, sizes
from queuekit.session.graph_files import empty_files, fixed_length_inputs, tfrecord_files


class InputChecks(Feature):
    """Framing and sizes at start, sizes at the end (see the module)."""

    name = "input_checks"

    def __init__(self, running) -> None:
        super().__init__(running)
        self._sizes: dict[str, int] = {}  # at start: a file cut or grown under a reader
        self._started = False

    def created(self, restored: str | None) -> None:
        self._check()
        if restored and not graph_objects(self.running.graph, GraphKeys.INPUT_POSITIONS):
            from queuekit.resume.restore import warn_unresumable  # only after a restore
            warn_unresumable(self.running.graph, set(), restored)

    def starting(self, runners) -> dict:
        if self._started and runners:  # runners added after the first run
            self._check()
        self._started = True
        return {}

    def _check(self) -> None:
        check_inputs(self.running.graph, self._sizes)

    def end_of_data(self, end: BaseException) -> None:
        """At the end of the input: raise if a file changed size while it was read."""
        changed = changed_while_read(self._sizes)
        if changed is not None:
            raise changed from end

    def describe_stall(self, ops: list) -> str:
        empty = empty_files(self.running.graph, ops)
        return f"; its input files hold no records: {', '.join(empty)}" if empty else ""


def check_inputs(graph, known: dict[str, int]) -> list[str]:
    """Check the framing of every TFRecord file and the size of every fixed-length file the
    graph's readers read (raising an error naming the file); add their sizes to ``known``.
    Returns the TFRecord files."""
    files = tfrecord_files(graph)
    check_files(files)
    records = list(files)
    for paths, record_bytes, header_bytes, footer_bytes in fixed_length_inputs(graph):
        check_sizes(paths, record_bytes, header_bytes, footer_bytes)
        files += paths
    known.update(sizes(f for f in files if f not in known))
    return records


def changed_while_read(known: dict[str, int]) -> DatasetError | None:
    """The error for the first file whose size is not what ``known`` noted at start."""
    changed = resized(known)
    if not changed:
        return None
    path, before, now = changed[0]
    return DatasetError(
        f"{path} changed while the pipeline read it ({before} bytes at the start, "
        + ("gone now" if now < 0 else f"{now} now")
        + "): the epoch did not read it as it is; the input ended early or late")
