"""Metrics for `evaluate.load(<directory>)`: each subdirectory is one metric module."""
