"""``queuekit run``: a TF1 program, unchanged, with queuekit installed into TensorFlow.

As ``python -m cProfile`` and ``coverage run`` do: the program gets its own
``sys.argv``, runs as ``__main__`` (``-m``: as a module, relative imports work),
with its script's folder first on ``sys.path``, and its exit status is its own,
except that a runner error that never ended the program makes a success exit 1.
Its exceptions (Ctrl-C's ``KeyboardInterrupt`` too) leave as they would have left it.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys


def add_run_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="run a TF1 program unchanged, with queuekit's guarantees",
        description="Run a TF1 queue-runner program as it is, with queuekit installed into "
                    "TensorFlow: a runner's error named and never lost, Ctrl-C while blocked, "
                    "stalls, threads joined. See docs/run.rst.",
        usage="queuekit run [options] (SCRIPT | -m MODULE) [ARGS...]")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    p.add_argument("--stall-timeout", type=float, default=60.0, metavar="SECS",
                   help="a run blocked this long with no element entering its queues raises "
                        "PipelineStalled (default 60; 0: never)")
    p.add_argument("--join-timeout", type=float, default=5.0, metavar="SECS",
                   help="how long a session's close waits for its runner threads (default 5)")
    p.add_argument("--report", action="store_true",
                   help="the input report of each session on stderr when it stops: the share "
                        "of step time spent waiting for input, each queue's fill and rate, "
                        "the verdict and the stage to widen")
    p.add_argument("--report-every", type=float, default=None, metavar="SECS",
                   help="the report every SECS seconds too (implies --report)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="give each runner that tf.train.batch / shuffle_batch made N threads "
                        "instead of its num_threads (what queuekit bench --program varies)")
    # A child of `queuekit bench --program`: its window, then the figures as JSON.
    p.add_argument("--bench-window", nargs=3, metavar=("WARMUP", "SECS", "PATH"),
                   default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-input-checks", dest="check_inputs", action="store_false",
                   help="do not walk the input files' framing when the runners start")
    p.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS",
                   help="the program and its arguments")
    p.set_defaults(func=run_program)


_VALUED = ("--stall-timeout", "--join-timeout", "--report-every", "--threads")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``run``'s own options, and the program with its arguments (``-m MODULE`` ends ours:
    what follows is the module's, options too)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[:i + 2], argv[i + 2:]
        if arg in _VALUED:
            i += 2
        elif arg == "--bench-window":
            i += 4
        elif arg.startswith(tuple(v + "=" for v in _VALUED)) or arg in (
                "--no-input-checks", "--report", "-h", "--help"):
            i += 1
        elif arg == "--":
            return argv[:i], argv[i + 1:]
        else:
            break
    return argv[:i], argv[i:]


def run_program(args) -> int:
    """Run the program; returns its exit status (raises what it raised, after clean-up)."""
    if args.module is None and not args.target:
        print("queuekit run: error: give a SCRIPT or -m MODULE", file=sys.stderr)
        return 2
    if args.module is None and not os.path.isfile(args.target[0]):
        print(f"queuekit run: error: no such file: {args.target[0]}", file=sys.stderr)
        return 2
    from queuekit.session.install import install, report, uninstall

    if args.module is not None:
        sys.argv = [args.module, *args.target]  # run_module puts the module's file first
        sys.path[0] = os.getcwd()
    else:
        sys.argv = list(args.target)
        sys.path[0] = os.path.dirname(os.path.abspath(args.target[0]))
    from queuekit.session.program_report import BenchDone, BenchWindow

    window = None
    if args.bench_window:
        warmup, seconds, path = args.bench_window
        window = BenchWindow(float(warmup), float(seconds), path)
    guard = install(stall_timeout_secs=args.stall_timeout, join_timeout_secs=args.join_timeout,
                    check_inputs=args.check_inputs, report=args.report,
                    report_every_secs=args.report_every, threads=args.threads, window=window)
    if window is not None:
        window.about = {"threads": args.threads, "varied": guard.varied, "fixed": guard.fixed}
    status, exiting = 0, None  # type: int, BaseException | None
    try:
        if args.module is not None:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args.target[0], run_name="__main__")
    except SystemExit as e:
        status, exiting = _status(e), e
    except BenchDone as e:  # the bench's window is over: the program ran as far as it needed
        exiting = e
    except BaseException as e:  # the program's: raised again once its threads are stopped
        try:
            report(guard.finish(e))
        finally:
            uninstall()
        raise
    try:
        missed = guard.finish(exiting)
        report(missed)
    finally:
        uninstall()
    return 1 if missed and status == 0 else status


def _status(e: SystemExit) -> int:
    """The exit status Python gives ``sys.exit(code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1
