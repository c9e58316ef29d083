"""What a builder does so that the program's graph keeps working as it did without queuekit.

A builder adds ops to the program's graph; two of TF1's habits would then go
wrong, silently or far from the cause (#43):

- summaries made inside a ``parse_fn`` (im2txt's, Slim's and Inception's
  preprocessing make image summaries) would be merged by ``merge_all()`` into
  the step, which would then read records that never reach a batch;
- a graph the program finalizes before its session starts (im2txt's, TF's
  eval scripts) leaves the session no way to make the op that finds the
  pipeline's uninitialised epoch counters, as ``Scaffold`` makes its
  ``ready_op`` before it finalizes.
"""

from __future__ import annotations

import contextlib
import logging

import tensorflow as tf

from queuekit.graph_keys import GraphKeys
from queuekit.graph_walk import uninitialized_report

log = logging.getLogger(__name__)
_v1 = tf.compat.v1


@contextlib.contextmanager
def summaries_kept_out(pipeline: str):
    """Summaries made while the readers are built (a ``parse_fn``'s image summaries, as
    im2txt's, Slim's and Inception's preprocessing make) go to
    ``GraphKeys.READER_SUMMARIES``, not ``SUMMARIES``.

    A summary of a reader's tensor runs the reader: a ``merge_all()`` fetched by the step
    would read records in the step, and they would never reach a batch (one epoch of 40
    records delivered 0, silently; #43). The Summaries are kept, not run."""
    graph = _v1.get_default_graph()
    summaries = graph.get_collection_ref(_v1.GraphKeys.SUMMARIES)
    before = len(summaries)
    yield
    made = summaries[before:]
    if made:
        del summaries[before:]
        for summary in made:
            graph.add_to_collection(GraphKeys.READER_SUMMARIES, summary)
        log.info("%s: %d summaries made in its readers (%s) are kept out of SUMMARIES, so "
                 "merge_all() never reads records in a step: GraphKeys.READER_SUMMARIES "
                 "holds them", pipeline, len(made), made[0].op.name)


def report_for_finalize() -> None:
    """Make, in the default graph, the op that reports which of its variables so far have
    no value, in ``GraphKeys.VARIABLE_REPORTS``: a session on the finalized graph runs it
    (``session.start.Initializer``), else it is never run."""
    graph = _v1.get_default_graph()
    report = uninitialized_report(graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
                                  + graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES))
    graph.add_to_collection(GraphKeys.VARIABLE_REPORTS, report)
