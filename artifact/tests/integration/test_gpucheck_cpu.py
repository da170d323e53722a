"""``dlfp gpu-check``: refuses at once without a GPU; its plan, configs and verdict logic; and the
whole command on the CPU engine (``--cpu-dry-run``, slow: three engine starts and a calibration).

The part that starts a real engine (or cluster); the fast tests are in ``artifact/tests/cluster/test_gpucheck.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlfp.harness.engine import cpu_build


@pytest.mark.slow
@pytest.mark.skipif(not cpu_build(), reason="the dry run needs vLLM's CPU build")
def test_cpu_dry_run_end_to_end(tmp_path: Path) -> None:
    """Install check, one paired trial (pre-flight + two arms) into a normal run folder with
    completion stamps in steps.parquet, the verdict table, and a fitted cost profile."""
    out = tmp_path / "gc"
    done = subprocess.run([sys.executable, "-m", "dlfp.cli", "gpu-check", "--cpu-dry-run", "--out", str(out),
                           "--requests", "20", "--allow-dirty"], capture_output=True, text=True, check=False)
    print(done.stdout, done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "gpu-check.json").read_text())
    assert record["dry_run"] and all(r["ok"] for r in record["install"].values())
    (row,) = record["checks"]
    assert row["status"] == "complete" and row["measured on"].endswith("vLLM 0.32.0+cpu, sync scheduling")  # as it ran
    assert 0 <= row["proxy error DLFP"] < 0.5  # synchronous CPU engine: the proxy is nearly exact
    assert row["scheduled ahead (%)"] == 0.0
    assert row["completion stamps (%)"] == 100  # the proxy error is computed on the executor's stamps
    run = out / "qwen3-tiny-tp1"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and "design" in manifest
    steps = pd.read_parquet(run / "trial-0" / "dlfp" / "steps.parquet")
    busy = steps[steps.total_tokens > 0]
    assert busy.exec_done_t.notna().all()
    assert "P99 ITL stock (ms)" in (out / "verdict.txt").read_text() and "P99 ITL stock" in done.stdout
    assert record["calibration"]["returncode"] == 0 and (out / "profile.yaml").is_file()
