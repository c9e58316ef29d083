"""``make --runner beam``: the local ``make``'s dataset, written by an Apache Beam pipeline.

The launcher lists the folder, assigns labels and class names once, the same
way as the local writer, and writes one task line per image to a staging
folder beside the output. The pipeline reads the task lines, runs the local
writer's per-image function on the workers (:mod:`queuekit.records.beam_fn`)
and writes the shards with ``WriteToTFRecord`` into the staging folder. Only
once the job succeeded, and its shards hold exactly the records its counter
says were written, are the shards, the skipped list, the labels and (last)
the manifest moved into place: a failed job leaves nothing that looks like a
dataset. Paths go through Beam's file systems, so ``gs://`` and ``s3://``
work where the runner has them.

Locally (``--runner beam`` or ``DirectRunner``) the pipeline runs on Beam's
FnApiRunner, in ``multi_processing`` mode (``in_memory`` for one worker):
never ``multi_threading``, which was seen to lose records silently, and
never the Prism runner, which DirectRunner tries first by downloading it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import secrets
import shutil
import tempfile
import time

from queuekit.errors import (
    DatasetError,
    ImageDecodeError,
    MissingDependencyError,
    OutputExistsError,
)
from queuekit.records.commit import (
    SPOOL_PREFIX,
    check_output,
    commit,
    manifest_path,
    manifest_text,
    previous_dataset,
    remove_stale,
    skipped_path,
)
from queuekit.records.folder import ImageFolder, folder_from_listing, scan_image_folder
from queuekit.records.labels import labels_text
from queuekit.records.tfrecord import Corruption, scan_stream
from queuekit.records.writer import (
    WriteReport,
    check_listing,
    check_options,
    image_tasks,
    labels_path,
    shard_paths,
)

log = logging.getLogger(__name__)

INSTALL = "pip install 'queuekit[beam]'"
LOCAL_RUNNERS = ("beam", "DirectRunner")


@contextlib.contextmanager
def root_logger_kept():
    """Keep Beam off the root logger: its import and its options add a handler to it.

    A root logger without handlers gets a NullHandler meanwhile, which makes
    Beam's ``logging.basicConfig()`` a no-op; Beam's records then reach the
    program's own handlers, if it configured any, as any library's do.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    if not handlers:
        root.addHandler(logging.NullHandler())
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def import_beam():
    """(apache_beam, queuekit.records.beam_fn), or an error naming the extra to install."""
    with root_logger_kept():
        try:
            import apache_beam

            from queuekit.records import beam_fn
        except ImportError as e:
            raise MissingDependencyError(
                f"make --runner beam needs Apache Beam: {INSTALL} ({e})") from e
    return apache_beam, beam_fn


def write_tfrecords_beam(source, output, *, image_size=(256, 256), encoding: str | None = None,
                         schema: str = "queuekit", shards: int = 1, workers: int | None = None,
                         overwrite: bool = False, strict: bool = False, runner: str = "beam",
                         options=()) -> WriteReport:
    """:func:`~queuekit.records.writer.write_tfrecords` as a Beam pipeline on ``runner``.

    Args:
        runner: ``beam`` or ``DirectRunner`` (this machine, ``workers``
            processes), or any Beam runner's name (``DataflowRunner``,
            ``FlinkRunner``, ``SparkRunner``...).
        options: Beam pipeline flags (``["--project=p", "--region=r"]``),
            passed through to the runner.

    The other arguments are ``write_tfrecords``'s. The records equal, as a
    multiset, what the local writer writes; Beam decides which shard holds
    which record, and their order. Skipped images are counted (Beam metrics
    ``queuekit:skipped`` and ``queuekit:failed``) and listed, one JSON line each,
    in ``<output>.skipped.jsonl``.

    Raises:
        MissingDependencyError: Apache Beam is not installed.
        ImageDecodeError: with ``strict``, an unreadable image (the job fails).
        DatasetError: a bad option, a folder without images, or a job that failed
            or whose shards do not hold what it reported.
    """
    import_beam()
    with root_logger_kept():  # Beam's options call logging.basicConfig()
        return _write(source, output, image_size=image_size, encoding=encoding, schema=schema,
                      shards=shards, workers=workers, overwrite=overwrite, strict=strict,
                      runner=runner, options=options)


