"""``dlfp plan``: a deployer's question checked before any work, run in virtual time, answered.

The refusals name what is wrong; the trace fitter recovers a known workload's burstiness and lengths;
the given-SLO capacity design judges every arm at the one level given; and a small plan runs end to end
(one trial, two arms' worth of time) and names a setting that is one of the arms it ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlfp.harness import tracefit
from dlfp.studies import deploy
from dlfp.studies.deploy import Question
from dlfp.trials.design import DesignSpec


def question(**over: object) -> Question:
    base = {"model": "qwen3-8b", "profile": "a100", "itl_slo_ms": 60.0, "ttft_slo_ms": 1500.0}
    return Question(**{**base, **over})


def write_trace(path: Path, n: int = 400, burstiness: float = 0.5, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1 / (4.0 * burstiness), n)
    long = rng.random(n) < 0.2
    prompt = np.where(long, rng.integers(2000, 4000, n), rng.integers(40, 300, n))
    output = np.where(long, rng.integers(10, 30, n), rng.integers(50, 200, n))
    pd.DataFrame({"arrival_s": np.cumsum(gaps), "prompt_len": prompt, "output_len": output}).to_csv(path, index=False)
    return path


def test_a_trace_becomes_a_workload_model_of_its_burstiness_and_lengths(tmp_path: Path) -> None:
    fitted = tracefit.fit_workload(tracefit.read_trace(write_trace(tmp_path / "t.csv", n=4000)))
    assert fitted["arrival"]["burstiness"] == pytest.approx(0.5, rel=0.15)
    assert fitted["trace_rate_rps"] == pytest.approx(4.0, rel=0.1)
    short, long = fitted["classes"]
    assert (short["name"], long["name"]) == ("short", "long")
    assert long["weight"] / (short["weight"] + long["weight"]) == pytest.approx(0.2, abs=0.03)
    ln = long["prompt_len"]["lognormal"]
    assert ln["min"] >= 2000 and ln["max"] < 4000 and 2700 < ln["median"] < 3300
    from dlfp.harness.workload import WorkloadSpec

    WorkloadSpec.from_dict({"n_requests": 10, "rate_rps": 1.0, "arrival": fitted["arrival"],
                            "classes": fitted["classes"]})  # the model is a valid workload
    said = tracefit.describe(fitted)
    assert said.startswith("4000 requests at ") and f"burstiness {fitted['arrival']['burstiness']:g}" in said


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.drop(columns="output_len"), r"missing column\(s\) \['output_len'\]"),
    (lambda d: d.assign(arrival_s=d.arrival_s[::-1].to_numpy()), "not sorted: row 1"),
    (lambda d: d.assign(arrival_s=d.arrival_s - 100), "row 0 has arrival_s"),
    (lambda d: d.assign(prompt_len=d.prompt_len.where(d.index != 3, 0)), "row 3 has prompt_len 0"),
    (lambda d: d.head(5), "5 requests; needs at least 20"),
    (lambda d: d.assign(arrival_s=1.0), "the same instant"),
])
def test_a_bad_trace_is_refused_by_row(tmp_path: Path, edit, message: str) -> None:
    good = pd.read_csv(write_trace(tmp_path / "t.csv", n=50))
    bad = tmp_path / "bad.csv"
    edit(good).to_csv(bad, index=False)
    with pytest.raises(ValueError, match=message):
        tracefit.read_trace(bad)


def test_a_trace_longer_than_the_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="more than the model length 1000"):
        tracefit.read_trace(write_trace(tmp_path / "t.csv"), max_model_len=1000)


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


def test_a_profile_without_engine_costs_is_refused(tmp_path: Path) -> None:
    raw = (Path(deploy.__file__).parents[1] / "sim/profiles/a100.yaml").read_text()
    bare = tmp_path / "bare.yaml"
    bare.write_text(raw[:raw.index("engine:")])
    with pytest.raises(ValueError, match="no 'engine' section"):
        deploy.check(question(profile=str(bare)))


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
    with pytest.raises(ValueError, match="milliseconds"):
        DesignSpec.parse({"kind": "capacity", "load": 0.15, "itl_slo_ms": 0, "ttft_slo_ms": 900})
    raw, _ = deploy.config(question())
    from dlfp.studies.capacity import split_arm

    levels = {split_arm(a["name"])[1] for a in raw["arms"]}
    assert levels == {None, "given"}


@pytest.mark.slow
def test_a_small_plan_runs_and_names_an_arm_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "trace.csv", n=200)
    assert deploy.main(["--model", "qwen3-0.6b", "--profile", "h200", "--workload", str(trace), "--itl-slo-ms", "20",
                        "--ttft-slo-ms", "400", "--trials", "1", "--out", str(tmp_path / "plan"), "--workers", "2",
                        "--allow-dirty"]) == 0
    out = capsys.readouterr().out
    assert "simulated: cost profile h200" in out and "virtual time" in out and "fitted to trace" in out
    used = out.split("Use ", 1)[1].split(":")[0]
    assert set(used.split(", ")) <= set(deploy.ARMS)
    [png] = (tmp_path / "plan").glob("*.capacity.png")
    assert png.stat().st_size > 10_000
    [table] = (tmp_path / "plan").glob("*.capacity.parquet")
    assert set(pd.read_parquet(table).arm) == set(deploy.ARMS)
    if "--scheduler-cls" in out:
        json.loads(out.split("--additional-config '", 1)[1].split("'", 1)[0])
