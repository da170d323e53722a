"""Every controller by name: the ``controller`` parameter's values, and how each is built.

Adding a controller is one module (a class with :class:`~dlfp.control.protocol.Controller`'s shape)
and one entry here; the parameters' validation, their reference table and the scheduler glue read
this table, and the glue names no controller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlfp.control.deadline import DeadlineController
from dlfp.control.law import DLFPController
from dlfp.control.slo import SLOController, slo_params_from

if TYPE_CHECKING:
    from dlfp.control.params import DLFPParams
    from dlfp.control.protocol import Controller


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered controller."""

    name: str
    build: Callable[[DLFPParams], Controller]
    family: str
    """The figures' family of an arm that runs it (:mod:`dlfp.analysis.families`)."""
    doc: str
    """What it does, in a line (the parameter reference)."""
    slos: tuple[str, ...] = ("itl_slo_ms",)
    """The SLO parameters it reads: a study that holds an SLO level gives it these."""


REGISTRY: dict[str, Entry] = {e.name: e for e in (
    Entry("law", DLFPController, "DLFP law",
          "the paper's law: proportional feedback on one observed interval"),
    Entry("slo", lambda p: SLOController(slo_params_from(p)), "SLO controller",
          "an online step-cost fit solved for itl_slo_ms, trimmed by tail feedback"),
    Entry("deadline", DeadlineController.from_params, "deadline controller",
          "the slo controller's chunk, or the engine's budget where the prompts' ttft_slo_ms deadlines need "
          "it and the P99 ITL can afford the slow step", slos=("itl_slo_ms", "ttft_slo_ms")),
)}
"""The controllers, in the order the reference lists them."""

NAMES: tuple[str, ...] = tuple(REGISTRY)


def build(params: DLFPParams) -> Controller:
    """A fresh controller of the kind ``params.controller`` names (validated against :data:`NAMES`)."""
    return REGISTRY[params.controller].build(params)
