"""An online model of one engine step's duration, and the largest prefill chunk that fits a step budget.

A mixed step costs a *decode floor*, paid whatever the prefill, plus a *prefill increment*::

    step = a + b*D + c*K  +  g*[P > 0] + e*P + f*P*(Cp + P/2)
           ^ decode floor ^   ^ prefill increment             ^

with ``D`` decoding requests holding ``K`` context tokens in all, and ``P`` prefill tokens whose
request has ``Cp`` tokens prefilled already. ``a`` is the per-step cost (the weights read, the host's
launches), ``b`` and ``c`` the per-decode and per-cached-token costs (KV reads), ``e`` the per-token
cost of the dense layers and ``f`` attention's: each chunk token attends over the context before the
chunk and, causally, over half the chunk itself (the roofline of :mod:`dlfp.sim.costmodel` has the same
``n*(c + n/2)`` term). ``g`` is what a step pays for carrying any prefill at all, whatever its size:
the host's work on a request being prefilled and the kernels a prefill batch adds. Replayed online over
the committed capacity study's logged steps, it cut the 90th percentile of the a-priori prediction error
on the modeled GPU targets from 6-12% to 3-11%, and changed nothing on the host-dominated ones (CPU
engine, Qwen3-0.6B), whose error is the steps' jitter (:mod:`dlfp.studies.fit_features`). The six
costs are fitted from completed steps by recursive least squares with
a forgetting factor (the fit follows a plant that drifts: thermal clocks, a growing KV cache, another
tenant). The fit itself is unconstrained (clipping RLS coefficients step by step breaks the
estimate's consistency with its covariance and diverges), but predictions take each prefill cost as
at least zero and the floor as at least zero (a negative cost fits noise, not hardware;
:mod:`dlfp.sim.stepfit` uses NNLS for the same reason), so a prediction is never negative and the
increment never falls as ``P`` grows.

Numerical safety, since the fit runs unattended for days inside the engine:

* features are scaled to order one and durations fitted in milliseconds, so the 6x6 covariance stays
  far from float64's limits;
* a weak prior (covariance :data:`PRIOR_VAR` on the diagonal) regularises the first steps, except
  on ``g``, whose prior is tight (:data:`PRIOR_VAR_CARRY`): while every step carries prefill (a steady
  stream of prompts), ``a`` and ``g`` are one sum to the data, and a tight prior on ``g`` books that sum
  as the decode floor, which then errs on the safe side (a budget over the floor with margin, the
  infeasible steps) until decode-only steps tell the two apart;
* forgetting inflates the covariance in directions the steps do not excite (a chunk held constant says
  nothing about a bigger one): its trace is bounded by the prior's, so the gain never winds up, and a
  covariance that loses positivity or finiteness is reset to the prior;
* a plant that changes abruptly (the recent mean *signed* error beyond :data:`BIAS_LIMIT`, which
  zero-mean jitter never reaches) inflates the covariance, so the fit re-learns in tens of steps
  rather than the forgetting's hundreds;
* once warm, a step far off its prediction (over ``outlier_k`` robust scales: a preemption, a GC pause,
  a compile) updates with a clipped residual, Huber-style, so a single 10 s stall moves the fit as
  little as a merely slow step; NaN, infinite, zero or negative durations and negative features are
  refused outright.

Fit quality is reported as :attr:`StepCostModel.rel_error`, the recent mean of ``|y - y_hat| / y``
with ``y_hat`` predicted *before* the step updated the fit (an honest, out-of-sample error).

Per step the update is a few hundred float operations on plain Python lists (no numpy: an array
allocation per call costs more than the arithmetic at this size), independent of the number of
requests, whose features arrive as sums.
"""

from __future__ import annotations

import math

