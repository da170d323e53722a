"""The online step-cost model: the chunk solve's invariants against an exact model (hypothesis), the fit's
convergence and drift tracking on a synthetic plant, and its numerical guards on degenerate input."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control.stepcost import SCALES, TRACE_MAX, StepCostModel

QUICK = settings(max_examples=60, deadline=None)


@dataclass(frozen=True)
class Plant:
    """A synthetic engine: the model's own form, with lognormal jitter and a per-token cost ``e`` that
    rises linearly to ``drift`` times its start over ``drift_steps`` steps (then stays)."""

    a: float = 8e-3
    b: float = 5e-5
    c: float = 5e-8
    e: float = 3e-5
    f: float = 1e-8
    g: float = 2e-3
    sigma: float = 0.0
    drift: float = 1.0
    drift_steps: int = 2000

    def e_at(self, step: int) -> float:
        return self.e * (1.0 + (self.drift - 1.0) * min(step, self.drift_steps) / self.drift_steps)

    def mean(self, d: float, k: float, p: float, cp: float, step: int = 0) -> float:
        return self.a + self.b * d + self.c * k + (self.g if p > 0 else 0.0) + self.e_at(step) * p + self.f * p * (
            cp + p / 2)

    def __call__(self, d: float, k: float, p: float, cp: float, step: int, rng: random.Random) -> float:
        jitter = math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else 1.0
        return self.mean(d, k, p, cp, step) * jitter


def exact_model(a: float, b: float, c: float, e: float, f: float, g: float = 0.0) -> StepCostModel:
    """A model whose coefficients are the plant's (seconds per raw unit)."""
    m = StepCostModel()
    m.theta = [v * 1e3 * s for v, s in zip((a, b, c, e, f, g), SCALES, strict=True)]
    return m


def random_step(rng: random.Random) -> tuple[int, int, int, int]:
    d = rng.randint(0, 64)
    return d, d * rng.randint(100, 4000), rng.choice((0, rng.randint(1, 2048))), rng.choice((0, rng.randint(0, 16384)))


def feed(m: StepCostModel, plant: Plant, steps: int, rng: random.Random, start: int = 0) -> None:
    for i in range(start, start + steps):
        d, k, p, cp = random_step(rng)
        assert m.update(d, k, p, cp, plant(d, k, p, cp, i, rng))


coefs = st.tuples(st.floats(1e-4, 0.2), st.floats(0, 1e-3), st.floats(0, 1e-6), st.floats(1e-7, 1e-3),
                  st.floats(0, 1e-7), st.floats(0, 0.05))
batches = st.tuples(st.integers(0, 256), st.integers(0, 1_000_000), st.integers(0, 100_000))
limits = st.integers(1, 256).flatmap(lambda lo: st.tuples(st.just(lo), st.integers(lo, 8192)))
blocks = st.sampled_from((None, 1, 16, 64))


@QUICK
@given(coefs, batches, limits, blocks, st.floats(0, 2), st.floats(0, 2))
def test_chunk_is_monotone_in_the_budget(c: tuple, batch: tuple, lim: tuple, block: int | None,
                                         b1: float, b2: float) -> None:
    m, (d, k, cp), (lo, hi) = exact_model(*c), batch, lim
    small, big = sorted((b1, b2))
    c_small, inf_small = m.chunk_for(small, d, k, cp, lo, hi, block)
    c_big, inf_big = m.chunk_for(big, d, k, cp, lo, hi, block)
    assert lo <= c_small <= c_big <= hi
    assert inf_big <= inf_small  # a larger budget is never less feasible


