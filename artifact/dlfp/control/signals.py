"""Feedback signals and per-step records, as pure logic fed with timestamps.

Two signals can drive the controller:

* ``schedule`` (the paper's): the interval between consecutive scheduler calls. At call
  ``j`` it measures step ``j-1``. In synchronous engines that is schedule + execute +
  output processing of step ``j-1``; under async scheduling call ``j`` happens while
  step ``j-1`` still runs, so the interval is only a proxy for completed GPU time.
* ``completion``: the cadence of model-execution completions (``update_from_output``
  calls): ``c_k - c_(k-1)`` for the latest completed step ``k`` not used before.

Guard: the measured step mixed prefill and decode, and the step being planned is mixed
too. With decodes running the engine never idles between steps, so no idle gap can hide
inside a guarded interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlfp.control.law import Observation


@dataclass(slots=True)
class StepRecord:
    """One engine step as the scheduler saw it (times from ``time.monotonic``, seconds)."""

    step: int
    schedule_t: float
    complete_t: float | None
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
    None where the executor does not stamp (the modeled one) or the step ran no model."""

    @property
    def mixed(self) -> bool:
        """Did this step really put prefill and decode work in one batch?"""
        return self.prefill_tokens > 0 and self.decode_reqs > 0


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

    __slots__ = ("_last_completed", "_last_scheduled", "_prev_completed", "_used", "decode_step_s", "signal")

    def __init__(self, signal: str) -> None:
        self.signal = signal
        self._last_scheduled: StepRecord | None = None
        self._last_completed: StepRecord | None = None
        self._prev_completed: StepRecord | None = None
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
            step, prev = self._last_completed, self._prev_completed
            if step is None or prev is None or step is self._used:
                return None
            interval = step.complete_t - prev.complete_t  # type: ignore[operator]
        self._used = step
        saturated = step.cap is not None and step.prefill_tokens >= step.cap
        return Observation(interval_s=interval, guarded=planning_mixed and step.mixed, saturated=saturated)

    def scheduled(self, record: StepRecord) -> None:
        """Register a step just returned by ``schedule()``."""
        self._last_scheduled = record

    def completed(self, record: StepRecord, now: float) -> None:
        """Register the completion of a step (its model output was processed)."""
        record.complete_t = now
        prev = self._last_completed
        if prev is not None and _decode_only(prev) and _decode_only(record):
            cadence = now - prev.complete_t  # type: ignore[operator]
            if cadence > 0:
                self.decode_step_s = cadence if self.decode_step_s is None else (
                    DECODE_EWMA * cadence + (1 - DECODE_EWMA) * self.decode_step_s)
        self._prev_completed = prev
        self._last_completed = record


def _decode_only(record: StepRecord) -> bool:
    return record.prefill_tokens == 0 and record.decode_reqs > 0
