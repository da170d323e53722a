"""The modeled executor: driven directly under vLLM's real scheduler, then inside real engines.

The direct tests build the executor and a scheduler from a ``VllmConfig`` (no engine) and
play the engine core's loop: depth 1 is the synchronous ``step()``, depth 2 the batch
queue of async scheduling. The ``slow`` tests start in-process ``vllm.LLM`` engines with
the executor as ``distributed_executor_backend``.
"""

from __future__ import annotations

import statistics
from collections import deque
from concurrent.futures import Future
from itertools import pairwise
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.request import Request

from dlfp.paths import model_path
from dlfp.sim.config import SimConfigError
from dlfp.sim.costmodel import ModelShape, kv_cache_bytes, load_profile, step_time
from dlfp.sim.executor import ModeledExecutor, prompt_digest, sampled_token
from dlfp.sim.standalone import make_executor, make_scheduler

pytest.importorskip("vllm")


def prompt(index: int, length: int) -> list[int]:
    return [100 + (index * 7919 + i * 31) % 30000 for i in range(length)]


def drive(executor: ModeledExecutor, requests: list[tuple[str, list[int], int]], num_blocks: int = 4096
          ) -> tuple[dict[str, list[int]], int]:
    """Run requests to completion as the engine core would; check every step's sampling.

    Returns the tokens per request and the number of preemptions seen.
    """
    scheduler = make_scheduler(executor, num_blocks)
    for rid, ids, n in requests:
        scheduler.add_request(Request(request_id=rid, prompt_token_ids=ids, pooling_params=None,
                                      sampling_params=SamplingParams(max_tokens=n, ignore_eos=True, temperature=0)))
    depth = 2 if executor.scheduler_config.async_scheduling else 1
    inflight: deque[tuple[Any, Future[Any], set[str]]] = deque()
    tokens: dict[str, list[int]] = {rid: [] for rid, _, _ in requests}
    preemptions = 0
    while scheduler.has_requests() or inflight:
        if scheduler.has_requests():
            out = scheduler.schedule()
            preemptions += len(out.preempted_req_ids or ())
            # vLLM's own verdict: a request samples unless it is mid-prompt after this step.
            expect = {r for r in out.num_scheduled_tokens if not scheduler.requests[r].is_prefill_chunk}
            future = executor.execute_model(out, non_block=True)
            if future.result() is None:  # an empty step's output comes from execute_model itself
                future = executor.sample_tokens(None, non_block=True)
            inflight.append((out, future, expect))
        if inflight and (len(inflight) >= depth or not scheduler.has_requests()):
            out, future, expect = inflight.popleft()
            output = future.result()
            assert {r for r, s in zip(output.req_ids, output.sampled_token_ids, strict=True) if s} == expect
            engine_outputs = scheduler.update_from_output(out, output).get(0)
            for eco in engine_outputs.outputs if engine_outputs else ():
                tokens[eco.request_id] += eco.new_token_ids
    return tokens, preemptions


FAST = {"profile": "h200"}  # qwen3-tiny on H200: microseconds of GPU time, 1 ms of host time per step


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_every_request_gets_exactly_its_tokens(async_scheduling: bool) -> None:
    executor = make_executor({**FAST, "async_scheduling": async_scheduling})
    # 600-token prompts under a 512-token budget: prefills are chunked.
    requests = [(f"r{i}", prompt(i, 600 if i % 3 == 0 else 40), 5 + 7 * i) for i in range(9)]
    tokens, _ = drive(executor, requests)
    vocab = executor.vocab
    for rid, ids, n in requests:
        assert tokens[rid] == [sampled_token(prompt_digest(ids), len(ids) + k, vocab) for k in range(n)], rid
    executor.shutdown()


def test_preempted_requests_resume_with_the_same_tokens() -> None:
    requests = [(f"p{i}", prompt(i, 120), 80) for i in range(8)]  # 1600 tokens in 60 blocks of 16
    runs = {}
    for mode in (False, True):
        executor = make_executor({**FAST, "async_scheduling": mode})
        runs[mode], preemptions = drive(executor, requests, num_blocks=60)
        executor.shutdown()
        assert preemptions > 0
        assert all(len(runs[mode][rid]) == n for rid, _, n in requests)
    assert runs[False] == runs[True]


