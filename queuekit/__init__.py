"""queuekit: safe and fast TF1 graph-mode queue input pipelines."""

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
from queuekit.export import (
    ExportReport,
    InspectReport,
    export_images,
    inspect_tfrecords,
)
from queuekit.folder import ImageFolder, scan_image_folder
from queuekit.make import WriteReport, write_tfrecords
from queuekit.pipeline import image_folder_batches, tfrecord_batches
from queuekit.runners import QueueStat
from queuekit.session import QueueSession

__version__ = "0.2.0"

__all__ = [
    "__version__",
    "QueueSession",
    "QueueStat",
    "tfrecord_batches",
    "image_folder_batches",
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
