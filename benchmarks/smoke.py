"""``--smoke``: a benchmark at its smallest size, to check that it still runs.

Every reproducible benchmark here takes it (``tests/test_benchmarks.py`` runs each one
so in CI's slow tier): a refactor cannot silently break one. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse


def parse(parser: argparse.ArgumentParser, argv=None, **tiny) -> argparse.Namespace:
    """``parser``'s arguments, with ``--smoke`` setting each of ``tiny`` (name=value)."""
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest size: checks that the benchmark runs (its numbers "
                             "mean nothing)")
    args = parser.parse_args(argv)
    if args.smoke:
        for name, value in tiny.items():
            setattr(args, name, value)
    return args
