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
    if many:  # the kept records of a read, fed together
        take = make_callable([keys, values])

        def enqueue():
            while tally.pending:  # reads until one of a read is kept
                k, v = take()
                keep = tally.keep(k)
                if keep.any():
                    return feed(k[keep], v[keep])
            return plain()

        return enqueue
    if bulk is None:  # one record a run (an image folder's reads)
        one = make_callable([keys, values])

        def take():
            k, v = one()
            return [k], [v]
    else:
        many_of = make_callable(list(bulk[:2]), [bulk[2]])
        count = 64

        def take():
            nonlocal count
            k, v = many_of(count)
            if len(v):
                count = int(min(1024, max(1, SKIP_READ_BYTES * len(v) // max(
                    1, sum(map(len, v))))))
            return k, v

    kept: collections.deque = collections.deque()  # read, not consumed: fed one a run

    def enqueue_one():
        while not kept and tally.pending:
            k, v = take()
            keep = tally.keep(k)
            kept.extend(rec for rec, ok in zip(zip(k, v, strict=True), keep, strict=True) if ok)
        if kept:
            return feed(*kept.popleft())
        return plain()

    return enqueue_one
