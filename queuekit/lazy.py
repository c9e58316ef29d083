"""Names a package re-exports, each imported on first use.

So that importing a package stays cheap and free of TensorFlow: ``queuekit
--version``, ``make``'s worker processes and Beam's workers import parts of
queuekit that need no TensorFlow, and the CLI quiets TensorFlow's start-up
log before anything loads it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(namespace: dict[str, Any], where: dict[str, str],
            check: Callable[[], None] | None = None, subpackages: tuple[str, ...] = ()):
    """``(__getattr__, __dir__)`` for a package whose ``namespace`` re-exports ``where``'s
    names (name -> the module that defines it) and its ``subpackages`` (``qk.cluster``
    without an ``import queuekit.cluster``); ``check()`` runs before a first import."""
    package = namespace["__name__"]
    where = {**where, **{sub: "" for sub in subpackages}}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module == "":
            value = importlib.import_module(f"{package}.{name}")
            namespace[name] = value
            return value
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if check is not None:
            check()
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later look-ups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
