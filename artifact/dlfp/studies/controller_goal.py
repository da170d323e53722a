"""The controller goal of issue 39 as a declared file (``configs/controller-goal.yaml``): read and
validated here, before any run that judges it, so the goal cannot move with the result.

Each criterion is a statement over the capacity study's target and SLO-level pairs (the file's comments
say what each means); :func:`load_goal` refuses a file that is missing a criterion, names one it does
not know, or sets a share or ratio outside its range.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dlfp.paths import CONFIGS

GOAL_FILE = CONFIGS / "controller-goal.yaml"


@dataclass(frozen=True, slots=True)
class PerTargetBudget:
    point_at_least: float
    interval_low_at_least: float
    confidence: float


@dataclass(frozen=True, slots=True)
class SingleBudget:
    point_at_least: float
    share_of_pairs: float


@dataclass(frozen=True, slots=True)
class Bound:
    point_at_least: float
    share_of_pairs: float


@dataclass(frozen=True, slots=True)
class TTFTAtCapacity:
    within: float


@dataclass(frozen=True, slots=True)
class Goal:
    """The declared goal: the arms judged and the four criteria."""

    arms: tuple[str, ...]
    per_target_budget: PerTargetBudget
    single_budget: SingleBudget
    bound: Bound
    ttft_at_capacity: TTFTAtCapacity


_CRITERIA = {"per_target_budget": PerTargetBudget, "single_budget": SingleBudget, "bound": Bound,
             "ttft_at_capacity": TTFTAtCapacity}
_RANGES = {"point_at_least": (0.0, 10.0), "interval_low_at_least": (0.0, 10.0), "confidence": (0.5, 1.0),
           "share_of_pairs": (0.0, 1.0), "within": (0.0, 1.0)}


def load_goal(path: Path = GOAL_FILE) -> Goal:
    """The goal in ``path``, validated (module docstring); a ValueError names what is wrong."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) != {"arms", "criteria"}:
        raise ValueError(f"{path}: needs exactly the keys 'arms' and 'criteria'")
    arms = raw["arms"]
    if not (isinstance(arms, list) and arms and all(isinstance(a, str) and a for a in arms)):
        raise ValueError(f"{path}: 'arms' must list arm names, got {arms!r}")
    criteria = raw["criteria"]
    if not isinstance(criteria, dict) or set(criteria) != set(_CRITERIA):
        raise ValueError(f"{path}: 'criteria' must be exactly {sorted(_CRITERIA)}, got {sorted(criteria or {})}")
    built: dict[str, Any] = {}
    for name, cls in _CRITERIA.items():
        given = criteria[name]
        fields = set(cls.__dataclass_fields__)
        if not isinstance(given, dict) or set(given) != fields:
            raise ValueError(f"{path}: criterion {name!r} needs exactly {sorted(fields)}, got {given!r}")
        for key, value in given.items():
            lo, hi = _RANGES[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
                raise ValueError(f"{path}: {name}.{key} = {value!r} is outside ({lo}, {hi}]")
        built[name] = cls(**{k: float(v) for k, v in given.items()})
    return Goal(arms=tuple(arms), **built)
