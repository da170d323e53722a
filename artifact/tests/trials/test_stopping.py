"""Where a capacity sweep stops (:mod:`dlfp.trials.stopping`).

The rule is pure over a manifest: an arm's loads wait for the one below, and none runs above a load that failed
at every level judging the arm. The run-level test holds the point of it: a sweep that stops gives the same
capacities as one that runs every point (and the same bytes for what both ran, on another number of workers).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.analysis.runs import load_run
from dlfp.studies import deploy
from dlfp.studies.capacity import capacity_table, point_rows, trial_capacities
from dlfp.studies.deploy import Question
from dlfp.trials.config import parse_config
from dlfp.trials.design import DesignSpec
from dlfp.trials.runner import run_trials
from dlfp.trials.schema import Manifest, Unit, read_manifest
from dlfp.trials.stopping import Stopping, fails_everywhere, judged_levels
from tests.trials.fakes import CONFIG

SLOS = {"tight": {"itl_ms": 10.0, "ttft_ms": 100.0}, "relaxed": {"itl_ms": 50.0, "ttft_ms": 500.0}}
LOADS = (0.15, 0.3, 0.6)


def _manifest(arms: list[str], trials: int = 1) -> Manifest:
    sweep = {"slos": SLOS, "arms": {a: {"load": float(a.rpartition("_")[2]) if "_" in a else LOADS[0]}
                                    for a in arms}}
    return Manifest(status="running", config={"trials": trials, "arms": [{"name": a} for a in arms]},
                    units=[Unit(k, a) for k in range(trials) for a in arms], design={"sweep": sweep})


def _finish(m: Manifest, index: int, margins: dict[str, float | None]) -> None:
    m.units[index].status, m.units[index].margins = "complete", margins


def test_an_arms_loads_wait_for_the_one_below_and_none_runs_past_a_failure_at_every_level() -> None:
    # listed out of load order: the chain is ordered by the sweep's loads, not the list
    arms = ["stock", "stock_0.6", "stock_0.3", "dlfp.tight_0.15", "dlfp.tight_0.3", "dlfp.tight_0.6"]
    m = _manifest(arms)
    stop = Stopping(m, enabled=True)
    assert [stop.blocked(i) for i in range(6)] == [False, True, True, False, True, True]
    _finish(m, 0, {"tight": 0.4, "relaxed": -0.2})  # fails tight only: stock goes on (judged at both)
    assert stop.to_skip(0) == {} and not stop.blocked(2) and stop.blocked(1)
    _finish(m, 2, {"tight": 0.9, "relaxed": None})  # None: nothing to judge, a failure
    assert list(stop.to_skip(2)) == [1]
    assert "stock_0.3" in stop.to_skip(2)[1] and "tight and relaxed" in stop.to_skip(2)[1]
    _finish(m, 3, {"tight": 0.1})  # a held arm: its own level decides
    assert list(stop.to_skip()) == [1, 4, 5]


def test_off_the_rule_blocks_and_skips_nothing() -> None:
    m = _manifest(["stock", "stock_0.3"])
    stop = Stopping(m, enabled=False)
    _finish(m, 0, {"tight": 1.0, "relaxed": 1.0})
    assert not stop.blocked(1) and stop.to_skip() == {} and stop.margins(0, pd.DataFrame(), pd.DataFrame()) is None


def test_a_unit_without_recorded_margins_is_not_taken_for_a_failure() -> None:
    """A run made before the rule: its sweep runs on rather than skip what it cannot judge."""
    m = _manifest(["stock", "stock_0.3"])
    m.units[0].status = "complete"
    assert Stopping(m, enabled=True).to_skip() == {} and not fails_everywhere(None) and not fails_everywhere({})


@given(st.dictionaries(st.sampled_from(["tight", "relaxed", "given"]),
                       st.one_of(st.none(), st.floats(allow_nan=False, min_value=-1, max_value=10)), min_size=1))
def test_a_failure_everywhere_means_no_level_is_met(margins: dict[str, float | None]) -> None:
    assert fails_everywhere(margins) == (not any(v is not None and v <= 0 for v in margins.values()))


def test_held_arms_are_judged_at_their_own_level_and_the_others_at_every_one() -> None:
    assert judged_levels("dlfp-slo.relaxed_0.3", SLOS) == ("relaxed",)
    assert judged_levels("mbt-512_0.3", SLOS) == judged_levels("stock", SLOS) == ("tight", "relaxed")


def test_only_capacity_designs_may_turn_it_off() -> None:
    assert DesignSpec.parse({"kind": "capacity", "load": 0.15}).stop_at_failure
    assert not DesignSpec.parse({"kind": "capacity", "load": 0.15, "stop_at_failure": False}).stop_at_failure
    with pytest.raises(ValueError, match=r"'design\.stop_at_failure' belongs to capacity designs"):
        DesignSpec.parse({"kind": "scaled", "stop_at_failure": False})


def test_a_trial_counts_when_its_sweep_stopped_at_a_failure_not_when_it_has_a_gap() -> None:
    def rows(trial: int, rates: list[float], itl: list[float]) -> list[dict]:
        return [{"target": "t", "level": "tight", "arm": "a", "trial": trial, "rate_rps": r, "itl_p99_ms": i,
                 "ttft_p99_ms": 1.0, "itl_slo_ms": 10.0, "ttft_slo_ms": 100.0} for r, i in zip(rates, itl, strict=True)]

    points = pd.DataFrame(rows(0, [1, 2, 3], [5, 5, 5]) + rows(1, [1, 2], [5, 20]) + rows(2, [1, 2], [5, 5])
                          + rows(3, [1, 3], [5, 20]))
    got = trial_capacities(points).set_index("trial")
    assert list(got.index) == [0, 1]  # 2: stopped without a failure (incomplete); 3: a gap below its failure
    assert got.loc[0, "censored"] == "above" and got.loc[1, "capacity_rps"] == pytest.approx(1 + 1 / 3)


def test_on_shared_engines_a_stopped_arm_replays_nothing_past_its_failure_and_a_resume_keeps_it(
        tmp_path: Path, fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real-time path (engines shared by an arm's loads): the judge fails every load from 0.3 on."""
    arms = fake()
    monkeypatch.setattr("dlfp.trials.stopping.unit_margins",
                        lambda requests, tokens, arm, slos: {lv: (1.0 if "_0.3" in arm else -0.5) for lv in slos})
    raw = {**CONFIG, "reuse_engine": True, "design": {"kind": "capacity", "load": 0.15, "enforce": False},
           "arms": [{"name": "stock"}, *({"name": f"stock_{x}", "load": x} for x in (0.3, 0.6)),
                    *({"name": f"mbt-256_{x}", "load": x, "engine": {"max_num_batched_tokens": 256}}
                      for x in (0.15, 0.3, 0.6))]}
    out = tmp_path / "run"
    done = run_trials(parse_config(raw), out, progress=False)
    assert done.complete and len(arms.calls) == 8  # 2 trials x 2 arms x loads 0.15 and 0.3
    assert [u.arm for u in done.units if u.status == "skipped"] == ["stock_0.6", "mbt-256_0.6"] * 2
    assert not (out / "trial-0" / "stock_0.6").exists()
    assert read_manifest(out).missing == [] and run_trials(parse_config(raw), out, progress=False).complete
    assert len(arms.calls) == 8


