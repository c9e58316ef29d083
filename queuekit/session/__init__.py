"""Running a graph: QueueSession, its runner threads, stall watch, signal routing and shutdown."""
