"""Suite-wide settings: Hypothesis draws the same examples on CI (the environment variable ``CI`` set)
and fresh ones elsewhere; with :data:`REQUIRE_ENV` set, vLLM must import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "explore"))

REQUIRE_ENV = "DLFP_REQUIRE_ENGINE"
"""Set (as `make plugin-check` sets it): the session refuses to start unless vLLM imports, so a broken
install fails instead of skipping the scheduler's tests into a green run."""


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get(REQUIRE_ENV, "") in ("", "0"):
        return
    # in a child interpreter: importing vLLM here would set up its logging before any test runs
    done = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise pytest.UsageError(f"{REQUIRE_ENV} is set and vLLM does not import "
                                f"({lines[-1] if lines else done.returncode}): install vLLM 0.32 or unset it")
