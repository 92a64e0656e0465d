"""Benchmarks: scripts run as ``python -m benchmarks.<name>``; ``--quick`` is the CI smoke size."""
