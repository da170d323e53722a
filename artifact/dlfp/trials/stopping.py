"""Where a capacity sweep stops: an arm's loads in order, none above its first that fails every SLO level judging it.

A trial's capacity for an arm is interpolated up to the arm's first point that misses the SLOs, and a
rate that meets them again above a failure does not count (a queue past saturation does not recover:
:func:`dlfp.studies.capacity.trial_capacity`). So no point above an arm's first load that fails at
*every* SLO level judging the arm can change a capacity, at any level: a capacity design does not run
those points (``design.stop_at_failure``, on by default). They are the sweep's costliest units: a point
replays requests in proportion to its load, and the overloaded ones queue. Read off the three-trial
capacity run committed before this rule (its points' margins), they were 31-61% of each modeled target's
requests and 85% of the CPU engine's.

Each trial and arm without its load (:attr:`~dlfp.trials.armid.ArmId.held`) is one *chain*, its loads
run in order; a finished unit is judged from its own client traces (:mod:`dlfp.metrics`, as the
capacity tables judge it) and its margins are recorded in its manifest record, so a resume decides
the same without reading a trace. What is skipped is recorded too (status ``skipped`` and why): the
run's manifest then says complete, and the capacity tables count such a trial's sweep as whole up to
its failure. A complete unit without recorded margins (a run made before this rule) is never taken
as a failure: the sweep then runs on, as it did. What is skipped depends only on the traces before
it, which are deterministic in virtual time, so the run is the same bytes on any number of workers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from dlfp import metrics
from dlfp.trials.armid import ArmId
from dlfp.trials.schema import Manifest

SKIPPED = "skipped"
"""A unit's status when its sweep stopped below it."""


def margin(itl_p99_ms: float, ttft_p99_ms: float, itl_slo_ms: float, ttft_slo_ms: float) -> float:
    """How far the worse of the two P99s is over its SLO, as a share (<= 0: both met; NaN: nothing to judge,
    which fails)."""
    return max(itl_p99_ms / itl_slo_ms, ttft_p99_ms / ttft_slo_ms) - 1.0


def judged_levels(arm: str, slos: Mapping[str, Any]) -> tuple[str, ...]:
    """The SLO levels a sweep's arm is judged at: its own where it holds one (``<name>.<level>``), else every one."""
    level = ArmId.parse(arm).level
    return (level,) if level is not None else tuple(slos)


def unit_margins(requests: pd.DataFrame, tokens: pd.DataFrame, arm: str,
                 slos: Mapping[str, Mapping[str, float]]) -> dict[str, float | None]:
    """Per level judging ``arm``: :func:`margin` of the unit's pooled P99 ITL and TTFT (None where it is NaN:
    JSON has no NaN)."""
    summary = metrics.summarize(requests, tokens, math.inf, math.inf)
    out: dict[str, float | None] = {}
    for level in judged_levels(arm, slos):
        m = margin(summary["itl_p99_ms"], summary["ttft_p99_ms"], slos[level]["itl_ms"], slos[level]["ttft_ms"])
        out[level] = m if math.isfinite(m) else None
    return out


def fails_everywhere(margins: Mapping[str, float | None] | None) -> bool:
    """Whether recorded margins miss every level (None: not recorded, so not known to fail)."""
    return margins is not None and bool(margins) and all(m is None or not m <= 0 for m in margins.values())


class Stopping:
    """The stopping rule over one run's units (module docstring); off, it blocks and skips nothing."""

    def __init__(self, manifest: Manifest, enabled: bool) -> None:
        self.manifest = manifest
        sweep = (manifest.design or {}).get("sweep") if enabled else None
        self.enabled = sweep is not None
        self.slos: dict[str, Any] = sweep["slos"] if sweep is not None else {}
        self._chain: dict[int, list[int]] = {}
        if sweep is None:
            return
        loads = {arm: float(point["load"]) for arm, point in sweep["arms"].items()}
        chains: dict[tuple[int, str], list[int]] = {}
        for i, unit in enumerate(manifest.units):
            chains.setdefault((unit.trial, ArmId.parse(unit.arm).held), []).append(i)
        for members in chains.values():
            members.sort(key=lambda i: loads[manifest.units[i].arm])
            for i in members:
                self._chain[i] = members

    def _below(self, index: int) -> list[int]:
        members = self._chain.get(index, [index])
        return members[:members.index(index)]

    def blocked(self, index: int) -> bool:
        """Whether a unit must wait: a lower load of its chain has not run yet (nor been skipped)."""
        return any(not self.manifest.units[j].settled for j in self._below(index))

    def margins(self, index: int, requests: pd.DataFrame, tokens: pd.DataFrame) -> dict[str, float | None] | None:
        """What to record of a finished unit (None when the rule is off)."""
        if not self.enabled:
            return None
        return unit_margins(requests, tokens, self.manifest.units[index].arm, self.slos)

    def reason(self, index: int) -> str | None:
        """Why a unit is not to run (a lower load of its chain failed every level judging it), else None."""
        for j in self._below(index):
            unit = self.manifest.units[j]
            if unit.complete and fails_everywhere(unit.margins):
                levels = " and ".join(unit.margins or {})
                return f"its sweep stopped at {unit.arm}, which missed the SLOs at {levels} (design.stop_at_failure)"
        return None

    def to_skip(self, finished: int | None = None) -> dict[int, str]:
        """Every unit not yet settled that is not to run, with why; after unit ``finished``, only its chain can
        have gained one (no need to look at the run's other units)."""
        members = range(len(self.manifest.units)) if finished is None else self._chain.get(finished, [])
        return {i: why for i in members
                if not self.manifest.units[i].settled and (why := self.reason(i)) is not None}
