"""What Beam's workers run for ``make --runner beam``: the local writer's per-image function.

Workers import this module when they unpickle :class:`EncodeImage`: it
imports Beam, Pillow, numpy and queuekit's encoder, and no TensorFlow (nor
``queuekit.errors``, whose errors subclass TensorFlow's), so a worker pays no
TensorFlow import and needs no TensorFlow installed.
"""

from __future__ import annotations

import io
import json

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from queuekit.records.make.workers import encode_example

NAMESPACE = "queuekit"
SKIPPED = "skipped"  # the tag of the images the encoder skipped, with its reason


class ImageSkipped(ValueError):
    """With ``--strict``: an image the writer cannot read; ``path: reason``, and the job fails."""


class EncodeImage(beam.DoFn):
    """A task line (JSON, see ``records.make.writer.image_tasks``) -> a serialized Example.

    An image the local writer would skip goes to the :data:`SKIPPED` output
    as (path, reason), or with ``strict`` fails the job. Anything else raised
    (a read error of the file system, say) is left to Beam: the launcher
    routes it to a dead-letter output.
    """

    def __init__(self, strict: bool):
        self.strict = strict
        self.written = Metrics.counter(NAMESPACE, "written")
        self.skipped = Metrics.counter(NAMESPACE, "skipped")

    def process(self, line: str):
        task = json.loads(line)
        task[1] = tuple(task[1])
        path = task[0]
        source = None
        if "://" in path:  # Pillow opens local paths itself, faster than through Beam
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                source = io.BytesIO(f.read())
        example, reason = encode_example(tuple(task), source)
        if example is None:
            if self.strict:
                raise ImageSkipped(f"{path}: {reason}")
            self.skipped.inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, (path, reason))
            return
        self.written.inc()
        yield example


def failed_line(bad) -> str:
    """A dead-letter element (task line, (type, repr, traceback lines)) -> a skipped-list line."""
    line, (_, _, trace) = bad
    Metrics.counter(NAMESPACE, "failed").inc()
    return skipped_line((json.loads(line)[0], trace[-1].strip()))


def skipped_line(item) -> str:
    path, reason = item
    return json.dumps({"path": path, "reason": reason})
