"""What a resumed session's runner threads run while a restore left records to skip
(:meth:`queuekit.resume.tally.InputPositions.enqueue_for`): reads of their reader alone,
many records a run where the reader can (:func:`queuekit.resume.graph.reads`), each
counted down by the tally, what was not consumed fed into the enqueue op in place of its
read, until nothing is left to skip or kept back. Loaded only then."""

from __future__ import annotations

import collections

SKIP_READ_BYTES = 8 << 20  # what a read of many records takes, about, whatever their size


def skipping(op, plain, make_callable, tally, read, many: bool, bulk):
    """The callable a runner thread runs for enqueue ``op`` of ``tally``'s reader, whose
    read is ``read`` ((keys, values); vectors with ``many``) and ``bulk`` its read of up to
    a fed count, or None; ``plain`` once nothing is left to skip.

    ``make_callable(fetches, feed_list=None)``: the session's, as the thread runs."""
    keys, values = read
    feed = make_callable(op, [keys, values])
    if many or bulk is None:
        take = make_callable([keys, values])

        def enqueue():
            while tally.pending:  # reads until one is kept (a read of many: one of them)
                k, v = take()
                keep = tally.keep(k if many else [k])
                if many and keep.any():
                    return feed(k[keep], v[keep])
                if not many and keep[0]:
                    return feed(k, v)
            return plain()

        return enqueue
    take_many = make_callable(list(bulk[:2]), [bulk[2]])
    kept: collections.deque = collections.deque()  # read, not consumed: fed one a run
    count = 64

    def enqueue_one():
        nonlocal count
        while not kept and tally.pending:
            k, v = take_many(count)
            if len(v):
                count = int(min(1024, max(1, SKIP_READ_BYTES * len(v) // max(
                    1, sum(map(len, v))))))
            keep = tally.keep(k)
            kept.extend(zip(k[keep], v[keep], strict=True))
        if kept:
            return feed(*kept.popleft())
        return plain()

    return enqueue_one
