"""Every controller by name: the ``controller`` parameter's values, and how each is built.

Adding a controller is one module (a class with :class:`~dlfp.control.protocol.Controller`'s shape and
a ``from_params`` constructor) and one entry here; the parameters' validation, their reference table,
the studies' SLO levels and the figures' families read this table, and the scheduler glue names no
controller. An entry names its class by path (``module:Class``, as vLLM names a ``scheduler_cls``) and
is imported when first built, so the parameters can read the table without importing every
controller, and a controller's module can read the parameters.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered controller."""

    name: str
    cls: str
    """``module:Class`` of a class whose ``from_params(params)`` builds the controller."""
    family: str
    """The figures' family of an arm that runs it (:mod:`dlfp.analysis.families`)."""
    doc: str
    """What it does, in a line (the parameter reference)."""
    slos: tuple[str, ...] = ("itl_slo_ms",)
    """The SLO parameters it reads: a study that holds an SLO level gives it these."""

    def build(self, params: Any) -> Any:
        """The controller (a :class:`~dlfp.control.protocol.Controller`) for validated ``DLFPParams``
        (untyped here: the parameters and the controllers import this table, not the other way round)."""
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name).from_params(params)


REGISTRY: dict[str, Entry] = {e.name: e for e in (
    Entry("law", "dlfp.control.law:DLFPController", "DLFP law",
          "the paper's law: proportional feedback on one observed interval"),
    Entry("slo", "dlfp.control.slo:SLOController", "SLO controller",
          "an online step-cost fit solved for itl_slo_ms, trimmed by tail feedback"),
    Entry("deadline", "dlfp.control.deadline:DeadlineController", "deadline controller",
          "the slo controller's chunk, or a bigger one where the prompts' ttft_slo_ms deadlines need it and "
          "the P99 ITL can afford the slow step", slos=("itl_slo_ms", "ttft_slo_ms")),
)}
"""The controllers, in the order the reference lists them."""

NAMES: tuple[str, ...] = tuple(REGISTRY)


def build(params: Any) -> Any:
    """A fresh controller of the kind ``params.controller`` names (validated against :data:`REGISTRY`)."""
    return REGISTRY[params.controller].build(params)
