"""The simulation chapter's GPU measurement (:mod:`dlfp.book.gpu_section`): the committed H200 profile gives
two tables captioned with where they were measured, shown and glued, and a verdict sentence; without one the
page says the factors are assumed, under the same glued names."""

from __future__ import annotations

from pathlib import Path

from dlfp.book.gpu_section import section
from dlfp.book.page import Glue, Say, Show, glued
from dlfp.paths import REPO_ROOT

KEYS = {"gpu_cal_passes", "gpu_cal_errors", "gpu_cal_verdict"}
COMMITTED = REPO_ROOT / "data" / "runs" / "gpu-calibrate-h200" / "h200-measured.yaml"


def test_a_measured_profile_is_shown_with_its_source_and_glued() -> None:
    items = list(section(str(COMMITTED)))
    values = glued(items)
    assert set(values) == KEYS
    shown = [i.value for i in items if isinstance(i, Show)]
    assert shown == [values["gpu_cal_errors"], values["gpu_cal_passes"]]
    source = f"(dlfp sim gpu-calibrate, {COMMITTED.parent})"
    assert all(s.caption.endswith(source) and "Source: measured on " in s.caption for s in shown)
    assert str(values["gpu_cal_verdict"]).startswith("On the forward passes measured on ")


def test_without_a_measurement_the_factors_are_said_to_be_assumed(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.yaml")
    items = list(section(missing))
    values = glued(items)
    assert set(values) == KEYS and not [i for i in items if isinstance(i, Show)]
    note = f"No GPU measurement is committed ({missing} is missing): the shipped profiles' factors are assumed."
    assert str(values["gpu_cal_verdict"]) == note and [i.text for i in items if isinstance(i, Say)] == [note]
    assert all(values[k].data.iloc[0, 0] == "none" for k in ("gpu_cal_passes", "gpu_cal_errors"))
    assert next(i.key for i in items if isinstance(i, Glue)) == "gpu_cal_verdict"
