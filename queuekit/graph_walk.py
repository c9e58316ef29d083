"""Small walks of a TF graph shared by the session's core and its features: the ops above
an op, and whether a run is a ``Saver``'s save or restore."""

from __future__ import annotations

import tensorflow as tf

_SAVE_OPS = ("SaveV2", "Save", "SaveSlices", "MergeV2Checkpoints")
_RESTORE_OPS = ("RestoreV2", "Restore", "RestoreSlice")


def checkpoint_run(graph: tf.Graph, fetches, feed_dict,
                   cache: dict[str, str]) -> tuple[str, str] | None:
    """("save" | "restore", the checkpoint prefix) when ``fetches`` is a ``Saver``'s save or
    restore: what ``Saver.save`` and ``Saver.restore`` run (a name, and the path fed)."""
    if not isinstance(fetches, str) or not feed_dict or len(feed_dict) != 1:
        return None
    kind = cache.get(fetches)
    if kind is None:
        kind = cache[fetches] = _checkpoint_kind(graph, fetches)
    if not kind:
        return None
    (value,) = feed_dict.values()
    value = value.decode() if isinstance(value, bytes) else str(value)
    return kind, value


def _checkpoint_kind(graph: tf.Graph, name: str) -> str:
    try:
        element = graph.as_graph_element(name)
    except (KeyError, ValueError, TypeError):
        return ""
    for op in ops_above(element.op if isinstance(element, tf.Tensor) else element):
        if op.type in _SAVE_OPS:
            return "save"
        if op.type in _RESTORE_OPS:
            return "restore"
    return ""


def ops_above(op, limit: int = 10_000):
    """``op`` and the ops its inputs and control inputs come from, each once, up to
    ``limit`` of them (a graph walk that must end quickly)."""
    todo, seen = [op], set[str]()
    while todo and len(seen) < limit:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        yield op
        todo += [t.op for t in op.inputs] + list(op.control_inputs)
