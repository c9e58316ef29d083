"""The TFRecord file format: framing and a scanner that names what is corrupt.

Framing (TensorFlow's ``record_writer.cc``): each record is a little-endian
uint64 length, the masked CRC32C of those 8 bytes, the data, and the masked
CRC32C of the data. :func:`scan_records` reads it in Python so that a corrupt
record can be reported with its file, index and byte offset.

A file may be GZIP- or ZLIB-compressed as a whole (``TFRecordOptions``);
:func:`compression_of` tells which from its first bytes, and the scanners read
through the decompression, with offsets in the decompressed stream (as
TensorFlow's reader reports them).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
import zlib
from collections.abc import Generator, Iterator

import google_crc32c


def _masked_crc(data: bytes) -> int:
    return _mask(google_crc32c.value(data))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Record:
    """One record; ``data`` is empty when the scan did not keep it (``length`` says its size)."""

    index: int
    offset: int
    data: bytes
    length: int = -1


@dataclasses.dataclass(frozen=True)
class Corruption:
    """What is wrong at one place of a file."""

    index: int
    offset: int
    reason: str


def compression_of(path: str) -> str:
    """``""`` (plain), ``"GZIP"`` or ``"ZLIB"``: what ``TFRecordOptions`` wrote ``path`` with.

    A plain file starts with a record header whose length CRC checks (a
    1 in 2**32 chance for other bytes), which tells it from a compressed
    stream's magic bytes even when its first length happens to look like them.
    """
    with open(path, "rb") as f:
        return _kind_of(f.read(12))


def _kind_of(head: bytes) -> str:
    """:func:`compression_of` from a file's first 12 bytes."""
    if len(head) == 12 and _masked_crc(head[:8]) == struct.unpack("<I", head[8:])[0]:
        return ""
    if head[:2] == b"\x1f\x8b":
        return "GZIP"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "ZLIB"
    return ""


class _Inflated:
    """A read-only stream of a zlib-format file's decompressed bytes, with ``tell``."""

    def __init__(self, f):
        self._f, self._inflate, self._buf, self._pos = f, zlib.decompressobj(), b"", 0

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and not self._inflate.eof:
            chunk = self._f.read(1 << 16)
            if not chunk:
                raise EOFError("compressed stream ended before its end marker")
            self._buf += self._inflate.decompress(chunk)
        out, self._buf = self._buf[:n], self._buf[n:]
        self._pos += len(out)
        return out

    def tell(self) -> int:
        return self._pos


def open_records(path: str):
    """(stream, file): ``path`` opened once for reading its records, decompressed if it is
    compressed; the caller closes the file."""
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller, or with the wrapper
    return _decompressed(f, _kind_of(os.pread(f.fileno(), 12, 0))), f


def _decompressed(f, kind: str):
    if kind == "GZIP":
        return gzip.GzipFile(fileobj=f, mode="rb")
    if kind == "ZLIB":
        return _Inflated(f)
    return f


# What a broken compressed stream raises while reading.
_STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def scan_records(path: str, *, data: bool = True,
                 max_data: int | None = None) -> Generator[Record | Corruption, None, None]:
    """Yield each record of ``path``, or a :class:`Corruption` where one is bad.

    A record whose data CRC is wrong is reported and skipped (its length is
    trustworthy); after a bad length CRC, a truncation or broken compression
    nothing more can be read, so the scan ends there. ``data=False`` checks
    the framing only (records are yielded with empty data). A record over
    ``max_data`` bytes has its CRC checked as it streams by and is yielded
    with empty data: memory stays bounded whatever a record's size.
    """
    stream, raw = open_records(path)
    with raw:
        yield from scan_stream(stream, data=data, max_data=max_data)


def scan_stream(stream, *, data: bool = True,
                max_data: int | None = None) -> Iterator[Record | Corruption]:
    """:func:`scan_records` of a binary stream already open (and decompressed): a Beam file."""
    index = 0
    while True:
        offset = stream.tell()
        try:
            item = _next_record(stream, index, offset, data, max_data)
        except _STREAM_ERRORS as e:
            yield Corruption(index, offset, f"broken compressed stream ({e})")
            return
        if item is None:
            return
        yield item
        if isinstance(item, Corruption) and item.reason != "bad data CRC":
            return
        index += 1


