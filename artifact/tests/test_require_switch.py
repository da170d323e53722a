"""``DLFP_REQUIRE_ENGINE`` (CI): a missing vLLM fails the suite instead of skipping its tests.

The child pytest, and every interpreter it starts, hides vLLM through a ``sitecustomize`` on its path (a
meta-path finder that says no module of that name exists), as on a machine where it is not installed.
A broken install (one that raises a plain ``ImportError``) already fails collection without the switch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dlfp.paths import REPO_ROOT
from tests.conftest import unimportable

TIMEOUT_S = 300
HIDE_VLLM = """\
import sys


class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None


sys.meta_path.insert(0, _Missing())
"""


def _collect(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE_VLLM)
    env = {k: v for k, v in os.environ.items() if k != "DLFP_REQUIRE_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(REPO_ROOT / "artifact")])
    if require is not None:
        env["DLFP_REQUIRE_ENGINE"] = require
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "artifact/tests/integration/test_engine_cpu.py"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_unimportable_names_each_module_that_fails_with_its_error() -> None:
    failed = unimportable(("json", "dlfp_no_such_module"))
    assert list(failed) == ["dlfp_no_such_module"]
    assert "ModuleNotFoundError" in failed["dlfp_no_such_module"]


def test_a_missing_vllm_skips_without_the_switch_and_fails_the_session_with_it(tmp_path) -> None:
    skipped = _collect(tmp_path, None)
    assert skipped.returncode in (0, 5), skipped.stdout + skipped.stderr  # collected, or nothing left
    assert "SKIPPED" in skipped.stdout, skipped.stdout
    off = _collect(tmp_path, "0")
    assert off.returncode == skipped.returncode
    required = _collect(tmp_path, "1")
    assert required.returncode not in (0, 5), required.stdout
    assert "hidden by the test" in required.stdout + required.stderr
    assert "DLFP_REQUIRE_ENGINE is set" in required.stdout + required.stderr
