"""vLLM glue: the scheduler plug-ins, stamped executors, direct drive, vLLM's version and command line.

Owns everything that subclasses or hooks vLLM 0.32, kept thin: the decisions live in
:mod:`dlfp.control`. ``--scheduler-cls dlfp.vllm.DLFPScheduler`` (or ``DLFPAsyncScheduler``;
either name picks the variant that matches the engine's scheduling mode). The two names load
:mod:`dlfp.vllm.scheduler` on first access, so the completion stamps, which the modeled
executor imports, and the version lookup do not pull in the scheduler.
Must not import: dlfp.paths, dlfp.harness, dlfp.trials, dlfp.analysis, dlfp.studies, dlfp.sim,
dlfp.cluster, dlfp.book, dlfp.bench (the plug-in's distribution holds none of them).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DLFPAsyncScheduler", "DLFPScheduler"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dlfp.vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
