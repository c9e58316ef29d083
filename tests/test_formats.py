"""The datasets users already have: Inception/Slim, MNIST, CIFAR binaries, any schema, GZIP.

The legacy layouts are written the way their own scripts write them (same
feature names and types, through ``tf.train.Example`` and TF's writer).
"""

import io
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import queuekit as qk
from queuekit.records.example import make_example
from tests.helpers import records_per_read

RNG = np.random.default_rng(7)


def _int64(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v if isinstance(v, list) else [v]))


def _bytes(v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _floats(v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=v))


def _encoded(pixels, fmt):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt, quality=90)
    return buf.getvalue()


def write_inception(path, images, labels, names, texts, *, fmt="JPEG", bbox=False,
                    broken=()):
    """build_image_data.py's _convert_to_example (build_imagenet_data.py's with ``bbox``).

    The images whose index is in ``broken`` keep their header and lose their data.
    """
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, (pixels, label, name, text) in enumerate(zip(images, labels, names, texts,
                                                             strict=True)):
            h, w_ = pixels.shape[:2]
            data = _encoded(pixels, fmt)
            if i in broken:
                data = data[:200] + bytes(len(data) - 200)
            feature = {
                "image/height": _int64(h), "image/width": _int64(w_),
                "image/colorspace": _bytes(b"RGB"), "image/channels": _int64(3),
                "image/class/label": _int64(label + 1),  # build_image_data: labels from 1
                "image/class/text": _bytes(text.encode()),
                "image/format": _bytes(fmt.encode()),
                "image/filename": _bytes(os.path.basename(name).encode()),
                "image/encoded": _bytes(data)}
            if bbox:
                feature.update({
                    "image/class/synset": _bytes(b"n0000%d" % label),
                    "image/object/bbox/xmin": _floats([0.1, 0.2][: 1 + label % 2]),
                    "image/object/bbox/ymin": _floats([0.1, 0.2][: 1 + label % 2]),
                    "image/object/bbox/xmax": _floats([0.9, 0.8][: 1 + label % 2]),
                    "image/object/bbox/ymax": _floats([0.9, 0.8][: 1 + label % 2]),
                    "image/object/bbox/label": _int64([label + 1] * (1 + label % 2))})
            w.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())
    return str(path)


def write_mnist(path, images, labels):
    """TF's reading_data/convert_to_records.py: raw uint8 image_raw, height, width, depth."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for pixels, label in zip(images, labels, strict=True):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "height": _int64(pixels.shape[0]), "width": _int64(pixels.shape[1]),
                "depth": _int64(pixels.shape[2]), "label": _int64(int(label)),
                "image_raw": _bytes(pixels.tobytes())})).SerializeToString())
    return str(path)


def write_slim(path, images, labels):
    """Slim's dataset_utils.image_to_tfexample (download_and_convert_flowers.py): labels from 0."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for pixels, label in zip(images, labels, strict=True):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": _bytes(_encoded(pixels, "PNG")),
                "image/format": _bytes(b"png"), "image/class/label": _int64(int(label)),
                "image/height": _int64(pixels.shape[0]),
                "image/width": _int64(pixels.shape[1])})).SerializeToString())
    return str(path)


