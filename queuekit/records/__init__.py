"""The dataset tools and files on disk: TFRecord framing, records, images, folders, ``make``
(:func:`write_tfrecords`), ``export`` (:func:`export_images`), ``inspect``
(:func:`inspect_tfrecords`). No graphs, no sessions; only ``inspect`` loads TensorFlow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuekit.lazy import exports

if TYPE_CHECKING:  # type checkers see the real names; at run time _WHERE loads them
    from queuekit.records.beam.launch import write_tfrecords_beam
    from queuekit.records.export import ExportReport, export_images
    from queuekit.records.folder import ImageFolder, scan_image_folder
    from queuekit.records.inspect import InspectReport, inspect_tfrecords
    from queuekit.records.make.labels import read_labels
    from queuekit.records.make.writer import WriteReport, write_tfrecords

_WHERE = {
    "write_tfrecords": "queuekit.records.make.writer",
    "WriteReport": "queuekit.records.make.writer",
    "write_tfrecords_beam": "queuekit.records.beam.launch",
    "export_images": "queuekit.records.export",
    "ExportReport": "queuekit.records.export",
    "inspect_tfrecords": "queuekit.records.inspect",
    "InspectReport": "queuekit.records.inspect",
    "scan_image_folder": "queuekit.records.folder",
    "ImageFolder": "queuekit.records.folder",
    "read_labels": "queuekit.records.make.labels",
}
__all__ = list(_WHERE)
__getattr__, __dir__ = exports(globals(), _WHERE)
