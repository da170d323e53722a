"""The ``fake`` fixture of the trial tests: the runner with :mod:`tests.trials.fakes` in place of engines."""

from __future__ import annotations

import pytest

from dlfp.trials.prediction import Measured
from tests.trials.fakes import CPU_LIKE, FakeArms, fake_preflight


@pytest.fixture
def fake(monkeypatch):
    def install(measured: Measured = CPU_LIKE, **kw) -> FakeArms:
        arms = FakeArms(**kw)
        monkeypatch.setattr("dlfp.harness.arm.run_arm", arms)
        monkeypatch.setattr("dlfp.harness.arm.run_arms", arms.many)
        monkeypatch.setattr("dlfp.trials.preflight.run_preflight", fake_preflight(measured))
        return arms
    return install
