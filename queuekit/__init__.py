"""queuekit: safe and fast TF1 graph-mode queue input pipelines."""

from queuekit.version import __version__

from queuekit.bench import BenchReport, benchmark
from queuekit.errors import (
    CorruptRecordError,
    DatasetError,
    EndOfData,
    ImageDecodeError,
    InputNotFound,
    MissingDependencyError,
    OutputExistsError,
    PipelineStalled,
    QueuekitError,
    ShutdownTimeout,
)
from queuekit.pipelines.builders import image_folder_batches, tfrecord_batches
from queuekit.pipelines.layout import RecordLayout, record_layout
from queuekit.records.export import ExportReport, export_images
from queuekit.records.folder import ImageFolder, scan_image_folder
from queuekit.records.inspect import InspectReport, inspect_tfrecords
from queuekit.records.writer import WriteReport, write_tfrecords
from queuekit.session.monitored import monitored_training_session
from queuekit.session.queue_session import QueueSession
from queuekit.session.runners import QueueStat


__all__ = [
    "__version__",
    "QueueSession",
    "monitored_training_session",
    "QueueStat",
    "tfrecord_batches",
    "image_folder_batches",
    "record_layout",
    "RecordLayout",
    "benchmark",
    "BenchReport",
    "ImageFolder",
    "scan_image_folder",
    "write_tfrecords",
    "WriteReport",
    "export_images",
    "ExportReport",
    "inspect_tfrecords",
    "InspectReport",
    "QueuekitError",
    "EndOfData",
    "PipelineStalled",
    "ShutdownTimeout",
    "DatasetError",
    "InputNotFound",
    "CorruptRecordError",
    "ImageDecodeError",
    "OutputExistsError",
    "MissingDependencyError",
]
