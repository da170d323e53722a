"""The simulation chapter's GPU measurement: the forward passes measured by ``dlfp sim gpu-calibrate`` and
each cost profile's error on them, as :mod:`dlfp.book.page` items. Without a committed measurement the page
says the shipped profiles' factors are assumed, under the same glued names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from dlfp.analysis import gpu_calibration
from dlfp.book.notebook import Plain
from dlfp.book.page import Glue, Item, Say, Show


def section(profile: str) -> Iterator[Item]:
    """Everything the section glues and shows (``profile``: the measured profile's path)."""
    if not Path(profile).is_file():
        note = f"No GPU measurement is committed ({profile} is missing): the shipped profiles' factors are assumed."
        yield Glue("gpu_cal_verdict", Plain(note))
        for key in ("gpu_cal_passes", "gpu_cal_errors"):
            yield Glue(key, pd.DataFrame({"GPU measurement": ["none"]}).style.hide(axis="index"))
        yield Say(note)
        return
    cal = gpu_calibration.load(profile)
    source = f"measured on {cal.measured_on} (dlfp sim gpu-calibrate, {Path(profile).parent})"
    passes = gpu_calibration.passes(cal).style.format(precision=2).hide(axis="index").set_caption(
        "Each forward pass: the GPU's busy time (kernels running; what the fit matches), its wall clock (every kernel "
        f"launched from Python), and the step time each profile predicts. Source: {source}")
    errors = gpu_calibration.errors(cal).style.format(precision=3, na_rep="").format(
        "{:.0f}", subset=["error p50 (%)", "error p90 (%)"]).hide(axis="index").set_caption(
        "Each profile's efficiencies (matmul, attention, memory: the shares of peak FLOP/s and HBM bandwidth a step "
        "reaches) and its relative error over the passes; the fit's leave-one-out error predicts "
        f"each pass by a fit that never saw it. Source: {source}")
    yield Glue("gpu_cal_passes", passes)
    yield Glue("gpu_cal_errors", errors)
    yield Glue("gpu_cal_verdict", Plain(f"On the forward passes measured on {cal.measured_on}, "
                                        f"{gpu_calibration.verdict(cal)}"))
    yield Show(errors)
    yield Show(passes)
