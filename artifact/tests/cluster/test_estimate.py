"""``dlfp.cluster.estimate``: a job's time is plain arithmetic on its configs, as the module
docstring states it: per missing arm one engine start plus the arrival span ``n_requests /
rate_rps`` (warm-up requests included, at a better-known rate where the plan has one), one
pre-flight (engine start plus probes) when the run has not started, times :data:`MARGIN` plus
:data:`FIXED_S`, in whole minutes, written the way ``sbatch --time`` reads it.

``tests/cluster/test_plan.py`` checks that planned jobs' limits are whole minutes above their work;
here are the exact numbers, the counting of missing arms (against a committed manifest and a
planned run) and the time format.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.cluster import estimate
from dlfp.cluster.estimate import (
    CPU_ENGINE_START_S,
    FIXED_S,
    MARGIN,
    PROBE_S,
    Rate,
    RunCost,
    arm_span_s,
    limit_s,
    run_cost,
    slurm_time,
)
from dlfp.paths import REPO_ROOT
from dlfp.trials.config import load_config
from dlfp.trials.manifest import plan_units
from dlfp.trials.schema import Unit, read_manifest


def test_the_documented_constants() -> None:
    assert (MARGIN, FIXED_S, PROBE_S) == (1.5, 600.0, 60.0)
    assert estimate.SIM_ENGINE_START_S < CPU_ENGINE_START_S < estimate.GPU_ENGINE_START_S


def test_arm_span_is_requests_over_rate() -> None:
    assert arm_span_s({"n_requests": 100, "rate_rps": 4.0}) == 25.0
    assert arm_span_s({"n_requests": 60, "rate_rps": 6.28, "classes": []}) == pytest.approx(9.554, abs=1e-3)


def test_arm_span_counts_the_engines_warm_up_at_the_rate_given() -> None:
    """Every engine replays its warm-up requests before the measured workload, at the same arrivals."""
    workload = {"n_requests": 100, "rate_rps": 4.0}
    assert arm_span_s(workload, warmup_requests=16) == 29.0
    assert arm_span_s(workload, 16, Rate(0.68, "derived")) == pytest.approx(116 / 0.68)
    one = [Unit(trial=0, arm="stock")]
    cost = run_cost("32b", workload, one, started=False, engine_start_s=180.0, warmup_requests=16,
                    rate=Rate(0.68, "the rate the modeled study derived (x)"))
    assert cost.arm_span_s == pytest.approx(116 / 0.68)
    assert cost.describe() == ("32b: 1 arm(s) x (180 s start + 171 s load) + pre-flight 240 s; load: (16 warm-up "
                               "+ 100 requests) at 0.68 req/s, the rate the modeled study derived (x)")
    assert run_cost("c", workload, one, True, 20.0).describe().endswith("(0 warm-up + 100 requests) at 4 req/s, "
                                                                        "the config's rate")


def test_a_run_cost_in_seconds_and_words() -> None:
    cost = RunCost("cpu-default", missing_arms=3, arm_span_s=25.0, engine_start_s=40.0, preflight_due=True)
    assert cost.seconds == 3 * (40 + 25) + (40 + 60) == 295.0
    assert cost.describe() == "cpu-default: 3 arm(s) x (40 s start + 25 s load) + pre-flight 100 s"
    started = RunCost("cpu-default", 3, 25.0, 40.0, preflight_due=False)
    assert started.seconds == 195.0 and "pre-flight" not in started.describe()
    assert RunCost("done", 0, 25.0, 40.0, False).seconds == 0.0


def test_run_cost_counts_the_units_still_to_run() -> None:
    units = [Unit(trial=0, arm=arm, status=status) for arm, status in (("a", "complete"), ("b", "missing"),
                                                                       ("c", "running"), ("d", "pending"))]
    cost = run_cost("x", {"n_requests": 30, "rate_rps": 2.0}, units, started=True, engine_start_s=20.0)
    assert (cost.missing_arms, cost.arm_span_s, cost.preflight_due) == (3, 15.0, False)
    assert cost.seconds == 3 * (20 + 15)


def test_a_planned_run_of_the_cpu_default_config() -> None:
    """Before its first start: every arm of every trial, and the pre-flight."""
    cfg = load_config(str(REPO_ROOT / "configs" / "cpu-default.yaml"))
    cost = run_cost(cfg.name, cfg.workload, plan_units(cfg), started=False, engine_start_s=CPU_ENGINE_START_S)
    n_units = len(cfg.seeds) * len(cfg.arms)
    assert cost.missing_arms == n_units == 6 and cost.preflight_due
    span = cfg.workload["n_requests"] / cfg.workload["rate_rps"]
    assert cost.seconds == pytest.approx(n_units * (CPU_ENGINE_START_S + span) + CPU_ENGINE_START_S + PROBE_S)
    assert limit_s(cost.seconds) == 60 * math.ceil((cost.seconds * 1.5 + 600) / 60)


def test_the_committed_cpu_default_run_costs_nothing_more() -> None:
    manifest = read_manifest(REPO_ROOT / "data" / "runs" / "cpu-default")
    cost = run_cost("cpu-default", manifest.config["workload"], manifest.units, started=True,
                    engine_start_s=CPU_ENGINE_START_S)
    assert cost.missing_arms == 0 and cost.seconds == 0.0
    assert limit_s(cost.seconds) == FIXED_S  # what is left: imports, papermill, the drain


@pytest.mark.parametrize(("work", "limit"), [(0.0, 600.0), (1.0, 660.0), (40.0, 660.0), (40.1, 720.0),
                                             (100.0, 780.0), (3600.0, 6000.0)])
def test_limit_s_known_values(work: float, limit: float) -> None:
    assert limit_s(work) == limit


@given(st.floats(0, 1e6, allow_nan=False))
def test_limit_s_is_the_margin_rounded_up_to_a_minute(work: float) -> None:
    need = work * MARGIN + FIXED_S
    limit = limit_s(work)
    assert limit % 60 == 0 and need <= limit < need + 60


@given(st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e3, allow_nan=False))
def test_more_work_never_gets_a_shorter_limit(work: float, more: float) -> None:
    assert limit_s(work + more) >= limit_s(work)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "00:00:00"), (59.2, "00:01:00"), (61, "00:01:01"), (3599, "00:59:59"), (3600, "01:00:00"),
    (86399, "23:59:59"), (86400, "1-00:00:00"), (90061, "1-01:01:01"), (3 * 86400 + 7200.5, "3-02:00:01"),
])
def test_slurm_time_known_values(seconds: float, text: str) -> None:
    assert slurm_time(seconds) == text


SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d{2}):(\d{2}):(\d{2})$")


@given(st.floats(0, 1e7, allow_nan=False))
def test_slurm_time_reads_back_as_the_whole_seconds_rounded_up(seconds: float) -> None:
    m = SLURM_TIME.match(slurm_time(seconds))
    assert m is not None
    days, hours, minutes, secs = (int(g or 0) for g in m.groups())
    assert hours < 24 and minutes < 60 and secs < 60
    assert (days == 0) == (m.group(1) is None)  # days only when there are some
    assert days * 86400 + hours * 3600 + minutes * 60 + secs == math.ceil(seconds)
