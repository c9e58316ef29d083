"""TF-Slim's loops on queuekit sessions: ``train``, ``evaluate_once``, ``evaluation_loop``.

Each takes the arguments of its namesake in ``tf_slim`` (``slim.learning.train``,
``slim.evaluation.evaluate_once``, ``slim.evaluation.evaluation_loop``) with
their defaults, and runs the loop with a :class:`~queuekit.QueueSession`
instead of a ``Supervisor`` or a ``MonitoredSession``: a runner's error is
raised with its file and record, a stall or Ctrl-C ends the loop, the threads
are always joined, checkpoints carry the input position. tf-slim itself is not
needed: what Slim's loops do around the session is TensorFlow's own
(``Scaffold``, ``CheckpointSaverHook``, ``SummarySaverHook``,
``StepCounterHook``, ``StopAtStepHook``, ``FinalOpsHook``,
``checkpoints_iterator``, ``SyncReplicasOptimizer.make_session_run_hook``).

Where they differ from Slim's (docs/migrating.rst): ``train`` stops at
``number_of_steps`` by a ``StopAtStepHook`` (a restored job already there takes
no step), its default step runs one ``Session.run`` per step (Slim's runs three)
and writes a checkpoint also as the session starts (TF's checkpoint hook does);
the evaluations count their evaluations in Python and run to the end of the
input when ``num_evals`` is None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from queuekit.errors import ShutdownTimeout
from queuekit.session.monitored import monitored_training_session
from queuekit.session.queue_session import QueueSession

_v1 = tf.compat.v1
_log = _v1.logging  # Slim's messages, where Slim's users look for them

_USE_DEFAULT = 0  # tf_slim's own sentinel (0), so code passing it along keeps working

# A worker's wait for the chief's startup_delay_steps checks the step this often (Slim: 1 s).
_STEP_POLL_SECS = 1.0


def train_step(sess, train_op, global_step, train_step_kwargs) -> tuple[Any, bool]:
    """Slim's ``train_step``: one step, logged when ``should_log``; ``(loss, should_stop)``.

    ``should_log`` is fetched with the step (Slim runs it, and ``should_stop``,
    each in a run of its own); ``should_stop``, when the dict has it, after the
    step, as Slim does. ``train``'s own dict has none: a ``StopAtStepHook``
    stops at ``number_of_steps``.
    """
    start = time.time()
    options = metadata = None
    if "should_trace" in train_step_kwargs:
        if "logdir" not in train_step_kwargs:
            raise ValueError("logdir must be present in train_step_kwargs when "
                             "should_trace is present")
        if sess.run(train_step_kwargs["should_trace"]):
            options = _v1.RunOptions(trace_level=_v1.RunOptions.FULL_TRACE)
            metadata = _v1.RunMetadata()
    fetches = {"loss": train_op, "step": global_step}
    if "should_log" in train_step_kwargs:
        fetches["log"] = train_step_kwargs["should_log"]
    values = sess.run(fetches, options=options, run_metadata=metadata)
    elapsed = time.time() - start
    if metadata is not None:
        _write_trace(metadata, train_step_kwargs, values["step"])
    if values.get("log"):
        _log.info("global step %d: loss = %.4f (%.3f sec/step)", values["step"],
                  values["loss"], elapsed)
    should_stop = False
    if "should_stop" in train_step_kwargs:
        should_stop = bool(sess.run(train_step_kwargs["should_stop"]))
    return values["loss"], should_stop


def _write_trace(metadata, kwargs, step) -> None:
    """Slim's trace: a Chrome timeline ``tf_trace-<step>.json`` and the run metadata."""
    from tensorflow.python.client import timeline

    trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
    with open(os.path.join(kwargs["logdir"], f"tf_trace-{step}.json"), "w") as f:
        f.write(trace)
    if kwargs.get("summary_writer") is not None:
        kwargs["summary_writer"].add_run_metadata(metadata, f"run_metadata-{step}")
        kwargs["summary_writer"].flush()


