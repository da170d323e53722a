"""What the SLO controller's step-cost fit misses (issue 39, item 2): the five features it ran the committed
capacity units with against richer ones, on the steps those units ran.

Those units' controller predicted a step as a decode floor (per step, per decode, per cached decode token)
plus a prefill increment (per chunk token, and attention over the chunk's context); it now has a sixth,
the first candidate here (:mod:`dlfp.control.stepcost`). Where it went wrong (host-dominated targets: the
CPU engine, Qwen3-0.6B), the question is whether a feature is missing or the steps are noisy. Here every
completed step of the ``dlfp-slo`` units of a target is fitted at once by least squares, in sample, with
the five features and with each candidate added (:data:`FEATURE_SETS`: a fixed cost of any step that
carries prefill, a quadratic term in the chunk, a per-decode cost of mixed steps), and judged where the
controller judged itself: on the steps it sized whose prefill filled the chunk
(:mod:`dlfp.studies.slo_fit`). An in-sample fit over all of a target's steps is the best any fixed
coefficients on those features can do, so a candidate that does not shrink the error there would not
shrink it online either; the row ``online fit (as run)`` is the controller's own logged prediction, for
comparison.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlfp.analysis.labels import source_kind, source_line
from dlfp.studies.slo_fit import CONTROLLER, OVERRUN, controller_runs, timed_steps
from dlfp.trials.armid import ArmId

BASE = ("D", "K", "P", "P * (Cp + P / 2)")
"""The controller's features beyond the intercept: decodes, their context, chunk tokens, chunk attention."""
FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "the five the units ran with": BASE,
    "+ prefill-step cost": (*BASE, "prefill"),
    "+ prefill-step cost, chunk squared": (*BASE, "prefill", "P * P"),
    "+ prefill-step cost, decodes x prefill": (*BASE, "prefill", "D * prefill"),
}
"""Candidate feature sets (expressions over the step's ``D``, ``K``, ``P``, ``Cp`` and ``prefill``, the
indicator of a step that carries prefill), each with an intercept."""
ONLINE = "online fit (as run)"


def feature_rows(root: Path) -> pd.DataFrame:
    """Every timed step of every ``dlfp-slo`` unit under ``root`` (capacity runs), one row each: target,
    its features, the observed duration, the controller's logged prediction and whether it sized the step
    with its chunk filled."""
    frames = []
    for target, run in controller_runs(root):
        for (_, arm), tables in sorted(run.tables.items()):
            if ArmId.parse(arm).base != CONTROLLER:
                continue
            st = timed_steps(tables["steps"])
            st = st[st.observed_s.notna() & (st.total_tokens > 0) & st.decode_context.notna()]
            frames.append(pd.DataFrame({
                "target": target, "source": source_line(run),
                "D": st.decode_reqs.astype(float), "K": st.decode_context.astype(float),
                "P": st.prefill_tokens.astype(float), "Cp": st.prefill_context.fillna(0).astype(float),
                "observed_s": st.observed_s, "predicted_s": st.get("predicted_s"),
                "judged": (st.get("budget_s").notna() & (st.prefill_tokens >= st.cap.fillna(np.inf))
                           & (st.prefill_tokens > 0) & ~st.get("infeasible").fillna(False).astype(bool)).to_numpy()
                if "budget_s" in st else False,
            }))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _errors(observed: np.ndarray, predicted: np.ndarray) -> dict[str, str]:
    e = observed / predicted - 1
    return {"median error (%)": _num(100 * np.median(e)),
            "90% of errors within (±%)": _num(100 * np.percentile(abs(e), 90)),
            f"over the prediction by >{OVERRUN:.0%} (% of steps)": _num(100 * np.mean(e > OVERRUN))}


def fitted(rows: pd.DataFrame, features: tuple[str, ...]) -> np.ndarray:
    """In-sample least-squares predictions (s) of ``rows``' durations from ``features`` and an intercept."""
    frame = rows.assign(prefill=(rows.P > 0).astype(float))
    x = np.column_stack([np.ones(len(frame)), *(frame.eval(f).to_numpy(float) for f in features)])
    theta, *_ = np.linalg.lstsq(x, frame.observed_s.to_numpy(float), rcond=None)
    return x @ theta


def feature_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per target (named with where its numbers come from) and feature set (module docstring): the error
    of its predictions on the judged steps; first the controller's own logged predictions."""
    out: list[dict[str, object]] = []
    if rows.empty:
        return pd.DataFrame()
    for target, g in rows.groupby("target", sort=False):
        judged = g.judged.to_numpy(bool)
        if not judged.any():
            continue
        name = f"{target} ({source_kind(g.source.iloc[0])})"
        observed = g.observed_s.to_numpy(float)[judged]
        out.append({"target": name, "fit": ONLINE, "steps judged": int(judged.sum()),
                    **_errors(observed, g.predicted_s.to_numpy(float)[judged])})
        for label, features in FEATURE_SETS.items():
            out.append({"target": name, "fit": f"in sample: {label}", "steps judged": int(judged.sum()),
                        **_errors(observed, fitted(g, features)[judged])})
    return pd.DataFrame(out)


def _num(x: float) -> str:
    return f"{x:.2g}" if abs(x) < 10 else f"{x:.0f}"
