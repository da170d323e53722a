"""The deadline controller: both SLOs in one decision. Each mixed step gets the chunk the ITL SLO
allows, unless the waiting prompts' TTFT deadlines need more and the P99 ITL can afford one slow step.
Pure logic, no vLLM.

The SLO controller (:mod:`dlfp.control.slo`) sizes every mixed step to the ITL SLO alone. Where the
decode floor leaves little room (tight SLOs, host-dominated steps), that chunk is small, prefill
queues and the P99 TTFT fails while the P99 ITL holds: capacity is then lost to the TTFT SLO. A fixed
budget fails the other way. Both SLOs are P99s: each lets 1% of its samples exceed it. This controller
spends that room on purpose, on the ITL side, where the TTFT side needs it:

1. **ITL chunk.** The SLO controller's decision: the largest chunk whose predicted step (online
   step-cost fit) fits its tail-corrected budget (``itl_cap``).
2. **Deadline need.** The prompts still to prefill, in vLLM's order (first come, first served: with
   one TTFT SLO that is earliest deadline first), each due ``ttft_slo_ms`` after the scheduler first
   saw it. A prompt finishes after the steps that prefill its queue's prefix (its own tokens and all
   before it), each as long as the fit predicts. ``need`` is the smallest chunk above the ITL chunk
   that gets the most prompts there in time, or none where no chunk gets more there than the ITL
   chunk does (it meets every deadline in reach, or the rest are lost whatever the chunk: bursting
   for them would only delay the others).
3. **Decision.** No ``need``: the ITL chunk. Otherwise, if the recent share
   of decode gaps over the ITL SLO, with this step's gaps counted as over, stays within
   ``ALLOWANCE x (1 - q)`` (half the share the P99 permits), a *burst*: the engine's whole token budget,
   since a gap over the SLO counts once in a P99 however long it is, and a big chunk clears the queue
   in one step. Without allowance the ITL chunk: the ITL SLO wins and a deadline may be missed.
   Where no chunk meets the ITL budget (the decode floor already fills it), every mixed step would put
   its gaps over the SLO whatever its chunk, so it is a burst where the allowance permits and deferred
   (cap 0) where it does not, until the allowance or the saturation guard releases it.
4. **Saturation guard**: the one every controller runs under (:mod:`dlfp.control.guard`, applied by the
   scheduler glue): once the head of the queue has waited a whole TTFT SLO, the step is unrestricted.
   Prefill is never starved, an isolated prefill (no decode running) is never restricted, and no cap
   exceeds the engine's budget.

Burst steps reach the step-cost fit but not the ITL budget's tail feedback: they exceed it on purpose.
Per decision: one pass over the queued prompts and O(log budget) fit predictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from dlfp.control.params import DLFPParams
from dlfp.control.protocol import BATCH, QUEUE, CompletedStep, Prompt, StepContext
from dlfp.control.slo import SLOController, SLODecision, slo_params_from
from dlfp.control.stepcost import StepCostModel

ALLOWANCE = 0.5
"""Share of the ITL quantile's room (``1 - q``: 1% for a P99) that bursts may spend."""
GAP_MEMORY = 0.999
"""Per-step decay of the gap counts the allowance reads (about the last thousand steps)."""
MIN_GAPS_PER_DECODE = 2.0
"""A burst needs at least this many times 1/(allowance) counted gaps per decode it stalls: no burst
before the counts can tell a share of half a percent."""
MARGIN_STEPS = 1.0
"""Decode-floor steps reserved before a deadline: the output path and the jitter of the fit's predictions."""
MAX_PROMPTS = 16
"""Prompts of the queue the deadline need looks at (its head: the rest come after them in any case)."""


@dataclass(frozen=True, slots=True)
class DeadlineDecision(SLODecision):
    """An :class:`~dlfp.control.slo.SLODecision` with the deadline side's reasons."""

    itl_cap: int | None = None
    """The chunk the ITL side allowed (the SLO controller's cap)."""
    need: int | None = None
    """The chunk the deadlines needed this step (None: the ITL chunk serves them as well as any, or the
    fit is cold)."""
    burst: bool = False
    """The step got the engine's budget, spending ITL allowance for the deadlines."""

    def log_fields(self) -> Mapping[str, Any]:
        return {"budget_s": self.budget_s, "predicted_s": self.predicted_s, "infeasible": self.infeasible,
                "itl_cap": self.itl_cap, "need": self.need, "burst": self.burst}