def _images(n, shape):
    return [RNG.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


def test_inception_png_records_read_once_with_exact_pixels_and_labels(tmp_path, caplog):
    """Auto-detection picks 'inception' and says so; labels 0-based; pixels exact (PNG)."""
    images = _images(23, (12, 10, 3))
    labels = [i % 3 for i in range(23)]
    path = write_inception(tmp_path / "train-00000-of-00001", images, labels,
                           [f"/src/{i}.png" for i in range(23)],
                           [f"class{x}" for x in labels], fmt="PNG")
    caplog.set_level(logging.INFO, logger="queuekit")
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(path, batch_size=5, num_epochs=1, num_readers=2,
                                normalize=False)
        got = {}
        for batch in qs.iterate(b):
            for img, label, name, text in zip(batch["image"], batch["label"],
                                              batch["filename"], batch["label_text"]):
                i = int(name.decode()[:-4])
                assert i not in got
                got[i] = img
                assert label == labels[i] and text.decode() == f"class{labels[i]}"
    assert sorted(got) == list(range(23))
    for i, img in got.items():
        np.testing.assert_array_equal(img, images[i])
    assert any("'inception' schema" in r.getMessage() and path in r.getMessage()
               for r in caplog.records)


def test_inception_jpegs_of_many_sizes_resized_and_bboxes_passed_through(tmp_path):
    """Photos of different sizes need image_size; bboxes arrive as SparseTensors per record."""
    images = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)
              for h, w in [(40, 60), (64, 48), (33, 33), (50, 70), (45, 45), (60, 40)]]
    labels = [0, 1, 0, 1, 0, 1]
    path = write_inception(tmp_path / "imagenet", images, labels,
                           [f"{i}.jpg" for i in range(6)], ["a", "b"] * 3, bbox=True)
    with tf.Graph().as_default():
        b = qk.tfrecord_batches(path, batch_size=6, num_epochs=1)
        with qk.QueueSession() as qs, pytest.raises(tf.errors.InvalidArgumentError,
                                                    match=r"pass decode=qk.Decode\(image_size"):
            list(qs.iterate(b))
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(path, batch_size=6, num_epochs=1,
                                normalize=False, decode=qk.Decode(
                                    image_size=(32, 24), dct_method="INTEGER_ACCURATE"))
        assert isinstance(b["bbox_xmin"], tf.SparseTensor)
        (batch,) = list(qs.iterate(b))
    expected = [tf.cast(tf.clip_by_value(tf.round(tf.image.resize(
        tf.io.decode_jpeg(_encoded(im, "JPEG"), 3, dct_method="INTEGER_ACCURATE"),
        (32, 24), antialias=True)), 0, 255), tf.uint8).numpy() for im in images]
    assert batch["image"].shape == (6, 32, 24, 3)
    np.testing.assert_array_equal(batch["image"], np.stack(expected))
    assert list(batch["label"]) == labels
    xmin = batch["bbox_xmin"]
    counts = np.bincount(xmin.indices[:, 0], minlength=6)
    assert list(counts) == [1 + x % 2 for x in labels]
    assert [s.decode() for s in batch["synset"]] == [f"n0000{x}" for x in labels]


def test_a_broken_jpeg_inside_a_record_is_named_by_file_and_record(tmp_path):
    """TF's decode error names no record; the runner's error gets a note that does."""
    path = write_inception(tmp_path / "train", _images(5, (16, 16, 3)), [0] * 5, ["x"] * 5,
                           ["a"] * 5, broken={3})
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        with qk.QueueSession() as qs:
            for _ in qs.iterate(qk.tfrecord_batches(path, batch_size=1, num_epochs=1)):
                pass
    notes = " ".join(info.value.__notes__)
    assert f"the record that failed to decode is {path}: record 3 at byte offset" in notes


def test_random_crop_decodes_a_window_of_the_requested_size(tmp_path):
    """random_crop takes a window (decode_and_crop_jpeg for JPEG, a slice for PNG), then resizes."""
    images = _images(4, (64, 64, 3))
    jpeg = write_inception(tmp_path / "j", images, [0] * 4, ["x"] * 4, ["a"] * 4)
    png = write_slim(tmp_path / "p", images, [0] * 4)
    for path in (jpeg, png):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(path, batch_size=4, num_epochs=1, seed=3, normalize=False,
                                    decode=qk.Decode(image_size=16, random_crop=(0.1, 0.5)))
            (batch,) = list(qs.iterate(b))
        assert batch["image"].shape == (4, 16, 16, 3)
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError, match="needs encoded"):
        qk.tfrecord_batches(jpeg, batch_size=2, decode=qk.Decode(random_crop=(0.1, 0.5)))


def test_mnist_records_read_once_with_exact_pixels(tmp_path):
    """convert_to_records.py's layout: 28x28x1 raw, labels as written, each record once."""
    images = _images(30, (28, 28, 1))
    labels = RNG.integers(0, 10, 30)
    files = [write_mnist(tmp_path / "a.tfrecords", images[:17], labels[:17]),
             write_mnist(tmp_path / "b.tfrecords", images[17:], labels[17:])]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=8, num_epochs=1, read_many=4,
                                normalize=False)
        batches = list(qs.iterate(b))
    got = np.concatenate([x["image"] for x in batches])
    np.testing.assert_array_equal(got, np.stack(images))
    assert list(np.concatenate([x["label"] for x in batches])) == list(labels)
    assert qk.record_layout(files).schema.name == "mnist"


