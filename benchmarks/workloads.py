"""Workloads the benchmarks share (``docs/benchmarks.rst`` names them)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def workload_a(tmp: str, records: int, size: int = 256) -> list[str]:
    """Workload (a)'s files in ``tmp``: ``records`` generated images written by `make`
    (at ``size`` x ``size``: 64 gives the small records of workload (s))."""
    sys.path.insert(0, ROOT)
    import queuekit as qk
    from queuekit.demo import generate_images

    generate_images(os.path.join(tmp, "img"), records)
    return qk.write_tfrecords(os.path.join(tmp, "img"), os.path.join(tmp, "a.tfrecords"),
                              image_size=(size, size), shards=4, progress=False).outputs
