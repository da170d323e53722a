"""Benchmarks: commands that report ratios measured side by side in one run (``dlfp bench ...``).

Each module is one command; none is a timed test. Must not import: dlfp.cluster.
"""
