"""Running one arm on a real (or modeled) vLLM engine: workload, open-loop client, engine, telemetry.

Owns: seeded workloads, the client that replays them with per-token timestamps, the engine
arguments every arm uses, one arm end to end, the hardware sampler, and the log file that takes
the engines' own output (:mod:`~dlfp.harness.quiet`). Must not import:
dlfp.trials, dlfp.analysis.runs, dlfp.studies.plans, dlfp.cluster, dlfp.book, dlfp.bench.
"""
