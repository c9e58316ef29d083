"""The plug-in point of a session: what a feature may add at each point of its life.

The core (:class:`~queuekit.QueueSession`, :class:`~queuekit.session.threads.SessionThreads`)
owns the session, the runner threads, the run policy, the stall watch, signals and
shutdown. Everything else a session does is a :class:`Feature`: the input checks and
the input report of every session, and what a graph's builders ask for with
:func:`install` (the input position, the autotuner, a work queue's
threads). The core calls each feature at these points, in this order, and knows none
of them by name, as ``MonitoredSession`` calls its hooks:

1. ``created(restored)``: the session exists, its variables are restored or
   initialised (``restored``: the checkpoint, or None); no runner runs yet.
2. ``enqueue_for(op, enqueue, make_callable)``: what a runner thread runs for an
   enqueue op (each feature may wrap what the one before gave).
3. ``starting(runners)``: before new runners start: the gates their threads wait on,
   per queue; the feature may start its own threads (``threads()``, joined at stop).
4. per run, ``observe(fetches, feed_dict)`` (every run through the session, also a
   hook's: what a ``Saver`` saves); ``before_step`` / ``after_step`` around the
   policy's run (run options, metadata); the hooks features add to ``running.hooks``,
   after the program's.
5. ``end_of_data(end)``: the input ended; ``describe_stall(ops)``: words for a stall.
6. ``closing()``: the session is about to stop its threads.

A feature overrides only what it needs; the core calls per run only the features that
override a per-run method, so a feature costs a step nothing where it does nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from queuekit.graph_keys import GraphKeys, graph_objects


class Feature:
    """One thing a session does beyond running the graph (see the module)."""

    name = ""  # how the session and other features find it (SessionThreads.feature)

    def __init__(self, running) -> None:
        # The started session: graph, sess, coord, runners, options; ``running.hooks``:
        # SessionRunHooks a feature adds, run after the program's on every run.
        self.running = running

    def created(self, restored: str | None) -> None:
        """The session exists and is restored (``restored``: the checkpoint) or initialised."""

    def enqueue_for(self, op, enqueue: Callable, make_callable: Callable) -> Callable:
        """What a runner thread runs for enqueue ``op``: ``enqueue`` (what the features
        before gave), or a callable in its place. ``make_callable``: the session's."""
        return enqueue

    def starting(self, runners: Sequence[Any]) -> dict[str, Any]:
        """``runners`` are about to start: the gate each queue's threads wait on."""
        return {}

    def threads(self) -> list:
        """The threads this feature started: the session joins them at stop."""
        return []

    def observe(self, fetches, feed_dict) -> None:
        """Before any run through the session or its hooks' session."""

    def before_step(self, reads, options, run_metadata):
        """Before the policy's run: ``(options, run_metadata, state)``; ``reads``, the queues
        it dequeues from. ``state`` is given back to :meth:`after_step`."""
        return options, run_metadata, None

    def after_step(self, run_metadata, state) -> None:
        """After the policy's run returned."""

    def end_of_data(self, end: BaseException) -> None:
        """The input ended (``end``, an :class:`~queuekit.EndOfData`); may raise instead."""

    def describe_stall(self, ops: list) -> str:
        """Words for a run stalled on the dequeue ``ops`` ("" when none apply)."""
        return ""

    def closing(self) -> None:
        """The session stops: before its threads are stopped."""


def overrides(feature: Feature, method: str) -> bool:
    """Whether ``feature`` does something at ``method`` (the core skips those that do not)."""
    return getattr(type(feature), method) is not getattr(Feature, method)


def load(spec: str) -> Callable[[Any], Feature | None]:
    """The factory named by ``spec``, "module:name" (:func:`install`)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def install(graph, feature: str) -> None:
    """Ask every session of ``graph`` to run ``feature``, the "module:name" of a callable that
    takes the started session (a :class:`Feature`); once per graph.

    A name, not the object: a builder installs what its graph needs without importing how a
    session runs it, and a session loads only the features its graph asks for (a local
    pipeline loads nothing of the cluster's).
    """
    installed = graph_objects(graph, GraphKeys.FEATURES)
    if feature not in installed:
        installed.append(feature)
