"""The DLFP control law as pure logic: no vLLM import, unit-testable in microseconds.

DLFP acts only on prefill work that would share an engine step with running decodes.
For such a *mixed* step it caps the step's prefill tokens at a chunk ``C``. After a
*guarded* cycle it updates ``C`` by proportional feedback on an observed interval ``T``
toward a target ``T*``:

    C <- clamp(C * (1 + k * (T* - T) / T*), C_min, C_max)

An interval above target never grows the chunk, one below never shrinks it. With no
decodes running, or no prefill waiting, the step is unrestricted (full token budget)
and ``C`` is left alone.

The paper's law grows ``C`` after any fast guarded cycle, including one whose prefill was
a short prompt far below the cap: a fast step then says nothing about a bigger chunk, yet
``C`` climbs to ``chunk_max`` between long prompts (integrator windup, in control terms),
and the next long prompt stalls the decodes in full. ``anti_windup`` (off by default, to
keep the paper's law) grows ``C`` only after a step whose prefill filled its cap.

Which interval feeds the law is a pluggable signal (see
:mod:`dlfp.control.signals`); the controller only sees an :class:`Observation`, in the step context
every controller gets (:mod:`dlfp.control.protocol`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from dlfp.control.protocol import CompletedStep, Decision, StepContext

if TYPE_CHECKING:
    from dlfp.control.params import DLFPParams


_UNRESTRICTED = Decision(cap=None, updated=False)
"""The decision of every step that is not mixed (or with control off): one frozen instance, not one per step."""


def next_chunk(chunk: float, interval_s: float, params: DLFPParams, target_s: float | None = None) -> float:
    """Apply the proportional law once toward ``target_s`` (default: the parameters' T*); the
    result always lies in [chunk_min, chunk_max]."""
    target = params.target_interval_s if target_s is None else target_s
    factor = 1.0 + params.gain * (target - interval_s) / target
    return min(float(params.chunk_max), max(float(params.chunk_min), chunk * factor))


class DLFPController:
    """Stateful wrapper around :func:`next_chunk`: holds ``C`` between steps (registered as ``law``)."""

    __slots__ = ("chunk", "params")
    needs: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, params: DLFPParams) -> None:
        self.params = params
        self.chunk = float(params.chunk_init)

    @classmethod
    def from_params(cls, params: DLFPParams) -> DLFPController:
        return cls(params)

    def decide(self, ctx: StepContext) -> Decision:
        """Plan one step. Only a mixed step is capped; only a guarded cycle adapts ``C``,
        toward ``ctx.target_s`` (default: the parameters' T*).

        With control disabled the decision is always unrestricted, so a disabled arm is
        stock vLLM scheduling with the same instrumentation.
        """
        if not (self.params.enabled and ctx.decodes_running and ctx.prefill_waiting):
            return _UNRESTRICTED
        obs = ctx.obs
        updated = obs is not None and obs.guarded
        if obs is not None and updated:
            proposed = next_chunk(self.chunk, obs.interval_s, self.params, ctx.target_s)
            held = self.params.anti_windup and not obs.saturated  # may shrink, never grow
            self.chunk = min(self.chunk, proposed) if held else proposed
        return Decision(cap=int(self.chunk), updated=updated)

    def completed(self, step: CompletedStep) -> None:
        """The law learns from the signal in each step's context, not from completions."""
