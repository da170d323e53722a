"""The saturation guard every controller runs under: pure logic, no vLLM.

A controller caps or defers prefill for the decodes' sake. Where the engine cannot keep up (arrivals
beyond what the capped steps drain, or a machine slower than the one the target assumes, so the law's
interval target is out of reach and the chunk sits at its floor), that choice starves prefill: the queue
grows without bound while every step still meets the decode target. vLLM's prefill interval has a guard
for the same failure (PR 44558: throttling is off while the last release step could not admit every
waiting prompt). Its test, prompts left waiting after a prefill step, does not carry over to chunking: a
capped step always leaves its prompt partly done, and two prompts arriving together are ordinary traffic.
What does carry over is the age of the queue's head: once the oldest prompt still to prefill has waited a
whole TTFT SLO, its first token is late already, deferring its work for the decodes only grows the queue,
and the step runs unrestricted, as stock would run it, until the head is younger than that again.

One rule for every controller, applied by the scheduler glue after the controller's decision (the
controller's state is left as its decision made it): a controller that plans to deadlines meets them
before the guard has to act; one that does not (the paper's law) gets the bound it lacked.
"""

from __future__ import annotations


def saturated(oldest_wait_s: float | None, ttft_slo_s: float) -> bool:
    """Is the queue saturated: has its oldest prompt still to prefill (None: there is none) waited at least
    the TTFT SLO?"""
    return oldest_wait_s is not None and oldest_wait_s >= ttft_slo_s
