"""queuekit.records.encode, proto and schema on their own: the protobuf-free Example writer
and reader against TensorFlow's protobuf, and schema detection from feature names."""

import pytest
import tensorflow as tf

from queuekit.records import encode, proto, schema


def _tf_example(**features) -> bytes:
    def feature(v):
        if isinstance(v, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
        if isinstance(v, float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
        if isinstance(v, list):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    return tf.train.Example(features=tf.train.Features(
        feature={k: feature(v) for k, v in features.items()})).SerializeToString()


def test_encode_example_is_what_protobuf_parses_with_the_same_values():
    """encode_example's bytes parse in TF's protobuf to the same features (negatives too)."""
    data = encode.encode_example({"label": -3, "big": 2**40, "img": b"\x00\xff" * 10})
    parsed = tf.train.Example.FromString(data).features.feature
    assert parsed["label"].int64_list.value == [-3]
    assert parsed["big"].int64_list.value == [2**40]
    assert parsed["img"].bytes_list.value == [b"\x00\xff" * 10]


def test_parse_example_reads_what_protobuf_writes():
    """Bytes, floats, several int64s, an empty feature: kinds and values as protobuf wrote."""
    data = _tf_example(name=b"x", score=0.5, ids=[1, -2, 3])
    empty = tf.train.Example(features=tf.train.Features(
        feature={"none": tf.train.Feature()})).SerializeToString()
    parsed = proto.parse_example(data)
    assert parsed["name"] == ("bytes", [b"x"])
    assert parsed["score"] == ("float", [0.5])
    assert parsed["ids"] == ("int64", [1, -2, 3])
    assert proto.parse_example(empty)["none"][0] == "empty"


def test_feature_lists_of_a_sequence_example():
    """A SequenceExample's lists, step by step; an Example has none."""
    seq = tf.train.SequenceExample(feature_lists=tf.train.FeatureLists(feature_list={
        "tokens": tf.train.FeatureList(feature=[
            tf.train.Feature(int64_list=tf.train.Int64List(value=[4, 5])),
            tf.train.Feature(int64_list=tf.train.Int64List(value=[6]))])}))
    assert proto.feature_lists(seq.SerializeToString()) == {
        "tokens": [("int64", [4, 5]), ("int64", [6])]}
    assert proto.feature_lists(_tf_example(a=1)) == {}


@pytest.mark.parametrize("junk", [b"\xff\xff\xff", b"\x0a\x20short", b"not a proto at all"])
def test_bytes_that_are_not_an_example_are_a_value_error(junk):
    """Truncated or foreign bytes: a ValueError, never an IndexError or a hang."""
    with pytest.raises(ValueError):
        proto.parse_example(junk)


def test_make_example_round_trips_in_both_layouts_and_detects_its_schema():
    """queuekit's and Inception's layouts parse back and are detected as what they are."""
    ours = proto.parse_example(encode.make_example(b"abc", label=2, height=1, width=1,
                                                   fmt="raw", filename="f"))
    assert ours["img_raw"] == ("bytes", [b"abc"]) and ours["label"] == ("int64", [2])
    assert schema.detect(ours) is schema.QUEUEKIT
    inception = proto.parse_example(encode.make_example(b"jpg", label=2, height=1, width=1,
                                                        fmt="jpeg", schema="inception"))
    assert inception["image/class/label"] == ("int64", [3])  # Inception's 0 is background
    assert schema.detect(inception) is schema.INCEPTION
    with pytest.raises(ValueError, match="JPEG or PNG"):
        encode.make_example(b"raw", label=0, height=1, width=1, schema="inception")


def test_detect_resolve_and_formats():
    """The seed's features are the seed; unknown ones are None with a hint; names resolve."""
    assert schema.detect({"img_raw", "label"}) is schema.SEED
    assert schema.detect({"pixels"}) is None
    assert "parse_fn=" in schema.how_to_declare({"pixels"})
    assert schema.resolve("auto") is None and schema.resolve("slim") is schema.SLIM
    with pytest.raises(ValueError, match="schema must be"):
        schema.resolve("nope")
    assert [schema.normalise_format(v, "raw") for v in (b"JPEG", "jpg", b"", "webp")] == [
        "jpeg", "jpeg", "raw", "any"]
