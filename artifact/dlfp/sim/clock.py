"""Sleeping until a deadline precisely enough to model sub-millisecond costs.

``time.sleep`` alone wakes about 0.1 ms late on Linux (timer slack plus scheduling), a
bias that would add to every modeled step. Sleeping to about ``SPIN_S`` before the
deadline and then yielding in a loop lands within tens of microseconds; the loop yields
with ``time.sleep(0)``, which releases the GIL, so the engine thread keeps running Python
while the modeled GPU stream waits (a bare busy loop would stall it for up to ``SPIN_S``).
"""

from __future__ import annotations

import time

SPIN_S = 0.001


def sleep_until(deadline: float) -> None:
    """Return at ``time.monotonic() >= deadline`` (immediately if it has passed)."""
    remaining = deadline - time.monotonic()
    if remaining > SPIN_S:
        time.sleep(remaining - SPIN_S)
    while time.monotonic() < deadline:
        time.sleep(0)
