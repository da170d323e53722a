"""The deadline controller (``dlfp.control.deadline``): the ITL chunk where the deadlines allow it, a
burst only within the ITL allowance, the saturation guard, deferral where no chunk meets the ITL
budget, and the engine's budget as the ceiling of every decision."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control import deadline as dl
from dlfp.control.deadline import DeadlineController, DeadlineDecision
from dlfp.control.params import DLFPParams
from dlfp.control.protocol import CompletedStep, Prompt, StepContext
from dlfp.control.slo import SLOController, SLOParams

A, B, E = 0.004, 0.0005, 0.00004
"""An exact plant: 4 ms per step, 0.5 ms per decode, 0.04 ms per prefill token (no context terms)."""


def plant_s(decodes: int, prefill: int) -> float:
    return A + B * decodes + E * prefill


def controller(itl_ms: float = 20.0) -> DeadlineController:
    return DeadlineController(SLOController(SLOParams(itl_slo_ms=itl_ms)))


class Loop:
    """Feeds a controller completed steps of the exact plant, in completion order."""

    def __init__(self, ctl: DeadlineController) -> None:
        self.ctl, self.t = ctl, 0.0

    def step(self, decodes: int, prefill: int, cap: int | None, fields: Any = None) -> None:
        start, self.t = self.t, self.t + plant_s(decodes, prefill)
        self.ctl.completed(CompletedStep(decode_reqs=decodes, decode_context=0, prefill_tokens=prefill,
                                         prefill_context=0, schedule_t=start, done_t=self.t, cap=cap,
                                         fields=fields))

    def warm(self, steps: int = 1000, decodes: int = 8) -> None:
        """Mixed steps at two prefill sizes (the fit's warm-up), then decode-only steps: all under the SLO."""
        for i in range(steps):
            self.step(decodes, (64, 160)[i % 2] if i < 40 else 0, None)


def mixed(ctl: DeadlineController, now: float, prompts: list[Prompt], decodes: int = 8,
          budget: int = 8192) -> DeadlineDecision:
    return ctl.decide(StepContext(decodes_running=True, prefill_waiting=True, decode_reqs=decodes, now=now,
                                  prompts=tuple(prompts), budget_tokens=budget))


def test_it_is_registered_and_reads_both_slos() -> None:
    from dlfp.control import registry

    c = registry.build(DLFPParams(controller="deadline", itl_slo_ms=30.0, ttft_slo_ms=400.0))
    assert isinstance(c, DeadlineController) and c.slo_s == 0.03
    assert registry.REGISTRY["deadline"].slos == ("itl_slo_ms", "ttft_slo_ms")


def test_no_decodes_or_no_prefill_is_unrestricted() -> None:
    ctl = controller()
    Loop(ctl).warm()
    for decodes, waiting in ((False, True), (True, False), (False, False)):
        d = ctl.decide(StepContext(decodes_running=decodes, prefill_waiting=waiting, decode_reqs=8,
                                   prompts=(Prompt(1000, 0.1),), budget_tokens=8192))
        assert d.cap is None and not d.burst


def test_deadlines_the_itl_chunk_meets_get_it() -> None:
    """Prompts due far ahead: the ITL side's chunk, no need beyond it."""
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    d = mixed(ctl, loop.t, [Prompt(200, loop.t + 0.2), Prompt(1500, loop.t + 0.5)])
    assert not d.burst and d.cap == d.itl_cap and d.need is None
    assert plant_s(8, d.cap) <= 0.020  # the ITL chunk fits the SLO on the exact plant


def test_a_deadline_the_itl_chunk_misses_gets_the_smallest_burst_that_makes_it() -> None:
    """1500 tokens due in 80 ms: the ITL chunk (about 230 tokens a 17 ms step) takes seven steps; half
    the prompt a step is two 38 ms steps, too slow; the whole prompt in one 68 ms step makes it."""
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    due = loop.t + 0.080
    d = mixed(ctl, loop.t, [Prompt(1500, due)])
    assert d.burst and d.need == d.cap == 1500 > d.itl_cap
    assert loop.t + plant_s(8, 1500) <= due  # made, on the exact plant
    assert loop.t + 2 * plant_s(8, 750) + dl.MARGIN_STEPS * plant_s(8, 0) > due


def test_a_deadline_no_chunk_can_make_is_given_up() -> None:
    """4000 tokens due in 80 ms: even one step of all of them (168 ms) misses, so no burst for it; a
    prompt behind it still counts."""
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    d = mixed(ctl, loop.t, [Prompt(4000, loop.t + 0.080)])
    assert not d.burst and d.need is None and d.cap == d.itl_cap


def test_bursts_stay_within_the_allowance_of_the_itl_quantile() -> None:
    """Deadlines that always need a burst: the share of decode gaps over the SLO stays within half the
    room a P99 leaves, over a long run."""
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    gaps = over = 0
    for _ in range(5000):
        d = mixed(ctl, loop.t, [Prompt(1500, loop.t + 0.080)])
        prefill = d.cap if d.cap is not None else 0
        duration = plant_s(8, prefill)
        gaps, over = gaps + 8, over + 8 * (duration > 0.020)
        loop.step(8, prefill, d.cap, d.log_fields())
    assert 0 < over <= dl.ALLOWANCE * 0.01 * gaps * 1.05


def test_a_burst_reaches_the_fit_but_not_the_itl_budget() -> None:
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    before = ctl.itl.budget_s
    n = ctl.model.n
    loop.step(8, 6000, 6000, {"burst": True})  # a 0.25 s step, over the SLO on purpose
    assert ctl.model.n == n + 1 and ctl.itl.budget_s == before
    loop.step(8, 6000, 6000, None)  # the same step, not a burst: the tail feedback shrinks the budget
    assert ctl.itl.budget_s < before


def test_where_no_chunk_meets_the_itl_budget_prefill_is_deferred_or_burst() -> None:
    """An SLO under the decode floor (8 decodes: 8 ms, SLO 6 ms): a chunk_min step would only put more
    gaps over, so the step defers (cap 0) until the allowance lets a burst through."""
    ctl = controller(itl_ms=6.0)
    loop = Loop(ctl)
    loop.warm()
    decisions = []
    for _ in range(300):
        d = mixed(ctl, loop.t, [Prompt(1000, loop.t + 10.0)])
        decisions.append(d)
        loop.step(8, 0 if d.cap == 0 else min(d.cap, 1000), d.cap, d.log_fields())
    assert all(d.infeasible for d in decisions)
    assert {d.cap for d in decisions if not d.burst} == {0}


@settings(max_examples=60, deadline=None)
@given(st.integers(64, 16384), st.lists(st.tuples(st.integers(0, 5000), st.floats(-1.0, 2.0)), max_size=20),
       st.integers(1, 64))
def test_no_decision_exceeds_the_engine_budget(budget: int, queue: list[tuple[int, float]], decodes: int) -> None:
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    prompts = [Prompt(r, loop.t + t) for r, t in queue]
    d = mixed(ctl, loop.t, prompts, decodes=decodes, budget=budget)
    assert d.cap is not None and 0 <= d.cap <= budget


def test_a_context_without_the_engine_budget_still_gets_the_itl_chunk() -> None:
    """A caller that does not say the engine's budget (``budget_tokens`` 0) is not deferred by it."""
    ctl = controller()
    loop = Loop(ctl)
    loop.warm()
    d = ctl.decide(StepContext(decodes_running=True, prefill_waiting=True, decode_reqs=8, now=loop.t,
                               prompts=(Prompt(200, loop.t + 0.2),)))
    assert d.cap == d.itl_cap > 0 and not d.burst