def train(train_op, logdir, train_step_fn: Callable[..., Any] = train_step,
          train_step_kwargs=_USE_DEFAULT, log_every_n_steps: int = 1, graph=None,
          master: str = "", is_chief: bool = True, global_step=None,
          number_of_steps: int | None = None, init_op=_USE_DEFAULT, init_feed_dict=None,
          local_init_op=_USE_DEFAULT, init_fn=None, ready_op=_USE_DEFAULT,
          summary_op=_USE_DEFAULT, save_summaries_secs: float = 600,
          summary_writer=_USE_DEFAULT, startup_delay_steps: int = 0, saver=None,
          save_interval_secs: float = 600, sync_optimizer=None, session_config=None,
          session_wrapper=None, trace_every_n_steps: int | None = None,
          ignore_live_threads: bool = False, **session_args):
    """``slim.learning.train``, argument for argument, on a queuekit session.

    Restores the latest checkpoint of ``logdir`` (else runs ``init_op`` and
    ``init_fn(sess)``), runs ``train_step_fn(sess, train_op, global_step,
    train_step_kwargs)`` until it returns ``should_stop``, the global step
    reaches ``number_of_steps`` or the input ends, writes checkpoints
    (``model.ckpt``) every ``save_interval_secs`` and at the end, and summaries
    and ``global_step/sec`` every ``save_summaries_secs`` into ``logdir``.
    Returns the last step's loss (None if no step ran). Keyword arguments
    beyond Slim's go to :func:`~queuekit.monitored_training_session`
    (``stall_timeout_secs``, ``save_on_preemption``...).
    """
    if train_op is None:
        raise ValueError("train_op cannot be None.")
    if logdir is None:
        for name, value, default in (("summary_op", summary_op, _USE_DEFAULT),
                                     ("saver", saver, None),
                                     ("trace_every_n_steps", trace_every_n_steps, None)):
            if value is not default:
                raise ValueError(f"Cannot provide {name} because logdir=None")
    if isinstance(sync_optimizer, _v1.train.SyncReplicasOptimizer):
        sync_optimizer = [sync_optimizer]
    if sync_optimizer is not None and startup_delay_steps > 0:
        raise ValueError("startup_delay_steps must be zero when sync_optimizer is supplied.")
    if number_of_steps is not None and number_of_steps <= 0:
        raise ValueError("`number_of_steps` must be either None or a positive number.")

    graph = graph or _v1.get_default_graph()
    with graph.as_default():
        if global_step is None:
            global_step = _v1.train.get_or_create_global_step()
        saver = saver or _v1.train.Saver()
        if summary_op is _USE_DEFAULT:
            summary_op = _v1.summary.merge_all()
        if summary_writer is _USE_DEFAULT:
            summary_writer = (_v1.summary.FileWriterCache.get(logdir) if logdir and is_chief
                              else None)
        if train_step_kwargs is _USE_DEFAULT:
            train_step_kwargs = _step_kwargs(global_step, number_of_steps, log_every_n_steps,
                                             trace_every_n_steps if is_chief else None,
                                             logdir, ask_stop=train_step_fn is not train_step)
        if summary_writer is not None:
            train_step_kwargs["summary_writer"] = summary_writer
        scaffold = _v1.train.Scaffold(
            init_op=None if init_op is _USE_DEFAULT else init_op, init_feed_dict=init_feed_dict,
            init_fn=None if init_fn is None else (lambda scaffold, sess: init_fn(sess)),
            ready_op=None if ready_op is _USE_DEFAULT else ready_op,
            local_init_op=None if local_init_op is _USE_DEFAULT else local_init_op,
            summary_op=summary_op, saver=saver)
        hooks = [opt.make_session_run_hook(is_chief) for opt in sync_optimizer or ()]
        hooks.extend(session_args.pop("hooks", None) or ())
        if number_of_steps is not None:
            hooks.append(_v1.train.StopAtStepHook(last_step=number_of_steps))
        chief_hooks = _train_chief_hooks(logdir, saver, summary_op, summary_writer,
                                         save_summaries_secs, save_interval_secs)
        chief_hooks.extend(session_args.pop("chief_only_hooks", None) or ())
        return _train_loop(
            lambda: monitored_training_session(
                master=master, is_chief=is_chief, checkpoint_dir=logdir, scaffold=scaffold,
                hooks=hooks, chief_only_hooks=chief_hooks, save_checkpoint_secs=None,
                save_checkpoint_steps=None, save_summaries_secs=None, save_summaries_steps=None,
                log_step_count_steps=None, config=session_config, **session_args),
            train_step_fn, train_op, global_step, train_step_kwargs,
            startup_delay_steps=0 if is_chief else min(startup_delay_steps,
                                                       number_of_steps or startup_delay_steps),
            session_wrapper=session_wrapper, ignore_live_threads=ignore_live_threads)


