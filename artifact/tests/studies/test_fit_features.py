"""What the SLO controller's fit misses (``dlfp.studies.fit_features``): a missing prefill-step cost is
found where the plant has one, jitter is not explained away by any feature, and the real committed run
is read through its verified traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlfp.studies import fit_features as ff
from tests.studies.test_capacity import cut_committed


def _rows(jitter: float, prefill_cost: float, n: int = 4000, seed: int = 0) -> pd.DataFrame:
    """Steps of a plant: 4 ms + 0.3 ms per decode + 0.02 ms per chunk token, ``prefill_cost`` ms more on a
    step that carries prefill, times (1 + uniform jitter); the controller's prediction is exact but for it."""
    rng = np.random.default_rng(seed)
    d = rng.integers(1, 32, n).astype(float)
    p = np.where(rng.random(n) < 0.5, rng.integers(64, 1024, n), 0).astype(float)
    clean = (4 + 0.3 * d + 0.02 * p + prefill_cost * (p > 0)) / 1e3
    observed = clean * (1 + jitter * rng.uniform(-1, 1, n))
    return pd.DataFrame({"target": "t", "source": "simulated: x", "D": d, "K": 100 * d, "P": p, "Cp": 0.0,
                         "observed_s": observed, "predicted_s": clean, "judged": p > 0})


def _p90(table: pd.DataFrame, fit: str) -> float:
    return float(table.set_index("fit").loc[fit, "90% of errors within (±%)"])


def test_a_missing_prefill_step_cost_is_found() -> None:
    table = ff.feature_table(_rows(jitter=0.0, prefill_cost=3.0))
    assert _p90(table, "in sample: the five the units ran with") > 5
    assert _p90(table, "in sample: + prefill-step cost") < 0.1
    assert _p90(table, ff.ONLINE) == 0  # the logged predictions were the exact plant


def test_jitter_is_not_explained_by_any_feature() -> None:
    table = ff.feature_table(_rows(jitter=0.4, prefill_cost=0.0))
    p90s = [_p90(table, f"in sample: {label}") for label in ff.FEATURE_SETS]
    assert min(p90s) > 30 and max(p90s) - min(p90s) < 3


def test_the_committed_runs_controller_units_are_read(tmp_path: Path) -> None:
    study = cut_committed(tmp_path, ("dlfp-slo.tight_0.15", "stock"))
    rows = ff.feature_rows(study)
    assert len(rows) and set(rows.target) == {"a100-qwen3-0.6b"} and rows.judged.any()
    assert (rows.observed_s > 0).all()
    table = ff.feature_table(rows)
    assert list(table.fit) == [ff.ONLINE, *(f"in sample: {label}" for label in ff.FEATURE_SETS)]
    assert ff.feature_table(ff.feature_rows(cut_committed(tmp_path / "b", ("stock",)))).empty
