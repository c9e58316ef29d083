"""Naming the input file and record behind a runner's error, from what the graph says.

TensorFlow's readers report ``corrupted record at 213506`` without the file, a
decode error names no image, a parse error no record. The graph knows more: the
files its readers read (``checks.py``). Loaded only when a runner fails.
"""

from __future__ import annotations

import logging
import re
import time

import tensorflow as tf

from queuekit.errors import BadRecordError
from queuekit.records.proto import first_value, parse_example
from queuekit.records.schema import detect
from queuekit.records.tfrecord import Corruption, Record, record_at, scan_records
from queuekit.session.checks import MAX_FILES, reader_files, upstream_files

log = logging.getLogger(__name__)

_OFFSET = re.compile(r"(?:corrupted|truncated) record at (\d+)")


def named_error(exc: BaseException, enqueue_op: tf.Operation) -> tuple[BaseException, str | None]:
    """A runner's error and a note naming the file (and record) behind it, or None.

    A ``UnicodeDecodeError`` (TensorFlow's message quoted a record's bytes that are not
    UTF-8) is replaced by a :class:`BadRecordError` saying what happened, the note in it.
    """
    note = note_for(exc, enqueue_op)
    if isinstance(exc, UnicodeDecodeError):
        # Instead of "'utf-8' codec can't decode byte 0xff".
        cause = exc
        exc = BadRecordError(
            "a record is not what the graph parses (TensorFlow's error quoted bytes "
            "that are not UTF-8)" + (f"; {note[len('queuekit: '):]}" if note else ""))
        exc.__cause__ = cause
        note = None
    return exc, note


def note_for(exc: BaseException, enqueue_op: tf.Operation) -> str | None:
    """A note naming the file (and record) behind a runner's error, or None."""
    graph = enqueue_op.graph
    if isinstance(exc, tf.errors.DataLossError):
        return corrupt_file_note(graph, enqueue_op, exc)
    if isinstance(exc, tf.errors.InvalidArgumentError):
        return (image_file_note(graph, enqueue_op, exc)
                or feature_note(graph, enqueue_op, exc)
                or not_example_note(graph, enqueue_op))
    if isinstance(exc, UnicodeDecodeError):
        return not_example_note(graph, enqueue_op)
    return None


def corrupt_file_note(graph: tf.Graph, op: tf.Operation, error: tf.errors.OpError) -> str | None:
    """A note naming the file, record index and byte offset of a ``DataLossError``.

    ``op`` is the enqueue op (or fetch) whose run failed. The candidate files
    are those its readers read; with the offset from TF's message each is
    checked by walking its record headers up to that offset.
    """
    try:
        files = reader_files(graph, [op])[:MAX_FILES]
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the error itself
        log.debug("could not list the reader files", exc_info=True)
        return None
    if not files:
        return None
    match = _OFFSET.search(error.message or "")
    found = []
    for path in files:
        if match is None:
            break
        # TF gives the record's offset for a bad header, its data's (12 bytes on) for bad data.
        offset = int(match.group(1))
        try:
            hits = [record_at(path, offset), record_at(path, offset - 12)]
        except OSError:
            continue
        for hit in hits:
            if hit is not None and isinstance(hit[1], Corruption):
                c = hit[1]
                found.append(f"{path}: record {c.index} at byte offset {c.offset}: {c.reason}")
                break
    if found:
        return "queuekit: the corrupt record is in " + "; or ".join(found)
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f"queuekit: the reader was reading one of: {shown} (`queuekit inspect` finds which)"


_DECODE = re.compile(r"decode|jpeg|png|gif|bmp|image", re.IGNORECASE)
_DECODE_BUDGET_SECS = 20.0  # spent at most on finding the undecodable image


def image_file_note(graph: tf.Graph, op: tf.Operation, error: tf.errors.OpError) -> str | None:
    """A note naming the image file a decode error came from (TF's message names none).

    The candidates are the files upstream of ``op`` (``image_folder_batches``'
    path list, or a hand-built one); each is decoded with TensorFlow's own
    decoder until one fails, within a time budget.
    """
    message = error.message or ""
    if not _DECODE.search(message) or "not a JPEG, PNG" in message:
        return None  # not a decode error, or one that names its file already
    try:
        records = reader_files(graph, [op], whole_files=False)
        files = [] if records else (reader_files(graph, [op], whole_files=True)
                                    or upstream_files(graph, [op]))
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the error itself
        log.debug("could not list the upstream files", exc_info=True)
        return None
    deadline = time.monotonic() + _DECODE_BUDGET_SECS
    with _Decoder() as decode:
        if records:  # the images are inside records: find the record
            return _undecodable_record(records, deadline, decode)
        for path in files:
            if time.monotonic() > deadline:
                return (f"queuekit: no undecodable image among the first files checked of "
                        f"{len(files)}")
            try:
                with open(path, "rb") as f:
                    decode(f.read())
            except OSError:
                continue
            except tf.errors.OpError as e:
                return f"queuekit: the image that failed to decode is {path} ({_first_line(e)})"
    return None


