"""TF's own distributed runtime: cluster tasks, their gRPC servers, the work queue's contract."""