def test_slim_labels_start_at_zero(tmp_path):
    """Slim's own converters store labels from 0: the 'slim' preset subtracts nothing."""
    images = _images(6, (8, 8, 3))
    path = write_slim(tmp_path / "flowers_train_00000-of-00001.tfrecord", images,
                      [0, 1, 2, 3, 4, 0])
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(path, batch_size=6, num_epochs=1, normalize=False)
        (batch,) = list(qs.iterate(b))
    assert list(batch["label"]) == [0, 1, 2, 3, 4, 0]
    np.testing.assert_array_equal(batch["image"], np.stack(images))
    assert qk.record_layout([path]).schema.name == "slim"


def test_an_unlabelled_set_gives_batches_without_label(tmp_path):
    """A test split written without labels (Slim's layout minus the label) still reads."""
    path = str(tmp_path / "test.tfrecord")
    images = _images(3, (8, 8, 3))
    with tf.io.TFRecordWriter(path) as w:
        for im in images:
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": _bytes(_encoded(im, "PNG")), "image/format": _bytes(b"png"),
                "image/height": _int64(8), "image/width": _int64(8)})).SerializeToString())
    with qk.QueueSession() as qs:
        (x,) = list(qs.iterate(qk.tfrecord_batches(path, batch_size=3, num_epochs=1,
                                                   normalize=False)))
    assert "label" not in x
    np.testing.assert_array_equal(x["image"], np.stack(images))


def test_an_unknown_layout_lists_its_features_and_how_to_declare_one(tmp_path):
    """An unknown record layout is a DatasetError listing the features found and showing a
    RecordSchema and a parse_fn."""
    path = str(tmp_path / "mine.tfrecords")
    with tf.io.TFRecordWriter(path) as w:
        w.write(tf.train.Example(features=tf.train.Features(feature={
            "pixels": _bytes(_encoded(_images(1, (4, 4, 3))[0], "PNG")),
            "cls": _int64(2)})).SerializeToString())
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError) as info:
        qk.tfrecord_batches(path, batch_size=1)
    msg = str(info.value)
    assert path in msg and "['cls', 'pixels']" in msg and "queuekit.RecordSchema(" in msg
    schema = qk.RecordSchema("mine", image="pixels", encoding="png", label="cls")
    with qk.QueueSession() as qs:
        (batch,) = list(qs.iterate(qk.tfrecord_batches(path, batch_size=1, num_epochs=1,
                                                       decode=qk.Decode(schema=schema))))
    assert batch["label"].tolist() == [2] and batch["image"].shape == (1, 4, 4, 3)


@pytest.mark.parametrize("read_many", [None, 8])
def test_parse_fn_with_shuffling_and_several_readers_delivers_each_record_once(
        tmp_path, read_many):
    """The escape hatch: the user's parse; queuekit does files, readers, shuffle, epochs."""
    from tests.helpers import write_id_records

    files = [write_id_records(tmp_path / f"{k}.tfrecords", 25, start=25 * k) for k in range(4)]

    def parse(serialized):
        parse_one = tf.io.parse_example if read_many else tf.io.parse_single_example
        feats = parse_one(serialized, {"id": tf.io.FixedLenFeature([], tf.int64),
                                       "payload": tf.io.FixedLenFeature([], tf.string)})
        return {"id": feats["id"], "size": tf.strings.length(feats["payload"])}

    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, parse_fn=parse, batch_size=7, num_epochs=1,
                                shuffle=True, seed=2, num_readers=3, read_many=read_many)
        batches = list(qs.iterate(b))
    ids = np.concatenate([x["id"] for x in batches])
    assert sorted(ids) == list(range(100)) and list(ids) != list(range(100))
    assert set(np.concatenate([x["size"] for x in batches])) == {100}


