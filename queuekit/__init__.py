"""queuekit: safe and fast TF1 graph-mode queue input pipelines.

``__all__`` is the core: the session, the builders and the errors a training
loop meets. The dataset tools are in :mod:`queuekit.records`, the cluster's
names in :mod:`queuekit.cluster`, every exception in :mod:`queuekit.errors`,
the benchmark in :mod:`queuekit.bench`, TF-Slim's loops in :mod:`queuekit.slim`;
their names also resolve here, as they did before 0.9. A name's module (and so
TensorFlow) is imported when the name is first used (:mod:`queuekit.lazy`).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from queuekit.lazy import exports
from queuekit.version import __version__

if TYPE_CHECKING:  # type checkers see the real names; at run time _WHERE loads them
    # (tests/test_packaging.py checks that the two lists agree)
    import queuekit.bench as bench
    import queuekit.cluster as cluster
    import queuekit.errors as errors
    import queuekit.records as records
    import queuekit.slim as slim
    from queuekit.bench import BenchReport, benchmark
    from queuekit.cluster.inputs import Shard, WorkQueueInput, worker_inputs
    from queuekit.cluster.launch import LocalCluster, exit_with_parent
    from queuekit.cluster.tasks import ClusterTask, cluster_from_env, start_server
    from queuekit.errors import (
        BadRecordError,
        ClusterError,
        CorruptRecordError,
        DatasetError,
        EndOfData,
        ImageDecodeError,
        InputNotFound,
        MissingDependencyError,
        OutputBusyError,
        OutputExistsError,
        PipelineStalled,
        QueuekitError,
        ShutdownTimeout,
        UnknownBatchSize,
        UnreadableFolderError,
        WorkLost,
    )
    from queuekit.graph_keys import GraphKeys
    from queuekit.pipelines.binary import FixedLengthLayout, fixed_length_batches
    from queuekit.pipelines.builders import tfrecord_batches
    from queuekit.pipelines.image_folders import image_folder_batches
    from queuekit.pipelines.layout import RecordLayout, record_layout
    from queuekit.pipelines.options import Decode
    from queuekit.pipelines.padding import pad_last_batch
    from queuekit.pipelines.prefetch import prefetched
    from queuekit.records.beam.launch import write_tfrecords_beam
    from queuekit.records.export import ExportReport, export_images
    from queuekit.records.folder import ImageFolder, scan_image_folder
    from queuekit.records.inspect import InspectReport, inspect_tfrecords
    from queuekit.records.make.labels import read_labels
    from queuekit.records.make.writer import WriteReport, write_tfrecords
    from queuekit.records.schema import SCHEMAS, RecordSchema
    from queuekit.session.install import install, installed, uninstall
    from queuekit.session.monitored import monitored_training_session
    from queuekit.session.preemption import PreemptionCheckpointHook
    from queuekit.session.profile import InputReportHook
    from queuekit.session.queue_session import QueueSession
    from queuekit.session.report import InputReport
    from queuekit.session.runners import QueueStat


def _has_tensorflow() -> bool:
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


_NO_TENSORFLOW = (
    "queuekit needs TensorFlow 2 and none is installed: pip install 'queuekit[cpu]' "
    "(tensorflow-cpu) or 'queuekit[gpu]' (tensorflow with CUDA), or install the "
    "TensorFlow distribution of your choice first")

# name -> the module that defines it
_WHERE = {
    "QueueSession": "queuekit.session.queue_session",
    "QueueStat": "queuekit.session.runners",
    "monitored_training_session": "queuekit.session.monitored",
    "install": "queuekit.session.install",
    "uninstall": "queuekit.session.install",
    "installed": "queuekit.session.install",
    "PreemptionCheckpointHook": "queuekit.session.preemption",
    "InputReport": "queuekit.session.report",
    "InputReportHook": "queuekit.session.profile",
    "tfrecord_batches": "queuekit.pipelines.builders",
    "image_folder_batches": "queuekit.pipelines.image_folders",
    "fixed_length_batches": "queuekit.pipelines.binary",
    "pad_last_batch": "queuekit.pipelines.padding",
    "prefetched": "queuekit.pipelines.prefetch",
    "Decode": "queuekit.pipelines.options",
    "GraphKeys": "queuekit.graph_keys",
    "FixedLengthLayout": "queuekit.pipelines.binary",
    "record_layout": "queuekit.pipelines.layout",
    "RecordLayout": "queuekit.pipelines.layout",
    "RecordSchema": "queuekit.records.schema",
    "SCHEMAS": "queuekit.records.schema",
    "ClusterTask": "queuekit.cluster.tasks",
    "cluster_from_env": "queuekit.cluster.tasks",
    "start_server": "queuekit.cluster.tasks",
    "LocalCluster": "queuekit.cluster.launch",
    "exit_with_parent": "queuekit.cluster.launch",
    "worker_inputs": "queuekit.cluster.inputs",
    "Shard": "queuekit.cluster.inputs",
    "WorkQueueInput": "queuekit.cluster.inputs",
    "benchmark": "queuekit.bench",
    "BenchReport": "queuekit.bench",
    "ImageFolder": "queuekit.records.folder",
    "scan_image_folder": "queuekit.records.folder",
    "write_tfrecords": "queuekit.records.make.writer",
    "WriteReport": "queuekit.records.make.writer",
    "write_tfrecords_beam": "queuekit.records.beam.launch",
    "read_labels": "queuekit.records.make.labels",
    "export_images": "queuekit.records.export",
    "ExportReport": "queuekit.records.export",
    "inspect_tfrecords": "queuekit.records.inspect",
    "InspectReport": "queuekit.records.inspect",
    "QueuekitError": "queuekit.errors",
    "EndOfData": "queuekit.errors",
    "PipelineStalled": "queuekit.errors",
    "ShutdownTimeout": "queuekit.errors",
    "DatasetError": "queuekit.errors",
    "BadRecordError": "queuekit.errors",
    "InputNotFound": "queuekit.errors",
    "CorruptRecordError": "queuekit.errors",
    "ImageDecodeError": "queuekit.errors",
    "UnreadableFolderError": "queuekit.errors",
    "OutputExistsError": "queuekit.errors",
    "OutputBusyError": "queuekit.errors",
    "MissingDependencyError": "queuekit.errors",
    "ClusterError": "queuekit.errors",
    "WorkLost": "queuekit.errors",
    "UnknownBatchSize": "queuekit.errors",
}

__all__ = [
    "__version__", "QueueSession", "monitored_training_session", "QueueStat",
    "PreemptionCheckpointHook", "InputReportHook",
    "tfrecord_batches", "image_folder_batches", "fixed_length_batches", "pad_last_batch",
    "RecordSchema", "SCHEMAS", "FixedLengthLayout",
    "QueuekitError", "EndOfData", "PipelineStalled", "ShutdownTimeout", "DatasetError",
    "BadRecordError", "CorruptRecordError",
]


def _check_tensorflow() -> None:
    # Here, not on import: Beam's workers import queuekit.records.beam.fn, which needs no
    # TensorFlow, where none is installed.
    if not _has_tensorflow():
        raise ImportError(_NO_TENSORFLOW)


__getattr__, __dir__ = exports(globals(), _WHERE, _check_tensorflow,
                               subpackages=("bench", "cluster", "errors", "records", "slim"))
