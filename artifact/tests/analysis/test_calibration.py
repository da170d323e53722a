"""``dlfp.analysis.calibration.calibrate_run``: a measured run's step records become a fitted profile
that names where it came from (the run folder, its manifest's sha256, the units fitted, the model),
is reproducible through its seed, and is refused for a simulated run or for arms the run lacks.

Read from the committed ``data/runs/cpu-default``; the refusal of a simulated run uses a run of
``data/runs/generalization-sim``. ``data/runs/sim-fidelity/profile.yaml`` is the committed profile
fitted from ``cpu-default``: refitting must give its coefficients again.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from dlfp.analysis.calibration import calibrate_run
from dlfp.paths import REPO_ROOT
from dlfp.sim.stepfit import FittedProfile, parse_fitted_profile

RUNS = REPO_ROOT / "data" / "runs"
RUN = RUNS / "cpu-default"
SIMULATED = sorted(p for p in (RUNS / "generalization-sim").iterdir() if (p / "manifest.json").is_file())


@pytest.fixture(scope="module")
def profile() -> FittedProfile:
    return calibrate_run(RUN)


def test_the_calibration_record_names_the_run(profile: FittedProfile) -> None:
    manifest = json.loads((RUN / "manifest.json").read_text(encoding="utf-8"))
    engine = manifest["config"]["engine"]
    assert isinstance(profile, FittedProfile)
    assert profile.calibration == {
        "run": str(RUN),
        "manifest_sha256": hashlib.sha256((RUN / "manifest.json").read_bytes()).hexdigest(),
        "units": [f"trial-{k}/{arm}" for k in range(manifest["config"]["trials"]) for arm in ("dlfp", "stock")],
        "model": engine["model"], "dtype": engine["dtype"]}
    assert profile.name == "fitted-cpu-default"
    assert profile.device.startswith("measured: ") and "vLLM 0.32.0+cpu" in profile.device
    assert profile.kv_cache_gib == float(engine["kv_cache_gib"]) == 2.0


def test_the_shape_is_the_runs_model(profile: FittedProfile) -> None:
    config = json.loads((REPO_ROOT / "artifact" / "dlfp" / "model_configs" / "qwen3-tiny" / "config.json").read_text())
    assert profile.shape["hidden"] == config["hidden_size"]
    assert profile.shape["layers"] == config["num_hidden_layers"]
    assert profile.shape["kv_heads"] == config["num_key_value_heads"]


def test_the_fit_is_non_negative_and_sees_every_step(profile: FittedProfile) -> None:
    from dlfp.analysis.runs import load_run

    n_steps = sum(len(t["steps"]) for t in load_run(RUN, tables=("steps",)).tables.values())
    fit = profile.fit
    assert min(fit.a, fit.e, fit.b, fit.c, fit.d) >= 0
    assert fit.n_train + fit.n_test <= n_steps and fit.n_test == pytest.approx(0.2 * (fit.n_train + fit.n_test),
                                                                                abs=2)
    assert 0 <= fit.heldout_p50 <= fit.heldout_p90 and fit.seed == 0


def test_refitting_gives_the_committed_profile_again(profile: FittedProfile) -> None:
    committed = yaml.safe_load((RUNS / "sim-fidelity" / "profile.yaml").read_text(encoding="utf-8"))
    assert committed["calibration"]["run"].endswith("cpu-default")
    assert committed["calibration"]["units"] == profile.calibration["units"]
    assert profile.fit.to_dict()["coefficients"] == pytest.approx(committed["coefficients"], rel=1e-9)


def test_arms_seed_and_name_are_honoured(profile: FittedProfile) -> None:
    stock = calibrate_run(RUN, arms=("stock",), seed=3, name="mine")
    assert stock.name == "mine" and stock.fit.seed == 3
    assert stock.calibration["units"] == ["trial-0/stock", "trial-1/stock", "trial-2/stock"]
    assert stock.fit.n_train + stock.fit.n_test < profile.fit.n_train + profile.fit.n_test
    again = calibrate_run(RUN, arms=("stock",), seed=3, name="mine")
    assert again.fit == stock.fit  # seeded: the held-out split and the fit repeat exactly


def test_the_profile_file_reads_back(profile: FittedProfile) -> None:
    back = parse_fitted_profile(yaml.safe_load(profile.to_yaml()))
    assert back.calibration == profile.calibration and back.fit == profile.fit and back.shape == profile.shape


@pytest.mark.parametrize("run_dir", SIMULATED[:1], ids=lambda p: p.name)
def test_a_simulated_run_is_refused(run_dir) -> None:
    with pytest.raises(ValueError, match="is a simulated run: calibrate on measured step records") as err:
        calibrate_run(run_dir)
    assert str(run_dir) in str(err.value)


@pytest.mark.parametrize("arms", [("nope",), ("Stock",), ()])
def test_arms_the_run_lacks_are_refused(arms: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=r"no complete unit of arm\(s\)") as err:
        calibrate_run(RUN, arms=arms)
    assert str(RUN) in str(err.value) and repr(list(arms)) in str(err.value)