@pytest.mark.slow
def test_a_sweep_that_stops_has_every_capacity_of_one_that_runs_every_point(tmp_path: Path) -> None:
    raw, _ = deploy.config(Question(model="qwen3-8b", profile="a100", itl_slo_ms=40.0, ttft_slo_ms=400.0))
    keep = ("stock", "mbt-256", "dlfp-slo.given")
    raw = {**raw, "trials": 2, "workload": {**raw["workload"], "n_requests": 40},
           "arms": [a for a in raw["arms"] if a["name"].rpartition("_")[0] in keep or a["name"] == "stock"]}
    full = {**raw, "design": {**raw["design"], "stop_at_failure": False}}
    run_trials(parse_config(full), tmp_path / "full", progress=False, allow_dirty=True, workers=1)
    run_trials(parse_config(raw), tmp_path / "stops", progress=False, allow_dirty=True, workers=2)

    stops = read_manifest(tmp_path / "stops")
    skipped = [u for u in stops.units if u.status == "skipped"]
    assert stops.complete and skipped, "the plan's SLOs should fail some arm below the top load"
    for u in skipped:
        assert "missed the SLOs" in u.skipped
    tables = {}
    for name in ("full", "stops"):
        run = load_run(tmp_path / name)
        tables[name] = capacity_table(point_rows(run, "t")).drop(columns=["late_points", "n_points", "source"])
    pd.testing.assert_frame_equal(tables["full"], tables["stops"])
    assert not tables["full"].capacity_rps.map(math.isnan).any()
    full_units = {(u.trial, u.arm): u.files for u in read_manifest(tmp_path / "full").units}
    for u in stops.complete_units():  # the same bytes, on two workers against one, for every unit both ran
        assert u.files == full_units[(u.trial, u.arm)]
