"""A vLLM executor with no model: it sleeps each step's modeled GPU time on one thread.

``distributed_executor_backend=ModeledExecutor`` (or ``"dlfp.sim.executor.ModeledExecutor"``)
runs vLLM 0.32's real engine core, scheduler and output processing, while the model is a
roofline cost (:mod:`dlfp.sim.costmodel`) or a profile fitted to measured steps by
``dlfp calibrate`` (:mod:`dlfp.sim.stepfit`, all of whose time is stream time). Per step,
``execute_model`` spends the modeled host time (input preparation, launches) on the
calling engine thread, then hands the step to a single worker thread, the modeled GPU
stream, which runs steps in order and finishes each at ``max(submitted, previous step
finished) + gpu time``. Under async scheduling the engine schedules step N+1 while step N
sleeps on that stream, exactly the overlap whose effect on the feedback signal this
project studies.

Outputs are fabricated: every request whose prompt is complete after a step gets one
token, a hash of its prompt and the token's position (deterministic across runs and arms,
like greedy decoding); a partial prefill chunk gets none. Which requests finish their
prompt follows from the scheduler output alone (context before the step, tokens scheduled,
tokens the request already has), the same test vLLM's own runner applies.

The KV cache is the modeled device's: profile capacity times ``gpu_memory_utilization``,
less weights and the activation reserve (:func:`dlfp.sim.costmodel.kv_cache_bytes`), so
preemption sets in where it would on that GPU; a fitted profile keeps the calibrated
engine's cache size. ``kv_cache_memory_bytes`` and ``VLLM_CPU_KVCACHE_SPACE`` size a CPU
worker's cache and are ignored here; vLLM's ``num_gpu_blocks_override`` still applies.

Settings come from ``additional_config["dlfp_sim"]`` (:mod:`dlfp.sim.config`). Not
supported: engine-level TP/PP (model TP with ``dlfp_sim.tp``), speculative decoding,
structured output, prompt embeddings, LoRA.
"""

from __future__ import annotations

import logging
import time
import zlib
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes

from dlfp.sim.clock import sleep_until
from dlfp.sim.config import parse_sim_config
from dlfp.sim.costmodel import GiB, ModelShape, StepTime, check_tp, kv_cache_bytes, load_profile, step_time
from dlfp.sim.stepfit import FittedProfile
from dlfp.vllm.completion_stamps import stamp

logger = logging.getLogger("dlfp.sim")

GPU_BLOCK_SIZE = 16
"""KV block size when the user sets none: vLLM's GPU default, not the CPU platform's 128."""

TIMELINE_LEN = 65536
KV_DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}


@dataclass(slots=True)
class ModeledStep:
    """Timing of one step (``time.monotonic`` seconds) on the engine thread and the stream.

    ``entry_t``: ``execute_model`` called (right after ``schedule()``); ``submit_t``: host
    time spent, handed to the stream; ``start_t``/``end_t``: modeled GPU interval;
    ``done_t``: when the stream thread really woke (``None`` until then). ``host_s`` is the
    modeled host time, so ``submit_t - entry_t - host_s`` is the executor's own overhead.
    """

    host_s: float
    entry_t: float
    submit_t: float
    start_t: float
    end_t: float
    tokens: int
    requests: int
    done_t: float | None = None


@dataclass(frozen=True, slots=True)
class _Request:
    prompt_len: int
    digest: int


def sampled_token(digest: int, position: int, vocab: int) -> int:
    """The fabricated token at ``position`` of a request whose prompt hashes to ``digest``."""
    return zlib.crc32(position.to_bytes(8, "little"), digest) % vocab


def prompt_digest(prompt_token_ids: list[int]) -> int:
    """A stable hash of a prompt (Python's ``hash`` changes with each process)."""
    return zlib.crc32(array("q", prompt_token_ids).tobytes())


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def _finish_on_stream(step: ModeledStep, output: ModelRunnerOutput, scheduler_output: SchedulerOutput
                      ) -> ModelRunnerOutput:
    sleep_until(step.end_t)
    step.done_t = time.monotonic()
    stamp(scheduler_output, step.done_t)  # the step's completion, as the real executors stamp it
    return output


