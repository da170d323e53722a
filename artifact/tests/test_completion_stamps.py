"""Per-step completion stamps (``dlfp.completion_stamps``): the mixin on fake executors, then in real engines.

Real engines here: vLLM's ``UniProcExecutor`` with the CPU worker (synchronous, as the CPU build
always is), and the async path on the modeled executor, whose outputs become available on a
stream thread while the engine core schedules ahead, as a GPU's do. That a CUDA output's
``AsyncOutputFuture`` is waited for the same way is the one step not run here (no GPU).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import Future
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dlfp.completion_stamps import CompletionStamps, Relay, exec_done_t, stamp


def step(tokens: int = 8) -> SimpleNamespace:
    return SimpleNamespace(total_num_scheduled_tokens=tokens)


class Base:
    """A fake vLLM executor: ``sample_tokens`` answers per ``mode``."""

    def __init__(self, mode: str, delay_s: float = 0.0) -> None:
        self.mode, self.delay_s = mode, delay_s
        self.ready_t: list[float] = []
        self.shut = False
        self._init_executor()

    def _init_executor(self) -> None:
        pass

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        return None

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        future: Future[Any] = Future()
        if self.mode == "inline":
            self.ready_t.append(time.monotonic())
            future.set_result("out")
        elif self.mode == "fail":
            future.set_exception(RuntimeError("worker died"))
        else:  # the output appears on another thread after delay_s, as a GPU's does

            def finish() -> None:
                self.ready_t.append(time.monotonic())
                future.set_result("out")

            threading.Timer(self.delay_s, finish).start()
        return future if non_block else future.result()

    def shutdown(self) -> None:
        self.shut = True


class Timed(CompletionStamps, Base):
    pass


def test_inline_output_is_stamped_when_sampling_returns() -> None:
    ex = Timed("inline")
    s = step()
    ex.execute_model(s)
    before = time.monotonic()
    assert ex.sample_tokens(None) == "out"
    assert before <= exec_done_t(s) <= time.monotonic()
    ex.shutdown()
    assert ex.shut


def test_pending_output_is_stamped_when_it_appears_not_when_collected() -> None:
    """The engine core collects an async step's output late (its batch queue); the stamp is early."""
    ex = Timed("later", delay_s=0.05)
    s = step()
    ex.execute_model(s)
    future = ex.sample_tokens(None, non_block=True)
    time.sleep(0.3)  # the engine core schedules more work before it asks
    collected = time.monotonic()
    assert future.result() == "out"
    assert abs(exec_done_t(s) - ex.ready_t[0]) < 0.02
    assert collected - exec_done_t(s) > 0.2


def test_empty_steps_are_not_paired_and_stamps_follow_issue_order() -> None:
    ex = Timed("later", delay_s=0.02)
    a, empty, b = step(), step(0), step()
    ex.execute_model(a)
    ex.execute_model(empty)  # no tokens: vLLM never samples it
    fa = ex.sample_tokens(None, non_block=True)
    ex.execute_model(b)
    fb = ex.sample_tokens(None, non_block=True)
    assert fa.result() == fb.result() == "out"
    assert exec_done_t(empty) is None
    assert exec_done_t(a) <= exec_done_t(b)
    assert len(ex.ready_t) == 2 and exec_done_t(a) >= ex.ready_t[0] and exec_done_t(b) >= ex.ready_t[1]


def test_a_failed_output_raises_to_the_engine_and_is_not_stamped() -> None:
    ex = Timed("fail")
    s = step()
    ex.execute_model(s)
    with pytest.raises(RuntimeError, match="worker died"):
        ex.sample_tokens(None)
    assert exec_done_t(s) is None


def test_relay_keeps_order_and_stops() -> None:
    relay = Relay("test-relay")
    inner = [Future() for _ in range(3)]
    steps = [step() for _ in inner]
    outer = [relay.submit(f, s) for f, s in zip(inner, steps, strict=True)]
    inner[1].set_result(1)  # ready before the first: still handed back after it
    time.sleep(0.05)
    assert not outer[1].done()
    inner[0].set_result(0)
    inner[2].set_result(2)
    assert [f.result(timeout=5) for f in outer] == [0, 1, 2]
    assert exec_done_t(steps[0]) <= exec_done_t(steps[1]) <= exec_done_t(steps[2])
    relay.close()
    relay._thread.join(timeout=5)
    assert not relay._thread.is_alive()


def test_stamp_helpers() -> None:
    s = step()
    assert exec_done_t(s) is None
    stamp(s, 12.5)
    assert exec_done_t(s) == 12.5
    stamp(None)  # nothing to stamp: no error


# --- real engines (in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0) ----------------------------------

def generate(model: str, backend: Any, log: Path, n: int, **engine: Any) -> Any:
    """Eight short requests and two long prompts through an in-process ``LLM``; returns the executor."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from dlfp.models import model_path

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
    from dlfp.steplog import read_step_log

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
    error = [abs(r["exec_done_t"] - s.done_t) for r, s in zip(rows, modeled, strict=True)]
    assert statistics.median(error) < 2e-3, f"stamp vs modeled completion: median {statistics.median(error):.4f} s"
    ahead = sum(b["schedule_t"] < a["exec_done_t"] for a, b in pairwise(rows))
    assert ahead >= 0.5 * len(rows), "async: the next step is scheduled before this one's output exists"
    waited = [r["complete_t"] - r["exec_done_t"] for r in rows]
    assert min(waited) >= 0
