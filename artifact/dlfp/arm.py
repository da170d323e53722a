"""One arm of a trial: a fresh engine, the workload replayed open-loop, the step records.

Both arms of a paired trial go through :func:`run_arm`; they differ only in the DLFP
``enabled`` flag inside ``spec.dlfp``.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from dlfp.driver import EngineTarget, TrialTrace, drive
from dlfp.engine import EngineSpec, start_engine
from dlfp.steplog import read_step_log
from dlfp.telemetry import TelemetrySampler
from dlfp.workload import Request

T = TypeVar("T")


@dataclass
class ArmResult:
    """Client trace plus engine-side steps, both on the trial's time base (seconds)."""

    trace: TrialTrace
    steps: pd.DataFrame
    telemetry: pd.DataFrame


def steps_frame(step_log: Path, t0_monotonic: float) -> pd.DataFrame:
    """The last engine start's step records, times shifted to the trial's time base."""
    runs = list(read_step_log(step_log))
    if not runs:
        raise RuntimeError(f"no step records in {step_log}: was the DLFP scheduler active?")
    _, rows = runs[-1]
    steps = pd.DataFrame(rows)
    for col in ("schedule_t", "complete_t"):
        steps[col] = steps[col].astype(float) - t0_monotonic
    return steps


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` that also works where a loop is already running (Jupyter kernels):
    there the coroutine gets its own loop on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def run_arm(spec: EngineSpec, requests: Sequence[Request], step_log: Path,
            progress: Callable[[int], None] | None = None,
            telemetry_interval_s: float = 0.5) -> ArmResult:
    """Start an engine for ``spec`` writing steps to ``step_log``, replay, shut down.

    Telemetry is sampled while the workload runs (engine start-up excluded).
    """
    spec = replace(spec, dlfp={**spec.dlfp, "step_log": str(step_log)})
    trace, telemetry = run_coroutine(_replay(spec, requests, progress, telemetry_interval_s))
    return ArmResult(trace, steps_frame(step_log, trace.t0_monotonic), telemetry)


async def _replay(spec: EngineSpec, requests: Sequence[Request], progress: Callable[[int], None] | None,
                  telemetry_interval_s: float) -> tuple[TrialTrace, pd.DataFrame]:
    """Engine lifetime inside one event loop: ``AsyncLLM`` binds its output handler to the
    loop it first runs on, so it must be created, used and shut down on the same one."""
    engine = start_engine(spec)
    try:
        with TelemetrySampler(telemetry_interval_s, t0_monotonic=0.0) as sampler:
            trace = await drive(EngineTarget(engine), requests, progress)
    finally:
        engine.shutdown()
        del engine  # let vLLM's finalizer run now, not at interpreter exit
        gc.collect()
    telemetry = sampler.frame()
    telemetry["t_s"] -= trace.t0_monotonic
    return trace, telemetry
