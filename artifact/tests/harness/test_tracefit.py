"""A request trace turned into the sweeps' workload language (:mod:`dlfp.harness.tracefit`): a known
workload's burstiness and lengths are recovered, and every malformed trace is refused by its first bad row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlfp.harness import tracefit
from dlfp.harness.workload import WorkloadSpec


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


def test_a_trace_of_one_kind_of_request_is_one_class_and_equal_lengths_stay_fixed(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    pd.DataFrame({"arrival_s": np.arange(30) * 0.5, "prompt_len": 100, "output_len": 20}).to_csv(path, index=False)
    fitted = tracefit.fit_workload(tracefit.read_trace(path))
    assert fitted["classes"] == [{"name": "short", "weight": 30, "prompt_len": {"fixed": 100},
                                  "output_len": {"fixed": 20}}]
    assert fitted["arrival"]["burstiness"] == 1000  # a clock: the gamma shape's upper bound
    assert fitted["trace_rate_rps"] == pytest.approx(2.0)


def test_a_parquet_trace_reads_as_a_csv_one(tmp_path: Path) -> None:
    frame = pd.read_csv(write_trace(tmp_path / "t.csv", n=60))
    frame.to_parquet(tmp_path / "t.parquet")
    assert tracefit.read_trace(tmp_path / "t.parquet").equals(tracefit.read_trace(tmp_path / "t.csv"))
    assert tracefit.is_trace("x.parquet") and tracefit.is_trace("x.csv") and not tracefit.is_trace("field")
