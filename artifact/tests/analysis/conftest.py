"""The committed CPU paired run (``data/runs/cpu-default``), loaded once per module, for the
analysis tests that read it as it is (copies are made where a test damages one)."""

from __future__ import annotations

import pandas as pd
import pytest

from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.paths import REPO_ROOT


@pytest.fixture(scope="module")
def run() -> RunData:
    return load_run(REPO_ROOT / "data" / "runs" / "cpu-default")


@pytest.fixture(scope="module")
def rows(run: RunData) -> pd.DataFrame:
    return trial_rows(run)
