"""Build the modeled executor and a real vLLM scheduler without an engine.

The executor tests and the executor-overhead benchmark play the engine core's loop by
hand (like vLLM's own scheduler tests): a ``VllmConfig`` carrying ``dlfp_sim`` settings,
the executor built from it, and a scheduler over the executor's KV cache spec.
"""

from __future__ import annotations

from typing import Any

from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
from vllm.v1.structured_output import StructuredOutputManager

from dlfp.paths import model_path
from dlfp.sim.executor import ModeledExecutor


def make_config(sim: dict[str, Any], model: str = "qwen3-tiny", budget: int = 512) -> VllmConfig:
    """A config for ``model`` (weightless) with ``additional_config["dlfp_sim"] = sim``."""
    model_config = ModelConfig(model=model_path(model), skip_tokenizer_init=True, dtype="float32",
                               max_model_len=4096, seed=0)
    scheduler_config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=64, max_model_len=4096,
                                       enable_chunked_prefill=True, is_encoder_decoder=False)
    return VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                      cache_config=CacheConfig(cache_dtype="auto", enable_prefix_caching=False),
                      additional_config={"dlfp_sim": sim})


def make_executor(sim: dict[str, Any], model: str = "qwen3-tiny", budget: int = 512) -> ModeledExecutor:
    """The modeled executor as an engine would build it (it turns async scheduling back on)."""
    return ModeledExecutor(make_config(sim, model, budget))


def make_scheduler(executor: ModeledExecutor, num_blocks: int) -> Scheduler:
    """vLLM's scheduler (async variant when the executor's config says so) over its KV spec."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    specs = executor.get_kv_cache_specs()[0]
    spec = next(iter(specs.values()))
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(list(specs), spec)])
    config = executor.vllm_config
    config.cache_config.num_gpu_blocks = num_blocks  # the engine core sets this from the KV cache config
    cls = AsyncScheduler if config.scheduler_config.async_scheduling else Scheduler
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=spec.block_size, log_stats=False)
