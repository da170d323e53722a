"""What the SLO controller's step-cost fit got wrong (``dlfp.studies.slo_fit``): the observed step
duration, the comparison only where the chunk was filled, and the per-target table; then the real
committed capacity run, read through its verified traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from dlfp.control.signals import best_completions
from dlfp.studies import slo_fit
from tests.studies.test_capacity import cut_committed


def _steps(rows: list[tuple[float, float, int, int, int, float | None, float | None]]) -> pd.DataFrame:
    """(schedule_t, complete_t, decodes, prefill, cap, budget, predicted) per step, in order."""
    return pd.DataFrame([{"step": i, "schedule_t": s, "complete_t": c, "exec_done_t": None, "decode_reqs": n,
                          "prefill_tokens": p, "cap": cap, "budget_s": b, "predicted_s": pr, "infeasible": False}
                         for i, (s, c, n, p, cap, b, pr) in enumerate(rows)])


def test_a_sized_step_is_timed_by_its_completion_cadence_and_unsized_steps_are_left_out() -> None:
    steps = _steps([(0.0, 0.010, 4, 0, 0, None, None),       # decode only: no budget, not sized
                    (0.009, 0.030, 4, 64, 64, 0.02, 0.019),  # sized: 20 ms after the last completion
                    (0.029, 0.045, 4, 32, 64, 0.02, 0.019)])  # sized, chunk not filled: 15 ms
    sized = slo_fit.sized_steps(steps.iloc[::-1])  # any order in, step order out
    assert list(sized.step) == [1, 2]
    assert sized.observed_s.tolist() == pytest.approx([0.020, 0.015])


def test_a_step_never_collected_has_no_duration_and_its_successor_is_timed_from_the_last_collected() -> None:
    steps = _steps([(0.0, 0.010, 4, 64, 64, 0.02, 0.02), (0.009, math.nan, 4, 64, 64, 0.02, 0.02),
                    (0.02, 0.040, 4, 64, 64, 0.02, 0.02)])
    done, _ = best_completions(steps.schedule_t.tolist(), steps.complete_t.tolist(), None)
    assert math.isnan(done[1])
    sized = slo_fit.sized_steps(steps)
    assert math.isnan(sized.observed_s.iloc[1]) and sized.observed_s.iloc[2] == pytest.approx(0.030)


def _rows(*steps: tuple[float, float, float, bool, bool], target: str = "t", level: str = "tight") -> pd.DataFrame:
    """(budget, predicted, observed, filled, infeasible) per sized step, ITL SLO 20 ms."""
    return pd.DataFrame([{"target": target, "level": level, "budget_s": b, "predicted_s": p, "observed_s": o,
                          "filled": f, "infeasible": i, "itl_slo_s": 0.02, "source": "simulated: x"}
                         for b, p, o, f, i in steps])


def test_the_fit_table_compares_filled_chunks_and_counts_overruns_and_infeasible_steps() -> None:
    rows = _rows((0.010, 0.010, 0.012, True, False),   # +20%, over budget by 20%
                 (0.010, 0.010, 0.009, True, False),   # -10%
                 (0.010, 0.010, 0.002, False, False),  # a prompt's short last piece: not an error of the fit
                 (0.010, 0.012, 0.013, True, True))    # no feasible chunk: counted apart
    table = slo_fit.fit_table(rows)
    assert table.to_dict("records") == [{
        "target": "t (simulated)", "SLO level": "tight", "steps sized (chunk filled, %)": "4 (75)",
        "median error (%)": "5", "90% of errors within (±%)": "19",
        "over budget by >10% (% of steps)": "33", "no feasible chunk (% of steps)": "25",
        "median budget (% of ITL SLO)": "50"}]


def test_a_study_without_the_controllers_units_has_no_table(tmp_path: Path) -> None:
    study = cut_committed(tmp_path, ("stock",))  # an interrupted study: the controller has not run yet
    assert slo_fit.study_rows(study).empty and slo_fit.fit_table(slo_fit.study_rows(study)).empty


def test_an_exact_fit_shows_no_error_and_no_overrun() -> None:
    rows = _rows(*[(0.01, 0.01 * k, 0.01 * k, True, False) for k in (0.5, 0.8, 1.0)])
    row = slo_fit.fit_table(rows).iloc[0]
    assert row["median error (%)"] == "0" and row["90% of errors within (±%)"] == "0"
    assert row["over budget by >10% (% of steps)"] == "0"


@pytest.fixture
def controller_units(tmp_path: Path) -> Path:
    """The committed 0.6B capacity run cut to trial 0's two SLO-controller units at load 0.15, beside
    one stock unit that the reading must skip."""
    return cut_committed(tmp_path, ("dlfp-slo.tight_0.15", "dlfp-slo.relaxed_0.15", "stock"))


def test_a_real_run_gives_each_level_its_own_rows_with_its_own_slo(controller_units: Path) -> None:
    rows = slo_fit.study_rows(controller_units)
    assert set(rows.level) == {"tight", "relaxed"} and set(rows.target) == {"a100-qwen3-0.6b"}
    slos = json.loads((controller_units / "a100-qwen3-0.6b" / "manifest.json").read_text())["design"]["sweep"]["slos"]
    for level, g in rows.groupby("level"):
        assert (g.itl_slo_s == slos[level]["itl_ms"] / 1e3).all()
        assert (g.budget_s <= g.itl_slo_s * (1 + 1e-9)).all()  # the budget never exceeds the SLO
        steps = pd.read_parquet(controller_units / "a100-qwen3-0.6b" / "trial-0" / f"dlfp-slo.{level}_0.15" /
                                "steps.parquet")
        assert len(g) == steps.budget_s.notna().sum() > 0
    table = slo_fit.fit_table(rows)
    assert list(table["SLO level"]) == list(dict.fromkeys(rows.level))
    assert (table.target == "a100-qwen3-0.6b (simulated)").all()
