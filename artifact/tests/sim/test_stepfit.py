"""Calibration recovers known coefficients from synthetic step records; fitted profiles round-trip."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlfp.sim.stepfit import FittedProfile, fit, parse_fitted_profile, step_durations

TRUE = {"a": 0.012, "e": 0.006, "b": 8e-5, "c": 4e-4, "d": 3e-8}


def synthetic_run(n: int, seed: int, noise: float = 0.02, idle_every: int = 25, slow: float = 0.0) -> pd.DataFrame:
    """Back-to-back sync steps of known cost, multiplicative noise, and some idle gaps; a
    ``slow`` fraction of the steps take twice as long (an engine thread preempted by the OS)."""
    rng = np.random.default_rng(seed)
    prefill = np.where(rng.random(n) < 0.6, rng.integers(1, 4096, n), 0)
    decode = rng.integers(0, 64, n)
    decode[prefill == 0] = np.maximum(decode[prefill == 0], 1)
    cost = TRUE["a"] + TRUE["e"] * (prefill > 0) + TRUE["b"] * prefill + TRUE["c"] * decode + TRUE["d"] * prefill**2
    cost = cost * (1 + noise * rng.standard_normal(n)) * np.where(rng.random(n) < slow, 2.0, 1.0)
    gap = np.where(np.arange(n) % idle_every == 0, 0.5, 0.0002)  # waits for arrivals, output processing
    schedule, complete, t = np.empty(n), np.empty(n), 100.0
    for i in range(n):
        schedule[i] = t + gap[i]
        complete[i] = t = schedule[i] + cost[i]
    return pd.DataFrame({"step": np.arange(n), "prefill_tokens": prefill, "decode_reqs": decode,
                         "total_tokens": prefill + decode, "schedule_t": schedule, "complete_t": complete})


def test_recovers_known_coefficients() -> None:
    result = fit([synthetic_run(600, 1), synthetic_run(600, 2)], seed=7)
    for key, want in TRUE.items():
        assert getattr(result, key) == pytest.approx(want, rel=0.05), key
    assert result.n_test == pytest.approx(0.2 * (result.n_train + result.n_test), abs=1)
    assert result.heldout_p50 < 0.03 and result.heldout_p90 < 0.06  # noise is 2%
    assert result.seed == 7


def test_predict_new_batches() -> None:
    result = fit(synthetic_run(800, 3, noise=0.0))
    got = result.predict([0, 2048], [16, 8])
    want = [TRUE["a"] + TRUE["c"] * 16,
            TRUE["a"] + TRUE["e"] + TRUE["b"] * 2048 + TRUE["c"] * 8 + TRUE["d"] * 2048**2]
    assert got == pytest.approx(want, rel=1e-6)
    assert result.heldout_p90 < 1e-6
    d = result.to_dict()
    assert d["coefficients"]["c_s_per_decode_req"] == pytest.approx(TRUE["c"])
    assert d["n_test"] == result.n_test and "prefill_tokens^2" in d["model"]


def test_durations_are_spans_not_cadence() -> None:
    steps = synthetic_run(100, 4, idle_every=10, noise=0.0)
    durations = step_durations(steps)
    assert len(durations) == 100  # idle waits before a step are not part of its span
    p, d = steps.prefill_tokens, steps.decode_reqs
    want = TRUE["a"] + TRUE["e"] * (p > 0) + TRUE["b"] * p + TRUE["c"] * d + TRUE["d"] * p**2
    assert durations.step_s.to_numpy() == pytest.approx(want.to_numpy(), rel=1e-9)


def test_async_records_are_refused() -> None:
    steps = synthetic_run(50, 5)
    steps["schedule_t"] = steps["schedule_t"] - 0.05  # scheduled while the previous step ran
    with pytest.raises(ValueError, match="synchronous runs"):
        fit(steps)


def test_too_few_steps() -> None:
    with pytest.raises(ValueError, match="need more steps"):
        fit(synthetic_run(6, 6))


def test_fit_is_seeded() -> None:
    steps = synthetic_run(300, 8)
    assert fit(steps, seed=1) == fit(steps, seed=1)
    assert fit(steps, seed=2) != fit(steps, seed=1)  # another held-out split


def test_fitted_profile_round_trips_and_predicts(tmp_path) -> None:
    import yaml

    from dlfp.sim.costmodel import load_profile

    result = fit(synthetic_run(400, 9))
    profile = FittedProfile(name="fitted-x", device="measured: test", fit=result, shape={"hidden": 64},
                            kv_cache_gib=2.0, calibration={"run": "x"})
    path = tmp_path / "p.yaml"
    path.write_text(profile.to_yaml())
    loaded = load_profile(path)
    assert isinstance(loaded, FittedProfile)
    assert loaded.fit.step_s(2048, 8) == pytest.approx(float(result.predict(2048, 8)), rel=1e-12)
    assert loaded.kv_cache_gib == 2.0 and loaded.calibration == {"run": "x"}
    raw = yaml.safe_load(path.read_text())
    raw["coefficients"]["a_s"] = -1.0
    with pytest.raises(ValueError, match="finite and >= 0"):
        parse_fitted_profile(raw, "p.yaml")
    del raw["kv_cache_gib"]
    with pytest.raises(ValueError, match=r"p.yaml: fitted profile lacks \['kv_cache_gib'\]"):
        parse_fitted_profile(raw, "p.yaml")


def test_bimodal_step_times_give_their_mean_not_the_fast_mode() -> None:
    """Half the steps take twice as long: the fit must predict the mean, 1.5x the fast mode."""
    result = fit(synthetic_run(1500, 10, noise=0.0, slow=0.5))
    p, d = np.array([0, 0, 64, 512, 2048, 4000]), np.array([1, 32, 4, 16, 8, 2])
    true = TRUE["a"] + TRUE["e"] * (p > 0) + TRUE["b"] * p + TRUE["c"] * d + TRUE["d"] * p**2
    assert result.predict(p, d) == pytest.approx(1.5 * true, rel=0.05)