def _step_kwargs(global_step, number_of_steps, log_every_n_steps, trace_every_n_steps, logdir,
                 ask_stop: bool) -> dict[str, Any]:
    """Slim's default ``train_step_kwargs`` (``should_stop`` only for the program's own
    step function: queuekit's stops by a hook, without a run of its own)."""
    kwargs: dict[str, Any] = {}
    with tf.name_scope("train_step"):
        if ask_stop:
            kwargs["should_stop"] = (tf.greater_equal(global_step, number_of_steps)
                                     if number_of_steps else tf.constant(False))
        if log_every_n_steps > 0:
            kwargs["should_log"] = tf.equal(tf.math.floormod(global_step, log_every_n_steps), 0)
        if trace_every_n_steps is not None:
            kwargs["should_trace"] = tf.equal(
                tf.math.floormod(global_step, trace_every_n_steps), 0)
            kwargs["logdir"] = logdir
    return kwargs


def _train_chief_hooks(logdir, saver, summary_op, summary_writer, save_summaries_secs,
                       save_interval_secs) -> list[Any]:
    """The chief's checkpoints and summaries, where and when Slim's Supervisor writes them."""
    if not logdir:
        return []
    # Slim saves at the end even with save_interval_secs=0: the hook saves at its end.
    hooks: list[Any] = [_v1.train.CheckpointSaverHook(
        logdir, saver=saver, checkpoint_basename="model.ckpt",
        save_secs=save_interval_secs if save_interval_secs else None,
        save_steps=None if save_interval_secs else 2**62)]
    if summary_writer is not None and save_summaries_secs:
        hooks.append(_v1.train.StepCounterHook(every_n_steps=None, every_n_secs=save_summaries_secs,
                                               summary_writer=summary_writer))
        if summary_op is not None:
            hooks.append(_v1.train.SummarySaverHook(
                save_secs=save_summaries_secs, summary_writer=summary_writer,
                summary_op=summary_op))
    return hooks


def _train_loop(make_session, train_step_fn, train_op, global_step, kwargs, *,
                startup_delay_steps: int, session_wrapper, ignore_live_threads: bool):
    """Slim's loop: the steps until a stop, the end of the input, or an error; a new
    session after an ``AbortedError`` (a parameter server restarted)."""
    total_loss = None
    while True:
        try:
            with make_session() as qs:
                _log.info("Starting Session.")
                sess = qs if session_wrapper is None else session_wrapper(qs)
                _wait_for_step(qs, global_step, startup_delay_steps)
                try:
                    while not qs.should_stop():
                        total_loss, should_stop = train_step_fn(sess, train_op, global_step,
                                                                kwargs)
                        if should_stop:
                            _log.info("Stopping Training.")
                            break
                except tf.errors.OutOfRangeError as e:
                    _log.info("Caught OutOfRangeError. Stopping Training. %s", e)
            return total_loss
        except tf.errors.AbortedError:
            _log.info("Retrying training!")
        except ShutdownTimeout as e:
            if not ignore_live_threads:
                raise
            _log.warning("%s (ignore_live_threads=True)", e)
            return total_loss


def _wait_for_step(qs, global_step, step: int) -> None:
    """A non-chief waits for the chief's first ``startup_delay_steps`` (Slim's wait)."""
    while step > 0 and not qs.should_stop():
        if _v1.train.global_step(qs, global_step) >= step:
            return
        time.sleep(_STEP_POLL_SECS)


class SummaryAtEndHook(tf.compat.v1.train.SessionRunHook):
    """Slim's ``SummaryAtEndHook``: the summary op once, after the evaluation, at the
    checkpoint's global step."""

    def __init__(self, log_dir=None, summary_writer=None, summary_op=None, feed_dict=None):
        if log_dir is None and summary_writer is None:
            raise ValueError("One of log_dir or summary_writer should be used.")
        self._log_dir, self._writer = log_dir, summary_writer
        self._op, self._replace_op, self._feed = summary_op, summary_op is None, feed_dict

    def begin(self):
        if self._replace_op:
            self._op = _v1.summary.merge_all()
        self._global_step = _v1.train.get_or_create_global_step()

    def after_create_session(self, session, coord):
        if self._writer is None:
            self._writer = _v1.summary.FileWriterCache.get(self._log_dir)

    def end(self, session):
        if self._op is not None:
            step = _v1.train.global_step(session, self._global_step)
            self._writer.add_summary(session.run(self._op, self._feed), step)
        self._writer.flush()


