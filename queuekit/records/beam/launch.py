"""``make --runner beam``: the local ``make``'s dataset, written by an Apache Beam pipeline.

The launcher lists the folder, assigns labels and class names once, the same
way as the local writer, and writes one task line per image to a staging
folder beside the output. The pipeline reads the task lines, runs the local
writer's per-image function on the workers (:mod:`queuekit.records.beam.fn`)
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
import json
import os
import time

from queuekit.errors import DatasetError, OutputExistsError
from queuekit.records.beam.job import (
    build_pipeline,
    import_beam,
    pipeline_options,
    root_logger_kept,
    run_job,
)
from queuekit.records.beam.store import OutputStore
from queuekit.records.folder import ImageFolder, folder_from_listing, scan_image_folder
from queuekit.records.make.commit import manifest_path, manifest_text, skipped_path
from queuekit.records.make.labels import labels_text
from queuekit.records.make.writer import (
    WriteReport,
    check_listing,
    check_options,
    image_tasks,
    labels_path,
    shard_paths,
)


def write_tfrecords_beam(source, output, *, image_size=(256, 256), encoding: str | None = None,
                         schema: str = "queuekit", shards: int = 1, workers: int | None = None,
                         overwrite: bool = False, strict: bool = False, runner: str = "beam",
                         options=()) -> WriteReport:
    """:func:`~queuekit.records.make.writer.write_tfrecords` as a Beam pipeline on ``runner``.

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
    store = OutputStore(output)
    with store.locked():  # one make per output, as the local writer
        finals = (shard_paths(store.output, shards) + [skipped_path(store.output)]
                  + [labels_path(store.output), manifest_path(store.output)])
        previous = store.previous(finals)
        if previous and not overwrite:
            raise OutputExistsError(f"output exists: {previous[0]} (use overwrite=True / "
                                    f"--overwrite to replace the dataset)")
        folder = source if isinstance(source, ImageFolder) else _listed(os.fspath(source))
        check_listing(folder, strict)
        tasks = image_tasks(folder, (height, width), encoding, schema)
        options, beam_runner = pipeline_options(runner, workers, options)
        started = time.monotonic()
        staging = store.staging()
        try:
            task_file = store.join(staging, "tasks.jsonl")
            store.write_text(task_file, "".join(_task_line(t) for t in tasks))
            stem, ext = os.path.splitext(os.path.basename(store.output))
            staged = [store.join(staging, os.path.basename(p)) for p in finals]
            pipeline = beam.Pipeline(runner=beam_runner, options=options)
            build_pipeline(pipeline, task_file, store.join(staging, stem), ext or ".tfrecords",
                           shards, staged[shards], strict)
            counters = run_job(pipeline, strict)
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


def _listed(root: str) -> ImageFolder:
    if "://" not in root:
        return scan_image_folder(root)
    from apache_beam.io.filesystems import FileSystems

    base = root.rstrip("/") + "/"
    found = FileSystems.match([base + "**"])[0].metadata_list
    return folder_from_listing(root, [m.path[len(base):] for m in found
                                      if m.path.startswith(base)])


def _task_line(task) -> str:
    return json.dumps(list(task)) + "\n"  # ASCII: undecodable names kept as \udcXX escapes


def _skip(line: str) -> tuple[str, str]:
    item = json.loads(line)
    return item["path"], item["reason"]


def _check_counts(written: int, skipped, counters: dict[str, int], tasks: int) -> None:
    """Fail unless every task is in the shards or the skipped list, once."""
    reported = counters.get("written")
    if reported is not None and reported != written:
        raise DatasetError(f"the Beam job reported {reported} records written but its shards "
                           f"hold {written}: nothing was put in place")
    counted = counters.get("skipped", 0) + counters.get("failed", 0)
    if reported is not None and counted != len(skipped):
        raise DatasetError(f"the Beam job counted {counted} skipped images but listed "
                           f"{len(skipped)}: nothing was put in place")
    if written + len(skipped) != tasks:
        raise DatasetError(f"the Beam job accounted for {written + len(skipped)} of {tasks} "
                           f"images ({written} written, {len(skipped)} skipped): nothing was "
                           f"put in place")


