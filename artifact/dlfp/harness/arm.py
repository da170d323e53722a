"""One arm of a trial: a fresh engine, the workload replayed open-loop, the step records.

Both arms of a paired trial go through :func:`run_arm`; they differ only in the DLFP
``enabled`` flag inside ``spec.dlfp``.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from dlfp.control.steplog import read_step_log
from dlfp.harness.driver import EngineTarget, TrialTrace, drive
from dlfp.harness.engine import EngineSpec, start_engine
from dlfp.harness.telemetry import TelemetrySampler, engine_gpus
from dlfp.harness.workload import Request
from dlfp.vllm import lifeline

T = TypeVar("T")


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


def steps_frame(step_log: Path, t0_monotonic: float) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The last engine start's step records, times shifted to the trial's time base, and what
    its header says ran (:data:`RAN`)."""
    runs = list(read_step_log(step_log))
    if not runs:
        raise RuntimeError(f"no step records in {step_log}: was the DLFP scheduler active?")
    header, rows = runs[-1]
    steps = pd.DataFrame(rows)
    for col in ("schedule_t", "complete_t", "exec_done_t"):
        if col in steps:
            steps[col] = steps[col].astype(float) - t0_monotonic
    return steps, {k: header[k] for k in RAN if k in header}


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` that also works where a loop is already running (Jupyter kernels):
    there the coroutine gets its own loop on a worker thread. An interrupt of the waiting thread
    (Ctrl-C in a notebook, a stop signal) cancels the coroutine, so its engine shuts down instead
    of running on unseen in the worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ready = threading.Event()
    handle: dict[str, Any] = {}

    async def main() -> T:
        handle["loop"], handle["task"] = asyncio.get_running_loop(), asyncio.current_task()
        ready.set()
        return await coro

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(asyncio.run, main())
        try:
            return future.result()
        except BaseException:
            if ready.wait(timeout=5) and not future.done():
                handle["loop"].call_soon_threadsafe(handle["task"].cancel)
            raise


def run_arm(spec: EngineSpec, requests: Sequence[Request], step_log: Path,
            progress: Callable[[int], None] | None = None,
            telemetry_interval_s: float = 0.5) -> ArmResult:
    """Start an engine for ``spec`` writing steps to ``step_log``, replay, shut down.

    Telemetry is sampled while the workload runs (engine start-up excluded).
    """
    spec = replace(spec, dlfp={**spec.dlfp, "step_log": str(step_log)})
    trace, telemetry = run_coroutine(_replay(spec, requests, progress, telemetry_interval_s))
    steps, ran = steps_frame(step_log, trace.t0_monotonic)
    return ArmResult(trace, steps, telemetry, ran)


async def _replay(spec: EngineSpec, requests: Sequence[Request], progress: Callable[[int], None] | None,
                  telemetry_interval_s: float) -> tuple[TrialTrace, pd.DataFrame]:
    async def body(target: EngineTarget) -> tuple[TrialTrace, TelemetrySampler]:
        # This engine's GPUs, not every GPU of the node; a modeled accelerator uses none.
        gpus = [] if spec.sim is not None else engine_gpus(spec.tensor_parallel_size)
        with TelemetrySampler(telemetry_interval_s, t0_monotonic=0.0, gpus=gpus) as sampler:
            return await drive(target, requests, progress), sampler

    trace, sampler = await with_engine(spec, body)
    telemetry = sampler.frame()
    telemetry["t_s"] -= trace.t0_monotonic
    return trace, telemetry


async def with_engine(spec: EngineSpec, body: Callable[[EngineTarget], Awaitable[T]]) -> T:
    """Start an engine for ``spec``, run ``body`` against it, shut it down whatever happens.

    The engine lives inside one event loop: ``AsyncLLM`` binds its output handler to the loop
    it first runs on, so it must be created, used and shut down on the same one.
    """
    engine = start_engine(spec)
    try:
        result = await lifeline.unless_engine_dies(engine, body(EngineTarget(engine)))
    except BaseException:
        _shutdown(engine, failing=True)
        raise
    else:
        _shutdown(engine, failing=False)
    finally:
        del engine  # let vLLM's finalizer run now, not at interpreter exit
        gc.collect()
    return result


def _shutdown(engine: Any, failing: bool) -> None:
    """Shut ``engine`` down. When the arm is already ``failing`` (an error, a signal, a dead
    engine core), a shutdown error is reported but does not replace the error that says why;
    an engine core that outlives this anyway ends with the driver (:mod:`dlfp.vllm.lifeline`)."""
    try:
        engine.shutdown()
    except Exception as exc:
        if not failing:
            raise
        print(f"dlfp: engine shutdown after a failed arm failed too: {type(exc).__name__}: {exc}",
              file=sys.stderr)
