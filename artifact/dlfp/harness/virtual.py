"""One arm in virtual time: the trials' workloads through :mod:`dlfp.sim.virtual`, as :func:`run_arms` results.

An engine spec whose ``sim`` says ``clock: virtual`` runs here instead of on a started engine: each
workload gets a fresh in-process engine core on a clock that starts at 0 at its first possible
arrival, the open-loop client sends every request exactly at its arrival (send lateness 0), and the
result is the same :class:`~dlfp.harness.result.ArmResult` a real engine gives (client trace, step
records through the DLFP step log, what ran), so the run folder, the analysis and the book need no
change. Nothing here reads a real clock. What a real engine needs and a virtual core does not is
skipped and said: no warm-up (there is no process to warm, and a fresh core is what a reset engine
is), no hardware telemetry (an empty table: nothing real ran).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.harness.driver import RequestTrace, to_trace
from dlfp.harness.engine import EngineSpec, engine_kwargs
from dlfp.harness.result import ArmResult, steps_frame
from dlfp.harness.telemetry import COLUMNS
from dlfp.harness.workload import Request


def submissions(requests: Sequence[Request]) -> list[Any]:
    """The workload's requests as the virtual client sends them."""
    from dlfp.sim.virtual import Submission

    return [Submission(r.request_id, r.prompt_token_ids, r.output_len, r.arrival_s) for r in requests]


def empty_telemetry() -> pd.DataFrame:
    """The telemetry table of a virtual run: its columns, no samples."""
    return pd.DataFrame({"t_s": pd.Series(dtype="float64"), "source": pd.Series(dtype="object"),
                         "metric": pd.Series(dtype="object"), "value": pd.Series(dtype="float64")})[list(COLUMNS)]


def run_workload(spec: EngineSpec, requests: Sequence[Request], step_log: Path,
                 progress: Callable[[int], None] | None = None) -> ArmResult:
    """Replay ``requests`` on a fresh virtual engine core for ``spec``."""
    from dlfp.sim.virtual import OpenLoop, simulate

    if progress is not None:
        progress(0)
    step_log.unlink(missing_ok=True)
    client = OpenLoop(submissions(requests), on_finish=None if progress is None else (lambda: progress(1)))
    received = simulate(engine_kwargs(spec), client, step_log)
    traces = []
    for r in sorted(requests, key=lambda r: r.arrival_s):
        got = received[r.request_id]
        done = got.finish_s is not None
        traces.append(RequestTrace(r, send_s=r.arrival_s, token_ids=got.token_ids, token_t=got.token_t,
                                   finish_s=float("nan") if got.finish_s is None else got.finish_s,
                                   status="ok" if done else "failed",
                                   error=None if done else "unfinished when the virtual run ended"))
    steps, ran = steps_frame(step_log, 0.0)
    step_log.unlink(missing_ok=True)
    return ArmResult(to_trace(traces, 0.0), steps, empty_telemetry(), ran)
