"""One arm in virtual time (:mod:`dlfp.harness.virtual`): what a started engine's arm gives back, with nothing
real in it (sends on time, no telemetry), and the arm runner's dispatch to it."""

from __future__ import annotations

from pathlib import Path

from dlfp.harness import workload
from dlfp.harness.arm import Job, run_arms
from dlfp.harness.engine import EngineSpec
from dlfp.harness.telemetry import COLUMNS
from dlfp.harness.virtual import empty_telemetry, run_workload, submissions

SPEC = EngineSpec(model="qwen3-0.6b", dtype="bfloat16", max_model_len=4096, max_num_batched_tokens=2048,
                  sim={"profile": "h200", "clock": "virtual"}, dlfp={"enabled": True, "itl_slo_ms": 20.0})


def test_an_arm_in_virtual_time_is_an_arm_result(tmp_path: Path) -> None:
    requests = workload.generate(workload.paper_mix(n_requests=30, rate_rps=40.0, seed=3))
    calls: list[int] = []
    result = run_workload(SPEC, requests, tmp_path / "steps.jsonl", calls.append)
    assert calls[0] == 0 and sum(calls) == len(requests)  # started, then one per finished request
    req = result.trace.requests
    assert (req.status == "ok").all() and (req.send_s == req.arrival_s).all() and result.trace.lateness_s == [0.0] * 30
    assert (req.output_len == req.output_len_requested).all()
    assert list(result.telemetry.columns) == list(COLUMNS) and result.telemetry.empty
    assert result.ran == {"scheduler": "DLFPAsyncScheduler", "async_scheduling": True,
                          "executor": "dlfp.sim.virtual.VirtualExecutor"}
    assert result.steps.prefill_tokens.sum() == sum(r.prompt_len for r in requests)
    assert not (tmp_path / "steps.jsonl").exists()  # the step log is read back and removed


def test_the_arm_runner_sends_a_virtual_spec_to_virtual_time(tmp_path: Path) -> None:
    jobs = [Job(workload.generate(workload.paper_mix(n_requests=8, rate_rps=20.0, seed=s)), lambda: None)
            for s in (1, 2)]
    got: dict[int, object] = {}
    run_arms(SPEC, jobs, tmp_path / "steps.jsonl", got.__setitem__)
    assert sorted(got) == [0, 1]
    again = run_workload(SPEC, jobs[1].requests, tmp_path / "again.jsonl")
    assert got[1].trace.tokens.equals(again.trace.tokens)  # each job on a fresh core: the same as alone


def test_a_workload_becomes_submissions_in_arrival_order_as_given() -> None:
    requests = workload.generate(workload.paper_mix(n_requests=5, rate_rps=1.0))
    subs = submissions(requests)
    assert [(s.request_id, s.arrival_s, s.output_len, tuple(s.prompt_token_ids)) for s in subs] == \
        [(r.request_id, r.arrival_s, r.output_len, r.prompt_token_ids) for r in requests]
    assert empty_telemetry().dtypes["t_s"] == "float64"
