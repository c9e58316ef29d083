"""Small walks of a TF graph shared by the session's core, its features and the builders:
the ops above an op, whether a run is a ``Saver``'s save or restore, the op that
reports which variables have no value yet, and a small ``boolean_mask``."""

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


def uninitialized_report(variables, name: str = "uninitialized"):
    """``tf.compat.v1.report_uninitialized_variables(variables)``: the same names, with
    :func:`rows_where` for its boolean_mask."""
    with tf.name_scope(name):
        initialized = [tf.compat.v1.is_variable_initialized(v) for v in variables]
        with tf.device("/cpu:0"):  # as TF's, which runs its part on the CPU
            if not variables:
                return tf.constant([], tf.string)
            names = tf.constant([v.op.name for v in variables])
            return rows_where(names, tf.logical_not(tf.stack(initialized)))


def rows_where(values, keep):
    """``tf.boolean_mask(values, keep)`` along the first axis, in 4 ops: its general shape
    arithmetic is 27 (they were 108 of each resumable reader's ops, reading many at once,
    and every graph's variable report), built in every graph and run with every read."""
    return tf.gather(values, tf.reshape(tf.where(keep), [-1]))