def _sequence_examples(tmp_path, n_files=3, per_file=20):
    """im2txt's records: an image id in the context, a caption of 2-14 ids as a feature list
    (as its build_mscoco_data.py writes them); {id: caption}."""
    captions, files = {}, []
    for f in range(n_files):
        path = str(tmp_path / f"train-{f:05d}-of-{n_files:05d}")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(per_file):
                k = f * per_file + i
                captions[k] = RNG.integers(1, 100, RNG.integers(2, 15)).tolist()
                ex = tf.train.SequenceExample()
                ex.context.feature["image/image_id"].int64_list.value.append(k)
                ex.context.feature["image/data"].bytes_list.value.append(b"jpeg bytes")
                ids = ex.feature_lists.feature_list["image/caption_ids"]
                for t in captions[k]:
                    ids.feature.add().int64_list.value.append(t)
                w.write(ex.SerializeToString())
        files.append(path)
    return files, captions


def _parse_caption(serialized):
    context, sequence = tf.io.parse_single_sequence_example(
        serialized, context_features={"image/image_id": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"image/caption_ids": tf.io.FixedLenSequenceFeature([], tf.int64)})
    return {"id": context["image/image_id"], "caption": sequence["image/caption_ids"]}


@pytest.mark.parametrize("shuffle,readers", [(False, 1), (False, 2), (True, 1), (True, 3)])
def test_sequence_example_captions_are_padded_per_batch_with_their_lengths(tmp_path, shuffle,
                                                                           readers):
    """im2txt's input: a parse_fn giving a caption of variable length is padded to the
    longest caption of its batch (zeros after it), with ``caption_length``; shuffled or not,
    one or several readers, every caption of the epoch arrives once and intact."""
    files, captions = _sequence_examples(tmp_path)
    got, widths = {}, set()
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, parse_fn=_parse_caption, batch_size=8, num_epochs=1,
                                shuffle=shuffle, seed=3, num_readers=readers)
        assert sorted(b) == ["caption", "caption_length", "id"]
        for x in qs.iterate(b):
            assert x["caption"].shape[1] == x["caption_length"].max()
            widths.add(x["caption"].shape[1])
            for i, caption, n in zip(x["id"], x["caption"], x["caption_length"], strict=True):
                assert int(i) not in got and not caption[n:].any()
                got[int(i)] = caption[:n].tolist()
    assert got == captions and len(widths) > 1
    if readers == 1:  # in order unless shuffled
        assert (list(got) != sorted(got)) == shuffle


def test_schema_auto_on_sequence_examples_names_their_feature_lists(tmp_path):
    """A schema would read a SequenceExample's context and drop its captions unsaid: the
    builder refuses, naming the feature lists and the parse_fn way; inspect shows both."""
    files, captions = _sequence_examples(tmp_path, n_files=1)
    with tf.Graph().as_default(), pytest.raises(qk.BadRecordError,
                                                match="SequenceExample.*image/caption_ids"):
        qk.tfrecord_batches(files, batch_size=4)
    report = qk.records.inspect_tfrecords(files)
    assert report.sequence_examples == 20
    steps = {len(c) for c in captions.values()}
    assert report.feature_lists["image/caption_ids"] == {
        "type": "int64", "steps": sorted(steps), "count": 20}
    text = str(report)
    assert "layout: SequenceExample" in text and "parse_single_sequence_example" in text
    assert f"image/caption_ids (int64, {min(steps)} to {max(steps)} steps" in text


def test_a_parse_fn_reads_with_tuned_readers_by_default_and_every_record_once(tmp_path):
    """A per-record parse_fn is the user's preprocessing: by default it runs in "auto"
    readers (a tuned runner), one record per call as before; without parse_fn, or with
    num_readers given, one reader in file order."""
    from queuekit.graph_keys import GraphKeys
    from tests.helpers import write_id_records

    files = [write_id_records(tmp_path / f"{k}.tfrecords", 30, start=30 * k) for k in range(3)]
    shapes = []

    def parse(serialized):
        shapes.append(serialized.shape.rank)
        return tf.io.parse_single_example(serialized, {"id": tf.io.FixedLenFeature([], tf.int64)})

    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, parse_fn=parse, batch_size=7, num_epochs=1)
        assert qs.graph.get_collection(GraphKeys.AUTOTUNE)
        ids = [i for x in qs.iterate(b) for i in x["id"].tolist()]
    assert sorted(ids) == list(range(90)) and set(shapes) == {0}
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, parse_fn=parse, batch_size=7, num_epochs=1,
                                num_readers=1)
        assert not qs.graph.get_collection(GraphKeys.AUTOTUNE)
        assert [i for x in qs.iterate(b) for i in x["id"].tolist()] == list(range(90))