class DeadlineController:
    """Sizes each mixed step from the ITL budget and the prompts' TTFT deadlines (module docstring);
    registered as ``deadline``."""

    needs: ClassVar[frozenset[str]] = frozenset({BATCH, QUEUE})
    __slots__ = ("_gaps", "_over", "chunk", "itl", "slo_s")

    def __init__(self, itl: SLOController) -> None:
        self.itl = itl
        self.slo_s = itl.params.slo_s
        self.chunk = itl.chunk
        self._gaps = 0.0
        """Decayed count of decode gaps (one per decoding request per completed step)."""
        self._over = 0.0
        """Decayed count of those over the ITL SLO."""

    @classmethod
    def from_params(cls, params: DLFPParams) -> DeadlineController:
        return cls(SLOController(slo_params_from(params)))  # the deadlines come with the prompts

    @property
    def model(self) -> StepCostModel:
        """The step-cost fit (the ITL side's)."""
        return self.itl.model

    def decide(self, ctx: StepContext) -> DeadlineDecision:
        """Plan one step (module docstring, 1 to 4)."""
        base = self.itl.decide(ctx)
        self.chunk = self.itl.chunk
        fields: dict[str, Any] = {"updated": base.updated, "infeasible": base.infeasible, "cold": base.cold,
                  "budget_s": base.budget_s, "floor_s": base.floor_s, "predicted_s": base.predicted_s}
        if base.cap is None:  # not mixed, or control off
            return DeadlineDecision(cap=None, **fields)
        prompts = ctx.prompts
        budget = ctx.budget_tokens or max(base.cap, self.itl.params.chunk_max)  # 0: the caller did not say
        itl_cap = min(base.cap, budget)
        need = None if base.cold else self._need(ctx, prompts, itl_cap, budget)
        if (base.infeasible or need is not None) and self._may_burst(ctx.decode_reqs):
            cap = need if need is not None else max(itl_cap, min(budget, sum(p.remaining for p in prompts)))
            self.chunk = float(cap)
            return DeadlineDecision(cap=cap, itl_cap=itl_cap, need=need, burst=True, **fields)
        return DeadlineDecision(cap=0 if base.infeasible else itl_cap, itl_cap=itl_cap, need=need, **fields)

    def _need(self, ctx: StepContext, prompts: Sequence[Prompt], itl_cap: int, budget: int) -> int | None:
        """The smallest chunk above ``itl_cap`` that brings the most prompts to their first token by their
        deadlines, None where none brings more than ``itl_cap`` does (it meets every deadline in reach,
        or no chunk saves another). A prompt finishes after the steps that prefill its queue's prefix,
        each of at most the chunk (vLLM's per-request threshold and budget both take the cap), each as
        long as the fit predicts a step of that many tokens (or of the whole queue, if less)."""
        model, d, k, pc = self.model, ctx.decode_reqs, ctx.decode_context, ctx.prefill_context
        margin = MARGIN_STEPS * model.floor_s(d, k)
        queue: list[tuple[int, float]] = []
        tokens = 0
        for p in prompts[:MAX_PROMPTS]:
            tokens += p.remaining
            left = p.deadline_s - ctx.now - margin
            if left > 0.0 and p.remaining > 0:
                queue.append((tokens, left))
        if not queue:
            return None

        def saved(chunk: int) -> int:
            step_s = model.predict_s(d, k, min(chunk, tokens), pc)
            return sum(1 for r, left in queue if -(-r // chunk) * step_s <= left)

        best, most = None, saved(itl_cap)
        if most == len(queue):
            return None
        for chunk in sorted({min(budget, c) for r, _ in queue for c in (r, -(-r // 2))} | {budget}):
            if chunk <= itl_cap:
                continue
            n = saved(chunk)
            if n > most:
                best, most = chunk, n
                if n == len(queue):
                    break
        return best

    def _may_burst(self, decodes: int) -> bool:
        """Would this step's gaps, all counted over the SLO, keep the over-share within the allowance?"""
        share = ALLOWANCE * (1.0 - self.itl.params.quantile)
        if self._gaps < MIN_GAPS_PER_DECODE * max(decodes, 1) / share:
            return False
        return self._over + decodes <= share * (self._gaps + decodes)

    def completed(self, step: CompletedStep) -> bool:
        """Count the step's decode gaps (over the SLO or not) and hand it to the ITL side, bursts to its
        fit only (their gaps exceed the budget on purpose)."""
        itl = self.itl
        duration = itl.duration(step)
        if duration is None:
            return False
        if step.decode_reqs > 0:
            self._gaps = GAP_MEMORY * self._gaps + step.decode_reqs
            self._over = GAP_MEMORY * self._over + (step.decode_reqs if duration > self.slo_s else 0)
        burst = bool(step.fields and step.fields.get("burst"))
        return itl.absorb(decode_reqs=step.decode_reqs, decode_context=step.decode_context,
                          prefill_tokens=step.prefill_tokens, prefill_context=step.prefill_context,
                          duration_s=duration, cap=step.cap, feedback=not burst)