def _next_record(f, index: int, offset: int, check_data: bool,
                 max_data: int | None = None) -> Record | Corruption | None:
    header = f.read(12)
    if not header:
        return None
    if len(header) < 12:
        return Corruption(index, offset, f"truncated: {len(header)} of 12 header bytes")
    length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
    if _masked_crc(length_bytes) != length_crc:
        return Corruption(index, offset, "bad length CRC")
    (length,) = struct.unpack("<Q", length_bytes)
    keep = check_data and (max_data is None or length <= max_data)
    got = crc = 0
    parts = []
    while got < length:  # in pieces: a corrupt length must not allocate it all at once
        part = f.read(min(length - got, 1 << 24))
        if not part:
            break
        got += len(part)
        if keep:
            parts.append(part)
        elif check_data:
            crc = google_crc32c.extend(crc, part)
    footer = f.read(4)
    if got < length or len(footer) < 4:
        return Corruption(index, offset, f"truncated: record of {length} bytes cut at {got}")
    if not check_data:
        return Record(index, offset, b"", length)
    data = b"".join(parts)
    if (_masked_crc(data) if keep else _mask(crc)) != struct.unpack("<I", footer)[0]:
        return Corruption(index, offset, "bad data CRC")
    return Record(index, offset, data, length)


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
    if compression_of(path):
        for item in scan_records(path):
            if item.offset == offset or (isinstance(item, Corruption) and item.offset < offset
                                         and item.reason != "bad data CRC"):
                return item.index, item
            if item.offset > offset:
                break
        return None
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


def first_record(path: str) -> Record | Corruption | None:
    """What the start of ``path`` holds: its first record (framing only), a corruption, or
    None for a file without records (an empty one, or an empty compressed stream)."""
    scan = scan_records(path, data=False)
    try:
        return next(scan, None)
    finally:
        scan.close()  # closes the file now, not when the generator is collected


def has_records(path: str) -> bool:
    """True when ``path`` holds at least one record header (any content past 0 bytes)."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


_BIG_RECORD = 1 << 16  # past this, read just the next header instead of a whole chunk


def what_it_is(path: str) -> str:
    """A hint on what a file that is not a TFRecord file looks like ("JSON text"...).

    A GZIP or ZLIB stream gets none: it is read as compressed TFRecords.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return ""
    if _kind_of(head[:12]):
        return ""
    if head.lstrip()[:1] in (b"{", b"["):
        return "JSON text"
    if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return f"text ({head[:12]!r}...)"
    return ""


def check_framing(path: str, offsets: list[int] | None = None) -> Corruption | None:
    """The first framing fault of ``path`` (a bad length CRC, a truncation), or None;
    ``offsets`` gets the byte offset of every record before it (in the decompressed
    stream of a compressed file, as TensorFlow's reader counts them).

    TensorFlow's reader takes a record header cut short as the end of the file,
    so a file truncated inside a header would silently lose its last record.
    This walks the headers only: one small read per record for large records,
    1 MiB at a time for small ones; data CRCs are left to the reader. A
    compressed file is decompressed and walked as a stream.
    """
    return walk(path, [] if offsets is None else offsets)[1]


def walk(path: str, offsets) -> tuple[str, Corruption | None]:
    """(:func:`compression_of`, :func:`check_framing`) of ``path`` in one open of it;
    ``offsets`` (a list, an ``array("q")``) gets the offset of each record before the
    fault."""
    with open(path, "rb") as f:
        fd, size = f.fileno(), os.fstat(f.fileno()).st_size
        kind = _kind_of(os.pread(fd, 12, 0))
        if kind:
            for item in scan_stream(_decompressed(f, kind), data=False):
                if isinstance(item, Corruption):
                    return kind, item
                offsets.append(item.offset)
            return kind, None
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
                return kind, Corruption(index, pos, f"truncated: {len(header)} of 12 header "
                                                    f"bytes")
            if _masked_crc(header[:8]) != struct.unpack("<I", header[8:])[0]:
                return kind, Corruption(index, pos, "bad length CRC")
            (length,) = struct.unpack("<Q", header[:8])
            end = pos + 16 + length
            if end > size:
                # The bytes of its data there, as scan_records counts them (not its footer's).
                return kind, Corruption(index, pos, f"truncated: record of {length} bytes cut "
                                                    f"at {min(length, max(0, size - pos - 12))}")
            offsets.append(pos)
            pos, index = end, index + 1
        return kind, None
