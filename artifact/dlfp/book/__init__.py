"""The book as a build: papermill notebooks in order, their helpers, byte-stable rendering.

Owns: ``dlfp pipeline`` and what the notebooks call. Must not import: dlfp.cluster, dlfp.bench.
"""
