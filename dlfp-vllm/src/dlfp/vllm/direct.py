"""Drive a vLLM scheduler directly, without an engine: real scheduler, fabricated outputs.

vLLM forces async scheduling off on the CPU platform, so the async variant cannot run in
a CPU engine; like vLLM's own scheduler tests, this module builds a scheduler from a
``VllmConfig`` and feeds it ``ModelRunnerOutput`` objects that sample one token for each
request whose prompt is complete after the step (none for a partial prefill chunk). Used
by the tests and by the ``schedule()`` overhead benchmark.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

BLOCK_SIZE = 16
SAMPLED_TOKEN = 7


def make_scheduler(
    scheduler_cls: type,
    *,
    async_scheduling: bool,
    model: str,
    dlfp: dict[str, Any] | None = None,
    max_num_batched_tokens: int = 4096,
    max_num_seqs: int = 128,
    num_blocks: int = 65536,
) -> Any:
    """A scheduler of ``scheduler_cls`` (ours or vLLM's) over the model config in directory ``model``.

    Only the config is read (no tokenizer, no weights): a weightless ``config.json`` is enough.
    """
    model_config = ModelConfig(model=model, skip_tokenizer_init=True,
                               dtype="float32", max_model_len=8192, seed=0)
    scheduler_config = SchedulerConfig(
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        max_model_len=8192, enable_chunked_prefill=True, async_scheduling=async_scheduling,
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(block_size=BLOCK_SIZE, cache_dtype="auto",
                               enable_prefix_caching=False)
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config,
                             additional_config={"dlfp": dict(dlfp or {})})
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    # The CPU platform turns async scheduling off while the config is built; put it back.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    hf = model_config.hf_config
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=hf.num_key_value_heads,
                             head_size=hf.head_dim, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec([f"layer.{i}" for i in range(hf.num_hidden_layers)],
                                          spec)],
    )
    return scheduler_cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                         structured_output_manager=StructuredOutputManager(vllm_config),
                         block_size=BLOCK_SIZE, log_stats=False)


def make_request(request_id: str, prompt_len: int, max_tokens: int) -> Request:
    """A greedy token-id request of exact prompt length that ignores EOS."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    prompt = [10 + (hash(request_id) + i) % 30000 for i in range(prompt_len)]
    return Request(request_id=request_id, prompt_token_ids=prompt, sampling_params=params,
                   pooling_params=None)


def fabricate_output(scheduler: Any, out: SchedulerOutput) -> ModelRunnerOutput:
    """What a model runner returns for ``out``: a token for each request done with its prompt.

    Call it right after ``schedule()`` returned ``out``: whether a request finished its
    prompt in this step is the scheduler's ``is_prefill_chunk`` flag as of that moment.
    """
    req_ids = list(out.num_scheduled_tokens)
    sampled = [[] if scheduler.requests[r].is_prefill_chunk else [SAMPLED_TOKEN] for r in req_ids]
    return ModelRunnerOutput(req_ids=req_ids,
                             req_id_to_index={r: i for i, r in enumerate(req_ids)},
                             sampled_token_ids=sampled)


def run_to_completion(scheduler: Any, arrivals: Mapping[int, Iterable[Request]], *,
                      async_depth: int, max_steps: int = 100000) -> list[SchedulerOutput]:
    """Schedule until every request finishes; ``async_depth`` steps may be in flight.

    ``arrivals`` maps a step index to the requests added just before that step is
    scheduled. Depth 1 is the synchronous engine loop; depth 2 is vLLM's batch queue
    under async scheduling (step N+1 is scheduled before step N's output is processed).

    A ``Request`` is the scheduler's mutable state, finished in place: every run needs fresh
    ones (:func:`make_request` again). One reused from an earlier run would sit in the waiting
    queue already finished until vLLM pops it ("Invalid request status: FINISHED_LENGTH_CAPPED",
    far from the cause), so it is refused here, before anything runs.
    """
    pending = {step: list(reqs) for step, reqs in arrivals.items()}
    for r in (r for reqs in pending.values() for r in reqs):
        if r.status != RequestStatus.WAITING or r.num_computed_tokens or r.num_output_tokens:
            raise ValueError(f"request {r.request_id!r} was already scheduled ({r.status.name}, "
                             f"{r.num_output_tokens} output tokens): build fresh requests for each run")
    inflight: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    outputs: list[SchedulerOutput] = []
    for step in range(max_steps):
        for r in pending.pop(step, ()):
            scheduler.add_request(r)
        if not (pending or scheduler.has_requests() or inflight):
            return outputs
        if scheduler.has_requests():
            out = scheduler.schedule()
            outputs.append(out)
            inflight.append((out, fabricate_output(scheduler, out)))
        if inflight and (len(inflight) >= async_depth or not scheduler.has_requests()):
            scheduler.update_from_output(*inflight.popleft())
    raise RuntimeError(f"requests still unfinished after {max_steps} steps")
