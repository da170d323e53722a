"""Units of a virtual-time run on worker processes.

A virtual unit (:mod:`dlfp.harness.virtual`) is a pure function of its engine spec and workload: it
reads no real clock and shares nothing with another unit, so units can run on as many processes as
the machine has cores and give the same bytes as one after another (the determinism tests check it).
Real-time units never run here: two real engines on one machine would slow each other, which is what a
measurement must not contain.

Workers come from a ``forkserver`` that imported vLLM once (about 10 s), so a worker starts in a fork
rather than a fresh interpreter, and no worker inherits the state of a parent that has already built
engine cores. Results come back as each unit finishes, in any order; the caller writes each one (and
the manifest) at once, so an interruption loses only the units in flight. Ctrl-C or SIGTERM in the
parent terminates the workers.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import Request

Task = tuple[int, EngineSpec, Sequence[Request]]
"""A unit to simulate: its index in the manifest, its engine, its workload."""


def default_workers() -> int:
    """The cores this process may run on (a SLURM allocation or ``taskset`` counts, not the node's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def simulate_unit(task: Task) -> tuple[int, Any, float]:
    """One unit in this process: ``(index, ArmResult, wall seconds)``."""
    from dlfp.harness.virtual import run_workload

    index, spec, requests = task
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dlfp-virtual-") as tmp:
        result = run_workload(spec, requests, Path(tmp) / "steps.jsonl")
    return index, result, time.monotonic() - started


def run_units(indices: Sequence[int], task: Callable[[int], Task], workers: int,
              done: Callable[[int, Any, float], None], blocked: Callable[[int], bool] = lambda i: False,
              wanted: Callable[[int], bool] = lambda i: True) -> None:
    """Simulate the units ``indices`` on ``workers`` processes (in this one when 1, or when there is one unit) and
    hand each result to ``done(index, result, wall_s)`` as it arrives.

    Units are taken in order, each once it is not ``blocked`` (a capacity sweep's next load waits for the one
    below it) and dropped when no longer ``wanted`` (its sweep stopped below it); both are asked again after
    every ``done``. ``task(index)`` builds a unit's task only when it is sent, and at most two per worker wait,
    so the workloads in flight stay few however many units a run has."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    pending = list(indices)

    def ready() -> list[int]:
        pending[:] = [i for i in pending if wanted(i)]
        return [i for i in pending if not blocked(i)]

    if workers == 1 or len(pending) <= 1:
        while go := ready():
            pending.remove(go[0])
            done(*simulate_unit(task(go[0])))
        _check_drained(pending)
        return
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["dlfp.sim.virtual", "dlfp.harness.virtual"])
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    in_flight = 0
    with ctx.Pool(processes=min(workers, len(pending))) as pool:  # leaving the block terminates the workers
        while True:
            for i in ready()[:2 * workers - in_flight]:
                pending.remove(i)
                pool.apply_async(simulate_unit, (task(i),), callback=results.put, error_callback=results.put)
                in_flight += 1
            if not in_flight:
                break
            result = results.get()
            in_flight -= 1
            if isinstance(result, BaseException):
                raise result
            done(*result)
    _check_drained(pending)


def _check_drained(pending: list[int]) -> None:
    """Every unit wanted was run: one left is blocked by a unit that is neither run nor dropped (a caller's bug)."""
    if pending:
        raise RuntimeError(f"units {pending[:5]} are blocked by units that never ran")
