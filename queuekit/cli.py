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
import importlib.util
import logging
import os
import signal
import sys

from queuekit.arguments import (
    check_writable,
    counts_from_zero,
    ints,
    non_negative,
    number,
    positive,
    reader_counts,
    size,
)
from queuekit.program import Terminated, quiet_tensorflow, signals_end_the_command
from queuekit.version import __version__

log = logging.getLogger(__name__)


def _progress(args) -> bool:
    return not args.quiet and sys.stderr.isatty()


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
    p.set_defaults(func=_run_make)


def _run_make(args) -> int:
    from queuekit.records.folder import scan_image_folder
    from queuekit.records.writer import write_tfrecords

    folder = scan_image_folder(args.image_dir, shuffle=args.shuffle, seed=args.seed)
    report = write_tfrecords(folder, args.output, image_size=args.size,
                                encoding=args.encoding, schema=args.schema,
                                shards=args.shards,
                                workers=args.workers, overwrite=args.overwrite,
                                start_method=_start_method(),
                                strict=args.strict, progress=_progress(args))
    for path in report.outputs:
        print(path)
    print(report, file=sys.stderr)
    return 0


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
                           overwrite=args.overwrite, progress=_progress(args))
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


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure reader/thread counts beside tf.data",
                       description="Run every configuration of the grid in its own process and "
                                   "report median records/s, MB/s, queue fill, CPU and RSS.")
    p.add_argument("files", nargs="*", metavar="FILES")
    p.add_argument("--readers", type=reader_counts, default=[1, 2, 4],
                   help="reader counts, comma-separated; auto adds a row tuned while it runs")
    p.add_argument("--threads", type=ints, default=[1, 2])
    p.add_argument("--read-many", type=counts_from_zero, default=[0, 64])
    p.add_argument("--batch-size", type=positive, default=32)
    p.add_argument("--image-size", type=size, default=None,
                   help="N or HEIGHTxWIDTH to resize encoded images to (JPEG photos of "
                        "different sizes, as in Inception's records)")
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--seconds", type=number(0, strict=True), default=5.0)
    p.add_argument("--warmup-batches", type=non_negative, default=20)
    p.add_argument("--repeat", type=positive, default=3)
    p.add_argument("--step-ms", type=number(0, strict=False), default=0.0,
                   help="simulated training step per batch")
    p.add_argument("--consume", choices=["graph", "numpy"], default="graph",
                   help="every row uses the batch in the graph (a reduce_sum, default) or "
                        "fetches it to numpy like a loop calling sess.run(batch)")
    p.add_argument("--compare", default="tfdata,tfdata-map,seed",
                   help="reference rows, comma-separated, or none: tfdata (tf.data doing the "
                        "builders' work: decode in map, normalise after batch), tfdata-map "
                        "(tf.data normalising each record in map), seed (the seed's "
                        "read_and_decode), hand (the 1x1 graph run by a hand-written "
                        "Session/Coordinator loop), ceilings (the files' bytes read alone; "
                        "normalising an in-memory batch)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable results")
    p.add_argument("--plot", metavar="PATH",
                   help="write a PNG of records/s and queue fill against readers "
                        "(needs matplotlib: pip install 'queuekit[plot]')")
    p.add_argument("--synthetic", type=positive, metavar="N",
                   help="benchmark N generated images instead of FILES")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_run_bench)


def _run_bench(args) -> int:
    import tempfile

    from queuekit.bench import REFERENCES, benchmark
    from queuekit.demo import generate_images
    from queuekit.errors import MissingDependencyError
    from queuekit.records.writer import write_tfrecords

    compare = [c for c in args.compare.split(",") if c and c != "none"]
    bad = [c for c in compare if c not in REFERENCES]
    if bad or (not args.files and not args.synthetic):
        print(f"queuekit bench: error: give FILES or --synthetic N; --compare takes "
              f"{','.join(REFERENCES)} or none", file=sys.stderr)
        return 2
    # Everything that can be checked is checked before the long run, not after it.
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError("--plot needs matplotlib: pip install 'queuekit[plot]'")
    for path in (args.json, args.plot):
        if path:
            check_writable(path)
    if args.files:
        from queuekit.pipelines.decode import DecodeOptions
        from queuekit.pipelines.layout import record_layout
        from queuekit.records.files import check_files, expand_files

        files = expand_files(args.files)
        check_files(files)
        record_layout(files, decode=DecodeOptions(args.image_size))
    with tempfile.TemporaryDirectory(prefix="queuekit-bench-") as tmp:
        files = args.files
        if args.synthetic:
            generate_images(os.path.join(tmp, "images"), args.synthetic)
            files = write_tfrecords(os.path.join(tmp, "images"),
                                       os.path.join(tmp, "bench.tfrecords"),
                                       progress=_progress(args)).outputs
        report = benchmark(files, readers=args.readers, threads=args.threads,
                              read_many=[k or None for k in args.read_many],
                              batch_size=args.batch_size, shuffle=args.shuffle,
                              seconds=args.seconds, warmup_batches=args.warmup_batches,
                              repeat=args.repeat, step_ms=args.step_ms, compare=compare,
                              image_size=args.image_size, consume=args.consume,
                              progress=_progress(args))
    print(report.table())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(report.to_json())
    if args.plot and report.rows:
        report.plot(args.plot)
    if report.interrupted:
        print("queuekit bench: interrupted", file=sys.stderr)
        return 130
    if not any(r.records_per_s for r in report.rows):
        print("queuekit bench: error: no configuration ran", file=sys.stderr)
        return 1
    return 0


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

    return run_demo(args.workdir, args.images, bench=not args.no_bench, progress=_progress(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuekit",
        description="Safe and fast TF1 queue input pipelines, and the TFRecord tools around them.")
    parser.add_argument("--version", action="version", version=f"queuekit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_demo_parser, add_make_parser, add_export_parser, add_inspect_parser,
                add_bench_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return int(e.code or 0)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("queuekit")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    # Signals first: a SIGTERM during TensorFlow's import also exits 143.
    with signals_end_the_command(), quiet_tensorflow(args.verbose):
        from queuekit.errors import (
            BadRecordError,
            CorruptRecordError,
            ImageDecodeError,
            QueuekitError,
        )

        try:
            return int(func(args) or 0)
        except (ImageDecodeError, CorruptRecordError, BadRecordError) as e:  # bad data
            print(f"queuekit {args.command}: error: {e}", file=sys.stderr)
            return 1
        except (QueuekitError, OSError) as e:
            print(f"queuekit {args.command}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"queuekit {args.command}: interrupted", file=sys.stderr)
            return 130
        except Terminated as e:
            print(f"queuekit {args.command}: stopped by {signal.Signals(e.signum).name}",
                  file=sys.stderr)
            return 128 + e.signum
        finally:
            root.removeHandler(handler)
