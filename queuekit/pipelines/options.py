"""The builders' arguments that are objects: how a record becomes an image (:class:`Decode`)
and where a worker's files come from (a ``Shard`` or a ``WorkQueueInput``, given as
``source``), and the keywords of earlier versions, which still work for a release with a
``DeprecationWarning`` naming their new place.

TF's own batch and producer knobs (``batch_size``, ``num_epochs``, ``shuffle``,
``capacity``...) stay flat, as ``tf.train.shuffle_batch`` has them; prefetch is a wrapper,
:func:`~queuekit.prefetched`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, TypedDict

from queuekit.pipelines.decode import DecodeOptions, image_size_pair


@dataclasses.dataclass(frozen=True)
class Decode:
    """How :func:`~queuekit.tfrecord_batches` turns a record into an image.

    Attributes:
        schema: ``"auto"`` recognises queuekit's, the seed's, Inception/Slim's
            and TF's MNIST layouts from the first record (and logs its choice);
            or a preset name (``queuekit.SCHEMAS``) or a :class:`~queuekit.RecordSchema`.
        image_shape: (H, W, C) of raw records that do not say (the seed's: 256x256x3).
        image_size: (height, width) to resize encoded images to (Inception's
            photos differ in size); None requires all to match the first.
        dct_method: ``decode_jpeg``'s ``dct_method`` (``INTEGER_FAST`` is faster
            and not exact).
        random_crop: (min, max) area fraction of a random crop taken before
            the resize, decoding only the window (``decode_and_crop_jpeg``).
    """

    schema: Any = "auto"
    image_shape: tuple[int, int, int] | None = None
    image_size: Any = None
    dct_method: str = ""
    random_crop: tuple[float, float] | None = None

    def options(self, seed: int | None) -> DecodeOptions:
        """The decoder's options (the crop's seed is the pipeline's)."""
        size = None if self.image_size is None else image_size_pair(self.image_size)
        crop = None if self.random_crop is None else tuple(self.random_crop)
        return DecodeOptions(size, self.dct_method, crop, seed)  # type: ignore[arg-type]


class EarlierPrefetch(TypedDict, total=False):
    """``prefetch=`` of earlier versions (now :func:`~queuekit.prefetched`)."""

    prefetch: int | None


class EarlierKeywords(EarlierPrefetch, total=False):
    """Keywords of earlier versions, still accepted (typed: a wrong one is still a type
    error to mypy)."""

    schema: Any  # Decode(schema=)
    image_shape: tuple[int, int, int] | None  # Decode(image_shape=)
    image_size: Any  # Decode(image_size=)
    dct_method: str  # Decode(dct_method=)
    random_crop: tuple[float, float] | None  # Decode(random_crop=)
    shard: Any  # source=Shard(...) or (index, count)
    work_queue: Any  # source=WorkQueueInput(...) or its device
    shard_by: str  # Shard(..., by=)
    lost_after_secs: float  # WorkQueueInput(..., lost_after_secs=)
    on_lost: str  # WorkQueueInput(..., on_lost=)


# Each keyword of an earlier version: (where it is now, the object's field).
_MOVED = {
    "schema": ("decode", "schema"), "image_shape": ("decode", "image_shape"),
    "image_size": ("decode", "image_size"), "dct_method": ("decode", "dct_method"),
    "random_crop": ("decode", "random_crop"),
    "shard": ("source", ""), "work_queue": ("source", ""),
    "shard_by": ("source", "by"), "lost_after_secs": ("source", "lost_after_secs"),
    "on_lost": ("source", "on_lost"),
    "prefetch": ("prefetched", ""),
}


@dataclasses.dataclass
class Spelled:
    """A builder's decode, source and prefetch, whichever way they were given."""

    decode: Decode
    source: Any  # a Shard, a WorkQueueInput or None (loaded only when given)
    prefetch: int | None  # None: the builder's default (2 with "auto" readers, else 0)


def spelled(builder: str, decode: Decode | None, source, earlier: Mapping[str, Any], *,
            accepts: tuple[str, ...] = tuple(_MOVED)) -> Spelled:
    """The objects from ``decode``, ``source`` and the earlier keywords ``earlier``; each of
    those warns once where it is used.

    Raises:
        TypeError: an unknown keyword (as Python's own message says it).
        ValueError: a value given both ways.
    """
    unknown = sorted(set(earlier) - set(accepts))
    if unknown:
        raise TypeError(f"{builder}() got unexpected keyword arguments: {unknown}")
    for key in earlier:
        place, field = _MOVED[key]
        new = (f"qk.prefetched(batch, {earlier[key]!r})" if place == "prefetched" else
               f"decode=qk.Decode({field}=...)" if place == "decode" else
               "source=qk.Shard(...) or qk.WorkQueueInput(...)" if not field else
               f"source=qk.{'Shard' if key == 'shard_by' else 'WorkQueueInput'}(..., {field}=...)")
        warnings.warn(f"{builder}({key}=...) is now {new}; {key}= will be removed in a "
                      f"later release", DeprecationWarning, stacklevel=3)
    moved = {_MOVED[k][1]: v for k, v in earlier.items() if _MOVED[k][0] == "decode"}
    if moved and decode is not None:
        raise ValueError(f"give decode=Decode(...) or {sorted(moved)}, not both")
    decode = decode if decode is not None else Decode(**moved)
    if not isinstance(decode, Decode):
        raise TypeError(f"decode must be a queuekit.Decode, not {type(decode).__name__}")
    return Spelled(decode, _source(source, earlier), earlier.get("prefetch"))


def _source(source, earlier: Mapping[str, Any]):
    """A Shard, a WorkQueueInput or None; the cluster's module is loaded only when given."""
    shard, work_queue = earlier.get("shard"), earlier.get("work_queue")
    rest = {k: earlier[k] for k in ("shard_by", "lost_after_secs", "on_lost") if k in earlier}
    if source is None and shard is None and work_queue is None and not rest:
        return None
    from queuekit.cluster.inputs import Shard, WorkQueueInput
    if source is not None and (shard is not None or work_queue is not None):
        raise ValueError("give source or shard/work_queue, not both")
    if isinstance(source, (Shard, tuple)):
        shard = source
    elif source is not None:  # a WorkQueueInput or its device
        work_queue = source
    shard = Shard.of(shard, rest.get("shard_by"))
    work_queue = WorkQueueInput.of(work_queue, rest.get("lost_after_secs"), rest.get("on_lost"))
    if work_queue and shard is not None:
        raise ValueError("give a Shard or a WorkQueueInput, not both")
    return shard or work_queue
