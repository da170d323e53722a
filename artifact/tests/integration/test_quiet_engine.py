"""``dlfp trial`` on the real CPU engine talks like a tool: progress lines on its stderr, the run's status on
its stdout, and everything vLLM and PyTorch print (driver, engine core, workers) in the run's engine log.

Three engine starts (pre-flight and two arms of 12 requests): about three minutes on 2 cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("vllm")

from dlfp.paths import CONFIGS
from dlfp.trials.config import merge, read_yaml
from dlfp.trials.runfolder import engine_log

pytestmark = pytest.mark.slow
ENGINE_TALK = re.compile(r"Triton|Warning|WARNING|NUMA|INFO|vllm|torch", re.IGNORECASE)
"""What the engines' own output looks like; none of it may reach the terminal."""


def test_dlfp_trial_prints_progress_lines_and_keeps_engine_output_in_its_log(tmp_path: Path) -> None:
    config = tmp_path / "quiet.yaml"
    raw = merge(read_yaml(str(CONFIGS / "cpu-smoke.yaml")), {"name": "quiet", "workload": {"n_requests": 12},
                                                              "design": {"enforce": False}})
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    dlfp = Path(sys.executable).with_name("dlfp")
    done = subprocess.run([str(dlfp), "trial", str(config), "--out", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == f"{out}: complete\n"
    lines = done.stderr.splitlines()
    assert all(line.startswith("[run] ") for line in lines), done.stderr
    assert not [line for line in lines if ENGINE_TALK.search(line.split(": ", 1)[-1].replace(str(tmp_path), ""))]
    assert lines[0] == f"[run] 2 of 2 units to run (1 trial x arms stock, dlfp); engine output: {engine_log(out)}"
    assert lines[1] == "[run] pre-flight: measuring the stock engine ..."
    for unit in ("trial 1/1 stock (unit 1/2)", "trial 1/1 dlfp (unit 2/2)"):
        mine = [line for line in lines if unit in line]
        assert ": engine starting; 0/12 requests" in mine[0]
        assert ": engine up after " in mine[1] and "left" in mine[1]
        assert ": done in " in mine[-1] and 3 <= len(mine) <= 8, mine  # a few lines per arm, not one per request
    assert lines[-1].startswith("[run] complete: 2 units") and lines[-1].endswith(f"engine output: {engine_log(out)}")
    log = engine_log(out).read_text().splitlines()
    headers = [line for line in log if line.startswith("===== ")]
    assert len(headers) == 3 and headers[0].endswith("pre-flight on the stock engine")
    assert len(log) > len(headers), "the engines printed nothing at all: is the log catching their descriptors?"
    assert not (out / engine_log(out).name).exists()  # beside the run folder, not in it
