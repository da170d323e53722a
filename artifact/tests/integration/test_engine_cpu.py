"""DLFP in a real vLLM CPU engine (tiny Qwen3, fp32): stock and DLFP arms on one workload.

Eight short requests decode while three 3500-token prompts arrive: enough stalls for
stock vLLM that they reach its P99 inter-token gap (3 of each decoder's 99 gaps). The long
prompts arrive 150-450 ms into the decode, so the decoders are still running for all three
even on a machine twice as fast as CI's (arrivals 0.4-1.4 s in once missed the last one or
two, and stock's P99 fell to an ordinary decode step). A first long prompt arrives alone.
Each arm starts a fresh engine (about a minute on 2 cores); the DLFP arm's engine first replays a
short warm-up and is reset (:func:`dlfp.harness.arm.run_arms`, as the capacity study reuses engines),
so the reset and the step log's segments are exercised on the real engine at no extra start.

The DLFP arm runs without the saturation guard. Whether the third long prompt has waited one TTFT
SLO behind capped chunks depends on the machine's speed (on CI's it did, and the released steps
stalled the decoders as stock's do), and this module is about the controller's caps. The guard's
release in vLLM's real scheduler is tested in ``dlfp-vllm/tests/vllm/test_controller_protocol.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

from dlfp.harness.arm import ArmResult, Job, run_arm, run_arms
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import Request
from dlfp.metrics import itl_gaps

pytestmark = pytest.mark.slow

DECODERS = [f"d{i}" for i in range(8)]
LONG = 3500


def _req(rid: str, index: int, at: float, prompt_len: int, out: int) -> Request:
    prompt = tuple(10 + (index * 7919 + i * 31) % 31000 for i in range(prompt_len))
    return Request(request_id=rid, index=index, cls="test", arrival_s=at,
                   prompt_token_ids=prompt, output_len=out)


def workload() -> list[Request]:
    reqs = [_req("solo", 0, 0.0, LONG, 2)]
    reqs += [_req(rid, i + 1, 1.0 + 0.02 * i, 32, 100) for i, rid in enumerate(DECODERS)]
    reqs += [_req(f"long{k}", 10 + k, 1.15 + 0.15 * k, LONG, 4) for k in range(3)]
    return reqs


DLFP = {"saturation_guard": False}
"""The paper's controller at its defaults, without the guard (see the module's docstring)."""

WARMUP = [_req("w0", 50, 0.0, 32, 40), _req("w1", 51, 0.05, 1500, 2), _req("w2", 52, 0.15, 1500, 2)]
"""The DLFP arm's warm-up: two long prompts beside a decoder, so its controller adapts (state to forget)."""


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> tuple[dict[str, ArmResult], Path]:
    """Both arms, and the DLFP engine's step log (its warm-up segment included)."""
    tmp = tmp_path_factory.mktemp("arms")
    out = {"stock": run_arm(EngineSpec(dlfp={"enabled": False}), workload(), tmp / "stock.jsonl")}
    run_arms(EngineSpec(dlfp=DLFP), [Job(workload(), lambda: None)], tmp / "dlfp.jsonl",
             lambda _, result: out.setdefault("dlfp", result), warmup=WARMUP)
    return out, tmp / "dlfp.jsonl"


@pytest.fixture(scope="module")
def arms(engines) -> dict[str, ArmResult]:
    return engines[0]


def test_a_reused_engine_reports_only_its_workloads_steps_from_a_fresh_controller(engines) -> None:
    """The warm-up's steps stay in the log's first segment, where the chunk adapted; the workload's
    start at step 0 with DLFP's initial chunk again, and none schedules a warm-up request."""
    from dlfp.control.steplog import read_step_log

    arms, log = engines
    [(first, warm), (second, _), *_] = list(read_step_log(log))
    assert (first["segment"], second["segment"]) == (0, 1)
    assert any(r["chunk"] != 256.0 for r in warm)
    steps = arms["dlfp"].steps.sort_values("step")
    assert steps.step.iloc[0] == 0 and steps.step.is_unique
    assert steps.chunk.iloc[0] == 256.0  # chunk_init: the warm-up's adaptation was forgotten
    sent = set(arms["dlfp"].trace.requests.request_id)
    assert sent == {r.request_id for r in workload()} and not sent & {r.request_id for r in WARMUP}


