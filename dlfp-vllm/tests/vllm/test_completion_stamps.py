"""Per-step completion stamps (``dlfp.vllm.completion_stamps``): the mixin on fake executors, then in real engines.

Real engines here: vLLM's ``UniProcExecutor`` with the CPU worker (synchronous, as the CPU build
always is), and the async path on the modeled executor, whose outputs become available on a
stream thread while the engine core schedules ahead, as a GPU's do. That a CUDA output's
``AsyncOutputFuture`` is waited for the same way is the one step not run here (no GPU).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from dlfp.vllm.completion_stamps import CompletionStamps, Relay, exec_done_t, stamp


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


def test_the_completion_signal_takes_the_stamp_not_the_late_collection() -> None:
    """Async: two outputs appear 50 ms apart on the device; the engine core collects them late and
    together. The completion signal (the scheduler copies each stamp into its step record before the
    tracker sees it) measures the outputs' cadence, not the collections'."""
    from dlfp.control.signals import EXEC_DONE, StepRecord, StepTracker

    ex = Timed("later", delay_s=0.05)
    tracker = StepTracker("completion")
    outs = [step(), step()]
    futures, records = [], []
    for i, s in enumerate(outs):
        records.append(StepRecord(step=i, schedule_t=time.monotonic(), complete_t=None, prefill_tokens=64,
                                  decode_reqs=4, total_tokens=68, cap=None, signal_s=None, guarded=False,
                                  target_s=0.05, chunk=64.0))
        ex.execute_model(s)
        futures.append(ex.sample_tokens(None, non_block=True))
        futures[-1].result()  # the device runs one step at a time: the next starts after this output
    time.sleep(0.2)  # the engine core gets round to collecting both only now
    for s, r, f in zip(outs, records, futures, strict=True):
        f.result()
        r.exec_done_t = exec_done_t(s)
        tracker.completed(r, time.monotonic())
    assert [r.complete_source for r in records] == [EXEC_DONE, EXEC_DONE]
    obs = tracker.observe(time.monotonic(), True)
    assert obs is not None and obs.interval_s == pytest.approx(ex.ready_t[1] - ex.ready_t[0], abs=0.02)
    assert obs.interval_s > 0.03 > records[1].complete_t - records[0].complete_t  # collections: back to back
    ex.shutdown()
