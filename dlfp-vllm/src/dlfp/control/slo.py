"""The SLO controller: hold the ITL SLO on every target at the least TTFT, from an online step-cost
fit (feed-forward) corrected by the observed tail of decode gaps (feedback). Pure logic, no vLLM.

How the field sizes a mixed step, and what is missing:

* Sarathi-Serve fixes a token budget per deployment, chosen offline from a profile so that a step
  stays under the decode-latency objective; it neither adapts to the batch nor to a drifting plant.
* SGLang's dynamic chunking for pipeline parallelism (and vllm-ascend's profiling-based variant of
  it) profiles chunk latencies up front, fits a quadratic in the chunk size and prefix, and solves it
  for the chunk whose time matches a pipeline-stage target: a fit solved for a time, but the time is
  a stage-balancing one, the fit is offline, and decodes play no part.
* MindIE's SLO scheduling feeds the observed TPOT back against its target to resize its prefill and
  decode batch limits (and, separately, fits phase latencies to choose prefill or decode per step):
  feedback on the latency objective, but on batch counts, not on the tokens of a mixed step.
* The paper's DLFP law (:mod:`dlfp.control.law`) steers the chunk by proportional feedback on one
  interval, model-free, with per-target tuning of its target fraction.

None sizes the mixed step from an online fit to a latency SLO. This controller does: each step the
chunk is the largest whose *predicted* mixed step (:class:`~dlfp.control.stepcost.StepCostModel`, fitted
online from completed steps) fits a step budget, and the budget is trimmed by integral feedback so the
P99 of inter-token gaps sits at ``setpoint x SLO``. The fit absorbs what the batch and the plant do
(more decodes, longer contexts, a slower clock) within a step; the feedback absorbs what the fit gets
wrong (step jitter, a missing feature) over a few hundred steps. One set of defaults for every target.

The feedback is integral control on the *exceedance indicator*: each decode gap over the set-point
shrinks the budget by ``gain*q``, each gap under it grows it by ``gain*(1-q)`` (both multiplicative,
weighted by the step's decodes relative to their running mean), so the budget stops moving exactly
where a fraction ``1-q`` of gaps exceed the set-point (of token-weighted gaps, when every step may
grow it; anti-windup below makes it err safe otherwise): the pinball-loss gradient, i.e. a streaming
quantile estimator run on the budget itself. Integrating the error of a windowed P99 estimate instead
stacks the window's lag (a high quantile falls only when old gaps leave it) on the integrator and
oscillates. :attr:`SLOController.tail_s` keeps a streaming P99 estimate of the gaps for the step log.

Anti-windup: the budget never grows on a step whose prefill did not fill its cap (a short prompt, or
no prefill at all: a fast step says nothing about a bigger chunk) or whose cap was already
``chunk_max``; it never shrinks below ``floor_margin x`` the observed step's decode floor, and never
exceeds the SLO. Cold start: until the fit is warm the cap alternates between a conservative chunk and
half of it (two distinct prefill sizes, so the per-token and attention costs become identifiable).

Per call, :meth:`SLOController.decide` is O(1) in the number of requests (the caller passes sums) and
:meth:`SLOController.completed` one 6x6 RLS update in plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from dlfp.control.params import DLFPConfigError, DLFPParams
from dlfp.control.protocol import BATCH, CompletedStep, Decision, StepContext
from dlfp.control.stepcost import StepCostModel

INITIAL_MARGIN = 0.9
"""The budget starts at ``INITIAL_MARGIN x setpoint x SLO``: feedback grows it when the tail allows."""
MIN_BUDGET_FRACTION = 0.05
"""Absolute floor of the budget state, as a fraction of the SLO (it cannot collapse to zero)."""
MAX_WEIGHT = 4.0
"""Cap of one step's weight in the feedback (its decodes over their running mean)."""
WEIGHT_ALPHA = 0.05
"""EWMA weight of the newest step in the running mean of decodes per step."""
TAIL_RATE = 0.05
"""Multiplicative step of the streaming tail estimate :attr:`SLOController.tail_s`."""


