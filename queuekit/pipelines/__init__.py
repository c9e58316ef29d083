"""Input pipelines: builders of TF1 queue-runner graphs, and the record layouts they parse."""
