"""queuekit: safe and fast TF1 graph-mode queue input pipelines."""

from queuekit.errors import (
    CorruptRecordError,
    DatasetError,
    EndOfData,
    ImageDecodeError,
    InputNotFound,
    OutputExistsError,
    PipelineStalled,
    QueuekitError,
    ShutdownTimeout,
)
from queuekit.runners import QueueStat
from queuekit.session import QueueSession

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "QueueSession",
    "QueueStat",
    "QueuekitError",
    "EndOfData",
    "PipelineStalled",
    "ShutdownTimeout",
    "DatasetError",
    "InputNotFound",
    "CorruptRecordError",
    "ImageDecodeError",
    "OutputExistsError",
]