@dataclass(frozen=True, slots=True)
class SLOParams:
    """Validated parameters of :class:`SLOController`: only ``itl_slo_ms`` is per deployment.

    The rest are one set of defaults for every target (no per-target tuning, no pre-flight run).
    """

    itl_slo_ms: float
    """The ITL SLO: the P99 of inter-token gaps must stay under it."""
    setpoint: float = 0.95
    """Where the gaps' quantile is held, as a fraction of the SLO (headroom for the estimate's noise)."""
    quantile: float = 0.99
    """Which quantile of the gaps the SLO binds (0.99: P99 ITL)."""
    chunk_min: int = 32
    """Smallest prefill chunk of a mixed step (also the chunk of an infeasible one)."""
    chunk_max: int = 2048
    """Largest prefill chunk of a mixed step."""
    block: int | None = None
    """Round chunks down to a multiple of this many tokens (None: no rounding)."""
    cold_chunk: int = 128
    """Cold-start chunk (clipped to [chunk_min, chunk_max]), alternating with half of it."""
    warmup_steps: int = 12
    """Completed steps the fit needs (over two distinct prefill sizes) before it sizes chunks."""
    forgetting: float = 0.995
    """RLS forgetting factor: about 1/(1-lambda) = 200 steps of memory."""
    outlier_k: float = 4.0
    """A step more than this many robust scales off its prediction updates the fit clipped."""
    floor_margin: float = 1.1
    """The budget stays at least this multiple of the predicted decode floor (prefill always progresses)."""
    loop_gain: float = 0.05
    """Integral gain of the tail feedback (log-budget step per exceeding gap, times ``quantile``)."""
    enabled: bool = True
    """Off: every decision unrestricted (stock scheduling with the same instrumentation)."""

    def __post_init__(self) -> None:
        _number(self, "itl_slo_ms", 0.0, 60000.0, lo_open=True)
        _number(self, "setpoint", 0.0, 1.0, lo_open=True)
        _number(self, "quantile", 0.5, 1.0, lo_open=False, hi_open=True)
        _number(self, "chunk_min", 1, 1 << 20, integer=True)
        _number(self, "chunk_max", self.chunk_min, 1 << 20, integer=True)
        if self.block is not None:
            _number(self, "block", 1, 1 << 16, integer=True)
        _number(self, "cold_chunk", 1, 1 << 20, integer=True)
        _number(self, "warmup_steps", 2, 10000, integer=True)
        _number(self, "forgetting", 0.9, 1.0)
        _number(self, "outlier_k", 1.0, 1000.0, lo_open=True)
        _number(self, "floor_margin", 1.0, 10.0, lo_open=True)
        _number(self, "loop_gain", 0.0, 1.0, lo_open=True)
        if not isinstance(self.enabled, bool):
            raise DLFPConfigError(f"slo parameter 'enabled' = {self.enabled!r} is invalid: allowed true or false")

    @property
    def slo_s(self) -> float:
        """The ITL SLO in seconds."""
        return self.itl_slo_ms / 1000.0

    @classmethod
    def from_mapping(cls, raw: dict[str, Any]) -> SLOParams:
        """Build from a user mapping; unknown keys are refused by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known, key=str)
        if unknown:
            raise DLFPConfigError(f"unknown slo parameter(s) {unknown}; known: {sorted(known)}")
        return cls(**raw)


def slo_params_from(params: DLFPParams) -> SLOParams:
    """The SLO controller's parameters for a DLFP configuration (``controller: slo``): its SLO, chunk
    range and switch; everything else is this module's one set of defaults."""
    return SLOParams(itl_slo_ms=float(params.itl_slo_ms), chunk_min=params.chunk_min, chunk_max=params.chunk_max,
                     enabled=params.enabled)


def _number(p: SLOParams, name: str, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False,
            integer: bool = False) -> None:
    value = getattr(p, name)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok and integer:
        ok = isinstance(value, int)
    if ok:
        ok = (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi)
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise DLFPConfigError(f"slo parameter {name!r} = {value!r} is invalid: allowed {interval}"
                              + (" (an integer)" if integer else ""))


