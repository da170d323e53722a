"""Synthetic trial capacities shaped as :func:`dlfp.studies.capacity.trial_capacities` makes them: a capacity
of 0 is censored below (the lowest rate, :data:`LOWEST`, already failed), one marked ``above`` met the SLOs at
the top rate."""

from __future__ import annotations

import math
from typing import Any

LOWEST = 1.0
"""The sweep's lowest rate (req/s): a trial that fails there has a capacity in [0, LOWEST]."""


def trial(target: str, level: str, arm: str, k: int, capacity: float, censored: str | None = None) -> dict[str, Any]:
    kind = censored or ("below" if capacity <= 0 else "none")
    high = LOWEST if kind == "below" else math.inf if kind == "above" else capacity
    return {"target": target, "level": level, "arm": arm, "trial": k, "capacity_rps": capacity, "censored": kind,
            "bracket_low_rps": 0.0 if kind == "below" else capacity, "bracket_high_rps": high}
