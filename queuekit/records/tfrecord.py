"""The TFRecord file format: framing and a scanner that names what is corrupt.

Framing (TensorFlow's ``record_writer.cc``): each record is a little-endian
uint64 length, the masked CRC32C of those 8 bytes, the data, and the masked
CRC32C of the data. :func:`scan_records` reads it in Python so that a corrupt
record can be reported with its file, index and byte offset.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator

import google_crc32c


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Record:
    index: int
    offset: int
    data: bytes


@dataclasses.dataclass(frozen=True)
class Corruption:
    """What is wrong at one place of a file."""

    index: int
    offset: int
    reason: str


def scan_records(path: str) -> Iterator[Record | Corruption]:
    """Yield each record of ``path``, or a :class:`Corruption` where one is bad.

    A record whose data CRC is wrong is reported and skipped (its length is
    trustworthy); after a bad length CRC or a truncation nothing more can be
    read, so the scan ends there.
    """
    with open(path, "rb") as f:
        index = 0
        while True:
            offset = f.tell()
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                yield Corruption(index, offset, f"truncated: {len(header)} of 12 header bytes")
                return
            length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
            if _masked_crc(length_bytes) != length_crc:
                yield Corruption(index, offset, "bad length CRC")
                return
            (length,) = struct.unpack("<Q", length_bytes)
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                yield Corruption(index, offset, f"truncated: record of {length} bytes cut at "
                                                f"{len(data)}")
                return
            if _masked_crc(data) != struct.unpack("<I", footer)[0]:
                yield Corruption(index, offset, "bad data CRC")
            else:
                yield Record(index, offset, data)
            index += 1


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, ``data``, its masked CRC (``record_writer.cc``)."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", _masked_crc(length)), data,
                     struct.pack("<I", _masked_crc(data))))


def record_at(path: str, offset: int) -> tuple[int, Record | Corruption] | None:
    """(index, what is there) for the record that starts at byte ``offset`` of ``path``.

    Walks the record headers with seeks (12 bytes read per record, no data),
    so it is cheap on large files. None when no record starts at ``offset``.
    A header that is corrupt or cut short before ``offset`` is returned as the
    :class:`Corruption` it is, with its own index and offset.
    """
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        pos = index = 0
        while pos <= offset and pos < size:
            f.seek(pos)
            header = f.read(12)
            if len(header) < 12:
                return index, Corruption(index, pos, f"truncated: {len(header)} of 12 header "
                                                     f"bytes")
            if _masked_crc(header[:8]) != struct.unpack("<I", header[8:])[0]:
                return index, Corruption(index, pos, "bad length CRC")
            (length,) = struct.unpack("<Q", header[:8])
            end = pos + 12 + length + 4
            if pos == offset or end > size:
                if end > size:
                    return index, Corruption(index, pos, f"truncated: record of {length} bytes "
                                                         f"cut at {max(0, size - pos - 12)}")
                data = f.read(length)
                footer = f.read(4)
                if _masked_crc(data) != struct.unpack("<I", footer)[0]:
                    return index, Corruption(index, pos, "bad data CRC")
                return index, Record(index, pos, data)
            pos, index = end, index + 1
    return None


def has_records(path: str) -> bool:
    """True when ``path`` holds at least one record header (any content past 0 bytes)."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


# Leading bytes of files that are not plain TFRecords, for a clearer error.
_MAGIC = ((b"\x1f\x8b", "GZIP-compressed"), (b"\x78\x01", "ZLIB-compressed"),
          (b"\x78\x9c", "ZLIB-compressed"), (b"\x78\xda", "ZLIB-compressed"))
_BIG_RECORD = 1 << 16  # past this, read just the next header instead of a whole chunk


def what_it_is(path: str) -> str:
    """A hint on what a file that is not a TFRecord file looks like ("GZIP-compressed"...)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return ""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head.lstrip()[:1] in (b"{", b"["):
        return "JSON text"
    if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return f"text ({head[:12]!r}...)"
    return ""


def check_framing(path: str) -> Corruption | None:
    """The first framing fault of ``path`` (a bad length CRC, a truncation), or None.

    TensorFlow's reader takes a record header cut short as the end of the file,
    so a file truncated inside a header would silently lose its last record.
    This walks the headers only: one small read per record for large records,
    1 MiB at a time for small ones; data CRCs are left to the reader.
    """
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = index = start = 0
        buf = b""
        length = 0
        while pos < size:
            off = pos - start
            if off + 12 > len(buf):
                start, off = pos, 0
                buf = os.pread(fd, 12 if length > _BIG_RECORD else 1 << 20, pos)
            header = buf[off:off + 12]
            if len(header) < 12:
                return Corruption(index, pos, f"truncated: {len(header)} of 12 header bytes")
            if _masked_crc(header[:8]) != struct.unpack("<I", header[8:])[0]:
                return Corruption(index, pos, "bad length CRC")
            (length,) = struct.unpack("<Q", header[:8])
            end = pos + 16 + length
            if end > size:
                return Corruption(index, pos, f"truncated: record of {length} bytes cut at "
                                              f"{max(0, size - pos - 12)}")
            pos, index = end, index + 1
        return None
    finally:
        os.close(fd)