@dataclass(frozen=True, slots=True)
class SLODecision(Decision):
    """A :class:`~dlfp.control.law.Decision` with what the step log should record about it.

    ``updated``: a completed step reached the fit or the budget since the previous decision.
    """

    infeasible: bool = False
    """The budget is below the predicted decode floor: no chunk meets the SLO; the cap is chunk_min."""
    cold: bool = False
    """The fit is not warm yet: the cap is the cold-start chunk."""
    budget_s: float | None = None
    """The step budget the chunk was sized to (None when unrestricted or cold)."""
    floor_s: float | None = None
    """Predicted decode-only step for this batch."""
    predicted_s: float | None = None
    """Predicted duration of the mixed step with the chosen cap."""

    def log_fields(self) -> Mapping[str, Any]:
        """The step log's ``budget_s``, ``predicted_s`` and ``infeasible`` (what :mod:`dlfp.studies.slo_fit` reads)."""
        return {"budget_s": self.budget_s, "predicted_s": self.predicted_s, "infeasible": self.infeasible}


_UNRESTRICTED = (SLODecision(cap=None, updated=False), SLODecision(cap=None, updated=True))
"""The decision of a step that is not mixed, by ``updated``: frozen instances, not one per step."""


def step_duration(schedule_t: float, done_t: float, prev_done_t: float | None, decode_reqs: int) -> float | None:
    """The duration a completed step is fitted with, from its completion times; None when unusable.

    With decodes running the engine never idles, so the completion cadence ``done - prev_done`` is the
    inter-token gap its decodes saw (the quantity the SLO binds). A step without decodes may follow an
    idle engine, so it is timed from ``max(prev_done, schedule)``: under async scheduling that is the
    cadence again (scheduled before its predecessor finished), in a synchronous engine the step's span.
    """
    if prev_done_t is None:
        return _positive(done_t - schedule_t)
    return _positive(done_t - (prev_done_t if decode_reqs > 0 else max(prev_done_t, schedule_t)))


def _positive(d: float) -> float | None:
    return d if d > 0.0 and d != math.inf else None


