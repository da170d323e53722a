"""Per-step completion stamps (``dlfp.vllm.completion_stamps``): the mixin on fake executors, then in real engines.

The part that starts a real engine; the fast tests are in ``dlfp-vllm/tests/vllm/test_completion_stamps.py``.
"""

from __future__ import annotations

import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from dlfp.vllm.completion_stamps import CompletionStamps


def generate(model: str, backend: Any, log: Path, n: int, **engine: Any) -> Any:
    """Eight short requests and two long prompts through an in-process ``LLM``; returns the executor."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from dlfp.paths import model_path

    prompts = [[10 + (i * 7919 + j * 31) % 30000 for j in range(1200 if i % 5 == 4 else 40)] for i in range(n)]
    llm = LLM(model=model_path(model), load_format="dummy", skip_tokenizer_init=True, max_model_len=2048,
              enable_prefix_caching=False, max_num_batched_tokens=512, distributed_executor_backend=backend,
              scheduler_cls="dlfp.vllm.DLFPScheduler",
              **{"additional_config": {}, **engine} | {"additional_config": {
                  **engine.get("additional_config", {}), "dlfp": {"step_log": str(log), "chunk_init": 128}}})
    try:
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                            SamplingParams(max_tokens=12, ignore_eos=True, temperature=0), use_tqdm=False)
        assert all(len(o.outputs[0].token_ids) == 12 for o in outs)
        return llm.llm_engine.engine_core.engine_core.model_executor
    finally:
        llm.llm_engine.engine_core.shutdown()


def records(log: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from dlfp.control.steplog import read_step_log

    (header, rows), = list(read_step_log(log))
    return header, [r for r in rows if r["total_tokens"] > 0]


@pytest.mark.slow
def test_uniproc_cpu_engine_stamps_every_step(engine_env: None, tmp_path: Path) -> None:
    """vLLM's UniProcExecutor with the real CPU worker (sync): each step is stamped between its
    scheduling and the scheduler's processing of its output."""
    from dlfp.vllm.executors import TimedUniProcExecutor

    log = tmp_path / "steps.jsonl"
    executor = generate("qwen3-tiny", TimedUniProcExecutor, log, 10, dtype="float32")
    assert type(executor) is TimedUniProcExecutor
    header, rows = records(log)
    assert header["async_scheduling"] is False and header["scheduler"] == "DLFPScheduler"
    assert rows and all(r["exec_done_t"] is not None for r in rows)
    assert all(r["schedule_t"] < r["exec_done_t"] <= r["complete_t"] for r in rows)
    assert all(r["complete_source"] == "exec_done" for r in rows)  # the controller was fed the stamps
    lag = statistics.median(r["complete_t"] - r["exec_done_t"] for r in rows)
    assert lag < 0.01, f"sync: update_from_output follows the output at once, median lag {lag * 1e3:.2f} ms"


@pytest.mark.slow
def test_async_engine_stamps_outputs_as_they_appear(engine_env: None, tmp_path: Path) -> None:
    """The async path on vLLM's real engine core: the modeled executor's outputs appear on its stream
    thread while the core schedules ahead; the relay stamps them then, not when the core collects them."""
    from dlfp.sim.executor import ModeledExecutor

    class TimedModeledExecutor(CompletionStamps, ModeledExecutor):
        pass

    log = tmp_path / "steps.jsonl"
    executor = generate("qwen3-8b", TimedModeledExecutor, log, 20,
                        additional_config={"dlfp_sim": {"profile": "a100", "async_scheduling": True}})
    header, rows = records(log)
    assert header["scheduler"] == "DLFPAsyncScheduler" and header["async_scheduling"] is True
    modeled = [s for s in executor.timeline if s.tokens > 0]
    assert len(modeled) == len(rows) and all(r["exec_done_t"] is not None for r in rows)
    assert all(r["complete_source"] == "exec_done" for r in rows)
    error = [abs(r["exec_done_t"] - s.done_t) for r, s in zip(rows, modeled, strict=True)]
    assert statistics.median(error) < 2e-3, f"stamp vs modeled completion: median {statistics.median(error):.4f} s"
    ahead = sum(b["schedule_t"] < a["exec_done_t"] for a, b in pairwise(rows))
    assert ahead >= 0.5 * len(rows), "async: the next step is scheduled before this one's output exists"
    waited = [r["complete_t"] - r["exec_done_t"] for r in rows]
    assert min(waited) >= 0
