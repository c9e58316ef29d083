"""``monitored_training_session``: TF's ``MonitoredTrainingSession``, argument for argument.

The session is made, restored and initialised by TensorFlow's own machinery
(``Scaffold``, ``ChiefSessionCreator``, ``SessionManager``) and checkpoints
and summaries are written by TensorFlow's own hooks, built exactly as
``monitored_session.MonitoredTrainingSession`` builds them; what runs them is a
:class:`~queuekit.QueueSession`, with its policy on runner errors, stalls,
Ctrl-C and a bounded shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from queuekit.session.preemption import PreemptionCheckpointHook
from queuekit.session.profile import InputReportHook
from queuekit.session.queue_session import DEFAULT_STALL_TIMEOUT_SECS, QueueSession
from queuekit.session.start import session_config

_v1 = tf.compat.v1

try:  # TF's own sentinel, so code that passes it along keeps working
    from tensorflow.python.training.monitored_session import USE_DEFAULT
except ImportError:  # pragma: no cover - a TF without the private module
    USE_DEFAULT = object()

# A worker that finds the chief not ready checks again after this long (TF: 30 s).
WORKER_RECOVERY_WAIT_SECS = 0.5


class WorkerSessionCreator(tf.compat.v1.train.SessionCreator):
    """TF's ``WorkerSessionCreator``, checking for the chief every ``recovery_wait_secs``.

    TF's own waits 30 s between checks, so a worker that starts a moment
    before the chief has initialised the model loses half a minute.
    """

    def __init__(self, scaffold=None, master: str = "", config=None,
                 max_wait_secs: float = 30 * 60,
                 recovery_wait_secs: float = WORKER_RECOVERY_WAIT_SECS):
        self._scaffold = scaffold or _v1.train.Scaffold()
        self._master = master
        self._config = config
        self._max_wait_secs = max_wait_secs
        self._recovery_wait_secs = recovery_wait_secs

    def create_session(self):
        scaffold = self._scaffold
        scaffold.finalize()
        manager = _v1.train.SessionManager(
            local_init_op=scaffold.local_init_op,
            local_init_feed_dict=scaffold.local_init_feed_dict,
            ready_op=scaffold.ready_op,
            ready_for_local_init_op=scaffold.ready_for_local_init_op,
            graph=_v1.get_default_graph(), recovery_wait_secs=self._recovery_wait_secs)
        return manager.wait_for_session(self._master, config=self._config,
                                        max_wait_secs=self._max_wait_secs)


def _resolve(steps, secs, default_steps, default_secs):
    """The USE_DEFAULT rules of MonitoredTrainingSession for one steps/secs pair."""
    if steps is USE_DEFAULT and secs is USE_DEFAULT:
        return default_steps, default_secs
    return (None if steps is USE_DEFAULT else steps), (None if secs is USE_DEFAULT else secs)


def monitored_training_session(
        master: str = "", is_chief: bool = True, checkpoint_dir: str | None = None,
        scaffold=None, hooks: Sequence[Any] | None = None,
        chief_only_hooks: Sequence[Any] | None = None, save_checkpoint_secs=USE_DEFAULT,
        save_summaries_steps=USE_DEFAULT, save_summaries_secs=USE_DEFAULT, config=None,
        stop_grace_period_secs: float = 120, log_step_count_steps: int | None = 100,
        max_wait_secs: float = 7200, save_checkpoint_steps=USE_DEFAULT,
        summary_dir: str | None = None, save_graph_def: bool = True, *,
        stall_timeout_secs: float | None = DEFAULT_STALL_TIMEOUT_SECS,
        recovery_wait_secs: float = WORKER_RECOVERY_WAIT_SECS,
        save_on_preemption: bool = False,
        report_input_secs: float | None = None, input_report: bool = True) -> QueueSession:
    """A started :class:`~queuekit.QueueSession` set up as ``MonitoredTrainingSession`` would.

    Migrating is one line: ``tf.compat.v1.train.MonitoredTrainingSession(``
    becomes ``qk.monitored_training_session(``, with the same arguments and
    defaults: the chief restores the latest checkpoint of ``checkpoint_dir``
    (else runs the scaffold's init op), and writes checkpoints every 600 s,
    summaries every 100 steps and the global step/s every 100 steps there; a
    non-chief waits for the chief to initialise the model. Like TF's, it runs
    the default graph and finalizes it.

    Args (beyond TF's, keyword only):
        stall_timeout_secs: see :class:`~queuekit.QueueSession`.
        recovery_wait_secs: how often a non-chief checks whether the chief is
            ready (TF's ``WorkerSessionCreator`` waits 30 s).
        save_on_preemption: on SIGTERM the chief finishes its step, writes a
            checkpoint into ``checkpoint_dir`` (with the input position) and
            exits with 143 (:class:`~queuekit.PreemptionCheckpointHook`).
        report_input_secs: every so many seconds the chief logs where the time goes (one
            line per pipeline: the share of step time spent waiting for input...) and
            writes the figures as scalars into the summary directory
            (:class:`~queuekit.InputReportHook`).
        input_report: False: the session counts and traces nothing for the input report
            (see :class:`~queuekit.QueueSession`).

    ``stop_grace_period_secs`` is the :class:`~queuekit.QueueSession`'s
    ``stop_grace_secs``: queuekit closes the queues first, so threads normally
    stop at once, and this is only the bound.
    """
    save_summaries_steps, save_summaries_secs = _resolve(
        save_summaries_steps, save_summaries_secs, 100, None)
    save_checkpoint_steps, save_checkpoint_secs = _resolve(
        save_checkpoint_steps, save_checkpoint_secs, None, 600)
    scaffold = scaffold or _v1.train.Scaffold()
    graph = _v1.get_default_graph()
    config = session_config(graph, master, config)
    all_hooks: list[Any] = []
    if not is_chief:
        creator: Any = WorkerSessionCreator(
            scaffold=scaffold, master=master, config=config, max_wait_secs=max_wait_secs,
            recovery_wait_secs=recovery_wait_secs)
    else:
        creator = _v1.train.ChiefSessionCreator(
            scaffold=scaffold, checkpoint_dir=checkpoint_dir, master=master, config=config)
        all_hooks.extend(chief_only_hooks or [])
        if report_input_secs:
            all_hooks.append(InputReportHook(every_n_secs=report_input_secs,
                                             output_dir=summary_dir or checkpoint_dir))
        if save_on_preemption and checkpoint_dir:
            all_hooks.append(PreemptionCheckpointHook(checkpoint_dir, scaffold=scaffold))
        all_hooks.extend(_chief_hooks(scaffold, checkpoint_dir, summary_dir or checkpoint_dir,
                                      log_step_count_steps, save_summaries_steps,
                                      save_summaries_secs, save_checkpoint_steps,
                                      save_checkpoint_secs, save_graph_def))
    all_hooks.extend(hooks or [])
    session = QueueSession(graph, target=master, config=config, session_creator=creator,
                           checkpoint_dir=checkpoint_dir,
                           hooks=all_hooks, stop_grace_secs=stop_grace_period_secs,
                           stall_timeout_secs=stall_timeout_secs, is_chief=is_chief,
                           input_report=input_report)
    return session.start()


def _chief_hooks(scaffold, checkpoint_dir, summary_dir, log_step_count_steps,
                 save_summaries_steps, save_summaries_secs, save_checkpoint_steps,
                 save_checkpoint_secs, save_graph_def) -> list[Any]:
    """The step counter, summary and checkpoint hooks, as MonitoredTrainingSession adds them."""
    hooks: list[Any] = []
    if summary_dir:
        if log_step_count_steps and log_step_count_steps > 0:
            hooks.append(_v1.train.StepCounterHook(output_dir=summary_dir,
                                                   every_n_steps=log_step_count_steps))
        if (save_summaries_steps and save_summaries_steps > 0) or (
                save_summaries_secs and save_summaries_secs > 0):
            hooks.append(_v1.train.SummarySaverHook(
                scaffold=scaffold, save_steps=save_summaries_steps,
                save_secs=save_summaries_secs, output_dir=summary_dir))
    if checkpoint_dir and ((save_checkpoint_secs and save_checkpoint_secs > 0) or (
            save_checkpoint_steps and save_checkpoint_steps > 0)):
        hooks.append(_v1.train.CheckpointSaverHook(
            checkpoint_dir, save_steps=save_checkpoint_steps, save_secs=save_checkpoint_secs,
            scaffold=scaffold, save_graph_def=save_graph_def))
    return hooks
