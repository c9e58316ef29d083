"""The ``queuekit`` command (``python -m queuekit``): ``main`` in :mod:`queuekit.cli.main`, its
argument types in ``arguments.py``, what it does as a program (quieting TensorFlow, ending on
SIGTERM/SIGHUP) in ``program.py``, ``bench``'s arguments in ``bench.py``. Nothing here loads
TensorFlow: ``queuekit --version`` stays instant."""

from queuekit.cli.main import main

__all__ = ["main"]