class _Decoder:
    """TensorFlow's own image decoder in a graph and session of its own: it works whether
    the program turned eager execution off (every TF1 program on TF2 does) or not, and adds
    nothing to the program's graph."""

    def __enter__(self):
        graph = tf.Graph()
        with graph.as_default():
            self._contents = tf.compat.v1.placeholder(tf.string, [])
            self._image = tf.io.decode_image(self._contents, channels=3,
                                             expand_animations=False)
        self._sess = tf.compat.v1.Session(graph=graph)
        return self

    def __call__(self, data: bytes) -> None:
        self._sess.run(self._image.op, {self._contents: data})

    def __exit__(self, *exc) -> None:
        self._sess.close()


_EAGER_NOISE = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\].*$")


def _first_line(error: tf.errors.OpError) -> str:
    """TensorFlow's reason, without its eager wrapper's node names."""
    line = ((error.message or "").strip().splitlines() or [""])[0]
    return _EAGER_NOISE.sub("", line).strip()


def _undecodable_record(files, deadline, decode: _Decoder) -> str | None:
    """The first record of ``files`` (in a known layout) whose image TensorFlow cannot decode."""
    for path in files:
        for item in scan_records(path):
            if time.monotonic() > deadline:
                return "queuekit: no undecodable record found in the time given to the search"
            if not isinstance(item, Record):
                continue
            try:
                feats = parse_example(item.data)
            except ValueError:  # not an Example: not ours to judge here
                continue
            schema = detect(feats)
            image = None if schema is None else first_value(feats, schema.image)
            if image is None or (schema is not None and schema.format_key is None
                                 and schema.encoding == "raw"):
                continue
            try:
                decode(image)
            except tf.errors.OpError as e:
                reason = _first_line(e)
                return (f"queuekit: the record that failed to decode is {path}: record "
                        f"{item.index} at byte offset {item.offset} ({reason})")
    return None


# TensorFlow's parse errors name the feature ("Key: label.  Data types don't match...",
# "Feature: label (data type: int64) is required...", "Key: label.  Can't parse serialized
# Example"), never the file or the record.
_KEY = re.compile(r"(?:Key|Feature): (?P<key>[^\s.,()]+)")
_KINDS = {"int64": "int64", "float32": "float", "string": "bytes"}  # dtype -> its list


def _dense_spec(graph: tf.Graph, key: str) -> tuple[str, int | None] | None:
    """(the list kind, the value count if fixed) a ``ParseExampleV2`` of ``graph`` expects
    for dense feature ``key``."""
    for op in graph.get_operations():
        if op.type != "ParseExampleV2":
            continue
        keys = tf.get_static_value(op.inputs[3])
        names = [] if keys is None else [k.decode() for k in keys.tolist()]
        if key in names:
            i = names.index(key)
            dtype = tf.as_dtype(op.get_attr("Tdense")[i]).name
            shape = tf.TensorShape(op.get_attr("dense_shapes")[i])
            count = shape.num_elements() if shape.is_fully_defined() else None
            return _KINDS.get(dtype, dtype), count
    return None


def feature_note(graph: tf.Graph, op: tf.Operation, error: tf.errors.OpError) -> str | None:
    """A note naming the first record whose feature does not fit the parse (a label of
    another type, missing, or with two values), within a time budget: TensorFlow's
    message names the feature only."""
    found = _KEY.search(error.message or "")
    key = "" if found is None else found.group("key")
    spec = _dense_spec(graph, key) if key else None
    if spec is None:
        return None
    want, count = spec

    def wrong(features) -> str | None:
        if key not in features:
            return f"no feature {key!r}"
        kind, values = features[key]
        if kind != want and not (kind == "empty" and count == 0):
            return f"{key!r} holds {kind} values, the parse expects {want}"
        if count is not None and len(values) != count:
            return f"{key!r} holds {len(values)} values, the parse expects {count}"
        return None

    def misfit(data: bytes) -> str | None:
        try:
            return wrong(parse_example(data))
        except ValueError:
            return None  # not an Example: not_example_note's to name

    found = _first_record(graph, op, misfit)
    return None if found is None else (
        f"queuekit: the record that does not fit the parse is {found[0]} ({found[1]})")


def _first_record(graph: tf.Graph, op: tf.Operation, problem):
    """``("<file>: record <i> at byte offset <o>", what)`` of the first record the readers
    upstream of ``op`` read for which ``problem(data)`` says what is wrong, within the
    search's time budget; else None."""
    try:
        files = reader_files(graph, [op], whole_files=False)[:MAX_FILES]
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the error itself
        log.debug("could not list the reader files", exc_info=True)
        return None
    deadline = time.monotonic() + _DECODE_BUDGET_SECS
    for path in files:
        for item in scan_records(path):
            if time.monotonic() > deadline or not isinstance(item, Record):
                break
            what = problem(item.data)
            if what:
                return f"{path}: record {item.index} at byte offset {item.offset}", what
    return None


def not_example_note(graph: tf.Graph, op: tf.Operation) -> str | None:
    """A note naming the first record the readers upstream of ``op`` read that is not a
    ``tf.train.Example`` (TensorFlow's parse error names no file), within a time budget."""
    def not_example(data: bytes) -> str | None:
        try:
            parse_example(data)
        except ValueError:
            return "not an Example"
        return None

    found = _first_record(graph, op, not_example)
    return None if found is None else (
        f"queuekit: the record that is not a tf.train.Example is {found[0]}")


