"""The modeled executor: driven directly under vLLM's real scheduler, then inside real engines.

The part that starts a real engine (or cluster); the fast tests are in ``artifact/tests/sim/test_executor.py``.
"""

from __future__ import annotations

import time
from itertools import pairwise
from typing import Any

import pytest
from vllm.sampling_params import SamplingParams

from dlfp.paths import model_path
from dlfp.sim.executor import ModeledExecutor, prompt_digest, sampled_token

pytest.importorskip("vllm")


def prompt(index: int, length: int) -> list[int]:
    return [100 + (index * 7919 + i * 31) % 30000 for i in range(length)]


def generate(sim: dict[str, Any], requests: list[tuple[list[int], int]], extra_config: dict[str, Any] | None = None,
             **engine: Any) -> tuple[list[list[int]], list[Any], float]:
    """Start an ``LLM`` over qwen3-8b with the modeled executor; outputs, timeline, start seconds."""
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    t0 = time.monotonic()
    llm = LLM(model=model_path("qwen3-8b"), load_format="dummy", skip_tokenizer_init=True,
              distributed_executor_backend=ModeledExecutor, max_model_len=4096, enable_prefix_caching=False,
              max_num_batched_tokens=1024, additional_config={"dlfp_sim": sim, **(extra_config or {})},
              **engine)
    started = time.monotonic() - t0
    try:
        outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids, _ in requests],
                            [SamplingParams(max_tokens=n, ignore_eos=True, temperature=0) for _, n in requests],
                            use_tqdm=False)
        executor = llm.llm_engine.engine_core.engine_core.model_executor
        return [list(o.outputs[0].token_ids) for o in outs], list(executor.timeline), started
    finally:
        llm.llm_engine.engine_core.shutdown()


WORKLOAD = [(prompt(i, 1500 if i % 4 == 0 else 30), 6 + 3 * i) for i in range(12)]


@pytest.mark.slow
def test_engine_sync_and_async_agree(engine_env: None) -> None:
    results = {mode: generate({"async_scheduling": mode}, WORKLOAD) for mode in (False, True)}
    outputs = {mode: r[0] for mode, r in results.items()}
    assert [len(t) for t in outputs[False]] == [n for _, n in WORKLOAD]
    assert outputs[False] == outputs[True]
    assert outputs[False][0] == [sampled_token(prompt_digest(WORKLOAD[0][0]), 1500 + k, 151936)
                                 for k in range(WORKLOAD[0][1])]
    sync_steps, async_steps = results[False][1], results[True][1]
    assert all(b.entry_t >= a.done_t for a, b in pairwise(sync_steps))
    overlapped = sum(b.entry_t < a.end_t for a, b in pairwise(async_steps))
    assert overlapped >= 0.8 * (len(async_steps) - 1)
    assert max(r[2] for r in results.values()) < 60


@pytest.mark.slow
def test_engine_deterministic_across_runs(engine_env: None) -> None:
    first = generate({"profile": "h200"}, WORKLOAD[:4])[0]
    assert generate({"profile": "h200"}, WORKLOAD[:4])[0] == first


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_engine_with_dlfp_scheduler(engine_env: None, tmp_path: Any, async_scheduling: bool) -> None:
    from dlfp.control.steplog import read_step_log

    log = tmp_path / "steps.jsonl"
    outputs, _, _ = generate({"async_scheduling": async_scheduling}, WORKLOAD,
                             scheduler_cls="dlfp.vllm.DLFPScheduler",
                             extra_config={"dlfp": {"step_log": str(log), "chunk_init": 128}})
    assert [len(t) for t in outputs] == [n for _, n in WORKLOAD]
    (header, records), = list(read_step_log(log))
    assert header["async_scheduling"] is async_scheduling
    mixed = [r for r in records if r["prefill_tokens"] and r["decode_reqs"]]
    over = [(r["step"], r["prefill_tokens"], r["cap"], r["decode_reqs"])
            for r in mixed if r["prefill_tokens"] > r["cap"]]
    assert mixed and not over, over
    ahead = sum(b["schedule_t"] < a["complete_t"] for a, b in pairwise(records))
    assert (ahead > 0) is async_scheduling