def _write(source, output, *, image_size, encoding, schema, shards, workers, overwrite, strict,
           runner, options) -> WriteReport:
    beam, _ = import_beam()
    height, width, encoding = check_options(image_size, encoding, schema, shards)
    workers = (os.cpu_count() or 1) if workers is None else max(1, int(workers))
    store = _Store(output)
    finals = (shard_paths(store.output, shards) + [skipped_path(store.output)]
              + [labels_path(store.output), manifest_path(store.output)])
    previous = store.previous(finals)
    if previous and not overwrite:
        raise OutputExistsError(f"output exists: {previous[0]} (use overwrite=True / "
                                f"--overwrite to replace the dataset)")
    folder = source if isinstance(source, ImageFolder) else _listed(os.fspath(source))
    check_listing(folder, strict)
    tasks = image_tasks(folder, (height, width), encoding, schema)
    pipeline_options, beam_runner = _options(runner, workers, options)
    started = time.monotonic()
    staging = store.staging()
    try:
        task_file = store.join(staging, "tasks.jsonl")
        store.write_text(task_file, "".join(_task_line(t) for t in tasks))
        stem, ext = os.path.splitext(os.path.basename(store.output))
        staged = [store.join(staging, os.path.basename(p)) for p in finals]
        pipeline = beam.Pipeline(runner=beam_runner, options=pipeline_options)
        _build(pipeline, task_file, store.join(staging, stem), ext or ".tfrecords", shards,
               staged[shards], strict)
        counters = _run(pipeline, strict)
        per_shard = [store.count_records(p) for p in staged[:shards]]
        skipped = [_skip(line) for line in store.read_text(staged[shards]).splitlines()]
        written = sum(per_shard)
        _check_counts(written, skipped, counters, len(tasks))
        if written == 0:
            raise DatasetError(f"{folder.root}: none of the {len(tasks)} images could be read "
                               f"(first: {skipped[0][0]}: {skipped[0][1]})")
        store.write_text(staged[shards + 1], labels_text(folder.class_names))
        store.write_text(staged[shards + 2], manifest_text(
            shards=finals[:shards], records=per_shard, labels=finals[shards + 1],
            classes=list(folder.class_names), image_size=(height, width), encoding=encoding,
            schema=schema))
        store.commit(list(zip(staged, finals, strict=True)), previous)  # the manifest last
    finally:
        store.remove(staging)
    gone = {path for path, _ in skipped}
    per_class = collections.Counter(t[4] for t in tasks if t[0] not in gone)
    return WriteReport(written, skipped, finals[:shards], finals[shards + 1],
                       list(folder.class_names), store.size(finals[:shards]),
                       time.monotonic() - started, dict(per_class))


def _build(pipeline, task_file: str, prefix: str, suffix: str, shards: int, skipped_list: str,
           strict: bool) -> None:
    """Tasks -> encoded records -> shards; skipped and failed images -> the skipped list."""
    beam, beam_fn = import_beam()
    from apache_beam.io.filesystem import CompressionTypes

    lines = (pipeline | "tasks" >> beam.io.ReadFromText(task_file)
             | "spread" >> beam.Reshuffle())  # else one worker may get every line
    encode = beam.ParDo(beam_fn.EncodeImage(strict)).with_outputs(beam_fn.SKIPPED,
                                                                  main="records")
    if strict:
        out = lines | "encode" >> encode
    else:
        out = lines | "encode" >> encode.with_exception_handling(dead_letter_tag="failed")
    out.records | "write" >> beam.io.WriteToTFRecord(
        prefix, file_name_suffix=suffix, num_shards=shards,
        shard_name_template="" if shards == 1 else None,
        compression_type=CompressionTypes.UNCOMPRESSED)
    listed = out[beam_fn.SKIPPED] | "skipped" >> beam.Map(beam_fn.skipped_line)
    if not strict:
        failed = out.failed | "failed" >> beam.Map(beam_fn.failed_line)
        listed = (listed, failed) | "all skipped" >> beam.Flatten()
    listed | "list skipped" >> beam.io.WriteToText(skipped_list, num_shards=1,
                                                   shard_name_template="")


def _listed(root: str) -> ImageFolder:
    if "://" not in root:
        return scan_image_folder(root)
    from apache_beam.io.filesystems import FileSystems

    base = root.rstrip("/") + "/"
    found = FileSystems.match([base + "**"])[0].metadata_list
    return folder_from_listing(root, [m.path[len(base):] for m in found
                                      if m.path.startswith(base)])


def _task_line(task) -> str:
    import json

    return json.dumps(list(task)) + "\n"  # ASCII: undecodable names kept as \udcXX escapes


def _skip(line: str) -> tuple[str, str]:
    import json

    item = json.loads(line)
    return item["path"], item["reason"]


