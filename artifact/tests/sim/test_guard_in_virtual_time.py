"""The saturation guard (:mod:`dlfp.control.guard`) on vLLM's own engine core in virtual time: a machine
slower than the paper's law assumes (its decode-only step already longer than the law's target), where the
law pins its chunk at ``chunk_min`` and, without the guard, starves the prompts. The rule itself and the
scheduler-level checks are the plug-in's tests (``dlfp-vllm/tests``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlfp.control import registry
from dlfp.harness.engine import EngineSpec, engine_kwargs
from dlfp.sim.virtual import OpenLoop, Submission, simulate
from tests.sim.test_virtual import engine, fitted, prompt, steps_of

TTFT_SLO_MS = 400.0
ITL_SLO_MS = 20.0
"""The law's target is half of it, 10 ms: below the modeled decode-only step of 16 decodes (about 17 ms)."""


def p99_ttft_s(tmp_path: Path, name: str, dlfp: dict[str, Any]) -> tuple[float, int]:
    """P99 TTFT of 30 prompts of 1536 tokens, one every 0.4 s, beside 16 long decodes, and how many steps
    the guard released, on the hand-checked fit (1 ms a step, 1 ms a decode, 1 us a prefill token)."""
    spec = EngineSpec(model="qwen3-tiny", max_model_len=4096, max_num_batched_tokens=2048, max_num_seqs=64,
                      sim={"profile": fitted(tmp_path), "async_scheduling": False, "clock": "virtual",
                           "engine": engine(tmp_path)},
                      dlfp={"itl_slo_ms": ITL_SLO_MS, "ttft_slo_ms": TTFT_SLO_MS, **dlfp})
    decodes = [Submission(f"d{i}", prompt(i, 32), 1500, 0.0) for i in range(16)]
    prompts = [Submission(f"p{i}", prompt(100 + i, 1536), 2, 0.5 + 0.4 * i) for i in range(30)]
    log = tmp_path / f"{name}.jsonl"
    got = simulate(engine_kwargs(spec), OpenLoop([*decodes, *prompts]), log)
    ttft = [got[s.request_id].token_t[0] - s.arrival_s for s in prompts]
    return float(np.percentile(ttft, 99)), sum(1 for r in steps_of(log) if r.get("saturated"))


def test_no_controller_at_its_defaults_starves_prefill_on_a_machine_slower_than_its_target(tmp_path: Path) -> None:
    """Every registered controller at its defaults keeps P99 TTFT within the TTFT SLO plus one SLO (the
    guard's wait, then the queue it releases); the paper's law without the guard does not come close,
    which is what the guard is for (its chunk at 32 tokens a 17 ms step: 0.8 s a prompt, one due every
    0.4 s)."""
    stock, _ = p99_ttft_s(tmp_path, "stock", {"enabled": False})
    starved, _ = p99_ttft_s(tmp_path, "law-unguarded", {"saturation_guard": False})
    assert starved > 10 * TTFT_SLO_MS / 1000.0 > 10 * stock
    for name in registry.NAMES:
        ttft, released = p99_ttft_s(tmp_path, name, {"controller": name})
        assert ttft <= 2 * TTFT_SLO_MS / 1000.0, (name, ttft, stock)
        if name == "law":
            assert released > 0  # the law reads no deadline: the guard is what bounds it
