"""The modeled accelerator: vLLM's real engine and scheduler over a modeled GPU.

Owns the cost model and its profiles, the executor that sleeps each step's modeled time, the fits
that calibrate profiles (:mod:`~dlfp.sim.stepfit` from a CPU run's step records,
:mod:`~dlfp.sim.gpufit` from forward passes that :mod:`~dlfp.sim.gpucal` times on a GPU node) and
the scheduler-without-engine rig of its tests and benchmark (:mod:`~dlfp.sim.standalone`).
:mod:`dlfp.sim.costmodel` (pure) prices a step from device profiles (``profiles/*.yaml``) and
:mod:`dlfp.sim.executor` (vLLM glue) sleeps that price per step; importing this package does not
import vLLM, and :mod:`~dlfp.sim.gpucal` runs with PyTorch, transformers, numpy, scipy and PyYAML
alone. Must not import: dlfp.harness, dlfp.trials, dlfp.analysis, dlfp.studies, dlfp.cluster,
dlfp.book, dlfp.bench.
"""
