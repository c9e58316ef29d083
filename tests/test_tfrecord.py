"""queuekit.records.tfrecord on its own: TFRecord framing, written and read against
TensorFlow's own writer and reader, and every fault the scanner names."""

import gzip
import zlib

import pytest
import tensorflow as tf

from queuekit.records import tfrecord
from queuekit.records.tfrecord import Corruption, Record

RECORDS = [b"", b"a", b"hello world" * 50, bytes(range(256))]


def _tf_file(path, records=RECORDS, compression=""):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=compression)) as w:
        for r in records:
            w.write(r)
    return str(path)


def test_frame_writes_what_tensorflow_writes_and_reads(tmp_path):
    """frame() is byte for byte TFRecordWriter's framing, and TF reads it back."""
    ours = tmp_path / "ours.tfrecords"
    ours.write_bytes(b"".join(tfrecord.frame(r) for r in RECORDS))
    theirs = _tf_file(tmp_path / "theirs.tfrecords")
    assert ours.read_bytes() == open(theirs, "rb").read()
    assert list(tf.compat.v1.io.tf_record_iterator(str(ours))) == RECORDS


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_scan_reads_every_record_with_its_offset_in_any_compression(tmp_path, compression):
    """Each record with its index and its offset in the (decompressed) stream."""
    path = _tf_file(tmp_path / "r.tfrecords", compression=compression)
    assert tfrecord.compression_of(path) == compression
    got = list(tfrecord.scan_records(path))
    assert [r.data for r in got] == RECORDS
    offsets = [0]
    for r in RECORDS[:-1]:
        offsets.append(offsets[-1] + 16 + len(r))
    assert [(r.index, r.offset) for r in got] == list(enumerate(offsets))


def test_a_bad_data_crc_is_named_and_the_scan_goes_on(tmp_path):
    """A flipped data byte: that record is a Corruption, the records after it still come."""
    path = tmp_path / "r.tfrecords"
    data = bytearray(open(_tf_file(path), "rb").read())
    second = 16 + len(RECORDS[0])  # the second record's header
    data[second + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    got = list(tfrecord.scan_records(str(path)))
    assert got[1] == Corruption(1, second, "bad data CRC")
    assert [r.data for r in got if isinstance(r, Record)] == [RECORDS[0], *RECORDS[2:]]
    assert tfrecord.check_framing(str(path)) is None  # the framing itself is sound


@pytest.mark.parametrize("cut,index", [(5, 1), (14, 1), (16 + 1 + 12 + 3, 2)])
def test_a_cut_file_is_a_truncation_at_the_record_it_cut(tmp_path, cut, index):
    """Cut inside a header, a footer or a record's data: a truncation naming that record."""
    path = tmp_path / "r.tfrecords"
    full = open(_tf_file(path), "rb").read()
    end = 16 + len(RECORDS[0]) + cut
    path.write_bytes(full[:end])
    fault = tfrecord.check_framing(str(path))
    assert fault is not None and fault.index == index and fault.reason.startswith("truncated")
    assert list(tfrecord.scan_records(str(path)))[-1] == fault


def test_a_bad_length_crc_ends_the_scan(tmp_path):
    """After a bad length nothing can be trusted: the scan stops there."""
    path = tmp_path / "r.tfrecords"
    data = bytearray(open(_tf_file(path), "rb").read())
    data[16 + 1] ^= 0x01  # the second record's length
    path.write_bytes(bytes(data))
    got = list(tfrecord.scan_records(str(path)))
    assert got[-1] == Corruption(1, 16, "bad length CRC") and len(got) == 2
    assert tfrecord.check_framing(str(path)) == got[-1]


def test_record_at_finds_the_record_at_an_offset(tmp_path):
    """record_at(offset): its index and data; None past the end."""
    path = _tf_file(tmp_path / "r.tfrecords")
    index, item = tfrecord.record_at(path, 16 + len(RECORDS[0]))
    assert (index, item.data) == (1, RECORDS[1])
    assert tfrecord.record_at(path, 10**6) is None


def test_a_broken_compressed_stream_is_a_corruption_not_an_exception(tmp_path):
    """A GZIP stream cut short, and a ZLIB one with garbage: named, never raised."""
    for name, opener in (("g", gzip.compress), ("z", zlib.compress)):
        framed = b"".join(tfrecord.frame(r) for r in RECORDS)
        path = tmp_path / f"{name}.tfrecords"
        path.write_bytes(opener(framed)[:-12])
        got = list(tfrecord.scan_records(str(path)))
        assert isinstance(got[-1], Corruption), name


def test_first_record_and_has_records_of_an_empty_file(tmp_path):
    """An empty file: no first record, no records; what_it_is names JSON text."""
    empty = tmp_path / "empty.tfrecords"
    empty.write_bytes(b"")
    assert tfrecord.first_record(str(empty)) is None and not tfrecord.has_records(str(empty))
    text = tmp_path / "labels.json"
    text.write_text('{"cat": 0}')
    assert tfrecord.what_it_is(str(text)) == "JSON text"
    assert tfrecord.what_it_is(_tf_file(tmp_path / "r.tfrecords")) == ""


def test_a_huge_record_over_max_data_is_checked_without_being_kept(tmp_path):
    """max_data: the record's CRC is checked as it streams by, its data not kept."""
    path = _tf_file(tmp_path / "r.tfrecords", [b"x" * 5000, b"y"])
    big, small = tfrecord.scan_records(path, max_data=100)
    assert (big.data, big.length) == (b"", 5000) and small.data == b"y"
