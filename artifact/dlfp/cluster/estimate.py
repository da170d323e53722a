"""How long a batch job needs, derived from the configs it runs (pure arithmetic).

A paired-trial run costs, per arm still missing, one engine start plus the workload's arrival
span (``n_requests / rate_rps``), and, when the run has not started yet, one pre-flight (the
design's measurement on a fresh engine: an engine start plus about a minute of probes). A job's
limit is that sum times :data:`MARGIN` plus :data:`FIXED_S` for imports, papermill and the
drain of the last requests. Under a *scaled* design the pre-flight sets the arrival rate, so the
config's ``rate_rps`` is a stand-in: the margin covers the difference, and a job that still runs
out of time is stopped by SLURM (SIGTERM), keeps its finished arms, and resumes on resubmission.

Engine starts are parameters: :data:`GPU_ENGINE_START_S` is an assumption for vLLM 0.32 with
CUDA graphs on an A100 (not measured here: no GPU); :data:`CPU_ENGINE_START_S` is measured on
the 2-core CPU machine (DESIGN.md: 20-40 s); :data:`SIM_ENGINE_START_S` is the modeled executor's
measured start with the engine core in its own process (about 17 s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MARGIN = 1.5
FIXED_S = 600.0
GPU_ENGINE_START_S = 180.0
CPU_ENGINE_START_S = 40.0
SIM_ENGINE_START_S = 20.0
PROBE_S = 60.0
"""Pre-flight probes after its engine is up (a few dozen prefills beside running decodes)."""
VERIFY_S = 60.0
"""The install check's own work after its engine start (seven requests, one long prompt)."""
BOOK_S = 900.0
"""The results job: re-executing notebooks over complete runs (no engine) and the strict book build."""


@dataclass(frozen=True)
class RunCost:
    """What is left to do in one run folder: arms missing, and whether its pre-flight is still due."""

    label: str
    missing_arms: int
    arm_span_s: float
    engine_start_s: float
    preflight_due: bool

    @property
    def seconds(self) -> float:
        preflight = self.engine_start_s + PROBE_S if self.preflight_due else 0.0
        return self.missing_arms * (self.engine_start_s + self.arm_span_s) + preflight

    def describe(self) -> str:
        parts = [f"{self.missing_arms} arm(s) x ({self.engine_start_s:.0f} s start + {self.arm_span_s:.0f} s load)"]
        if self.preflight_due:
            parts.append(f"pre-flight {self.engine_start_s + PROBE_S:.0f} s")
        return f"{self.label}: " + " + ".join(parts)


def arm_span_s(workload: Mapping[str, Any]) -> float:
    """Seconds of open-loop arrivals in one arm: requests over the config's arrival rate."""
    return float(workload["n_requests"]) / float(workload["rate_rps"])


def run_cost(label: str, workload: Mapping[str, Any], units: Sequence[Mapping[str, Any]], started: bool,
             engine_start_s: float) -> RunCost:
    """The cost of a run given its planned units (or its manifest's, when it has started)."""
    missing = sum(1 for u in units if u.get("status") != "complete")
    return RunCost(label, missing, arm_span_s(workload), engine_start_s, preflight_due=not started)


def limit_s(work_s: float) -> float:
    """A job's time limit for ``work_s`` of estimated work: the margin, the fixed part, whole minutes."""
    return 60.0 * math.ceil((work_s * MARGIN + FIXED_S) / 60.0)


def slurm_time(seconds: float) -> str:
    """``D-HH:MM:SS``/``HH:MM:SS`` as ``sbatch --time`` takes it."""
    total = math.ceil(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