def test_num_epochs_warns_once_that_the_batch_dimension_is_unknown(tmp_path):
    """num_epochs keeps the last, smaller batch by default: a warning at the caller's line
    names the static-batch fix; an explicit allow_smaller_final_batch, or no num_epochs,
    is silent."""
    import warnings

    from tests.helpers import write_id_records

    path = write_id_records(tmp_path / "ids.tfrecords", 10)
    parse = lambda s: tf.io.parse_single_example(  # noqa: E731
        s, {"id": tf.io.FixedLenFeature([], tf.int64)})
    with tf.Graph().as_default():
        with pytest.warns(qk.UnknownBatchSize, match="pad_last_batch") as caught:
            b = qk.tfrecord_batches(path, parse_fn=parse, batch_size=4, num_epochs=1)
        assert b["id"].shape.as_list() == [None]
        assert caught[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for kw in (dict(num_epochs=1, allow_smaller_final_batch=True),
                       dict(num_epochs=1, allow_smaller_final_batch=False), {}):
                qk.tfrecord_batches(path, parse_fn=parse, batch_size=4, **kw)


def test_parse_fn_output_of_unknown_rank_is_named(tmp_path):
    """A parse_fn output without even a rank cannot be padded: named, with the fix."""
    from tests.helpers import write_id_records

    path = write_id_records(tmp_path / "ids.tfrecords", 3)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="'tensor' has an unknown"):
        qk.tfrecord_batches(path, batch_size=2, parse_fn=lambda s: {
            "tensor": tf.io.parse_tensor(s, tf.uint8)})


def _cifar_file(path, n, *, start=0, labels=1):
    """CIFAR's binary format: label byte(s), then 3072 pixels, CHW (R plane, G, B)."""
    hwc = [RNG.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(n)]
    for i, im in enumerate(hwc):
        im[0, 0, 0] = start + i  # an id, to match records to sources
    tags = [[(start + i) % 10 + 10 * k for k in range(labels)] for i in range(n)]
    with open(path, "wb") as f:
        for tag, im in zip(tags, hwc, strict=True):
            f.write(bytes(tag) + im.transpose(2, 0, 1).tobytes())
    return str(path), hwc, tags


@pytest.mark.parametrize("read_many,readers", [(None, 2), (16, 2), (None, "auto")])
def test_cifar10_binaries_decode_to_the_right_pixels_and_labels(tmp_path, read_many, readers):
    """CIFAR-10 binaries (CHW) come out HWC with their labels, every record once, for each
    read_many and reader count."""
    (a, ia, la), (b, ib, lb) = (_cifar_file(tmp_path / "data_batch_1.bin", 40),
                                _cifar_file(tmp_path / "data_batch_2.bin", 35, start=40))
    sources, tags = ia + ib, la + lb
    with qk.QueueSession() as qs:
        batch = qk.fixed_length_batches([a, b], "cifar10", batch_size=16, num_epochs=1,
                                        shuffle=True, seed=1, num_readers=readers,
                                        max_readers=3, read_many=read_many, normalize=False)
        expected = {64} if readers == "auto" else {read_many} if read_many else set()
        assert records_per_read(qs.graph) == expected
        seen = []
        for x in qs.iterate(batch):
            for img, label in zip(x["image"], x["label"]):
                i = int(img[0, 0, 0])
                np.testing.assert_array_equal(img, sources[i])
                assert label == tags[i][0]
                seen.append(i)
    assert sorted(seen) == list(range(75))


def test_cifar100_gives_both_labels(tmp_path):
    """CIFAR-100 records give coarse_label and label."""
    path, images, tags = _cifar_file(tmp_path / "train.bin", 9, labels=2)
    with qk.QueueSession() as qs:
        (x,) = list(qs.iterate(qk.fixed_length_batches(path, "cifar100", batch_size=9,
                                                       num_epochs=1, normalize=False)))
    assert x["coarse_label"].tolist() == [t[0] for t in tags]
    assert x["label"].tolist() == [t[1] for t in tags]
    np.testing.assert_array_equal(x["image"], np.stack(images))


