"""The modeled-accelerator mode: vLLM's real engine and scheduler over a modeled GPU.

:mod:`dlfp.sim.costmodel` (pure) prices a step from device profiles (``profiles/*.yaml``),
:mod:`dlfp.sim.executor` (vLLM glue) sleeps that price per step, and
:mod:`dlfp.sim.calibrate` (pure) fits step-time coefficients to measured step records.
Importing this package does not import vLLM.
"""
