"""The ``queuekit`` command line: one ``add_<name>_parser`` per subcommand.

Exit codes, the same for every subcommand: 0 success; 1 bad data (a corrupt
or malformed record, an unreadable image or folder under ``--strict``,
``inspect`` finding either); 2 usage or input errors (bad arguments, missing
inputs, an output that exists or cannot be written); 128 + the signal's
number when stopped by one (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), with
nothing left half-written.

The CLI is a program, not the library: it quiets TensorFlow's start-up log
(``TF_CPP_MIN_LOG_LEVEL=2`` and its Python logger at ERROR) for its own
process and children, unless ``-v`` is given or the variable is already set.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from queuekit.cli.arguments import (
    beam_option,
    check_beam_flags,
    positive,
    show_progress,
    size,
)
from queuekit.cli.bench import add_bench_parser
from queuekit.cli.program import (
    Terminated,
    ignore_ending_signals,
    quiet_tensorflow,
    signals_end_the_command,
)
from queuekit.cli.run import add_run_parser
from queuekit.version import __version__

log = logging.getLogger(__name__)


def add_make_parser(sub) -> None:
    p = sub.add_parser("make", help="image folder -> TFRecord",
                       description="Write a class-per-folder image tree to TFRecord file(s).")
    p.add_argument("image_dir", help="root folder: IMAGE_DIR/<class>/<image>")
    p.add_argument("output", help="output .tfrecords path (shards derive their names from it)")
    p.add_argument("--size", type=size, default=(256, 256),
                   help="N or HEIGHTxWIDTH each image is resized to (default 256)")
    p.add_argument("--encoding", choices=["raw", "jpeg", "png"], default=None,
                   help="image bytes: raw RGB (the seed's format, default), jpeg (the "
                        "default of --schema inception) or png")
    p.add_argument("--schema", choices=["queuekit", "inception"], default="queuekit",
                   help="record layout: queuekit's (the seed's features and more, default) "
                        "or Inception/Slim's build_image_data.py (image/encoded, labels from 1)")
    p.add_argument("--shards", type=positive, default=1)
    p.add_argument("--workers", type=positive, default=None,
                   help="decode processes (default: one per core)")
    p.add_argument("--shuffle", action="store_true", help="shuffle the image order")
    p.add_argument("--seed", type=int, default=None, help="seed of --shuffle")
    p.add_argument("--strict", action="store_true", help="fail on the first unreadable image")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--runner", default="local",
                   help="local (default: worker processes on this machine), beam (Apache "
                        "Beam on this machine, --workers processes) or a Beam runner's name: "
                        "DataflowRunner, FlinkRunner, SparkRunner... (needs queuekit[beam]); "
                        "Beam's pipeline flags go after --")
    p.add_argument("--beam-option", action="append", default=[], type=beam_option,
                   metavar="KEY=VALUE", help="a Beam pipeline option, as --KEY=VALUE (repeatable)")
    p.set_defaults(func=_run_make)


def _run_make(args) -> int:
    if args.runner == "local":
        from queuekit.records.folder import scan_image_folder
        from queuekit.records.make.writer import write_tfrecords

        folder = scan_image_folder(args.image_dir, shuffle=args.shuffle, seed=args.seed)
        report = write_tfrecords(folder, args.output, image_size=args.size,
                                 encoding=args.encoding, schema=args.schema, shards=args.shards,
                                 workers=args.workers, overwrite=args.overwrite,
                                 start_method=_start_method(),
                                 strict=args.strict, progress=show_progress(args))
    else:
        report = _make_with_beam(args, args.beam_option + args.passthrough)
    for path in report.outputs:
        print(path)
    print(report, file=sys.stderr)
    return 0


def _make_with_beam(args, flags):
    from queuekit.records.beam.launch import write_tfrecords_beam

    beam_log = logging.getLogger("apache_beam")
    level = beam_log.level
    if not args.verbose:  # the workers' logs: Beam's chatter, and tracebacks of skipped images
        flags = ["--default_sdk_harness_log_level=CRITICAL", *flags]
        beam_log.setLevel(logging.ERROR)
    try:
        return write_tfrecords_beam(args.image_dir, args.output, image_size=args.size,
                                    encoding=args.encoding, schema=args.schema,
                                    shards=args.shards, workers=args.workers,
                                    overwrite=args.overwrite, strict=args.strict,
                                    runner=args.runner, options=flags)
    finally:
        beam_log.setLevel(level)


def _start_method() -> str | None:
    # QUEUEKIT_START_METHOD=fork compares the start methods (README, make).
    return os.environ.get("QUEUEKIT_START_METHOD") or None


def add_export_parser(sub) -> None:
    p = sub.add_parser("export", help="TFRecord -> image folder",
                       description="Write every record's image to OUT_DIR/<label>/<index>.<ext>.")
    p.add_argument("tfrecords", nargs="+", metavar="TFRECORD")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--format", choices=["jpg", "png"], default="jpg")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what a previous export wrote in OUT_DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_export)


def _run_export(args) -> int:
    from queuekit.records.export import export_images

    report = export_images(args.tfrecords, args.out_dir, format=args.format,
                           overwrite=args.overwrite, progress=show_progress(args))
    print(report)
    return 0


def add_inspect_parser(sub) -> None:
    p = sub.add_parser("inspect", help="count records, features, labels; find corruption",
                       description="Report on TFRecord files; exit 1 when a record is corrupt "
                                   "or not a tf.train.Example.")
    p.add_argument("tfrecords", nargs="+", metavar="TFRECORD")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run_inspect)


def _run_inspect(args) -> int:
    from queuekit.records.inspect import inspect_tfrecords

    report = inspect_tfrecords(args.tfrecords)
    print(report.to_json() if args.json else report)
    return 1 if report.bad else 0


def add_demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="the whole job on generated data",
                       description="Generate an image folder, make TFRecords, read one epoch "
                                   "exactly once, export, and run a short bench.")
    p.add_argument("--workdir", default="queuekit-demo")
    p.add_argument("--images", type=positive, default=600)
    p.add_argument("--no-bench", action="store_true", help="skip the short benchmark")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_run_demo)


def _run_demo(args) -> int:
    from queuekit.demo import run_demo

    return run_demo(args.workdir, args.images, bench=not args.no_bench,
                    progress=show_progress(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuekit",
        description="Safe and fast TF1 queue input pipelines, and the TFRecord tools around them.")
    parser.add_argument("--version", action="version", version=f"queuekit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_demo_parser, add_make_parser, add_export_parser, add_inspect_parser,
                add_bench_parser, add_run_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # With make --runner, everything after "--" is for Beam's pipeline options; any
    # other "--" is argparse's own (a file name that starts with "-").
    cut = argv.index("--") if "--" in argv else len(argv)
    passthrough = []
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "run" and any(a == "--runner" or a.startswith("--runner=")
                                for a in argv[:cut]):
        argv, passthrough = argv[:cut], argv[cut + 1:]
    target = None
    if command == "run":  # the program's arguments are its own, options or not
        from queuekit.cli.run import split_argv

        at = argv.index("run") + 1
        ours, target = split_argv(argv[at:])
        argv = argv[:at] + ours
    try:
        args = parser.parse_args(argv)
        if target is not None:
            args.target = target
        args.passthrough = passthrough
        check_beam_flags(parser, args)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return int(e.code or 0)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command != "run":  # a program run keeps its own streams
        _tolerant_output()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("queuekit")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.command == "run":  # the program's own signals, TF logging and exceptions
        try:
            return args.func(args)
        finally:
            root.removeHandler(handler)
    try:
        # Signals first: a SIGTERM during TensorFlow's import also exits 143.
        # A local make, export and inspect need no TensorFlow (they read and write records
        # themselves; only a corrupt record's error class loads it).
        load = not (args.command in ("export", "inspect")
                    or (args.command == "make" and args.runner == "local"))
        with signals_end_the_command(), quiet_tensorflow(args.verbose, load=load):
            return _run(func, args)
    except KeyboardInterrupt:
        ignore_ending_signals()
        print(f"queuekit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        ignore_ending_signals()
        print(f"queuekit {args.command}: stopped by {signal.Signals(e.signum).name}",
              file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:
        # The reader went away (`queuekit inspect d | head -1`): end quietly, as Unix tools
        # do on SIGPIPE, and let nothing flush into the closed pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    finally:
        root.removeHandler(handler)


def _run(func, args) -> int:
    """The subcommand, with its errors turned into the documented exit codes."""
    import queuekit.errors as errors

    try:
        return int(func(args) or 0)
    except BrokenPipeError:
        raise
    except (errors.QueuekitError, OSError) as e:
        print(f"queuekit {args.command}: error: {e}", file=sys.stderr)
        # CorruptRecordError exists once TensorFlow is loaded (a make never loads it).
        corrupt = vars(errors).get("CorruptRecordError")
        bad_data = (errors.ImageDecodeError, errors.BadRecordError,
                    errors.UnreadableFolderError) + ((corrupt,) if corrupt else ())
        return 1 if isinstance(e, bad_data) else 2


def _tolerant_output() -> None:
    """Print any path: a file name that is not UTF-8 (kept as surrogates) goes out as its own
    bytes on a UTF-8 stream, and as an escape on another, instead of a UnicodeEncodeError
    after the work is done (``PYTHONIOENCODING=utf-8:strict``)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None or getattr(stream, "errors", "") != "strict":
            continue
        utf8 = (getattr(stream, "encoding", "") or "").lower().replace("-", "") == "utf8"
        try:
            reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")
        except (ValueError, OSError):
            pass