def test_a_truncated_cifar_file_is_named_not_silently_shortened(tmp_path):
    """A CIFAR file cut short is a CorruptRecordError naming it, not a shorter epoch."""
    good, _, _ = _cifar_file(tmp_path / "data_batch_1.bin", 3)
    cut, _, _ = _cifar_file(tmp_path / "data_batch_2.bin", 3)
    with open(cut, "r+b") as f:
        f.truncate(3 * 3073 - 100)
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError) as info:
        qk.fixed_length_batches([good, cut], batch_size=2)
    assert info.value.path == cut and info.value.index == 2
    assert "3073-byte records" in str(info.value)


def test_tfrecords_given_to_fixed_length_batches_are_named_as_such(tmp_path):
    """TFRecord files given to fixed_length_batches are named as TFRecords."""
    path = _queuekit_records(tmp_path / "x.tfrecords", 5)
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError, match="looks like TFRec"):
        qk.fixed_length_batches(path, "cifar10")


def test_fixed_length_parse_fn_with_a_header(tmp_path):
    """Any fixed-length format: record_bytes, header_bytes and the user's parse."""
    path = tmp_path / "x.bin"
    path.write_bytes(b"HEAD" + b"".join(bytes([i]) * 5 for i in range(10)))
    with qk.QueueSession() as qs:
        b = qk.fixed_length_batches(str(path), record_bytes=5, header_bytes=4, batch_size=4,
                                    num_readers=1,  # in file order
                                    num_epochs=1, parse_fn=lambda v: {
                                        "v": tf.reshape(tf.io.decode_raw(v, tf.uint8), [5])})
        got = np.concatenate([x["v"] for x in qs.iterate(b)])
    assert got[:, 0].tolist() == list(range(10)) and (got == got[:, :1]).all()


def _queuekit_records(path, n, options=None):
    with tf.io.TFRecordWriter(str(path), options=options) as w:
        for i in range(n):
            w.write(make_example(bytes([i]) * 12, label=i % 2, height=2, width=2,
                                 filename=f"id{i}"))
    return str(path)


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_compressed_tfrecords_are_read_inspected_and_exported(tmp_path, kind):
    """GZIP and ZLIB TFRecords are detected and read by the builders, inspect and export."""
    files = [_queuekit_records(tmp_path / f"{k}.tfrecords.gz", 20, kind) for k in range(2)]
    with qk.QueueSession() as qs:
        b = qk.tfrecord_batches(files, batch_size=6, num_epochs=1, num_readers=2,
                                normalize=False)
        names = sorted(n.decode() for x in qs.iterate(b) for n in x["filename"])
    assert names == sorted([f"id{i}" for i in range(20)] * 2)
    report = qk.inspect_tfrecords(files)
    assert report.records == 40 and {f.compression for f in report.files} == {kind}
    assert not report.bad
    out = qk.export_images(files[:1], tmp_path / "out", progress=False)
    assert out.count == 20
    with tf.Graph().as_default(), pytest.raises(qk.DatasetError, match=f"is {kind} compressed"):
        qk.tfrecord_batches(files, batch_size=2, compression="")


def test_a_cut_gzip_file_is_named_at_build_time(tmp_path):
    """A GZIP file cut in half is a CorruptRecordError naming it when the pipeline is built."""
    path = _queuekit_records(tmp_path / "cut.tfrecords.gz", 200, "GZIP")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with tf.Graph().as_default(), pytest.raises(qk.CorruptRecordError) as info:
        qk.tfrecord_batches(path, batch_size=2)
    assert info.value.path == path and "compressed stream" in str(info.value)
    report = qk.inspect_tfrecords([path])
    assert report.bad and report.files[0].corrupt


# Inception's image_processing.parse_example_proto, as an unmodified trainer reads records.
INCEPTION_SPEC = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
    "image/class/label": tf.io.FixedLenFeature([1], tf.int64, default_value=-1),
    "image/class/text": tf.io.FixedLenFeature([], tf.string, default_value=""),
    **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32)
       for k in ("xmin", "ymin", "xmax", "ymax")},
}


