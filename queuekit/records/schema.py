"""Record schemas: which ``tf.train.Example`` features hold the image, the label and the rest.

Plain Python, no TensorFlow: ``make``'s workers, ``export`` and ``inspect`` use
it as well as the builders. The presets are the layouts legacy TF1 datasets
were written in; :func:`detect` picks one from the feature names of a record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from queuekit.records.proto import first_value

# The seed's images: its files have no shape features.
SEED_SHAPE = (256, 256, 3)
ENCODINGS = ("raw", "jpeg", "png", "any")
EXTRA_KINDS = ("string", "int64", "float", "var_float", "var_int64")


@dataclasses.dataclass(frozen=True)
class RecordSchema:
    """Where a record keeps its image and label, and which other features to pass through.

    Attributes:
        name: shown in logs and errors.
        image: the bytes feature holding the image.
        encoding: ``raw`` (uint8 pixels, row-major HWC), ``jpeg``, ``png``, or
            ``any`` (whatever ``tf.io.decode_image`` reads: JPEG, PNG, GIF, BMP).
        format_key: a bytes feature naming each record's encoding (``raw``,
            ``jpeg``, ``JPEG``, ``png``...), read from the first record; it
            overrides ``encoding``.
        shape: (height, width, channels) of every image, when the records do
            not say (the seed's files: 256x256x3).
        shape_keys: int64 features (height, width, channels) giving the shape
            per record; channels may be None (then 3, or ``shape``'s).
        label: the int64 label feature, or None for unlabelled records.
        label_offset: subtracted from the stored label, so labels start at 0
            (Inception's ``build_image_data.py`` stores class k as k + 1).
        extras: output name -> (feature, kind) of the features passed through
            when the first record has them; kind is one of :data:`EXTRA_KINDS`
            (``var_*`` are variable-length, batched as ``tf.SparseTensor``).
        signature: features whose presence makes :func:`detect` choose this schema.
    """

    name: str
    image: str
    encoding: str = "raw"
    format_key: str | None = None
    shape: tuple[int, int, int] | None = None
    shape_keys: tuple[str, str, str | None] | None = None
    label: str | None = "label"
    label_offset: int = 0
    extras: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    signature: tuple[str, ...] = ()

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise ValueError(f"RecordSchema encoding must be one of {ENCODINGS}, not "
                             f"{self.encoding!r}")
        for out, (_, kind) in self.extras.items():
            if kind not in EXTRA_KINDS:
                raise ValueError(f"RecordSchema extra {out!r}: kind must be one of "
                                 f"{EXTRA_KINDS}, not {kind!r}")
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(int(v) for v in self.shape))

    def replace(self, **changes) -> RecordSchema:
        """A copy with some fields changed (``INCEPTION.replace(label_offset=0)``)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        label = "no label" if self.label is None else (
            f"label {self.label}" + (f" - {self.label_offset}" if self.label_offset else ""))
        return f"{self.name!r} schema (image {self.image}, {label})"


QUEUEKIT = RecordSchema(
    "queuekit", image="img_raw", format_key="format",
    shape_keys=("height", "width", "channels"), label="label",
    extras={"label_text": ("label_text", "string"), "filename": ("filename", "string")},
    signature=("img_raw", "height"))
# The seed script's files: label + raw 256x256x3 img_raw, nothing else.
SEED = RecordSchema("seed", image="img_raw", shape=(256, 256, 3), label="label",
                    signature=("img_raw",))
# Inception's build_image_data.py / build_imagenet_data.py (and the Slim trainers that read
# them): JPEG bytes, labels from 1 (0 is the background class).
_BBOX = {f"bbox_{k}": (f"image/object/bbox/{k}", "var_float")
         for k in ("ymin", "xmin", "ymax", "xmax")}
INCEPTION = RecordSchema(
    "inception", image="image/encoded", encoding="any", format_key="image/format",
    shape_keys=("image/height", "image/width", "image/channels"),
    label="image/class/label", label_offset=1,
    extras={"label_text": ("image/class/text", "string"),
            "filename": ("image/filename", "string"),
            "synset": ("image/class/synset", "string"), **_BBOX,
            "bbox_label": ("image/object/bbox/label", "var_int64")},
    signature=("image/encoded", "image/class/text"))
# Slim's download_and_convert_*.py (dataset_utils.image_to_tfexample): labels from 0.
SLIM = RecordSchema(
    "slim", image="image/encoded", encoding="any", format_key="image/format",
    shape_keys=("image/height", "image/width", None), label="image/class/label",
    signature=("image/encoded",))
# TF's reading_data/convert_to_records.py (MNIST): raw uint8 pixels, 28x28x1.
MNIST = RecordSchema(
    "mnist", image="image_raw", shape_keys=("height", "width", "depth"), label="label",
    signature=("image_raw", "depth"))

SCHEMAS = {s.name: s for s in (QUEUEKIT, SEED, INCEPTION, SLIM, MNIST)}
# Most specific first: queuekit's files also have the seed's features.
_DETECT_ORDER = (QUEUEKIT, SEED, MNIST, INCEPTION, SLIM)


def detect(features: Iterable[str]) -> RecordSchema | None:
    """The preset whose signature features are all in ``features``, or None."""
    names = set(features)
    for schema in _DETECT_ORDER:
        if names.issuperset(schema.signature):
            return schema
    return None


def resolve(schema) -> RecordSchema | None:
    """A :class:`RecordSchema` for a preset name or schema object; None for ``"auto"``."""
    if schema is None or schema == "auto":
        return None
    if isinstance(schema, RecordSchema):
        return schema
    if isinstance(schema, str) and schema in SCHEMAS:
        return SCHEMAS[schema]
    raise ValueError(f"schema must be 'auto', one of {sorted(SCHEMAS)} or a "
                     f"queuekit.RecordSchema, not {schema!r}")


def how_to_declare(features: Iterable[str]) -> str:
    """The hint an unknown layout's error ends with."""
    names = sorted(features)
    byte_like = [n for n in names if any(w in n for w in ("image", "img", "encoded", "raw"))]
    image = byte_like[0] if byte_like else "<bytes feature>"
    return (f"features: {names}; declare the layout, e.g. decode=queuekit.Decode(schema="
            f"queuekit.RecordSchema('mine', image={image!r}, encoding='jpeg', "
            f"label='<int64 feature>')), or pass "
            f"parse_fn=<your function from a serialized record to a dict of tensors>")


def normalise_format(value: bytes | str | None, default: str) -> str:
    """``b'JPEG'``, ``'jpg'``, ``b'raw'`` -> one of :data:`ENCODINGS`; unknown -> ``any``."""
    if value is None:
        return default
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    text = text.strip().lower()
    return {"jpg": "jpeg", "jpeg": "jpeg", "png": "png", "raw": "raw", "": default}.get(
        text, "any")


def record_shape(feats, schema: RecordSchema, default=None) -> tuple[int, int, int]:
    """(height, width, channels) the record says, else ``default``, the schema's, the seed's."""
    fallback = tuple(default or schema.shape or SEED_SHAPE)
    keys = schema.shape_keys
    if keys is None or keys[0] not in feats:
        return fallback
    channels = first_value(feats, keys[2], fallback[2]) if keys[2] else fallback[2]
    return (int(first_value(feats, keys[0], 0)), int(first_value(feats, keys[1], 0)),
            int(channels))
