"""How long a batch job needs, derived from the configs it runs (pure arithmetic).

A paired-trial run costs, per arm still missing, one engine start plus the arrival span of the
engine's warm-up requests and the workload (``(warmup_requests + n_requests) / rate``), and, when
the run has not started yet, one pre-flight (the design's measurement on a fresh engine: an engine
start plus about a minute of probes). A job's limit is that sum times :data:`MARGIN` plus
:data:`FIXED_S` for imports, papermill and the drain of the last requests. Under a *scaled*
design the pre-flight sets the arrival rate, so the config's ``rate_rps`` is only a stand-in: the
plan (:mod:`dlfp.cluster.plan`) passes a better :class:`Rate` where it has one (the rate a started
run's pre-flight derived, else the one the modeled study derived for the same model and TP size),
the margin covers the rest, and a job that still runs out of time is stopped by SLURM (SIGTERM),
keeps its finished arms, and resumes on resubmission.

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

from dlfp.trials.schema import Unit

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
class Rate:
    """An arm's arrival rate (requests per second) and where it comes from, for the estimate's basis."""

    rps: float
    source: str


def config_rate(workload: Mapping[str, Any]) -> Rate:
    """The config's own ``rate_rps``: the real rate of a fixed design, a stand-in under a scaled one."""
    return Rate(float(workload["rate_rps"]), "the config's rate")


@dataclass(frozen=True)
class RunCost:
    """What is left to do in one run folder: arms missing, and whether its pre-flight is still due."""

    label: str
    missing_arms: int
    arm_span_s: float
    engine_start_s: float
    preflight_due: bool
    load_basis: str = ""
    """How ``arm_span_s`` was derived: requests, warm-up, the rate and its source."""

    @property
    def seconds(self) -> float:
        preflight = self.engine_start_s + PROBE_S if self.preflight_due else 0.0
        return self.missing_arms * (self.engine_start_s + self.arm_span_s) + preflight

    def describe(self) -> str:
        parts = [f"{self.missing_arms} arm(s) x ({self.engine_start_s:.0f} s start + {self.arm_span_s:.0f} s load)"]
        if self.preflight_due:
            parts.append(f"pre-flight {self.engine_start_s + PROBE_S:.0f} s")
        return f"{self.label}: " + " + ".join(parts) + (f"; load: {self.load_basis}" if self.load_basis else "")


def arm_span_s(workload: Mapping[str, Any], warmup_requests: int = 0, rate: Rate | None = None) -> float:
    """Seconds of open-loop arrivals in one arm: its engine's warm-up requests (replayed at the
    workload's arrival times, then discarded) and its workload, at ``rate`` (default: the config's)."""
    return (warmup_requests + float(workload["n_requests"])) / (rate or config_rate(workload)).rps


def run_cost(label: str, workload: Mapping[str, Any], units: Sequence[Unit], started: bool,
             engine_start_s: float, warmup_requests: int = 0, rate: Rate | None = None) -> RunCost:
    """The cost of a run given its planned units (or its manifest's, when it has started)."""
    rate = rate or config_rate(workload)
    missing = sum(1 for u in units if not u.settled)
    basis = f"({warmup_requests} warm-up + {workload['n_requests']} requests) at {rate.rps:.3g} req/s, {rate.source}"
    return RunCost(label, missing, arm_span_s(workload, warmup_requests, rate), engine_start_s,
                   preflight_due=not started, load_basis=basis)


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