@QUICK
@given(coefs, batches, limits, blocks, st.floats(1e-4, 2))
def test_exact_model_chunk_fits_the_budget_and_is_the_largest(c: tuple, batch: tuple, lim: tuple,
                                                               block: int | None, budget: float) -> None:
    m, (d, k, cp), (lo, hi) = exact_model(*c), batch, lim
    chunk, infeasible = m.chunk_for(budget, d, k, cp, lo, hi, block)
    assert infeasible == (m.floor_s(d, k) + m.coefficients_s()[5] >= budget)  # the floor and carrying prefill
    if infeasible:
        assert chunk == lo
        return
    if m.max_prefill(budget, d, k, cp) >= lo:  # not clipped up to chunk_min
        assert m.predict_s(d, k, chunk, cp) <= budget * (1 + 1e-12)
    step = block or 1
    nxt = (chunk // step + 1) * step  # the next candidate chunk
    assert nxt > hi or m.predict_s(d, k, nxt, cp) > budget


def test_solve_matches_the_quadratic_by_hand() -> None:
    m = exact_model(0.010, 0.0, 0.0, 2e-5, 1e-8)  # floor 10 ms; increment 2e-5 P + 1e-8 P (1000 + P/2)
    p = m.max_prefill(0.040, 8, 0, 1000)
    assert math.isclose(0.010 + 2e-5 * p + 1e-8 * p * (1000 + p / 2), 0.040, rel_tol=1e-12)
    assert m.chunk_for(0.040, 8, 0, 1000, 32, 4096, None) == (int(p), False)
    assert m.chunk_for(0.040, 8, 0, 1000, 32, 4096, 64) == (int(p) // 64 * 64, False)
    assert m.chunk_for(0.040, 8, 0, 1000, 32, 100, None) == (100, False)
    assert m.chunk_for(0.009, 8, 0, 1000, 32, 4096, None) == (32, True)
    assert m.chunk_for(math.inf, 8, 0, 1000, 32, 4096, None) == (4096, False)
    assert m.chunk_for(math.nan, 8, 0, 1000, 32, 4096, None) == (32, True)
    assert exact_model(0.01, 0, 0, 0, 0).max_prefill(0.02, 1, 0) == math.inf  # free prefill: chunk_max


def test_the_cost_of_carrying_prefill_comes_before_the_first_token() -> None:
    """A 5 ms fixed cost of any step with prefill: the chunk gets 5 ms less, a budget within 5 ms of the
    floor fits no chunk, and a decode-only step does not pay it."""
    m = exact_model(0.010, 0.0, 0.0, 2e-5, 1e-8, 0.005)
    p = m.max_prefill(0.040, 8, 0, 1000)
    assert math.isclose(0.015 + 2e-5 * p + 1e-8 * p * (1000 + p / 2), 0.040, rel_tol=1e-12)
    assert m.chunk_for(0.014, 8, 0, 1000, 32, 4096, None) == (32, True)
    assert m.predict_s(8, 0, 0, 0) == m.floor_s(8, 0) == 0.010
    assert math.isclose(m.predict_s(8, 0, 1, 0), 0.015 + 2e-5 + 5e-9, rel_tol=1e-12)


def test_noise_free_plant_recovers_the_coefficients() -> None:
    plant, m, rng = Plant(), StepCostModel(), random.Random(1)
    feed(m, plant, 300, rng)
    for got, want in zip(m.coefficients_s(), (plant.a, plant.b, plant.c, plant.e, plant.f, plant.g), strict=True):
        assert math.isclose(got, want, rel_tol=1e-3)
    assert m.rel_error is not None and m.rel_error < 1e-3 and m.warm and m.outliers == 0


def test_noisy_drifting_plant_converges_and_tracks_the_drift() -> None:
    """5% jitter, per-token cost rising 2x over 2000 steps: the a-priori error settles near the noise
    (the mean |jitter| is 4%) and the fitted per-token cost follows the drift."""
    plant, m, rng = Plant(sigma=0.05, drift=2.0, drift_steps=2000), StepCostModel(), random.Random(2)
    errors = []
    for i in range(2500):
        d, k, p, cp = random_step(rng)
        y = plant(d, k, p, cp, i, rng)
        if i >= 200:
            errors.append(abs(y - m.predict_s(d, k, p, cp)) / y)
        m.update(d, k, p, cp, y)
        if i in (1000, 2499):
            assert math.isclose(m.coefficients_s()[3], plant.e_at(i), rel_tol=0.1), (i, m.coefficients_s())
    assert sum(errors) / len(errors) < 0.10
    assert m.rel_error < 0.10


def test_a_huge_outlier_barely_moves_a_warm_fit() -> None:
    plant, m, rng = Plant(sigma=0.02), StepCostModel(), random.Random(3)
    feed(m, plant, 300, rng)
    ref = (32, 64_000, 512, 1000)
    before = m.predict_s(*ref)
    assert m.update(*ref, 1000 * plant.mean(*ref))  # a 1000x stall
    assert m.outliers >= 1
    assert math.isclose(m.predict_s(*ref), before, rel_tol=0.05)
    for _ in range(5):  # a burst of 20x stalls
        m.update(*ref, 20 * plant.mean(*ref))
    assert math.isclose(m.predict_s(*ref), before, rel_tol=0.25)
    feed(m, plant, 100, rng)
    assert math.isclose(m.predict_s(*ref), plant.mean(*ref), rel_tol=0.05)


def test_a_level_shift_is_learnt_despite_the_clipping() -> None:
    m, rng = StepCostModel(), random.Random(4)
    feed(m, Plant(sigma=0.02), 300, rng)
    slower = Plant(a=16e-3, b=1e-4, c=1e-7, e=6e-5, f=2e-8, sigma=0.02)  # the engine suddenly 2x slower
    feed(m, slower, 300, rng)
    assert m.rel_error < 0.05


def test_an_outlier_in_warm_up_is_forgotten() -> None:
    plant, m, rng = Plant(sigma=0.02), StepCostModel(), random.Random(5)
    assert m.update(16, 16_000, 256, 0, 100 * plant.mean(16, 16_000, 256, 0))  # a first step 100x slow
    feed(m, plant, 400, rng)
    assert m.rel_error < 0.05


def test_bad_durations_and_features_are_refused_and_change_nothing() -> None:
    m = StepCostModel()
    feed(m, Plant(), 20, random.Random(6))
    theta, n = list(m.theta), m.n
    for y in (math.nan, math.inf, -math.inf, -0.01, 0.0, 1e9):
        assert not m.update(8, 8000, 128, 0, y)
    for bad in ((-1, 0, 0, 0), (0, -5, 0, 0), (0, 0, -1, 0), (0, 0, 0, -1), (math.nan, 0, 0, 0),
                (0, math.inf, 0, 0), (0, 0, math.inf, 0), (0, 0, 0, math.nan)):
        assert not m.update(*bad, 0.02)
    assert m.theta == theta and m.n == n and m.rejected == 14


def test_identical_steps_stay_bounded_and_never_warm() -> None:
    m = StepCostModel()
    for _ in range(2000):
        m.update(16, 16_000, 256, 0, 0.025)
    assert not m.warm  # one prefill size says nothing about another
    assert math.isclose(m.predict_s(16, 16_000, 256, 0), 0.025, rel_tol=1e-6)
    assert all(math.isfinite(v) for v in m.theta)
    assert sum(m.cov[i][i] for i in range(6)) <= TRACE_MAX * (1 + 1e-9)
    chunk, _ = m.chunk_for(0.05, 16, 16_000, 0, 32, 2048)
    assert 32 <= chunk <= 2048


def test_decode_only_and_empty_steps_fit_the_floor() -> None:
    plant, m, rng = Plant(), StepCostModel(), random.Random(7)
    for i in range(200):
        d = rng.randint(1, 64)
        k = d * rng.randint(100, 4000)
        m.update(d, k, 0, 0, plant(d, k, 0, 0, i, rng))
    m.update(0, 0, 0, 0, plant.a)
    assert not m.warm
    assert math.isclose(m.floor_s(32, 64_000), plant.mean(32, 64_000, 0, 0), rel_tol=1e-3)
    assert m.predict_s(0, 0, 0, 0) >= 0


def test_warm_needs_enough_steps_over_two_distinct_prefill_sizes() -> None:
    m = StepCostModel(warmup_steps=12)
    for _ in range(11):
        m.update(8, 8000, 128, 0, 0.02)
    m.update(8, 8000, 150, 0, 0.02)
    assert not m.warm  # 150 is not distinct from 128 (under 1.5x)
    m.update(8, 8000, 64, 0, 0.015)
    assert m.warm


def test_a_corrupted_covariance_is_reset() -> None:
    m = StepCostModel()
    feed(m, Plant(), 50, random.Random(8))
    m.cov[2][2] = math.nan
    assert m.update(8, 8000, 128, 0, 0.02)
    assert m.resets == 1 and all(math.isfinite(v) for row in m.cov for v in row)
    m.cov = [[-v for v in row] for row in m.cov]  # no longer positive: x'Px < 0
    m.update(8, 8000, 128, 0, 0.02)
    assert m.resets == 2
    feed(m, Plant(), 100, random.Random(9))
    assert m.rel_error < 0.01


durations = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(1e-4, 1.0))
counts = st.one_of(st.integers(0, 512), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(counts, counts, counts, counts, durations), max_size=60))
def test_any_input_sequence_keeps_the_fit_finite_and_predictions_non_negative(steps: list) -> None:
    m = StepCostModel(warmup_steps=4)
    for step in steps:
        m.update(*step)
    assert all(math.isfinite(v) for v in m.theta)
    assert sum(m.cov[i][i] for i in range(6)) <= TRACE_MAX * (1 + 1e-9)
    for d, k, p, cp in ((0, 0, 0, 0), (64, 10**6, 2048, 10**5), (1, 10, 1, 0)):
        y = m.predict_s(d, k, p, cp)
        assert math.isfinite(y) and y >= 0
        chunk, _ = m.chunk_for(0.05, d, k, cp, 32, 2048, 16)
        assert 32 <= chunk <= 2048


