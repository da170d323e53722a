"""An arm's identity on a rate sweep: its base arm, the SLO level it holds, and its load.

A capacity run names each unit's arm ``<base>[.<level>]_<load>`` (``dlfp.tight_0.45``: the DLFP arm holding
the tight level's SLOs, at load 0.45; ``mbt-512_0.3``; plain ``stock`` is stock at the lowest load). The name
is a folder name and a key of the run's sweep record, so it stays the form on disk; :class:`ArmId` is that
name parsed once, in one place, instead of split apart by whoever needs a part of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dlfp.trials.sweep import KNOWN_LEVELS

_LOAD = re.compile(r"\d+(\.\d+)?")


def _split(name: str) -> tuple[str, str | None, float | None]:
    """``name``'s base, level and load, by the form in the module docstring."""
    load = None
    head, sep, tail = name.rpartition("_")
    if sep and _LOAD.fullmatch(tail):
        name, load = head, float(tail)
    base, _, level = name.rpartition(".")
    return (base, level, load) if base and level in KNOWN_LEVELS else (name, None, load)


@dataclass(frozen=True)
class ArmId:
    """A parsed arm name (module docstring). ``level`` None: the arm is judged at every level of the sweep;
    ``load`` None: the name carries no load (``stock``, or an arm outside a sweep). Built only from parts
    whose :attr:`name` parses back to them."""

    base: str
    level: str | None = None
    load: float | None = None

    def __post_init__(self) -> None:
        if not self.base or _split(self.base) != (self.base, None, None):
            raise ValueError(f"arm base {self.base!r} is empty or ends in a level or a load: it would not parse back")
        if self.level is not None and self.level not in KNOWN_LEVELS:
            raise ValueError(f"SLO level {self.level!r} is not one of {list(KNOWN_LEVELS)}")
        if self.load is not None and not (math.isfinite(self.load) and self.load > 0
                                          and _LOAD.fullmatch(str(self.load))):
            raise ValueError(f"load {self.load!r} is not a positive number written without an exponent")

    @property
    def held(self) -> str:
        """The arm without its load: ``dlfp.tight`` (the arm as a sweep's plan lists it before its loads)."""
        return self.base if self.level is None else f"{self.base}.{self.level}"

    @property
    def name(self) -> str:
        """The name on disk: ``<base>[.<level>][_<load>]``."""
        return self.held if self.load is None else f"{self.held}_{self.load}"

    def at(self, load: float) -> ArmId:
        """The same arm at ``load``."""
        return ArmId(self.base, self.level, load)

    @classmethod
    def parse(cls, name: str) -> ArmId:
        """``ArmId("dlfp", "tight", 0.45)`` for ``dlfp.tight_0.45``, ``ArmId("stock")`` for ``stock`` and
        ``ArmId("stock", None, 0.3)`` for ``stock_0.3``: the inverse of :attr:`name`."""
        return cls(*_split(name))