def test_start_up_answers() -> None:
    executor = make_executor({}, model="qwen3-8b")
    assert executor.scheduler_config.async_scheduling  # back on although the CPU platform turned it off
    assert executor.cache_config.block_size == 16
    specs = executor.get_kv_cache_specs()[0]
    assert len(specs) == 36
    spec = next(iter(specs.values()))
    assert isinstance(spec, FullAttentionSpec)
    assert (spec.num_kv_heads, spec.head_size, spec.dtype.itemsize, spec.block_size) == (8, 128, 2, 16)
    shape = ModelShape.from_dir(model_path("qwen3-8b"))
    utilization = 0.92  # vLLM's default gpu_memory_utilization
    assert executor.determine_available_memory() == [kv_cache_bytes(shape, load_profile("a100"), 1, 2, utilization)]
    assert executor.get_supported_kv_cache_layouts()[0]
    assert executor.supported_tasks == ("generate",)
    executor.compile_or_warm_up_model()
    assert executor.collective_rpc("synchronize_device", non_block=True).result()
    with pytest.raises(NotImplementedError, match="'load_model'"):
        executor.collective_rpc("load_model")
    assert executor.take_draft_token_ids() is None
    executor.check_health()
    executor.shutdown()
    assert not make_executor({"async_scheduling": False}).scheduler_config.async_scheduling


def test_bad_configuration_fails_at_construction() -> None:
    with pytest.raises(SimConfigError, match="'tpp'"):
        make_executor({"tpp": 2})
    with pytest.raises(ValueError, match="unknown profile 'v100'"):
        make_executor({"profile": "v100"})
    with pytest.raises(ValueError, match="tp=3 does not divide"):
        make_executor({"tp": 3}, model="qwen3-8b")


def fitted_profile(tmp_path: Any, model: str = "qwen3-tiny") -> Any:
    """A fitted profile whose costs tell prefill tokens and decodes apart: 1 us vs 1 ms each."""
    from dataclasses import asdict

    from dlfp.sim.stepfit import Fit, FittedProfile

    fit = Fit(a=1e-3, e=0.0, b=1e-6, c=1e-3, d=0.0, n_train=0, n_test=0, heldout_p50=0.0, heldout_p90=0.0, seed=0)
    shape = asdict(ModelShape.from_dir(model_path(model)))
    path = tmp_path / "fitted.yaml"
    path.write_text(FittedProfile("fitted-test", "test", fit, shape, kv_cache_gib=0.5).to_yaml())
    return path


def test_fitted_profile_costs_prefill_tokens_and_decodes(tmp_path: Any) -> None:
    executor = make_executor({"profile": str(fitted_profile(tmp_path)), "async_scheduling": False})
    assert executor.determine_available_memory() == [512 * 1024 * 1024]
    requests = [(f"f{i}", prompt(i, 600 if i % 3 == 0 else 40), 6) for i in range(6)]
    tokens, _ = drive(executor, requests)
    assert all(len(tokens[rid]) == n for rid, _, n in requests)
    decodes_seen = set()
    for step in executor.timeline:
        # gpu = a + b * prefill + c * decodes with prefill = tokens - decodes: solve for decodes
        decodes = (step.end_t - step.start_t - 1e-3 - 1e-6 * step.tokens) / (1e-3 - 1e-6)
        assert decodes == pytest.approx(round(decodes), abs=1e-6) and 0 <= round(decodes) <= step.requests
        assert step.host_s == 0.0
        decodes_seen.add(round(decodes))
    assert max(decodes_seen) >= 3 and 0 in decodes_seen
    executor.shutdown()
    with pytest.raises(ValueError, match="another model shape"):
        make_executor({"profile": str(fitted_profile(tmp_path, "qwen3-8b"))})
    with pytest.raises(ValueError, match="tp must be 1"):
        make_executor({"profile": str(fitted_profile(tmp_path)), "tp": 2})


def _timeline(async_scheduling: bool) -> list[Any]:
    executor = make_executor({"async_scheduling": async_scheduling}, model="qwen3-8b")
    requests = [(f"t{i}", prompt(i, 64), 12) for i in range(4)]
    drive(executor, requests)
    executor.shutdown()
    shape, a100 = ModelShape.from_dir(model_path("qwen3-8b")), load_profile("a100")
    decode = step_time(shape, a100, [(1, 70)] * 4).gpu_s
    steps = list(executor.timeline)
    assert all(s.end_t - s.start_t == pytest.approx(decode, rel=0.02) for s in steps[2:])  # decode steps
    return steps


def test_async_schedules_next_step_while_the_stream_runs() -> None:
    steps = _timeline(async_scheduling=True)
    overlapped = [b.entry_t < a.end_t for a, b in pairwise(steps)]
    assert sum(overlapped) >= len(overlapped) - 1
    # The stream stays busy: the next step starts when the previous one ends.
    assert statistics.median(b.start_t - a.end_t for a, b in pairwise(steps)) < 1e-3


def test_sync_waits_for_each_step() -> None:
    steps = _timeline(async_scheduling=False)
    assert all(b.entry_t >= a.done_t for a, b in pairwise(steps))
    assert statistics.median(s.done_t - s.end_t for s in steps) < 1e-3  # stream wakes on time
