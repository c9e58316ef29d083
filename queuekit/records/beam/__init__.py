"""`make --runner beam`: the same dataset written by an Apache Beam job (Beam is imported
only here)."""
