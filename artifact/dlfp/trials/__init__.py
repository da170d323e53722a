"""Paired trials: configs, the design and its pre-flight, the runner, run folders, provenance.

Owns: everything that decides what runs and writes ``data/runs/<id>/``, and the progress lines a
run reports (:mod:`~dlfp.trials.progress`). Must not import:
dlfp.analysis.runs, dlfp.studies.plans, dlfp.cluster, dlfp.book, dlfp.bench.
"""
