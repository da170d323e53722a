"""Benchmarks: commands that report ratios measured side by side in one run."""