def _options(runner: str, workers: int, flags):
    """(PipelineOptions, the runner object or name) for ``runner`` and the user's flags."""
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        WorkerOptions,
    )

    flags = list(flags)
    options = PipelineOptions(flags)
    if runner not in LOCAL_RUNNERS:
        return options, runner
    given = {f.split("=")[0] for f in flags}
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise DatasetError("direct_running_mode=multi_threading is refused: Beam's threaded "
                           "mode was seen to lose records silently; use multi_processing "
                           "(the default) or in_memory")
    if "--default_sdk_harness_log_level" not in given:  # workers' INFO lines, on our stderr
        options.view_as(WorkerOptions).default_sdk_harness_log_level = "WARNING"
    if "--direct_num_workers" not in given:
        direct.direct_num_workers = workers
    if "--direct_running_mode" not in given:
        direct.direct_running_mode = ("in_memory" if direct.direct_num_workers == 1
                                      else "multi_processing")
    # What DirectRunner runs a batch pipeline on once it gave up on Prism (which it
    # would first try to download): the FnApiRunner, with the options for its workers.
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return options, fn_runner.FnApiRunner(provision_info=info)


def _run(pipeline, strict: bool) -> dict[str, int]:
    """Run the job to its end; the queuekit counters it committed."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.runner import PipelineState

    from queuekit.records.beam_fn import NAMESPACE

    try:
        result = pipeline.run()
        state = result.wait_until_finish()
    except Exception as e:
        text = str(e)
        marker = "ImageSkipped: "
        if strict and marker in text:  # the worker's exception arrives as text
            raise ImageDecodeError(text[text.index(marker) + len(marker):].splitlines()[0]) from e
        raise DatasetError(f"the Beam job failed: {text.splitlines()[0] if text else e!r}") from e
    if state != PipelineState.DONE:
        raise DatasetError(f"the Beam job ended {state}, not DONE: nothing was written")
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    return counters


def _check_counts(written: int, skipped, counters: dict[str, int], tasks: int) -> None:
    """Fail unless every task is in the shards or the skipped list, once."""
    reported = counters.get("written")
    if reported is not None and reported != written:
        raise DatasetError(f"the Beam job reported {reported} records written but its shards "
                           f"hold {written}: nothing was put in place")
    if written + len(skipped) != tasks:
        raise DatasetError(f"the Beam job accounted for {written + len(skipped)} of {tasks} "
                           f"images ({written} written, {len(skipped)} skipped): nothing was "
                           f"put in place")


class _Store:
    """The output's file system: the local one (atomic commit), or one of Beam's."""

    def __init__(self, output):
        text = os.fspath(output)
        self.remote = "://" in text
        self.output = text if self.remote else check_output(text)
        from apache_beam.io.filesystems import FileSystems

        self.fs = FileSystems
        self.folder = self.fs.split(self.output)[0]

    def previous(self, finals: list[str]) -> list[str]:
        if not self.remote:
            remove_stale(self.folder, [os.path.basename(f) for f in finals])
            return previous_dataset(self.output)
        stem, ext = os.path.splitext(self.output)
        patterns = [self.output + s for s in ("", ".labels.txt", ".manifest.json",
                                              ".skipped.jsonl")]
        patterns.append(f"{stem}-?????-of-?????{ext or '.tfrecords'}")
        found = self.fs.match(patterns)
        return sorted(m.path for r in found for m in r.metadata_list)

    def staging(self) -> str:
        if not self.remote:
            return tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=self.folder)
        path = self.join(self.folder, f"{SPOOL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
        self.fs.mkdirs(path)
        return path

    def join(self, folder: str, name: str) -> str:
        return os.path.join(folder, name) if not self.remote else self.fs.join(folder, name)

    def write_text(self, path: str, text: str) -> None:
        with self.fs.create(path) as f:
            f.write(text.encode("utf-8", "surrogateescape"))

    def read_text(self, path: str) -> str:
        with self._open(path) as f:
            return f.read().decode("utf-8", "surrogateescape")

    def count_records(self, path: str) -> int:
        n = 0
        with self._open(path) as f:
            for item in scan_stream(f, data=True):
                if isinstance(item, Corruption):
                    raise DatasetError(f"{path}: record {item.index} (offset {item.offset}) "
                                       f"written by the Beam job is bad: {item.reason}")
                n += 1
        return n

    def _open(self, path: str):
        from apache_beam.io.filesystem import CompressionTypes

        return self.fs.open(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def commit(self, moves: list[tuple[str, str]], previous: list[str]) -> None:
        if not self.remote:
            commit(moves, previous)
            return
        # Object stores have no atomic rename: the old dataset goes first and the
        # manifest comes last, so a dataset without its manifest is not complete.
        if previous:
            self.fs.delete(previous)
        for src, dst in moves:
            self.fs.rename([src], [dst])

    def remove(self, staging: str) -> None:
        if not self.remote:
            shutil.rmtree(staging, ignore_errors=True)
            return
        try:
            self.fs.delete([staging + "/"])
        except Exception as e:  # a clean-up must not hide the job's own error
            log.warning("could not remove the staging folder %s: %s", staging, e)

    def size(self, paths: list[str]) -> int:
        return sum(m.size_in_bytes for r in self.fs.match(paths) for m in r.metadata_list)