N = 6
"""Coefficients: intercept, decodes, decode context, prefill tokens, prefill attention, carrying prefill."""
SCALES = (1.0, 32.0, 32768.0, 1024.0, 1024.0 * 1024.0, 1.0)
"""Feature units: one step, 32 decodes, 32k cached decode tokens, 1k prefill tokens, 1M token pairs, one
step that carries prefill."""
PRIOR_VAR = 1.0e4
"""Prior variance of each coefficient, in ms^2 per scaled unit: a standard deviation of 100 ms, weak
next to one observed step (the data outweigh the prior after a step or two)."""
PRIOR_VAR_CARRY = 100.0
"""Prior variance of ``g`` (the cost of carrying prefill), ms^2: a standard deviation of 10 ms, a hundred
times tighter than the other costs', so that steps which all carry prefill book 99% of their shared
intercept as the floor, while a few hundred steps with and without prefill learn ``g`` to 0.1%."""
PRIORS = (PRIOR_VAR,) * (N - 1) + (PRIOR_VAR_CARRY,)
TRACE_MAX = sum(PRIORS)
"""Bound on the covariance trace: never less informed than the prior (anti-windup of the forgetting)."""
MIN_SCALE = 0.02
"""Smallest robust relative scale for outlier clipping: a fit at 0.1% error still tolerates 8% jitter."""
ERROR_ALPHA = 0.05
"""EWMA weight of the newest step in :attr:`StepCostModel.rel_error` (about the last 20 to 40 steps)."""
MAX_DURATION_S = 3600.0
"""A step reported longer than an hour is a clock error, not a step."""
BIAS_LIMIT = 0.1
"""A recent mean signed relative residual beyond this is a change of plant, not noise (jitter averages
out: at 10% step jitter the mean over the last ~20 steps wanders by about 2%)."""
INFLATE = 10.0
"""Covariance inflation on a detected change: the past counts this many times less."""
INFLATE_EVERY = 20
"""Steps between two inflations (the bias must re-accumulate first)."""
DISTINCT_RATIO = 1.5
"""Two prefill sizes are distinct when the larger is at least this multiple of the smaller."""


