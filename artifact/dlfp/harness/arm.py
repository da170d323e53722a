"""One arm of a trial: a fresh engine, the workload replayed open-loop, the step records.

Both arms of a paired trial go through :func:`run_arm`; they differ only in the DLFP
``enabled`` flag inside ``spec.dlfp``.

:func:`run_arms` replays several workloads on one engine, one after another, to spare the engine
start (about 60 of a CPU unit's 80 s, 15 s of a modeled one) where a study runs the same engine at
many rates. Between two workloads the engine is idle and reset (``reset_prefix_cache``: vLLM drops
its prefix cache, and the DLFP scheduler, being idle, starts over with a fresh controller, tracker
and step count and a new step-log segment), so each workload meets the control state a fresh
engine would. What a reused engine keeps is its warmed process (caches, allocator, lazily built
code paths): measured with ``dlfp bench reuse``, a fresh engine's first workload pays for that in
its P99 TTFT, so a reused engine replays a short warm-up workload first (discarded), and every
workload it measures meets a warmed engine.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from dlfp.harness import lifeline
from dlfp.harness.driver import EngineTarget, drive
from dlfp.harness.engine import EngineSpec, start_engine
from dlfp.harness.result import ArmResult, steps_frame
from dlfp.harness.telemetry import TelemetrySampler, engine_gpus
from dlfp.harness.workload import Request

T = TypeVar("T")


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
            telemetry_interval_s: float = 0.5, warmup: Sequence[Request] = ()) -> ArmResult:
    """Start an engine for ``spec`` writing steps to ``step_log``, replay ``warmup`` (discarded, as in
    :func:`run_arms`), then ``requests``, shut down.

    Telemetry is sampled while the workload runs (engine start-up excluded).
    """
    results: list[ArmResult] = []
    run_arms(spec, [Job(requests, (lambda: progress))], step_log, lambda _, r: results.append(r),
             telemetry_interval_s, warmup)
    return results[0]


@dataclass(frozen=True)
class Job:
    """One workload for :func:`run_arms`; ``begin`` is called when its replay starts and returns the
    callback its requests report progress to (None: none)."""

    requests: Sequence[Request]
    begin: Callable[[], Callable[[int], None] | None]
    wanted: Callable[[], bool] = lambda: True
    """Asked just before the job would start: False skips it (a capacity sweep that stopped below it)."""


def run_arms(spec: EngineSpec, jobs: Sequence[Job], step_log: Path, done: Callable[[int, ArmResult], None],
             telemetry_interval_s: float = 0.5, warmup: Sequence[Request] = ()) -> None:
    """Start one engine for ``spec``; replay ``warmup`` (discarded: a fresh engine's first requests
    pay one-time costs the later workloads of a reused engine do not, so every measured workload
    should meet a warmed engine), then each job's workload in turn, resetting the idle engine after
    each (module docstring), and hand each result to ``done(index, result)`` as it finishes, so a
    caller can keep it before the next starts; shut down however it ends.

    An engine on the virtual clock (:attr:`EngineSpec.virtual`) starts nothing: each job runs on a fresh
    in-process engine core (:mod:`dlfp.harness.virtual`), without warm-up or telemetry."""
    if spec.virtual:
        from dlfp.harness.virtual import run_workload

        for i, job in enumerate(jobs):
            if job.wanted():
                done(i, run_workload(spec, job.requests, step_log, job.begin()))
        return
    spec = replace(spec, dlfp={**spec.dlfp, "step_log": str(step_log)})
    first = 1 if warmup else 0  # the warm-up's step-log segment comes first

    async def body(target: EngineTarget) -> None:
        # This engine's GPUs, not every GPU of the node; a modeled accelerator uses none.
        gpus = [] if spec.sim is not None else engine_gpus(spec.tensor_parallel_size)
        if warmup:
            await drive(target, warmup, None)
            await target.engine.reset_prefix_cache()
        segment = first
        for i, job in enumerate(jobs):
            if not job.wanted():
                continue
            with TelemetrySampler(telemetry_interval_s, t0_monotonic=0.0, gpus=gpus) as sampler:
                trace = await drive(target, job.requests, job.begin())
            telemetry = sampler.frame()
            telemetry["t_s"] -= trace.t0_monotonic
            await target.engine.reset_prefix_cache()  # ends this workload's step-log segment, flushed
            steps, ran = steps_frame(step_log, trace.t0_monotonic, segment=segment)
            segment += 1
            done(i, ArmResult(trace, steps, telemetry, ran))

    run_coroutine(with_engine(spec, body))


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
    an engine core that outlives this anyway ends with the driver (:mod:`dlfp.harness.lifeline`)."""
    try:
        engine.shutdown()
    except Exception as exc:
        if not failing:
            raise
        print(f"dlfp: engine shutdown after a failed arm failed too: {type(exc).__name__}: {exc}",
              file=sys.stderr)
