"""Resume, both halves in one place: what a builder adds to a pipeline so that it can be
resumed (``graph.py``: its own filename producer, the reads noted, the keys of consumed
records), what a session does with it (``tally.py``: the session feature that counts what
the steps consumed, writes it beside each checkpoint and resumes from it), and the
position file as untrusted input (``file.py``). See ``docs/resume.rst``."""
