"""The Beam job of ``make --runner beam``: its options, its transforms, running it.

Beam is imported here only when a Beam ``make`` runs, with the root logger
kept as it was (see :func:`root_logger_kept`).
"""

from __future__ import annotations

import contextlib
import logging

from queuekit.errors import DatasetError, ImageDecodeError, MissingDependencyError
from queuekit.signals import workers_end_first

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
    """(apache_beam, queuekit.records.beam.fn), or an error naming the extra to install."""
    with root_logger_kept():
        try:
            import apache_beam

            import queuekit.records.beam.fn as beam_fn
        except ImportError as e:
            raise MissingDependencyError(
                f"make --runner beam needs Apache Beam: {INSTALL} ({e})") from e
    return apache_beam, beam_fn


def build_pipeline(pipeline, task_file: str, prefix: str, suffix: str, shards: int,
                   skipped_list: str, strict: bool) -> None:
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


def pipeline_options(runner: str, workers: int, flags):
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


def run_job(pipeline, strict: bool) -> dict[str, int]:
    """Run the job to its end; the queuekit counters it committed."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.runner import PipelineState

    from queuekit.records.beam.fn import NAMESPACE

    try:
        with workers_end_first("apache_beam"):  # a signal must not wait for a busy worker
            result = pipeline.run()
            state = result.wait_until_finish()
    except Exception as e:
        skipped = skipped_image(e) if strict else None
        if skipped:
            raise ImageDecodeError(skipped) from e
        text = str(e)
        raise DatasetError(f"the Beam job failed: {text.splitlines()[0] if text else e!r}") from e
    if state != PipelineState.DONE:
        raise DatasetError(f"the Beam job ended {state}, not DONE: nothing was written")
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    return counters


def skipped_image(error: BaseException) -> str | None:
    """``path: reason`` of the image a strict job failed on, if it failed on one.

    In this process (``in_memory``) Beam re-raises the worker's ImageSkipped,
    its message extended with the step's name; from worker processes it
    arrives as the text of a remote traceback.
    """
    from queuekit.records.beam.fn import ImageSkipped

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ImageSkipped):
            text = str(seen.args[0] if seen.args else seen)
            return text.strip("\"'").split(" [while running")[0]
        seen = seen.__cause__ or seen.__context__
    marker = "ImageSkipped: "
    text = str(error)
    if marker in text:
        return text[text.index(marker) + len(marker):].splitlines()[0].split(" [while running")[0]
    return None
