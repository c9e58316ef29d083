"""Image bytes -> a checked uint8 [H, W, C] tensor, in the reader threads.

Raw bytes are checked against the expected size; encoded images are decoded
(with ``decode_jpeg``'s options where the bytes are JPEG), optionally cropped
at random (``decode_and_crop_jpeg``: only the crop window is decoded) and
resized, and checked against the shape the batch queue holds. Every check
names the record (the reader's ``file:offset`` key) that fails it.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """How encoded images become the batch's fixed-size uint8 images.

    Attributes:
        size: (height, width) to resize every image to; None keeps the first
            record's size and makes any other size an error.
        dct_method: ``decode_jpeg``'s ``dct_method`` (``""`` TF's default,
            ``INTEGER_ACCURATE``, ``INTEGER_FAST``: faster, not bit-exact).
        crop_area: (min, max) fraction of the image area of a random crop
            (aspect ratio 3/4 to 4/3, Inception's), decoded with
            ``decode_and_crop_jpeg``; needs ``size``.
        seed: op seed of the crop.
    """

    size: tuple[int, int] | None = None
    dct_method: str = ""
    crop_area: tuple[float, float] | None = None
    seed: int | None = None


def check_raw(img_raw, key, shape, name: str = "img_raw"):
    """uint8 [H, W, C] of one record's raw bytes, asserting their size names the record."""
    h, w, c = shape
    expected = h * w * c
    length = tf.strings.length(img_raw)
    check = tf.debugging.Assert(tf.equal(length, expected), [
        (f"{name} size mismatch: expected {expected} bytes for a {h}x{w}x{c} raw image; "
         f"record (file:byte offset) and actual size:"), key, length])
    with tf.control_dependencies([check]):
        return tf.reshape(tf.io.decode_raw(img_raw, tf.uint8), shape)


def check_raw_many(img_raw, keys, shape, name: str = "img_raw"):
    """uint8 [n, H, W, C] of n records' raw bytes, naming those of the wrong size."""
    h, w, c = shape
    expected = h * w * c
    lengths = tf.strings.length(img_raw)
    bad = tf.not_equal(lengths, expected)
    # Indices and gathers, not boolean_mask: its general shape arithmetic was 28 ops, run
    # with every read of the batch although the message is read only when one is bad.
    where = tf.reshape(tf.where(bad), [-1])
    check = tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(bad)),
        [(f"{name} size mismatch: expected {expected} bytes for a {h}x{w}x{c} raw image; "
          f"records (file:byte offset) and actual sizes:"), tf.gather(keys, where),
         tf.gather(lengths, where)], summarize=4)
    with tf.control_dependencies([check]):
        return tf.reshape(tf.io.decode_raw(img_raw, tf.uint8), [-1, h, w, c])


def resized(image, size):
    """``image`` resized to ``size`` = (height, width), antialiased, back to uint8."""
    image = tf.image.resize(image, size, antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)


def decode_encoded(contents, key, shape, fmt: str, options: DecodeOptions):
    """uint8 ``shape`` from JPEG/PNG/GIF/BMP bytes: decoded, cropped, resized, checked."""
    channels = shape[2]
    if options.crop_area is not None:
        image = _random_crop(contents, channels, options)
    elif fmt == "jpeg" or (fmt == "any" and options.dct_method):
        image = tf.cond(tf.io.is_jpeg(contents),
                        lambda: tf.io.decode_jpeg(contents, channels,
                                                  dct_method=options.dct_method),
                        lambda: _decode_any(contents, channels))
    else:
        image = _decode_any(contents, channels)
    if options.size is not None:
        image = resized(image, options.size)
        image.set_shape(shape)
        return image
    got = tf.shape(image)
    h, w, c = shape
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(got, shape)), [
        f"decoded {fmt} image is not {h}x{w}x{c} (pass decode=qk.Decode(image_size=(height, "
        f"width)) to resize images of other sizes); record (file:byte offset) and decoded "
        f"shape:", key, got])
    with tf.control_dependencies([check]):
        image = tf.identity(image)
    image.set_shape(shape)  # the Assert checked it (an EnsureShape could fail first, unnamed)
    return image


def _decode_any(contents, channels):
    return tf.io.decode_image(contents, channels=channels, expand_animations=False)


def _random_crop(contents, channels, options: DecodeOptions):
    """A random crop (Inception's distortion box), decoding only the window for JPEGs."""

    def window(image_shape):
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            image_shape, bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
            min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=options.crop_area, max_attempts=10,
            use_image_if_no_bounding_boxes=True, seed=options.seed)
        return begin, size

    def jpeg():
        begin, size = window(tf.image.extract_jpeg_shape(contents))
        crop = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.io.decode_and_crop_jpeg(contents, crop, channels=channels,
                                          dct_method=options.dct_method)

    def other():
        image = _decode_any(contents, channels)
        begin, size = window(tf.shape(image))
        return tf.slice(image, begin, size)

    return tf.cond(tf.io.is_jpeg(contents), jpeg, other)


def image_size_pair(size) -> tuple[int, int]:
    """(height, width) of an ``image_size``: one int for both, or a pair."""
    h, w = (size, size) if isinstance(size, int) else (int(v) for v in size)
    if h < 1 or w < 1:
        raise ValueError(f"image_size must be positive, not {size}")
    return h, w