class StepCostModel:
    """Recursive least squares with forgetting over the six step costs; see the module docstring.

    ``forgetting`` (lambda) weighs a step ``n`` steps old by ``lambda**n``: 0.995 remembers about
    200 steps, enough to average step jitter, short enough to follow a drift within a few hundred.
    ``warmup_steps`` accepted steps, spanning two distinct prefill sizes, make the fit :attr:`warm`.
    """

    __slots__ = ("_p_max", "_p_min", "_since", "bias", "cov", "forgetting", "inflations", "n", "outlier_k",
                 "outliers", "rejected", "rel_error", "resets", "scale", "theta", "warmup_steps")

    def __init__(self, forgetting: float = 0.995, outlier_k: float = 4.0, warmup_steps: int = 12) -> None:
        if not 0.5 <= forgetting <= 1.0:
            raise ValueError(f"forgetting {forgetting!r} outside [0.5, 1]")
        if not outlier_k > 1.0:
            raise ValueError(f"outlier_k {outlier_k!r} must exceed 1")
        self.forgetting = float(forgetting)
        self.outlier_k = float(outlier_k)
        self.warmup_steps = int(warmup_steps)
        self.theta = [0.0] * N
        """Coefficients in ms per scaled feature unit (:data:`SCALES`), the unconstrained fit."""
        self.cov = _prior()
        """Covariance, N rows of N, symmetric."""
        self.n = 0
        """Steps accepted into the fit."""
        self.rel_error: float | None = None
        """Recent mean relative a-priori error ``|y - y_hat| / y`` (None before the first step)."""
        self.scale = 1.0
        """Robust relative residual scale (EWMA of clipped ``|e| / y_hat``) for outlier clipping."""
        self.outliers = 0
        """Steps whose residual was clipped."""
        self.rejected = 0
        """Steps refused (non-finite or non-positive duration, negative features)."""
        self.resets = 0
        """Covariance resets (lost positivity or finiteness)."""
        self.bias = 0.0
        """Recent mean signed relative residual (clipped) once warm: the change detector's input."""
        self.inflations = 0
        """Covariance inflations on a detected change of plant."""
        self._since = 0
        self._p_min = math.inf
        self._p_max = 0.0

    @property
    def warm(self) -> bool:
        """Has the fit seen enough steps, over at least two distinct prefill sizes, to be trusted?"""
        return self.n >= self.warmup_steps and self._p_max >= DISTINCT_RATIO * self._p_min

    def coefficients_s(self) -> tuple[float, float, float, float, float, float]:
        """The fitted costs in seconds per raw unit: (a per step, b per decode, c per cached decode
        token, e per prefill token, f per prefill token pair, g per step that carries prefill)."""
        t = self.theta
        return (t[0] / 1e3, t[1] / SCALES[1] / 1e3, t[2] / SCALES[2] / 1e3, t[3] / SCALES[3] / 1e3,
                t[4] / SCALES[4] / 1e3, t[5] / SCALES[5] / 1e3)

    def floor_s(self, decode_reqs: float, decode_context: float) -> float:
        """Predicted duration of a decode-only step: the floor every mixed step pays."""
        t = self.theta
        return max(0.0, t[0] + t[1] * decode_reqs / SCALES[1] + t[2] * decode_context / SCALES[2]) / 1e3

    def predict_s(self, decode_reqs: float, decode_context: float, prefill_tokens: float,
                  prefill_context: float = 0.0) -> float:
        """Predicted duration of a step, in seconds: the floor plus the increment with each prefill cost
        taken as at least zero (so never negative, and never decreasing in the prefill)."""
        t, p = self.theta, prefill_tokens
        inc = max(0.0, t[3]) * p / SCALES[3] + max(0.0, t[4]) * p * (prefill_context + 0.5 * p) / SCALES[4]
        if p > 0.0:
            inc += max(0.0, t[5])
        return self.floor_s(decode_reqs, decode_context) + inc / 1e3

    def max_prefill(self, budget_s: float, decode_reqs: float, decode_context: float,
                    prefill_context: float = 0.0) -> float:
        """The largest real ``P`` whose predicted step fits ``budget_s``: 0 when the floor and the cost of
        carrying prefill exceed it, ``inf`` when the fit says prefill costs nothing.

        Solves ``a2*P**2 + a1*P = slack`` in the cancellation-free form ``2*slack / (a1 + sqrt(a1**2 +
        4*a2*slack))``, which also covers ``a2 = 0``; monotone in the budget since ``a1, a2 >= 0``.
        """
        slack = budget_s * 1e3 - self.floor_s(decode_reqs, decode_context) * 1e3 - max(0.0, self.theta[5])
        if not slack > 0.0:  # NaN too
            return 0.0
        if slack == math.inf:
            return math.inf
        e, f = max(0.0, self.theta[3]) / SCALES[3], max(0.0, self.theta[4]) / SCALES[4]
        a2, a1 = 0.5 * f, e + f * prefill_context
        denom = a1 + math.sqrt(a1 * a1 + 4.0 * a2 * slack)
        if denom <= 0.0:
            return math.inf
        p = 2.0 * slack / denom
        return p if p == p else 0.0  # a NaN context (inf/inf) gets the conservative answer

    def chunk_for(self, budget_s: float, decode_reqs: float, decode_context: float, prefill_context: float,
                  chunk_min: int, chunk_max: int, block: int | None = None) -> tuple[int, bool]:
        """``(chunk, infeasible)``: the largest chunk in [chunk_min, chunk_max] (a multiple of ``block``
        where given, unless that falls below chunk_min) whose predicted mixed step fits ``budget_s``.

        ``infeasible`` when the budget does not even cover the predicted decode floor and the cost of
        carrying prefill: no chunk can meet it, and the chunk is ``chunk_min`` (prefill must still
        progress; a NaN input reads the same). Monotone in the budget: each stage (solve, clip, round,
        the one-block float guard) is non-decreasing in it.
        """
        p = self.max_prefill(budget_s, decode_reqs, decode_context, prefill_context)
        if p <= 0.0:
            return chunk_min, True
        step = block if block and block > 1 else 1
        chunk = chunk_max if p >= chunk_max else int(p)
        chunk -= chunk % step
        if chunk > chunk_min and self.predict_s(decode_reqs, decode_context, chunk, prefill_context) > budget_s:
            chunk -= step  # the root's last-ulp rounding put it one block past the budget
        return max(chunk_min, chunk), False

    def update(self, decode_reqs: float, decode_context: float, prefill_tokens: float, prefill_context: float,
               duration_s: float) -> bool:
        """Fit one completed step; False (and nothing changes but :attr:`rejected`) for a refused one."""
        if not (decode_reqs >= 0 and decode_context >= 0 and prefill_tokens >= 0 and prefill_context >= 0
                and 0.0 < duration_s <= MAX_DURATION_S
                and decode_context != math.inf and prefill_context != math.inf and prefill_tokens != math.inf
                and decode_reqs != math.inf):  # NaN fails every comparison above
            self.rejected += 1
            return False
        p = float(prefill_tokens)
        x = (1.0, decode_reqs / SCALES[1], decode_context / SCALES[2], p / SCALES[3],
             p * (prefill_context + 0.5 * p) / SCALES[4], (1.0 if p > 0.0 else 0.0) / SCALES[5])
        y = duration_s * 1e3
        used = self.predict_s(decode_reqs, decode_context, p, prefill_context) * 1e3  # what decisions saw
        t0, t1, t2, t3, t4, t5 = self.theta
        err = y - (t0 + t1 * x[1] + t2 * x[2] + t3 * x[3] + t4 * x[4] + t5 * x[5])  # the fit's own residual
        ref = used if used > 0.0 else y
        if self.warm:
            limit = self.outlier_k * max(self.scale, MIN_SCALE) * ref
            if abs(err) > limit:
                err = math.copysign(limit, err)
                self.outliers += 1
            # |err| is clipped, so the scale grows at most (1 + alpha*(k-1))-fold a step: a level shift
            # is learnt within a few dozen steps, a lone stall barely moves it.
            self.scale += ERROR_ALPHA * (abs(err) / ref - self.scale)
            self.bias += ERROR_ALPHA * (err / ref - self.bias)
            self._since += 1
            if abs(self.bias) > BIAS_LIMIT and self._since >= INFLATE_EVERY:
                self._inflate()
        elif self.n:
            self.scale += ERROR_ALPHA * (min(abs(err) / ref, 1.0) - self.scale)
        rel = min(abs(y - used) / y, 1.0)  # one stall adds at most alpha to the reported error
        self.rel_error = rel if self.rel_error is None else self.rel_error + ERROR_ALPHA * (rel - self.rel_error)
        self._rls(x, err)
        self.n += 1
        if p > 0.0:
            self._p_min, self._p_max = min(self._p_min, p), max(self._p_max, p)
        return True

    def _rls(self, x: tuple[float, ...], err: float) -> None:
        """One RLS step with forgetting: ``theta += P x e / (lam + x'Px)``, ``P = (P - Px x'P / (lam +
        x'Px)) / lam``, then the covariance guards.

        The covariance is exactly symmetric (``px_i * px_j`` is bitwise ``px_j * px_i``), so only its
        upper triangle is computed and mirrored, and ``Px`` is read off rows by symmetry: the same
        floats as the full product, in 21 entries instead of 36 (this runs on every engine step; see
        ``dlfp bench schedule``)."""
        x0, x1, x2, x3, x4, x5 = x
        lam = self.forgetting
        (c00, c01, c02, c03, c04, c05), (_, c11, c12, c13, c14, c15), (_, _, c22, c23, c24, c25), \
            (_, _, _, c33, c34, c35), (_, _, _, _, c44, c45), (_, _, _, _, _, c55) = self.cov
        p0 = c00 * x0 + c01 * x1 + c02 * x2 + c03 * x3 + c04 * x4 + c05 * x5
        p1 = c01 * x0 + c11 * x1 + c12 * x2 + c13 * x3 + c14 * x4 + c15 * x5
        p2 = c02 * x0 + c12 * x1 + c22 * x2 + c23 * x3 + c24 * x4 + c25 * x5
        p3 = c03 * x0 + c13 * x1 + c23 * x2 + c33 * x3 + c34 * x4 + c35 * x5
        p4 = c04 * x0 + c14 * x1 + c24 * x2 + c34 * x3 + c44 * x4 + c45 * x5
        p5 = c05 * x0 + c15 * x1 + c25 * x2 + c35 * x3 + c45 * x4 + c55 * x5
        xpx = p0 * x0 + p1 * x1 + p2 * x2 + p3 * x3 + p4 * x4 + p5 * x5
        if not (0.0 <= xpx < math.inf):  # a covariance no longer positive (round-off) or overflowed
            self._reset()
            return
        k = 1.0 / (lam + xpx)
        ke = k * err
        t0, t1, t2, t3, t4, t5 = self.theta
        self.theta = theta = [t0 + p0 * ke, t1 + p1 * ke, t2 + p2 * ke, t3 + p3 * ke, t4 + p4 * ke, t5 + p5 * ke]
        il = 1.0 / lam
        n00 = (c00 - p0 * p0 * k) * il
        n01 = (c01 - p0 * p1 * k) * il
        n02 = (c02 - p0 * p2 * k) * il
        n03 = (c03 - p0 * p3 * k) * il
        n04 = (c04 - p0 * p4 * k) * il
        n05 = (c05 - p0 * p5 * k) * il
        n11 = (c11 - p1 * p1 * k) * il
        n12 = (c12 - p1 * p2 * k) * il
        n13 = (c13 - p1 * p3 * k) * il
        n14 = (c14 - p1 * p4 * k) * il
        n15 = (c15 - p1 * p5 * k) * il
        n22 = (c22 - p2 * p2 * k) * il
        n23 = (c23 - p2 * p3 * k) * il
        n24 = (c24 - p2 * p4 * k) * il
        n25 = (c25 - p2 * p5 * k) * il
        n33 = (c33 - p3 * p3 * k) * il
        n34 = (c34 - p3 * p4 * k) * il
        n35 = (c35 - p3 * p5 * k) * il
        n44 = (c44 - p4 * p4 * k) * il
        n45 = (c45 - p4 * p5 * k) * il
        n55 = (c55 - p5 * p5 * k) * il
        trace = n00 + n11 + n22 + n33 + n44 + n55
        if not (min(n00, n11, n22, n33, n44, n55) > 0.0 and trace != math.inf) or not math.isfinite(sum(theta)):
            self._reset()
            return
        if trace > TRACE_MAX:  # most decode-only steps: they excite no prefill direction
            s = TRACE_MAX / trace
            n00, n01, n02, n03, n04, n05 = n00 * s, n01 * s, n02 * s, n03 * s, n04 * s, n05 * s
            n11, n12, n13, n14, n15 = n11 * s, n12 * s, n13 * s, n14 * s, n15 * s
            n22, n23, n24, n25 = n22 * s, n23 * s, n24 * s, n25 * s
            n33, n34, n35, n44, n45, n55 = n33 * s, n34 * s, n35 * s, n44 * s, n45 * s, n55 * s
        self.cov = [[n00, n01, n02, n03, n04, n05], [n01, n11, n12, n13, n14, n15], [n02, n12, n22, n23, n24, n25],
                    [n03, n13, n23, n33, n34, n35], [n04, n14, n24, n34, n44, n45], [n05, n15, n25, n35, n45, n55]]

    def _inflate(self) -> None:
        """A persistent bias: the plant changed faster than the forgetting follows (a new model
        revision's clocks, another tenant). Weigh the past :data:`INFLATE` times less, so the next few
        dozen steps re-fit it; the trace bound still caps the gain."""
        self.cov = [[c * INFLATE for c in row] for row in self.cov]
        self.bias, self._since = 0.0, 0
        self.inflations += 1

    def _reset(self) -> None:
        """Covariance reset: back to the prior's uncertainty, keeping the coefficients (the data's best
        guess so far); a non-finite coefficient goes back to zero."""
        self.cov = _prior()
        self.theta = [v if math.isfinite(v) else 0.0 for v in self.theta]
        self.resets += 1


def _prior() -> list[list[float]]:
    return [[PRIORS[i] if i == j else 0.0 for j in range(N)] for i in range(N)]
