"""The graph collections queuekit's builders fill and its sessions read, named once.

As TensorFlow's ``GraphKeys``: a builder (``pipelines``) marks what it built,
a ``QueueSession`` (``session``) finds it in the graph; the two parts never
import each other, both import this.
"""


class GraphKeys:
    """Names of queuekit's graph collections."""

    # Names of the queues whose runners an "auto" builder built: a tuner thread sets how
    # many of their threads run.
    AUTOTUNE = "queuekit_autotune"
    # One cluster.work.WorkQueue per work_queue builder: the session runs its threads.
    WORK_QUEUES = "queuekit_work_queues"
