"""The version, in a module of its own so the CLI can print it without importing TensorFlow."""

__version__ = "0.8.0"