@QUICK
@given(st.integers(0, 2**32 - 1), st.lists(st.floats(0.0, 50.0), min_size=6, max_size=6),
       st.floats(-100.0, 100.0), st.sampled_from([0.9, 0.995, 1.0]))
def test_the_unrolled_rls_step_is_the_textbook_update(seed: int, x: list, err: float, lam: float) -> None:
    """``_rls`` computes the upper triangle only and mirrors it: it must equal the full-matrix RLS step
    (``theta += Px e / (lam + x'Px)``, ``P = (P - Px x'P / (lam + x'Px)) / lam``, then the trace bound)
    and leave the covariance exactly symmetric."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(6, 6))
    cov = a @ a.T + 0.1 * np.eye(6)  # symmetric positive definite
    cov = (cov + cov.T) / 2
    theta = rng.normal(size=6)
    m = StepCostModel(forgetting=lam)
    m.cov, m.theta = [list(map(float, row)) for row in cov], list(map(float, theta))
    m._rls(tuple(x), err)
    xv = np.array(x)
    px = cov @ xv
    denom = lam + xv @ px
    want_theta = theta + px * err / denom
    want_cov = (cov - np.outer(px, px) / denom) / lam
    trace = np.trace(want_cov)
    if trace > TRACE_MAX:
        want_cov *= TRACE_MAX / trace
    assert m.resets == 0
    np.testing.assert_allclose(m.theta, want_theta, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.array(m.cov), want_cov, rtol=1e-7, atol=1e-9 * np.abs(cov).max())
    assert all(m.cov[i][j] == m.cov[j][i] for i in range(6) for j in range(6))