class SLOController:
    """Feed-forward chunk sizing from the step-cost fit, with tail feedback on the step budget.

    A :class:`~dlfp.control.protocol.Controller` (registered as ``slo``) that reads the batch's sums;
    completed steps come in through :meth:`completed` (or :meth:`absorb` with a duration).
    """

    needs: ClassVar[frozenset[str]] = frozenset({BATCH})
    __slots__ = ("_cold_caps", "_cold_i", "_d_mean", "_prev_done_t", "_updated", "budget_s", "chunk",
                 "model", "params", "tail_s")

    @classmethod
    def from_params(cls, params: DLFPParams) -> SLOController:
        return cls(slo_params_from(params))

    def __init__(self, params: SLOParams) -> None:
        self.params = params
        self.model = StepCostModel(params.forgetting, params.outlier_k, params.warmup_steps)
        self.budget_s = INITIAL_MARGIN * params.setpoint * params.slo_s
        """Budget state (the feedback's integrator); each decision clips it to its bounds."""
        cold = min(params.chunk_max, max(params.chunk_min, params.cold_chunk))
        other = cold // 2 if cold // 2 >= params.chunk_min else min(params.chunk_max, 2 * cold)
        self._cold_caps = (cold, other)
        self._cold_i = 0
        self.chunk = float(cold)
        """The last cap decided (the step log's ``chunk``)."""
        self.tail_s: float | None = None
        """Streaming estimate of the gaps' ``quantile`` (P99), for the step log."""
        self._d_mean: float | None = None
        self._prev_done_t: float | None = None
        self._updated = False

    def decide(self, ctx: StepContext) -> SLODecision:
        """Plan one step: the cap of a mixed step, None for an unrestricted one.

        Reads the running decodes and their total context tokens (``ctx.decode_reqs``,
        ``ctx.decode_context``) and the tokens already prefilled of the request the chunk goes to
        (``ctx.prefill_context``); not the signal or T*: this controller learns from
        :meth:`completed`, and its target is the SLO.
        """
        updated, self._updated = self._updated, False
        p = self.params
        if not (p.enabled and ctx.decodes_running and ctx.prefill_waiting):
            return _UNRESTRICTED[updated]
        model = self.model
        if not model.warm:
            self._cold_i ^= 1
            cap = self._cold_caps[self._cold_i]
            self.chunk = float(cap)
            return SLODecision(cap=cap, updated=updated, cold=True)
        decode_reqs, decode_context, prefill_context = ctx.decode_reqs, ctx.decode_context, ctx.prefill_context
        floor = model.floor_s(decode_reqs, decode_context)
        budget = min(p.slo_s, max(self.budget_s, p.floor_margin * floor))
        cap, infeasible = model.chunk_for(budget, decode_reqs, decode_context, prefill_context,
                                          p.chunk_min, p.chunk_max, p.block)
        self.chunk = float(cap)
        return SLODecision(cap=cap, updated=updated, infeasible=infeasible, budget_s=budget, floor_s=floor,
                           predicted_s=model.predict_s(decode_reqs, decode_context, cap, prefill_context))

    def absorb(self, *, decode_reqs: int, decode_context: int, prefill_tokens: int, prefill_context: int,
               duration_s: float, cap: int | None, feedback: bool = True) -> bool:
        """Absorb one completed step (its actual work, its duration, the cap it ran under): fit the step
        cost and, with decodes and ``feedback``, feed the gap to the budget (a controller that ran the step
        over the budget on purpose keeps it out). False for a refused step (bad duration)."""
        model = self.model
        if not model.update(decode_reqs, decode_context, prefill_tokens, prefill_context, duration_s):
            return False
        self._updated = True
        if decode_reqs > 0 and feedback:
            saturated = cap is not None and prefill_tokens >= cap and cap < self.params.chunk_max
            self._feedback(duration_s, decode_reqs, decode_context, saturated)
        return True

    def completed(self, step: CompletedStep, feedback: bool = True) -> bool:
        """:meth:`absorb` with the duration taken from completion times (:meth:`duration`)."""
        duration = self.duration(step)
        if duration is None:
            return False
        return self.absorb(decode_reqs=step.decode_reqs, decode_context=step.decode_context,
                           prefill_tokens=step.prefill_tokens, prefill_context=step.prefill_context,
                           duration_s=duration, cap=step.cap, feedback=feedback)

    def duration(self, step: CompletedStep) -> float | None:
        """The duration a completed step is fitted with (:func:`step_duration`), None (counted as
        rejected) where it has none; steps must arrive in completion order (an earlier or repeated
        ``done_t`` is refused)."""
        done_t, prev = step.done_t, self._prev_done_t
        if not (done_t == done_t and done_t != math.inf) or (prev is not None and done_t <= prev):
            self.model.rejected += 1
            return None
        self._prev_done_t = done_t
        duration = step_duration(step.schedule_t, done_t, prev, step.decode_reqs)
        if duration is None:
            self.model.rejected += 1
        return duration

    def _feedback(self, gap_s: float, decode_reqs: int, decode_context: int, saturated: bool) -> None:
        """One decode gap into the tail estimate and, once the fit is warm, the budget integrator."""
        p = self.params
        q = p.quantile
        d_mean = self._d_mean = decode_reqs if self._d_mean is None else (
            self._d_mean + WEIGHT_ALPHA * (decode_reqs - self._d_mean))
        w = min(MAX_WEIGHT, decode_reqs / d_mean)
        tail = self.tail_s
        if tail is None:
            self.tail_s = gap_s
        else:
            self.tail_s = tail * math.exp(TAIL_RATE * w * ((gap_s > tail) - (1.0 - q)))
        if not self.model.warm:
            return
        if gap_s > p.setpoint * p.slo_s:
            step = -p.loop_gain * w * q
        elif saturated:
            step = p.loop_gain * w * (1.0 - q)
        else:
            return
        old = self.budget_s
        new = old * math.exp(step)
        low = min(p.floor_margin * self.model.floor_s(decode_reqs, decode_context), p.slo_s)
        if new < low:
            new = max(new, min(old, low))  # shrinking stops at the bound; a state below it stays put
        self.budget_s = min(p.slo_s, max(MIN_BUDGET_FRACTION * p.slo_s, new))
