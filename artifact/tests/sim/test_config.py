"""``additional_config["dlfp_sim"]`` validation and the precise sleep: no vLLM needed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dlfp.sim.clock import sleep_until
from dlfp.sim.config import SimConfig, SimConfigError, parse_sim_config


def test_defaults_without_configuration() -> None:
    assert parse_sim_config(None) == SimConfig(profile="a100", async_scheduling=True, tp=1, dtype_bytes=2)
    assert parse_sim_config({"dlfp": {"gain": 0.3}}) == SimConfig()  # the scheduler's key is not ours


def test_settings_are_read() -> None:
    cfg = parse_sim_config({"dlfp_sim": {"profile": "h200", "async_scheduling": False, "tp": 2, "dtype_bytes": 1}})
    assert cfg == SimConfig(profile="h200", async_scheduling=False, tp=2, dtype_bytes=1)


@pytest.mark.parametrize(("raw", "message"), [
    ({"profle": "a100"}, r"unknown dlfp_sim setting\(s\) \['profle'\]"),
    ({"tp": 0}, "'tp' = 0"),
    ({"tp": True}, "'tp' = True"),
    ({"dtype_bytes": 3}, "'dtype_bytes' = 3"),
    ({"async_scheduling": "yes"}, "'async_scheduling' = 'yes'"),
    ({"profile": ""}, "'profile' = ''"),
])
def test_bad_settings_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(SimConfigError, match=message):
        parse_sim_config({"dlfp_sim": raw})


def test_sleep_until_is_never_early_and_rarely_late() -> None:
    late = []
    for duration in (0.0, 0.0003, 0.002, 0.005) * 5:
        deadline = time.monotonic() + duration
        sleep_until(deadline)
        late.append(time.monotonic() - deadline)
    assert min(late) >= 0
    assert sorted(late)[len(late) // 2] < 0.0005  # a plain time.sleep is ~0.1 ms late


def test_pure_modules_do_not_import_vllm() -> None:
    code = ("import sys, dlfp.sim, dlfp.sim.stepfit, dlfp.sim.clock, dlfp.sim.config, dlfp.sim.costmodel; "
            "sys.exit('vllm' in sys.modules or 'torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
