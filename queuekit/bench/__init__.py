"""``queuekit bench``: records/s of reader/thread configurations beside tf.data and the seed."""

from queuekit.bench.report import BenchReport, BenchRow
from queuekit.bench.run import REFERENCES, benchmark, machine_info

__all__ = ["BenchReport", "BenchRow", "REFERENCES", "benchmark", "machine_info"]
