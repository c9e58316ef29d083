"""Save on preemption: on SIGTERM, finish the step, write a checkpoint, exit with 143.

Cloud platforms send SIGTERM before they reclaim a machine. What TF2's
``PreemptionCheckpointHandler`` does for ``tf.distribute``, as a
``SessionRunHook`` for TF1 loops: the signal only sets a flag (its handler is
installed in ``begin``, so a ``QueueSession`` routes it: a run blocked for
more than ``stop_grace_secs`` is woken, a step in progress finishes), the
hook's ``after_run`` then saves through the session it is given (under a
``QueueSession`` with queuekit's builders, the checkpoint carries the input
position: the restart resumes at the next unconsumed record) and raises
``SystemExit(128 + signum)``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

log = logging.getLogger(__name__)
_v1 = tf.compat.v1


class PreemptionCheckpointHook(tf.compat.v1.train.SessionRunHook):
    """On ``signals`` (SIGTERM), save ``<checkpoint_dir>/<basename>-<global step>`` after the
    step in progress and exit with ``128 + signum``.

    Args:
        checkpoint_dir: where the checkpoint goes (``monitored_training_session``'s).
        saver: the ``Saver`` to save with; else the ``scaffold``'s, else a ``Saver()``
            made in ``begin`` (before a session creator finalizes the graph).
        scaffold: a ``Scaffold`` whose saver to use, as ``CheckpointSaverHook`` takes it.
        checkpoint_basename: as ``CheckpointSaverHook``'s.
        signals: what counts as preemption.
    """

    def __init__(self, checkpoint_dir: str, *, saver=None, scaffold=None,
                 checkpoint_basename: str = "model.ckpt",
                 signals: Sequence[int] = (signal.SIGTERM,)):
        self._path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._saver = saver
        self._scaffold = scaffold
        self._signals = tuple(signals)
        self._previous: dict[int, Any] = {}
        self._got: int | None = None
        self._step = None
        self._coord = None

    def begin(self):
        self._step = _v1.train.get_global_step()
        if self._saver is None and self._scaffold is None:
            self._saver = _v1.train.Saver()
        if threading.current_thread() is threading.main_thread():
            for signum in self._signals:
                self._previous[signum] = signal.signal(signum, self._note)
        else:
            log.warning("PreemptionCheckpointHook: not in the main thread, where Python runs "
                        "signal handlers; no checkpoint will be written on preemption")

    def after_create_session(self, session, coord):
        self._coord = coord

    def _note(self, signum, frame):
        if self._coord is not None and self._coord.should_stop():
            # The session is over (it may have ended without calling end): the signal is
            # the program's again, delivered as its previous handler would take it.
            self._restore_handlers()
            os.kill(os.getpid(), signum)
            return
        self._got = signum

    def after_run(self, run_context, run_values):
        if self._got is None:
            return
        saver = self._saver or self._scaffold.saver
        session = run_context.session
        step = session.run(self._step) if self._step is not None else None
        path = saver.save(session, self._path, global_step=step)
        log.warning("signal %d: saved %s after step %s; exiting", self._got, path, step)
        self._restore_handlers()
        raise SystemExit(128 + self._got)

    def end(self, session):
        self._restore_handlers()

    def _restore_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._note:
                signal.signal(signum, previous)
        self._previous.clear()
