"""What the CLI does as a program, never the library: quiet TensorFlow, end on SIGTERM/SIGHUP."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading

from queuekit.signals import ENDING, handlers_replaced


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread so that every ``finally`` cleans up."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminate(signum, frame):
    raise Terminated(signum)


@contextlib.contextmanager
def signals_end_the_command():
    """SIGTERM and SIGHUP end the command like Ctrl-C (a batch scheduler's preemption,
    ``timeout``, ``docker stop``), unless the process chose to ignore them (``nohup``)."""
    terminating = [s for s in ENDING if s != signal.SIGINT]
    with handlers_replaced(lambda _, handler: _terminate if handler == signal.SIG_DFL else None,
                           terminating):
        yield


def ignore_ending_signals() -> None:
    """The command was ended by a signal: ignore SIGINT, SIGTERM and SIGHUP until exit.

    What is left is the interpreter's exit, which joins the worker pool's thread and stops
    the fork server (tens of ms). A second Ctrl-C there killed the process by SIGINT
    instead of letting it exit 130. The program calls this, never the library.
    """
    if threading.current_thread() is threading.main_thread():
        for signum in ENDING:
            signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def quiet_tensorflow(verbose: bool, *, load: bool = True):
    """TensorFlow's start-up log off for the command; ``load``: import it now, silently
    (a command that needs no TensorFlow, a local ``make``, does not load it at all)."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    set_env = not verbose and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    if set_env:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # read once, when TensorFlow loads
    if not verbose:
        tf_logger.setLevel(logging.ERROR)
    if set_env and load:
        _import_tensorflow_silently()
    try:
        yield
    finally:
        tf_logger.setLevel(level)
        if set_env:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


def _import_tensorflow_silently() -> None:
    """Import TensorFlow with the C-level stderr closed for the moment it takes.

    Its start-up lines (oneDNN, cpu_feature_guard, "All log messages before
    absl::InitializeLog()") are written before TF_CPP_MIN_LOG_LEVEL is read.
    An import error is raised with stderr restored, so it is seen.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded, captured): nothing to hide
        import tensorflow  # noqa: F401
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
