"""``queuekit bench``'s command line: its arguments, and the run that prints the table."""

from __future__ import annotations

import importlib.util
import os
import sys

from queuekit.cli.arguments import (
    check_writable,
    ints,
    non_negative,
    number,
    positive,
    read_counts,
    reader_counts,
    show_progress,
    size,
)


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure reader/thread counts beside tf.data",
                       description="Run every configuration of the grid in its own process and "
                                   "report median records/s, MB/s, queue fill, CPU and RSS.")
    p.add_argument("files", nargs="*", metavar="FILES")
    p.add_argument("--readers", type=reader_counts, default=[1, 2, 4],
                   help="reader counts, comma-separated; auto adds a row tuned while it runs")
    p.add_argument("--threads", type=ints, default=None,
                   help="batching threads, comma-separated (default 1,2; with --program "
                        "1,2,4)")
    p.add_argument("--program", metavar='"SCRIPT ARGS..."',
                   help="benchmark a TF1 program's own pipeline instead of FILES: the program "
                        "as written, then with each --threads count given to the runners "
                        "batch/shuffle_batch made, each run by `queuekit run` for --seconds "
                        "after --warmup-secs (it runs the program: point its outputs at a "
                        "scratch folder)")
    p.add_argument("--warmup-secs", type=number(0, strict=False), default=2.0,
                   help="with --program: seconds of steps before the window")
    p.add_argument("--read-many", type=read_counts, default=[0, 64, "batch"],
                   help="records per read, comma-separated: 0 is one, batch a whole batch "
                        "queued as it is (read_many='batch')")
    p.add_argument("--prefetch", type=lambda text: ints(text, 0), default=None,
                   help="batches made ready ahead of the step, comma-separated "
                        "(tfrecord_batches' prefetch; by default its default: 2 for auto "
                        "readers, else 0)")
    p.add_argument("--batch-size", type=positive, default=32)
    p.add_argument("--image-size", type=size, default=None,
                   help="N or HEIGHTxWIDTH to resize encoded images to (JPEG photos of "
                        "different sizes, as in Inception's records)")
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--seconds", type=number(0, strict=True), default=5.0)
    p.add_argument("--warmup-batches", type=non_negative, default=20)
    p.add_argument("--repeat", type=positive, default=3)
    p.add_argument("--epochs", type=positive, default=None,
                   help="time each row's whole run of N passes over the files instead "
                        "(from its graph's build to its end of data: a short job's rate, "
                        "with what an 'auto' count spends finding itself)")
    p.add_argument("--step-ms", type=number(0, strict=False), default=0.0,
                   help="simulated training step per batch")
    p.add_argument("--consume", choices=["graph", "numpy"], default="graph",
                   help="every row uses the batch in the graph (a reduce_sum, default) or "
                        "fetches it to numpy like a loop calling sess.run(batch)")
    p.add_argument("--compare", default="tfdata-batched,tfdata,seed",
                   help="reference rows, comma-separated, or none (default: tfdata-batched,"
                        "tfdata,seed): tfdata (tf.data doing the "
                        "builders' work: decode in map, normalise after batch), tfdata-batched "
                        "(tf.data vectorised: batch, then parse together), tfdata-map "
                        "(tf.data normalising each record in map), seed (the seed's "
                        "read_and_decode), hand (the 1x1 graph run by a hand-written "
                        "Session/Coordinator loop), ceilings (the files' bytes read alone; "
                        "normalising an in-memory batch)")
    p.add_argument("--no-spinning", dest="spinning", action="store_false",
                   help="run every session with its thread pools' spinning off (TensorFlow's "
                        "config.experimental.disable_thread_spinning): on few cores, the "
                        "readers of an input-bound loop get the CPU idle pool threads spun on")
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="run N other processes, each burning a core, beside every row: how "
                        "each configuration holds up on a machine it shares (default 0)")
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
    from queuekit.records.make.writer import write_tfrecords

    if args.program:
        return _bench_program(args)
    args.threads = args.threads or [1, 2]
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
                                       progress=show_progress(args)).outputs
        report = benchmark(files, readers=args.readers, threads=args.threads,
                              read_many=[k or None for k in args.read_many],
                              prefetch=args.prefetch or [None],
                              batch_size=args.batch_size, shuffle=args.shuffle,
                              seconds=args.seconds, warmup_batches=args.warmup_batches,
                              repeat=args.repeat, step_ms=args.step_ms, compare=compare,
                              image_size=args.image_size, consume=args.consume,
                              spinning=args.spinning, epochs=args.epochs,
                              load=args.load, progress=show_progress(args))
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


def _bench_program(args) -> int:
    from queuekit.bench.program import bench_program

    if args.files or args.synthetic:
        print("queuekit bench: error: --program runs a program's own pipeline: give no FILES "
              "or --synthetic", file=sys.stderr)
        return 2
    try:
        report = bench_program(args.program, args.threads or [1, 2, 4], seconds=args.seconds,
                               warmup=args.warmup_secs, repeat=args.repeat,
                               progress=show_progress(args))
    except RuntimeError as e:  # the program failed: its own output says why
        print(f"queuekit bench: error: {e}", file=sys.stderr)
        return 1
    print(report.table())
    if report.interrupted:
        print("queuekit bench: interrupted", file=sys.stderr)
        return 130
    return 0 if report.best is not None else 1
