"""Stand-ins for the engine arm and the pre-flight, shared by the runner's tests and the trace fuzzers.

The engine arm is replaced by a recorder that fabricates a tiny trace (fault injection: it can
raise ``KeyboardInterrupt`` or an error in a chosen unit); the real engine runs in
``artifact/tests/integration/test_trial_cpu.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dlfp.harness.arm import ArmResult
from dlfp.harness.driver import TrialTrace, stamp
from dlfp.trials import runfolder
from dlfp.trials.prediction import Measured
from dlfp.trials.preflight import PreflightResult

CONFIG = {"name": "unit", "trials": 2, "workload": {"n_requests": 3, "rate_rps": 50.0}}


class FakeArms:
    """Stands in for ``dlfp.harness.arm.run_arm``; raises ``fail`` on call number ``fail_at``."""

    def __init__(self, fail_at: int | None = None, fail: BaseException | None = None) -> None:
        self.calls: list[bool] = []
        self.engines: list[int] = []
        """Workloads per engine that :meth:`many` ran (one engine per unit goes through ``__call__`` alone)."""
        self.warmups: list[int] = []
        """Warm-up requests each engine replayed first (of :meth:`many`, or of a call given them)."""
        self.fail_at, self.fail = fail_at, fail

    def __call__(self, spec, requests, step_log: Path, progress=None, telemetry_interval_s=0.5, warmup=()):
        self.calls.append(spec.dlfp["enabled"])
        if warmup:
            self.warmups.append(len(warmup))
        if self.fail_at == len(self.calls):
            raise self.fail
        reqs = pd.DataFrame([{"request_id": r.request_id, "arrival_s": r.arrival_s, "send_s": r.arrival_s,
                              "first_token_s": stamp(r.arrival_s + 0.1), "finish_s": r.arrival_s + 0.2,
                              "prompt_len": r.prompt_len, "output_len_requested": r.output_len,
                              "output_len": r.output_len, "status": "ok", "error": None}
                             for r in requests])
        toks = pd.DataFrame([{"request_id": r.request_id, "index": i, "t_s": stamp(r.arrival_s + 0.1 + i / 100),
                              "token_id": 7} for r in requests for i in range(r.output_len)])
        steps = pd.DataFrame({"step": [0], "schedule_t": [0.0], "complete_t": [0.01], "prefill_tokens": [0],
                              "decode_reqs": [1]})
        tele = pd.DataFrame({"t_s": [0.0], "source": ["cpu"], "metric": ["util_pct"], "value": [50.0]})
        return ArmResult(TrialTrace(reqs, toks, 0.0, [0.0] * len(requests)), steps, tele, dict(RAN))

    def many(self, spec, jobs, step_log: Path, done, telemetry_interval_s=0.5, warmup=()) -> None:
        """Stands in for ``dlfp.harness.arm.run_arms``: one engine start (``engines``), every job on it."""
        self.engines.append(len(jobs))
        self.warmups.append(len(warmup))
        for i, job in enumerate(jobs):
            if job.wanted():  # as run_arms: a job its sweep stopped below is not replayed
                job.begin()
                done(i, self(spec, job.requests, step_log))


RAN = {"scheduler": "DLFPScheduler", "async_scheduling": False, "executor": "fake"}
"""What the fake engine reports it ran (``dlfp.harness.arm.RAN``)."""

CPU_LIKE = Measured(decode_s=0.010, prefill_fixed_s=0.005, prefill_per_token_s=1e-4, decoders=4, source="fake")
"""A pre-flight result like the 2-core CPU engine's, so the scaled design derives without refusal."""


def fake_preflight(measured: Measured = CPU_LIKE):
    def run(spec, facts, decoders, vocab, source) -> PreflightResult:
        assert not spec.dlfp["enabled"]  # the pre-flight measures the stock engine
        steps = pd.DataFrame({"step": [0, 1], "schedule_t": [0.0, 0.01], "complete_t": [0.01, 0.02],
                              "prefill_tokens": [0, 0], "decode_reqs": [4, 4]})
        return PreflightResult(measured, steps)
    return run


def manifest(out: Path) -> dict:
    return json.loads((out / runfolder.MANIFEST).read_text())
