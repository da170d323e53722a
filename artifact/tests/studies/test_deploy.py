"""``dlfp plan``: a deployer's question checked before any work, run in virtual time, answered.

The refusals name what is wrong; the trace fitter recovers a known workload's burstiness and lengths;
the given-SLO capacity design judges every arm at the one level given; and a small plan runs end to end
(one trial, two arms' worth of time) and names a setting that is one of the arms it ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dlfp.studies import deploy
from dlfp.studies.deploy import Question
from dlfp.trials.design import DesignSpec
from tests.harness.test_tracefit import write_trace


def question(**over: object) -> Question:
    base = {"model": "qwen3-8b", "profile": "a100", "itl_slo_ms": 60.0, "ttft_slo_ms": 1500.0}
    return Question(**{**base, **over})


@pytest.mark.parametrize(("over", "message"), [
    ({"profile": "b300"}, "unknown profile 'b300'"),
    ({"model": "/nowhere"}, "unknown model '/nowhere'"),
    ({"tp": 3}, "tp=3 does not divide"),
    ({"model": "qwen3-32b", "profile": "a100", "tp": 1, "itl_slo_ms": 1.0}, "no step can meet it"),
    ({"itl_slo_ms": 1.0}, r"--itl-slo-ms 1: no step can meet it; one request's decode step alone takes"),
    ({"ttft_slo_ms": 0.5}, "--ttft-slo-ms 0.5: no request can meet it"),
    ({"itl_slo_ms": -5.0}, "give the SLO in milliseconds"),
    ({"workload": "chat"}, "use one of"),
    ({"trials": 0}, "--trials 0"),
])
def test_what_cannot_run_is_refused_before_any_work(over: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        deploy.check(question(**over))


def test_an_unknown_engine_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown engine-core profile 'laptop'"):
        deploy.check(question(engine="laptop"))


def test_the_floors_grow_with_the_model() -> None:
    small, big = (deploy.floors_ms(q, deploy.config(q)[0]) for q in (question(model="qwen3-0.6b"), question()))
    assert small[0] < big[0] and small[1] < big[1]


def test_a_given_slo_capacity_design_has_one_level() -> None:
    spec = DesignSpec.parse({"kind": "capacity", "load": 0.15, "itl_slo_ms": 50, "ttft_slo_ms": 900})
    assert (spec.itl_slo_ms, spec.ttft_slo_ms) == (50.0, 900.0)
    with pytest.raises(ValueError, match="go together"):
        DesignSpec.parse({"kind": "capacity", "load": 0.15, "itl_slo_ms": 50})
    with pytest.raises(ValueError, match="go together"):
        DesignSpec.parse({"kind": "scaled", "itl_slo_ms": 50, "ttft_slo_ms": 900})
    with pytest.raises(ValueError, match=r"'design.itl_slo_ms' = 0 is invalid: allowed null or \(0, 3600000\]"):
        DesignSpec.parse({"kind": "capacity", "load": 0.15, "itl_slo_ms": 0, "ttft_slo_ms": 900})
    raw, _ = deploy.config(question())
    from dlfp.trials.armid import ArmId

    levels = {ArmId.parse(a["name"]).level for a in raw["arms"]}
    assert levels == {None, "given"}


@pytest.mark.slow
def test_a_small_plan_runs_and_names_an_arm_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "trace.csv", n=200)
    # Qwen3-8B on the A100: its virtual units cost half of 0.6B's (vLLM's scheduler per step dominates there)
    assert deploy.main(["--model", "qwen3-8b", "--profile", "a100", "--workload", str(trace), "--itl-slo-ms", "60",
                        "--ttft-slo-ms", "1500", "--trials", "1", "--out", str(tmp_path / "plan"), "--workers", "2",
                        "--allow-dirty"]) == 0
    out = capsys.readouterr().out
    assert "simulated: cost profile a100" in out and "virtual time" in out and "fitted to trace" in out
    used = out.split("Use ", 1)[1].split(":")[0]
    assert set(used.split(", ")) <= set(deploy.ARMS)
    [png] = (tmp_path / "plan").glob("*.capacity.png")
    assert png.stat().st_size > 10_000
    [table] = (tmp_path / "plan").glob("*.capacity.parquet")
    assert set(pd.read_parquet(table).arm) == set(deploy.ARMS)
    if "--scheduler-cls" in out:
        json.loads(out.split("--additional-config '", 1)[1].split("'", 1)[0])