class ModeledExecutor(Executor):
    """Executor whose "GPU" is a modeled step time; see the module docstring."""

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        return True

    def _init_executor(self) -> None:
        self.sim = parse_sim_config(self.vllm_config.additional_config)
        if self.parallel_config.world_size > 1:
            raise ValueError("ModeledExecutor runs as one engine process: model tensor parallelism "
                             "with additional_config['dlfp_sim']['tp'], not tensor/pipeline_parallel_size")
        if self.speculative_config is not None or self.lora_config is not None:
            raise ValueError("ModeledExecutor supports neither speculative decoding nor LoRA")
        self.cost_profile = load_profile(self.sim.profile)
        self.shape = ModelShape.from_hf_config(self.model_config.hf_text_config.to_dict())
        check_tp(self.shape, self.sim.tp)
        if isinstance(self.cost_profile, FittedProfile):
            if ModelShape(**self.cost_profile.shape) != self.shape:
                raise ValueError(f"fitted profile {self.cost_profile.name!r} was calibrated on another model shape "
                                 f"({self.cost_profile.calibration.get('model')}); calibrate this model's runs")
            if self.sim.tp != 1:
                raise ValueError("a fitted profile models the engine it was measured on: dlfp_sim.tp must be 1")
        self.vocab = self.model_config.get_vocab_size()
        # The CPU platform turned async scheduling off; the engine core reads it only after
        # the executor is built (scheduler class, batch queue), so this is the place.
        self.scheduler_config.async_scheduling = self.sim.async_scheduling
        if not self.cache_config.user_specified_block_size:
            self.cache_config.block_size = GPU_BLOCK_SIZE
        self.timeline: deque[ModeledStep] = deque(maxlen=TIMELINE_LEN)
        self._stream = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlfp-sim-gpu")
        self._stream_free_t = 0.0
        self._pending: deque[Future[ModelRunnerOutput]] = deque()
        self._requests: dict[str, _Request] = {}
        self._rpc: dict[str, Callable[..., Any]] = {
            "get_kv_cache_spec": self._kv_cache_spec,
            "get_supported_kv_cache_layouts": lambda: [x.name for x in get_supported_kv_cache_layouts([])],
            "set_kv_cache_layout": lambda layout: None,
            "determine_available_memory": self._available_memory,
            "update_max_model_len": lambda max_model_len: None,
            "initialize_from_config": lambda kv_cache_configs: None,
            "compile_or_warm_up_model": lambda: CompilationTimes(language_model=0.0, encoder=0.0),
            "get_supported_tasks": lambda: ("generate",),
            "reset_mm_cache": lambda: None,
            "reset_encoder_cache": lambda: None,
            "synchronize_device": lambda: self._stream.submit(time.monotonic).result(),
        }
        logger.info("dlfp.sim: modeled %d x %s (%s), async_scheduling=%s, %d-byte values",
                    self.sim.tp, self.cost_profile.name, self.cost_profile.device, self.sim.async_scheduling,
                    self.sim.dtype_bytes)

    def _kv_cache_spec(self) -> dict[str, FullAttentionSpec]:
        spec = FullAttentionSpec(block_size=self.cache_config.block_size, num_kv_heads=self.shape.kv_heads,
                                 head_size=self.shape.head_dim, dtype=KV_DTYPES[self.sim.dtype_bytes])
        return {f"model.layers.{i}.self_attn.attn": spec for i in range(self.shape.layers)}

    def _available_memory(self) -> int:
        if isinstance(self.cost_profile, FittedProfile):
            return int(self.cost_profile.kv_cache_gib * GiB)
        return kv_cache_bytes(self.shape, self.cost_profile, self.sim.tp, self.sim.dtype_bytes,
                              self.cache_config.gpu_memory_utilization)

    def collective_rpc(self, method: str | Callable[..., Any], timeout: float | None = None,
                       args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                       non_block: bool = False) -> Any:
        handler = self._rpc.get(method) if isinstance(method, str) else None
        if handler is None:
            raise NotImplementedError(f"ModeledExecutor has no worker method {method!r}")
        result = [handler(*args, **(kwargs or {}))]
        return _done(result) if non_block else result

    def execute_model(self, scheduler_output: SchedulerOutput, non_block: bool = False) -> Any:
        entry = self._now()
        for req_id in scheduler_output.finished_req_ids:
            self._requests.pop(req_id, None)
        if scheduler_output.total_num_scheduled_tokens == 0:
            # vLLM's runner answers an empty step at once, and the core then skips sampling.
            return _done(EMPTY_MODEL_RUNNER_OUTPUT) if non_block else EMPTY_MODEL_RUNNER_OUTPUT
        batch, prefill_tokens, decode_reqs, output = self._plan(scheduler_output)
        cost = self._cost(batch, prefill_tokens, decode_reqs)
        self._pending.append(self._launch(entry, cost, output, scheduler_output, len(batch)))
        return _done(None) if non_block else None

    def _now(self) -> float:
        return time.monotonic()

    def _launch(self, entry: float, cost: StepTime, output: ModelRunnerOutput, scheduler_output: SchedulerOutput,
                requests: int) -> Any:
        """Spend the step's host time on this (the engine) thread, queue its GPU time on the stream; returns
        what ``sample_tokens`` hands the engine core (a future of ``output``). Real time: sleeps."""
        sleep_until(entry + cost.host_s)
        submit = time.monotonic()
        start = max(submit, self._stream_free_t)
        self._stream_free_t = start + cost.gpu_s
        step = ModeledStep(host_s=cost.host_s, entry_t=entry, submit_t=submit, start_t=start, end_t=start + cost.gpu_s,
                           tokens=scheduler_output.total_num_scheduled_tokens, requests=requests)
        self.timeline.append(step)
        return self._stream.submit(_finish_on_stream, step, output, scheduler_output)

    def _cost(self, batch: list[tuple[int, int]], prefill_tokens: int, decode_reqs: int) -> StepTime:
        """The profile's time for one step: roofline from the batch, or the fitted linear model."""
        if isinstance(self.cost_profile, FittedProfile):
            return StepTime(gpu_s=self.cost_profile.fit.step_s(prefill_tokens, decode_reqs), host_s=0.0)
        return step_time(self.shape, self.cost_profile, batch, self.sim.tp, self.sim.dtype_bytes)

    def _plan(self, so: SchedulerOutput) -> tuple[list[tuple[int, int]], int, int, ModelRunnerOutput]:
        """The step's batch for the cost model, its prefill tokens and decode count, and the
        output its completion will return. A decode is one new token that is the request's
        next (prompt complete); everything else is prefill work, as the step records count it.
        """
        counts = so.num_scheduled_tokens
        batch: list[tuple[int, int]] = []
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        work = [0, 0]  # prefill tokens, decode requests

        def add(req_id: str, computed: int, target: int) -> None:
            after = computed + counts[req_id]
            batch.append((counts[req_id], computed))
            req_ids.append(req_id)
            if counts[req_id] == 1 and after >= target:
                work[1] += 1
            else:
                work[0] += counts[req_id]
            done = after >= target
            sampled.append([sampled_token(self._requests[req_id].digest, after, self.vocab)] if done else [])

        for new in so.scheduled_new_reqs:
            if new.prompt_token_ids is None:
                raise ValueError(f"request {new.req_id}: ModeledExecutor needs token-id prompts")
            self._requests[new.req_id] = _Request(len(new.prompt_token_ids), prompt_digest(new.prompt_token_ids))
            # Model runner V2 resends resumed requests as new, with all their tokens so far.
            target = len(new.prefill_token_ids) if new.prefill_token_ids is not None else len(new.prompt_token_ids)
            add(new.req_id, new.num_computed_tokens, target)
        cached = so.scheduled_cached_reqs
        for req_id, computed, outputs in zip(cached.req_ids, cached.num_computed_tokens, cached.num_output_tokens,
                                             strict=True):
            add(req_id, computed, self._requests[req_id].prompt_len + outputs)
        output = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                   sampled_token_ids=sampled)
        return batch, work[0], work[1], output

    def sample_tokens(self, grammar_output: GrammarOutput | None, non_block: bool = False) -> Any:
        if grammar_output is not None:
            raise NotImplementedError("ModeledExecutor does not support structured output")
        future = self._pending.popleft()
        return future if non_block else future.result()

    def take_draft_token_ids(self) -> None:
        return None

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        self._stream.shutdown(wait=True, cancel_futures=True)
