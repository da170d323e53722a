"""Feedback signals and per-step records, as pure logic fed with timestamps.

Two signals can drive the controller:

* ``schedule`` (the paper's): the interval between consecutive scheduler calls. At call
  ``j`` it measures step ``j-1``. In synchronous engines that is schedule + execute +
  output processing of step ``j-1``; under async scheduling call ``j`` happens while
  step ``j-1`` still runs, so the interval is only a proxy for completed GPU time.
* ``completion``: the cadence of model-execution completions, ``c_k - c_(k-1)`` for the
  latest completed step ``k`` not used before. ``c_k`` is the step's best completion time
  (:func:`completion_time_usable`): the executor's stamp of when its output became available
  (``exec_done_t``, :mod:`dlfp.vllm.completion_stamps`; on a GPU, the device's finish) where
  one is recorded and plausible, else the moment the engine core collected the output
  (``update_from_output``, ``complete_t``), which under async scheduling lags the device by
  however long the engine core took to ask. The step log records which one each step used
  (``complete_source``), and :func:`best_completions` rebuilds the same choice from a
  step table, so the book's divergence and the controller see one clock.

Guard: the measured step mixed prefill and decode, and the step being planned is mixed
too. With decodes running the engine never idles between steps, so no idle gap can hide
inside a guarded interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlfp.control.protocol import Observation

EXEC_DONE = "exec_done"
"""``complete_source`` of a step whose completion time is the executor's stamp (``exec_done_t``)."""
COLLECT = "collect"
"""``complete_source`` of a step whose completion time is the engine core's collect time (``complete_t``)."""


@dataclass(slots=True)
class StepRecord:
    """One engine step as the scheduler saw it (times from ``time.monotonic``, seconds)."""

    step: int
    schedule_t: float
    complete_t: float | None
    """When the engine core handed the step's output to the scheduler (``update_from_output``)."""
    prefill_tokens: int
    decode_reqs: int
    total_tokens: int
    cap: int | None
    signal_s: float | None
    guarded: bool
    target_s: float
    chunk: float
    exec_done_t: float | None = None
    """When the executor saw this step's model output become available (:mod:`dlfp.vllm.completion_stamps`);
    None where the executor does not stamp (stock executors, the modeled one unstamped) or the step ran no model."""
    complete_source: str | None = None
    """Which time the completion signal took for this step: :data:`EXEC_DONE` or :data:`COLLECT`;
    None while the step is pending (logged at shutdown without a completion). Older logs lack it."""
    deferred: bool = False
    """Did the prefill cadence (``prefill_every``) hold this step's prefill back while decodes ran?
    Older logs lack it: no cadence, never deferred."""
    saturated: bool = False
    """Did the saturation guard (:mod:`dlfp.control.guard`) run this step unrestricted against the
    controller's cap or deferral? Older logs lack it: never."""
    decode_context: int | None = None
    """Context tokens of the step's decoding requests, in all (controllers that read the batch only:
    None otherwise)."""
    prefill_context: int | None = None
    """Tokens already prefilled of the request the step's chunk went to (as ``decode_context``)."""
    controller: dict[str, Any] | None = None
    """The controller's own fields for this step (:meth:`dlfp.control.law.Decision.log_fields`; the SLO
    controller's ``budget_s``, ``predicted_s``, ``infeasible``), None where it has none. The step table
    spreads them into columns (:func:`spread_controller_fields`); older logs have them as fields."""

    @property
    def mixed(self) -> bool:
        """Did this step really put prefill and decode work in one batch?"""
        return self.prefill_tokens > 0 and self.decode_reqs > 0


def completion_time_usable(stamp: float | None, schedule_t: float, collect_t: float, prev_t: float | None) -> bool:
    """May a step's executor stamp stand for its completion? The one rule shared by the controller
    (:meth:`StepTracker.completed`) and the analysis (:func:`best_completions`).

    A stamp is used if it exists and is physically possible: not before the step was scheduled,
    not after its output was collected (the engine core collects only after the stamp), and
    strictly after the previous step's completion time (steps complete in order; an equal or
    earlier stamp is a duplicate or a mispaired one, which would feed the controller a zero or
    negative cadence). Otherwise the collect time stands in: it is never earlier than the previous
    completion time, which was at most the previous collect time.
    """
    if stamp is None or stamp != stamp:  # missing, or NaN from a table
        return False
    return schedule_t <= stamp <= collect_t and (prev_t is None or stamp > prev_t)


