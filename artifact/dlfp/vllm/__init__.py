"""vLLM plug-ins: ``--scheduler-cls dlfp.vllm.DLFPScheduler`` (either name picks the right variant)."""

from dlfp.vllm.scheduler import DLFPAsyncScheduler, DLFPScheduler

__all__ = ["DLFPAsyncScheduler", "DLFPScheduler"]
