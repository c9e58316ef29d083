"""A Beam job (queuekit's runner set-up, 2 worker processes) whose bundles never end on their
own, run as the CLI runs one: SIGTERM must end it, with its workers.

    python beam_blocked_job.py MARKER_DIR     # a file started-<pid> per busy worker
"""

import os
import sys
import time

import apache_beam as beam

from queuekit.cli.program import Terminated, signals_end_the_command
from queuekit.records.beam.job import pipeline_options, run_job


class Busy(beam.DoFn):
    """A bundle that takes two minutes (bounded: a broken test cannot hang forever)."""

    def __init__(self, marker_dir):
        self.marker_dir = marker_dir

    def process(self, element):
        open(os.path.join(self.marker_dir, f"started-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)
        yield element


if __name__ == "__main__":
    with signals_end_the_command():
        options, runner = pipeline_options("beam", 2, [])
        pipeline = beam.Pipeline(runner=runner, options=options)
        _ = (pipeline | beam.Create(range(8)) | beam.Reshuffle()
             | beam.ParDo(Busy(sys.argv[1])))
        try:
            run_job(pipeline, strict=True)
        except Terminated as e:
            sys.exit(128 + e.signum)