def evaluate_once(master, checkpoint_path, logdir, num_evals: int | None = 1,
                  initial_op=None, initial_op_feed_dict=None, eval_op=None,
                  eval_op_feed_dict=None, final_op=None, final_op_feed_dict=None,
                  summary_op=_USE_DEFAULT, summary_op_feed_dict=None,
                  variables_to_restore=None, session_config=None,
                  hooks: Sequence[Any] | None = None, **session_args):
    """``slim.evaluation.evaluate_once``: ``eval_op`` ``num_evals`` times (None: to the end
    of the input) on the model of ``checkpoint_path``, then ``final_op``, whose value it
    returns, and ``summary_op`` written into ``logdir``. Keyword arguments beyond Slim's
    go to :class:`~queuekit.QueueSession` (``stall_timeout_secs``...)."""
    evaluation = _Evaluation(logdir, num_evals, initial_op, initial_op_feed_dict, None,
                             eval_op, eval_op_feed_dict, final_op, final_op_feed_dict,
                             summary_op, summary_op_feed_dict, variables_to_restore,
                             session_config, hooks, master, session_args)
    return evaluation.run(checkpoint_path)


def evaluation_loop(master, checkpoint_dir, logdir, num_evals: int | None = 1,
                    initial_op=None, initial_op_feed_dict=None, init_fn=None, eval_op=None,
                    eval_op_feed_dict=None, final_op=None, final_op_feed_dict=None,
                    summary_op=_USE_DEFAULT, summary_op_feed_dict=None,
                    variables_to_restore=None, eval_interval_secs: float = 60,
                    max_number_of_evaluations: int | None = None, session_config=None,
                    timeout: float | None = None, timeout_fn=None,
                    hooks: Sequence[Any] | None = None, **session_args):
    """``slim.evaluation.evaluation_loop``: :func:`evaluate_once` on each new checkpoint of
    ``checkpoint_dir`` (``tf.compat.v1.train.checkpoints_iterator``: at most one every
    ``eval_interval_secs``, ending after ``timeout`` s without one when ``timeout_fn`` is
    absent or returns True) until ``max_number_of_evaluations``; the last ``final_op``
    value."""
    evaluation = _Evaluation(logdir, num_evals, initial_op, initial_op_feed_dict, init_fn,
                             eval_op, eval_op_feed_dict, final_op, final_op_feed_dict,
                             summary_op, summary_op_feed_dict, variables_to_restore,
                             session_config, hooks, master, session_args)
    result = None
    paths = _v1.train.checkpoints_iterator(checkpoint_dir, min_interval_secs=eval_interval_secs,
                                           timeout=timeout, timeout_fn=timeout_fn)
    for done, path in enumerate(paths, 1):
        result = evaluation.run(path)
        if max_number_of_evaluations is not None and done >= max_number_of_evaluations:
            break
    return result


class _Evaluation:
    """One graph's evaluation, built once (its ops, before any session finalizes the
    graph) and run on as many checkpoints as it is given."""

    def __init__(self, logdir, num_evals, initial_op, initial_op_feed_dict, init_fn, eval_op,
                 eval_op_feed_dict, final_op, final_op_feed_dict, summary_op,
                 summary_op_feed_dict, variables_to_restore, session_config, hooks, master,
                 session_args):
        self.graph = _v1.get_default_graph()
        if summary_op is _USE_DEFAULT:
            summary_op = _v1.summary.merge_all()
        self.hooks = list(hooks or [])
        if summary_op is not None:
            self.hooks.append(SummaryAtEndHook(log_dir=logdir, summary_op=summary_op,
                                               feed_dict=summary_op_feed_dict))
        self.final = _v1.train.FinalOpsHook(final_op, final_op_feed_dict)
        self.hooks.append(self.final)
        self.scaffold = _v1.train.Scaffold(
            init_op=initial_op, init_feed_dict=initial_op_feed_dict,
            init_fn=None if init_fn is None else (lambda scaffold, sess: init_fn(sess)),
            saver=None if variables_to_restore is None else _v1.train.Saver(
                variables_to_restore))
        self.num_evals, self.eval_op, self.eval_feed = num_evals, eval_op, eval_op_feed_dict
        self.master, self.config, self.session_args = master, session_config, session_args

    def run(self, checkpoint_path):
        creator = _v1.train.ChiefSessionCreator(
            scaffold=self.scaffold, checkpoint_filename_with_path=checkpoint_path,
            master=self.master, config=self.config)
        _log.info("Starting evaluation at %s", time.strftime("%Y-%m-%d-%H:%M:%S", time.gmtime()))
        start = time.time()
        with QueueSession(self.graph, target=self.master, config=self.config,
                          session_creator=creator, hooks=self.hooks,
                          **self.session_args) as qs:
            done = 0
            while (self.eval_op is not None and not qs.should_stop()
                   and (self.num_evals is None or done < self.num_evals)):
                qs.run(self.eval_op, self.eval_feed)
                done += 1
        _log.info("Inference Time : %.5fs", time.time() - start)
        _log.info("Finished evaluation at %s", time.strftime("%Y-%m-%d-%H:%M:%S", time.gmtime()))
        return self.final.final_ops_values
