"""The saturation guard's rule (:mod:`dlfp.control.guard`). The scheduler-level checks (the record, the
release after one SLO) are in ``tests/vllm/test_controller_protocol.py``; what the guard is for, on vLLM's
own engine core in virtual time, is the artifact's ``artifact/tests/sim/test_guard_in_virtual_time.py``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dlfp.control.guard import saturated


@given(st.one_of(st.none(), st.floats(0, 1e4)), st.floats(1e-3, 1e4), st.floats(0, 1e4))
def test_the_guard_fires_from_one_ttft_slo_of_waiting_on(wait: float | None, slo: float, more: float) -> None:
    assert saturated(wait, slo) == (wait is not None and wait >= slo)
    if wait is not None and saturated(wait, slo):
        assert saturated(wait + more, slo)  # waiting longer never un-saturates the queue
