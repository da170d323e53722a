"""What one arm gives back, from a real engine or a virtual one: the client trace and the step records.

Its own module because both arm runners return it (:mod:`dlfp.harness.arm` for started engines,
:mod:`dlfp.harness.virtual` for virtual ones) and the first dispatches to the second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.control.signals import spread_controller_fields
from dlfp.control.steplog import read_step_log
from dlfp.harness.driver import TrialTrace

RAN = ("scheduler", "async_scheduling", "executor")
"""What the engine reports it ran, from its step log's header: the scheduler class vLLM chose
(``DLFPAsyncScheduler`` only under async scheduling), the async mode and the executor. A config
asks; vLLM may decide otherwise (it turns async scheduling off where a feature needs it), and a
label must say what ran."""


@dataclass
class ArmResult:
    """Client trace plus engine-side steps, both on the trial's time base (seconds), and what
    the engine reports it ran (:data:`RAN`; empty for results built without an engine)."""

    trace: TrialTrace
    steps: pd.DataFrame
    telemetry: pd.DataFrame
    ran: dict[str, Any] = field(default_factory=dict)


def steps_frame(step_log: Path, t0_monotonic: float,
                segment: int | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The step records of the last engine start (or of its ``segment``-th segment, counting from
    0: one per workload of a reused engine), times shifted to the trial's time base, and what its
    header says ran (:data:`RAN`)."""
    runs = list(read_step_log(step_log))
    if segment is not None:  # the last start's segments: its first header has segment 0
        starts = [i for i, (h, _) in enumerate(runs) if h.get("segment", 0) == 0]
        runs = runs[starts[-1]:] if starts else []
        runs = runs[segment:segment + 1]
    if not runs:
        which = "" if segment is None else f" for workload {segment}"
        raise RuntimeError(f"no step records in {step_log}{which}: was the DLFP scheduler active?")
    header, rows = runs[-1]
    steps = pd.DataFrame(spread_controller_fields(rows))
    for col in ("schedule_t", "complete_t", "exec_done_t"):
        if col in steps:
            steps[col] = steps[col].astype(float) - t0_monotonic
    return steps, {k: header[k] for k in RAN if k in header}
