"""Token-length distributions of request classes, and the validation helpers workloads share.

A length is ``fixed``, ``uniform`` over an inclusive integer range, or ``lognormal`` clipped to
``[min, max]``. Published traces report lengths as a median with a mean or a high percentile, so
a lognormal may be given by its median and exactly one of ``sigma`` (of log length), ``p90`` or
``mean`` of the *unclipped* distribution; the two latter are converted to ``sigma`` once, at
parse time, and the draws are the same whichever spelling a config uses.

Clipping keeps every draw inside the bounds (so the config can check a class against the model
length before any work), at the price of a point mass at ``min`` and ``max``:
:meth:`LengthDist.draw` says which draws it moved, and :meth:`LengthDist.mean_length` is the mean
of the clipped draws, which is what a load computed from mean lengths must use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

LENGTH_KINDS = ("fixed", "uniform", "lognormal")
LOGNORMAL_SHAPES = ("sigma", "p90", "mean")
"""The ways a lognormal's spread may be given beside its median; exactly one is required."""
MAX_LEN = 1 << 20
"""Largest token length a distribution may produce; guards against typos that eat memory."""

Z90 = 1.2815515655446004
"""The standard normal's 0.9 quantile: log(p90 / median) = Z90 * sigma for a lognormal."""


def bad(name: str, value: Any, allowed: str) -> ValueError:
    """The error every workload refusal raises: the field as the user wrote it, its value, what is allowed."""
    return ValueError(f"{name}={value!r} is invalid; allowed: {allowed}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    allowed = f"integer >= {lo}" if hi is None else f"integer in [{lo}, {hi}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise bad(name, value, allowed)
    if value < lo or (hi is not None and value > hi):
        raise bad(name, value, allowed)


def check_keys(where: str, raw: Any, required: Iterable[str], optional: Iterable[str] = ()) -> None:
    """Refuse non-mappings, unknown keys and missing keys, naming them."""
    req, known = set(required), set(required) | set(optional)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    missing = sorted(req - set(raw))
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")


_BOUND_NAMES = {"fixed": ("fixed", "fixed"), "uniform": ("uniform[0]", "uniform[1]"),
                "lognormal": ("min", "max")}
"""How each kind spells its bounds in a spec, so errors use the name the user wrote."""


def _sigma_from(key: str, value: Any, median: float) -> float:
    """The log-space sigma of a lognormal with ``median`` whose ``key`` (p90 or mean) is ``value``."""
    if not (is_number(value) and math.isfinite(value) and value >= median):
        raise bad(key, value, f"finite number >= median ({median}): a lognormal's {key} is at least its median")
    ratio = math.log(value / median)
    return ratio / Z90 if key == "p90" else math.sqrt(2 * ratio)


def _log_mass(u: float, v: float) -> float:
    """log(Phi(v) - Phi(u)) for u < v, without the cancellation of a difference of two values near 1."""
    from scipy.special import log_ndtr, ndtr

    if u >= 0:
        return _log_mass(-v, -u)
    if v <= 0:
        lv = float(log_ndtr(v))
        ratio = math.exp(float(log_ndtr(u)) - lv)  # Phi(u) / Phi(v) < 1
        return lv + math.log1p(-ratio) if ratio < 1 else -math.inf
    return math.log(float(ndtr(v) - ndtr(u)))  # u < 0 < v: at least Phi(v) - 1/2 apart


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution over the integers [lo, hi] (``fixed``: lo == hi).

    ``lognormal`` draws exp(N(log median, sigma)), rounds to the nearest integer and clips to
    [lo, hi], so the bounds hold for every draw, not just most of them.
    """

    kind: str
    lo: int
    hi: int
    median: float = 0.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise bad("kind", self.kind, " or ".join(LENGTH_KINDS))
        lo_name, hi_name = _BOUND_NAMES[self.kind]
        check_int(lo_name, self.lo, 1, MAX_LEN)
        check_int(hi_name, self.hi, 1, MAX_LEN)
        if self.hi < self.lo:
            raise bad(f"{lo_name}, {hi_name}", (self.lo, self.hi), f"{lo_name} <= {hi_name}")
        if self.kind == "fixed" and self.hi != self.lo:
            raise bad("hi", self.hi, f"equal to lo={self.lo} for a fixed length")
        if self.kind == "lognormal":
            if not (is_number(self.median) and self.lo <= self.median <= self.hi):
                raise bad("median", self.median, f"number in [min, max] = [{self.lo}, {self.hi}]")
            if not (is_number(self.sigma) and math.isfinite(self.sigma) and self.sigma >= 0):
                raise bad("sigma", self.sigma, "finite number >= 0")

    @classmethod
    def parse(cls, value: Any, where: str = "length") -> LengthDist:
        """Parse ``128``, ``{"fixed": 128}``, ``{"uniform": [lo, hi]}`` or ``{"lognormal": {"median": m,
        "min": a, "max": b}}`` with one of ``"sigma": s``, ``"p90": q`` or ``"mean": x``."""
        try:
            return cls._parse(value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    @classmethod
    def _parse(cls, value: Any) -> LengthDist:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return cls("fixed", int(value), int(value))
        if not (isinstance(value, Mapping) and len(value) == 1
                and next(iter(value)) in LENGTH_KINDS):
            raise bad("length", value, "an int, {'fixed': n}, {'uniform': [lo, hi]} or "
                      "{'lognormal': {'median', 'min', 'max' and one of 'sigma', 'p90', 'mean'}}")
        ((kind, arg),) = value.items()
        if kind == "fixed":
            return cls("fixed", arg, arg)
        if kind == "uniform":
            if not (isinstance(arg, Sequence) and not isinstance(arg, (str, bytes)) and len(arg) == 2):
                raise bad("uniform", arg, "[lo, hi], inclusive integers")
            return cls("uniform", arg[0], arg[1])
        check_keys("lognormal", arg, ("median", "min", "max"), LOGNORMAL_SHAPES)
        shapes = [k for k in LOGNORMAL_SHAPES if k in arg]
        if len(shapes) != 1:
            raise ValueError(f"lognormal: give exactly one of {list(LOGNORMAL_SHAPES)} beside 'median', "
                             f"got {shapes}")
        if shapes == ["sigma"]:
            return cls("lognormal", arg["min"], arg["max"], arg["median"], arg["sigma"])
        base = cls("lognormal", arg["min"], arg["max"], arg["median"])  # validates median and bounds first
        return cls("lognormal", base.lo, base.hi, base.median, _sigma_from(shapes[0], arg[shapes[0]], base.median))

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` lengths (int64), element by element so a prefix does not depend on n, and per draw
        whether clipping raised it to ``lo`` or lowered it to ``hi`` (the truncation a run records)."""
        if self.kind != "lognormal":
            none = np.zeros(n, dtype=bool)
            if self.kind == "fixed":
                return np.full(n, self.lo, dtype=np.int64), none, none
            return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64), none, none
        raw = np.rint(rng.lognormal(math.log(self.median), self.sigma, size=n))
        return np.clip(raw, self.lo, self.hi).astype(np.int64), raw < self.lo, raw > self.hi

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths (int64), element by element so a prefix does not depend on n."""
        return self.draw(rng, n)[0]

    def median_length(self) -> float:
        """The draws' median: a lognormal's own (it lies in [lo, hi], which clipping leaves in
        place), the midpoint of a uniform or fixed range."""
        return float(self.median) if self.kind == "lognormal" else (self.lo + self.hi) / 2

    def mean_length(self) -> float:
        """The draws' mean, clipping included: for a lognormal, lo P(X < lo) + hi P(X > hi) + E[X; lo <= X <= hi]
        in closed form (rounding to integers moves no draw by more than half a token, so neither the mean).

        The unclipped mean exp(mu + sigma^2 / 2) overstates a heavy-tailed class by the tail that
        clipping removes (and overflows for a wide sigma); the sum is computed in logs and kept
        inside its bounds so a wide sigma stays finite."""
        if self.kind != "lognormal":
            return (self.lo + self.hi) / 2
        if self.sigma == 0 or self.lo == self.hi:
            return float(min(max(self.median, self.lo), self.hi))
        from scipy.special import ndtr

        mu, s = math.log(self.median), float(self.sigma)
        a, b = (math.log(self.lo) - mu) / s, (math.log(self.hi) - mu) / s
        mass = float(ndtr(b) - ndtr(a))  # P(lo <= X <= hi)
        log_inside = mu + s * s / 2 + _log_mass(a - s, b - s)  # E[X; lo <= X <= hi], in logs
        # Past float's range (sigma ~ 1e154 and wider: inf - inf), the mass inside is 0 to float anyway.
        inside = math.exp(min(log_inside, 700.0)) if math.isfinite(log_inside) else 0.0
        inside = min(max(inside, self.lo * mass), self.hi * mass)
        return float(min(max(self.lo * float(ndtr(a)) + inside + self.hi * float(ndtr(-b)), self.lo), self.hi))
