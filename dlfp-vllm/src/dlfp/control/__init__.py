"""Control laws, their parameters, feedback signals and the step log: pure logic.

Owns: the DLFP law (:mod:`~dlfp.control.law`), its validated parameters, the signals that
feed it and the per-step records the scheduler writes. Must not import: vllm, dlfp.vllm,
dlfp.harness, dlfp.trials, dlfp.analysis.runs, dlfp.studies.plans, dlfp.sim, dlfp.cluster, dlfp.book,
dlfp.bench, dlfp.paths (unit-testable in microseconds, no vLLM needed; the plug-in's distribution
holds only this and :mod:`dlfp.vllm`).
"""