def test_make_inception_feeds_the_inception_parser_and_reads_back_like_queuekit(tmp_path):
    """make --schema inception: the Inception trainer's parse works, labels from 1; queuekit
    reads it back with the same 0-based labels, pixels and names as its own layout."""
    from queuekit.cli import main
    from tests.imagefactory import make_mixed_folder

    make_mixed_folder(tmp_path / "src")
    out = tmp_path / "inc" / "train.tfrecords"
    ours = tmp_path / "qk" / "train.tfrecords"
    assert main(["make", str(tmp_path / "src"), str(out), "--schema", "inception",
                 "--size", "24", "--encoding", "png", "--quiet", "--workers", "1"]) == 0
    qk.write_tfrecords(tmp_path / "src", ours, image_size=24, encoding="png", progress=False,
                       workers=1)
    classes = qk.read_labels(str(out) + ".labels.txt")
    for serialized in tf.data.TFRecordDataset(str(out)):
        feats = tf.io.parse_single_example(serialized, INCEPTION_SPEC)
        label = int(feats["image/class/label"][0])
        assert 1 <= label <= len(classes)
        assert feats["image/class/text"].numpy().decode() == classes[label - 1]
        assert tf.io.decode_image(feats["image/encoded"], 3).shape == (24, 24, 3)

    def read(path):
        with qk.QueueSession() as qs:
            b = qk.tfrecord_batches(str(path), batch_size=50, num_epochs=1, normalize=False)
            (x,) = list(qs.iterate(b))
        return {n.decode(): (int(lb), img) for n, lb, img in
                zip(x["filename"], x["label"], x["image"])}

    a, b = read(out), read(ours)
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        assert a[name][0] == b[name][0]
        np.testing.assert_array_equal(a[name][1], b[name][1])
    exported = qk.export_images([str(out)], tmp_path / "exported", progress=False)
    assert exported.count == len(a)
    assert qk.inspect_tfrecords([str(out)]).schemas == {"inception": len(a)}


@pytest.mark.slow
def test_bench_runs_on_inception_photos_of_many_sizes(tmp_path):
    """bench's rows (queuekit and tf.data) read an Inception dataset with image_size."""
    images = [RNG.integers(0, 256, (20 + 3 * i, 30, 3), dtype=np.uint8) for i in range(8)]
    path = write_inception(tmp_path / "train", images, [0] * 8, ["x"] * 8, ["a"] * 8)
    report = qk.benchmark(path, readers=(1,), image_size=(16, 16), batch_size=4,
                          seconds=0.3, repeat=1, warmup_batches=1, compare=("tfdata",))
    assert [r.error for r in report.rows] == [None, None]
    assert all(r.records_per_s > 0 for r in report.rows)


def test_queuekits_example_decoder_agrees_with_protobuf():
    """records.proto.parse_example gives what tf.train.Example's protobuf gives: bytes,
    floats, negative int64s, empty features, names that are not ASCII, a SequenceExample's
    context; bytes that are no message are a ValueError."""
    import random

    from queuekit.records.example import feature_value
    from queuekit.records.proto import parse_example

    rng = random.Random(3)
    for _ in range(50):
        feats = {}
        for k in range(rng.randint(0, 6)):
            kind = rng.choice(["bytes", "float", "int64", "empty"])
            n = rng.randint(0, 5)
            if kind == "bytes":
                f = tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[rng.randbytes(rng.randint(0, 300)) for _ in range(n)]))
            elif kind == "float":
                f = tf.train.Feature(float_list=tf.train.FloatList(
                    value=[rng.uniform(-1e6, 1e6) for _ in range(n)]))
            elif kind == "int64":
                f = tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[rng.randint(-2**63, 2**63 - 1) for _ in range(n)]))
            else:
                f = tf.train.Feature()
            feats[f"f{k}/é"] = f
        data = tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
        proto = tf.train.Example.FromString(data).features.feature
        mine = parse_example(data)
        assert set(mine) == set(proto)
        for name in proto:
            kind, values = feature_value(proto[name])
            assert mine[name][0] == kind and np.allclose(mine[name][1], values) if (
                kind == "float") else mine[name] == (kind, values)
    seq = tf.train.SequenceExample(context=tf.train.Features(feature={
        "c": tf.train.Feature(int64_list=tf.train.Int64List(value=[7]))}))
    seq.feature_lists.feature_list["words"].feature.add().bytes_list.value.append(b"hi")
    assert parse_example(seq.SerializeToString()) == {"c": ("int64", [7])}
    for junk in (b"\xff", b"\x0a\x05ab", b"\x0b", b"{\n  \"name\": 1}"):
        with pytest.raises(ValueError):
            parse_example(junk)
