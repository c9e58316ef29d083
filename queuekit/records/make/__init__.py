"""`make`: image folders to TFRecord shards, in worker processes, committed whole."""
