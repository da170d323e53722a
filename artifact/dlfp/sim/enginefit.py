"""The engine-core cost profile of a measured synchronous run: what virtual time charges around each step.

:mod:`dlfp.sim.stepfit` fits each step's span (``schedule()`` through the forward pass); a replay in virtual
time (:mod:`dlfp.sim.virtual`) also charges what lies between spans and after them, the engine core's
``update_from_output`` and the output path to the client, which the same run's records show: the gap from
one step's collection to the next ``schedule()``, and each token's client time after its step's collection.
Pure: step and token tables in, an engine-core profile mapping out (:func:`dlfp.sim.costmodel.parse_engine_host`
reads it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dlfp.sim.costmodel import EngineHost, engine_section

IN_SPAN_US = 1.0
"""The ``schedule()`` terms of an engine section fitted from step spans: the span starts at ``schedule()``,
so its cost is already in the fitted step time; a token microsecond (a profile's values are positive)."""
INPUT_US = 150.0
"""A fitted engine section's input path, which step records do not show: the shipped profiles' assumption."""


def engine_host_fit(steps: Sequence[pd.DataFrame], tokens: Sequence[pd.DataFrame], name: str,
                    origin: str) -> dict[str, Any]:
    """The engine-core profile (a mapping :func:`dlfp.sim.costmodel.parse_engine_host` reads) of a synchronous
    run's host costs outside its fitted spans, from the same records (``origin`` names them):

    * ``update``: the busy gap from a step's collection (``complete_t``, where ``update_from_output``
      starts) to the next ``schedule()``, over steps followed by a step with decodes (the engine did not
      wait for an arrival): its median, split into a fixed part and a part per decode by least squares;
    * ``output``: from a step's collection to the client's token, the median over tokens of the time since
      the last collection before each, less the update's median;
    * ``schedule``: inside the fitted span (:data:`IN_SPAN_US`); ``input``: not in the records
      (:data:`INPUT_US`, assumed)."""
    gaps, decodes, delays = [], [], []
    for st, tk in zip(steps, tokens, strict=True):
        s = st.dropna(subset=["complete_t"]).sort_values("schedule_t")
        nxt = s["schedule_t"].shift(-1) - s["complete_t"]
        busy = (s["decode_reqs"].shift(-1) > 0) & nxt.gt(0)
        gaps.append(nxt[busy].to_numpy(dtype=float))
        decodes.append(s["decode_reqs"][busy].to_numpy(dtype=float))
        done = np.sort(s["complete_t"].to_numpy(dtype=float))
        t = tk["t_s"].to_numpy(dtype=float)
        i = np.searchsorted(done, t, side="right") - 1
        delays.append(t[i >= 0] - done[i[i >= 0]])
    gap, dec, delay = np.concatenate(gaps), np.concatenate(decodes), np.concatenate(delays)
    if gap.size < 10 or delay.size < 10:
        raise ValueError(f"{gap.size} busy gaps and {delay.size} tokens: too few to measure the engine's host costs")
    coef, _ = nnls(np.stack([np.ones_like(dec), dec], axis=1), gap)
    update_median = float(np.median(gap))
    fixed = max(float(coef[0]), 1e-6)
    per = max(float(coef[1]), 1e-9)
    host = EngineHost(schedule_us=IN_SPAN_US, schedule_request_us=IN_SPAN_US / 1000, update_us=fixed * 1e6,
                      update_request_us=per * 1e6, output_us=max(float(np.median(delay)) - update_median, 1e-6) * 1e6,
                      output_request_us=1e-3, input_us=INPUT_US)
    section = engine_section(host, "measured")
    for key in ("schedule_us", "schedule_per_request_us", "output_per_request_us", "input_us"):
        section[key]["source"] = "assumed"
    return {"name": name, "description": f"engine-core costs of the synchronous run {origin}, fitted from its step "
            "records and client tokens (dlfp.sim.enginefit.engine_host_fit)",
            "references": [f"{gap.size} busy gaps and {delay.size} tokens of {origin}; schedule() inside the "
                           "fitted span (a token 1 us); input path assumed as gpu-node's"],
            "engine": section}
