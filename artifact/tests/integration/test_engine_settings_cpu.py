"""GPU engine settings: validated by the trial config parser, turned into vLLM engine arguments.

The part that starts a real engine (or cluster); the fast tests are in ``artifact/tests/harness/test_engine.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlfp.harness.engine import (
    EngineSpec,
)


@pytest.mark.slow
def test_tensor_parallel_2_on_the_cpu_engine(tmp_path: Path) -> None:
    """Two worker processes (one core each) behind vLLM's MultiprocExecutor, stamped: the DLFP
    scheduler resolves in the engine core, the workers never import it, every step is stamped."""
    pytest.importorskip("vllm")
    from dlfp.control.steplog import read_step_log
    from dlfp.harness.arm import run_arm
    from dlfp.harness.workload import Request

    def req(rid: str, i: int, at: float, n: int, out: int) -> Request:
        return Request(rid, i, "test", at, tuple(10 + (i * 7919 + j * 31) % 30000 for j in range(n)), out)

    workload = [req(f"d{i}", i, 0.02 * i, 32, 24) for i in range(4)] + [req("long", 4, 0.15, 1200, 2)]
    log = tmp_path / "steps.jsonl"
    spec = EngineSpec(tensor_parallel_size=2, max_model_len=2048, max_num_batched_tokens=2048,
                      enforce_eager=True)  # two workers, not compilation, are what this checks: a faster start
    arm = run_arm(spec, workload, log)
    reqs = arm.trace.requests.set_index("request_id")
    assert (reqs.status == "ok").all() and reqs.output_len.to_dict() == {r.request_id: r.output_len for r in workload}
    # The workload's segment, then the empty one the reset after it opens (``run_arms``).
    (header, rows), (tail, after) = list(read_step_log(log))
    assert (header["segment"], tail["segment"]) == (0, 1) and not after
    assert header["scheduler"] == "DLFPScheduler" and header["async_scheduling"] is False
    rows = [r for r in rows if r["total_tokens"] > 0]
    assert rows and all(r["schedule_t"] < r["exec_done_t"] <= r["complete_t"] for r in rows)
    mixed = [r for r in rows if r["prefill_tokens"] and r["decode_reqs"]]
    assert mixed and all(r["prefill_tokens"] <= r["cap"] for r in mixed)