def decoder_gaps(arm: ArmResult) -> np.ndarray:
    tokens = arm.trace.tokens
    return itl_gaps(tokens[tokens.request_id.isin(DECODERS)])


def third_longest_decode_step(arm: ArmResult) -> float:
    """The third-longest engine step that carried decodes (scheduler-call to scheduler-call).

    The engine's own record of the stalls decoders suffer. Stock has three, one per long
    prompt, so its third-longest step is still a full-prompt stall; ranking third rather than
    first keeps one OS hiccup on 2 cores from deciding (seen: a 662-token DLFP chunk that took
    156 ms where its neighbours took 55-60 ms). The client's gaps pick up such noise too, so
    its worst gap is printed, not asserted; its P99 is.
    """
    s = arm.steps.sort_values("step")
    duration = s.schedule_t.shift(-1) - s.schedule_t
    return float(duration[s.decode_reqs > 0].nlargest(3).iloc[-1])


def test_every_request_complete_and_outputs_identical(arms) -> None:
    want = {r.request_id: r.output_len for r in workload()}
    for arm in arms.values():
        reqs = arm.trace.requests.set_index("request_id")
        assert (reqs.status == "ok").all(), reqs[reqs.status != "ok"].error.tolist()
        assert reqs.output_len.to_dict() == want
    ids = {name: a.trace.tokens.groupby("request_id").token_id.apply(list).to_dict()
           for name, a in arms.items()}
    assert ids["stock"] == ids["dlfp"]


def test_mixed_steps_carry_capped_prefill(arms) -> None:
    steps = arms["dlfp"].steps
    mixed = steps[(steps.prefill_tokens > 0) & (steps.decode_reqs > 0)]
    assert len(mixed) >= 4
    assert mixed.cap.notna().all() and (mixed.prefill_tokens <= mixed.cap).all()
    assert mixed.guarded.any()  # the controller really adapted on guarded cycles
    assert not steps.saturated.any()
    stock = arms["stock"].steps
    stock_mixed = stock[(stock.prefill_tokens > 0) & (stock.decode_reqs > 0)]
    assert stock.cap.isna().all() and stock_mixed.prefill_tokens.max() >= LONG


def test_isolated_long_prompt_gets_full_budget(arms) -> None:
    steps = arms["dlfp"].steps
    first = steps.iloc[0]
    assert first.prefill_tokens == LONG and first.decode_reqs == 0 and np.isnan(first.cap)


def test_decode_stalls_fall_well_below_stock(arms) -> None:
    stock, dlfp = decoder_gaps(arms["stock"]), decoder_gaps(arms["dlfp"])
    # 99 gaps per decoder, unless the client fell behind and vLLM merged two tokens into one
    # output chunk (one gap fewer, as vllm bench serve counts it); seen once on CI, in 8 of 792.
    for gaps in (stock, dlfp):
        assert 0.95 * 8 * 99 <= len(gaps) <= 8 * 99
    stall_stock, stall_dlfp = third_longest_decode_step(arms["stock"]), third_longest_decode_step(arms["dlfp"])
    print(f"third-longest engine step with decodes {stall_stock * 1e3:.0f} -> {stall_dlfp * 1e3:.0f} ms, "
          f"client max gap {stock.max() * 1e3:.0f} -> {dlfp.max() * 1e3:.0f} ms, "
          f"P99 {np.percentile(stock, 99) * 1e3:.0f} -> {np.percentile(dlfp, 99) * 1e3:.0f} ms")
    assert stall_dlfp < 0.6 * stall_stock
    assert np.percentile(dlfp, 99) < 0.7 * np.percentile(stock, 99)
