"""One run with ``SessionRunHook`` objects, merged as ``MonitoredSession`` merges them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

_v1 = tf.compat.v1


def run_with_hooks(hooks: Sequence[Any], session, run: Callable, fetches, feed_dict,
                   options, run_metadata) -> tuple[Any, bool]:
    """``run(fetches, feeds, options, run_metadata)`` with every hook's requests added.

    The merge follows ``monitored_session._HookedSession.run``: each hook's
    ``before_run`` may add fetches, feeds (never one already fed) and run
    options; ``after_run`` gets its own results. Returns the caller's results
    and whether a hook asked to stop.
    """
    ctx = _v1.train.SessionRunContext(
        original_args=_v1.train.SessionRunArgs(fetches, feed_dict), session=session)
    options = options if options is not None else _v1.RunOptions()
    feeds = dict(feed_dict or {})
    hook_fetches = {}
    for hook in hooks:
        request = hook.before_run(ctx)
        if request is None:
            continue
        if request.fetches is not None:
            hook_fetches[hook] = request.fetches
        if request.feed_dict:
            clash = set(feeds) & set(request.feed_dict)
            if clash:
                raise RuntimeError(f"{type(hook).__name__} feeds tensors already fed: {clash}")
            feeds.update(request.feed_dict)
        if request.options:
            options.trace_level = max(options.trace_level, request.options.trace_level)
            options.timeout_in_ms = max(options.timeout_in_ms, request.options.timeout_in_ms)
            options.debug_options.debug_tensor_watch_opts.extend(
                request.options.debug_options.debug_tensor_watch_opts)
    if run_metadata is None:
        run_metadata = _v1.RunMetadata()
    out = run({"caller": fetches, "hooks": hook_fetches}, feeds, options, run_metadata)
    for hook in hooks:
        hook.after_run(ctx, _v1.train.SessionRunValues(
            results=out["hooks"].get(hook), options=options, run_metadata=run_metadata))
    return out["caller"], ctx.stop_requested