def best_completions(schedule_t: Sequence[float], complete_t: Sequence[float | None],
                     exec_done_t: Sequence[float | None] | None) -> tuple[list[float], list[str | None]]:
    """Each step's completion time and its ``complete_source`` as the controller takes them, for steps
    given in step order (vLLM completes them in that order): the stamp where
    :func:`completion_time_usable` accepts it, else the collect time; NaN and None for a step never
    collected (pending at shutdown). Without stamps (``exec_done_t`` None) the collect times. For
    step tables logged before ``complete_source`` existed; the controller itself uses
    :meth:`StepTracker.completed`, which applies the same rule step by step."""
    times: list[float] = []
    sources: list[str | None] = []
    prev: float | None = None
    stamps = exec_done_t if exec_done_t is not None else [None] * len(complete_t)
    for s, c, e in zip(schedule_t, complete_t, stamps, strict=True):
        if c is None or math.isnan(c):
            times.append(math.nan)
            sources.append(None)
            continue
        use = e is not None and completion_time_usable(e, s, c, prev)
        prev = float(e) if use else float(c)  # type: ignore[arg-type]
        times.append(prev)
        sources.append(EXEC_DONE if use else COLLECT)
    return times, sources


def spread_controller_fields(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step-log records with each one's ``controller`` map spread into its own keys (a step table's
    columns), so a reader finds ``budget_s`` where a log written before the map had it."""
    out = []
    for row in rows:
        own = row.get("controller")
        if "controller" in row:
            row = {k: v for k, v in row.items() if k != "controller"}
            if own:
                row.update(own)
        out.append(row)
    return out


DECODE_EWMA = 0.2
"""Weight of the newest decode-only step in the running estimate of the decode step."""


class StepTracker:
    """Keeps the last steps' timing and turns it into the configured signal.

    It also keeps a running estimate of the decode-only step (``decode_step_s``): the
    completion cadence of decode-only steps that follow a decode-only step, exponentially
    weighted. A controller whose target is a multiple of it (``target: decode``) needs no SLO
    and scales itself with the model, the hardware and the batch, the one input a model-free
    controller can measure for free.
    """

    __slots__ = ("_cadence", "_last_completed", "_last_done_t", "_last_scheduled", "_used", "decode_step_s",
                 "signal")

    def __init__(self, signal: str) -> None:
        self.signal = signal
        self._last_scheduled: StepRecord | None = None
        self._last_completed: StepRecord | None = None
        self._last_done_t: float | None = None
        """Completion time of ``_last_completed`` (its stamp or its collect time)."""
        self._cadence: float | None = None
        """``_last_done_t`` minus the completion time of the step completed before it."""
        self._used: StepRecord | None = None
        self.decode_step_s: float | None = None

    def observe(self, now: float, planning_mixed: bool) -> Observation | None:
        """The signal available at a scheduler call at time ``now``, or ``None``."""
        if self.signal == "schedule":
            step = self._last_scheduled
            if step is None:
                return None
            interval = now - step.schedule_t
        else:
            step, cadence = self._last_completed, self._cadence
            if step is None or cadence is None or step is self._used:
                return None
            interval = cadence
        self._used = step
        saturated = step.cap is not None and step.prefill_tokens >= step.cap
        return Observation(interval_s=interval, guarded=planning_mixed and step.mixed, saturated=saturated)

    def scheduled(self, record: StepRecord) -> None:
        """Register a step just returned by ``schedule()``."""
        self._last_scheduled = record

    def completed(self, record: StepRecord, now: float) -> None:
        """Register the completion of a step whose output was collected at ``now``.

        Set ``record.exec_done_t`` first where the executor stamped the step: the signal then
        takes the stamp (the device's completion) instead of ``now`` (:func:`completion_time_usable`),
        and ``record.complete_source`` says which. A step completed again, or after a later step
        (vLLM completes in order; defensive), keeps its first times and does not move the cadence.
        """
        prev = self._last_completed
        if prev is not None and record.step <= prev.step:
            if record.complete_t is None:
                record.complete_t, record.complete_source = now, COLLECT
            return
        record.complete_t = now
        prev_t, stamp = self._last_done_t, record.exec_done_t
        if stamp is not None and completion_time_usable(stamp, record.schedule_t, now, prev_t):
            done_t, record.complete_source = stamp, EXEC_DONE
        else:
            done_t, record.complete_source = now, COLLECT
        if prev is not None and prev_t is not None:
            cadence = done_t - prev_t
            if cadence > 0 and _decode_only(prev) and _decode_only(record):
                self.decode_step_s = cadence if self.decode_step_s is None else (
                    DECODE_EWMA * cadence + (1 - DECODE_EWMA) * self.decode_step_s)
            self._cadence = cadence
        self._last_done_t = done_t
        self._last_completed = record

    @property
    def last_done_t(self) -> float | None:
        """Completion time of the step completed last: its stamp or its collect time."""
        return self._last_done_t

def _decode_only(record: StepRecord) -> bool:
    return record.prefill_tokens == 0 and record.decode_reqs > 0
