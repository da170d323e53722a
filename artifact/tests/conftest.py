"""Suite-wide settings: Hypothesis profiles, what must be installed, dirty-tree runs, in-process engines,
Ctrl-C.

About twenty modules need vLLM or papermill (``pytest.importorskip``): a developer's machine without
them (a GPU-only install, no book extra) skips those. CI sets ``DLFP_REQUIRE_ENGINE=1``, as it sets
``DLFP_REQUIRE_BROWSER`` and ``DLFP_REQUIRE_SLURM``: then the session refuses to start unless every
module of :data:`REQUIRED_MODULES` imports, so a broken install fails the suite instead of skipping
most of it into a green run.

Runs started by tests are scratch runs, never published, and developers test in working trees
with uncommitted code: the suite allows runs from a dirty tree through the environment
(:data:`dlfp.trials.provenance.ALLOW_DIRTY_ENV`), which also reaches the processes tests start
(``dlfp trial`` subprocesses, papermill kernels). Session-scoped, so it is in place before any
module-scoped fixture starts a run. ``test_provenance.py`` removes it to test the refusal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

from dlfp.trials.provenance import ALLOW_DIRTY_ENV

# Property tests draw the same examples on every CI run (a landing never depends on a seed), and
# fresh ones elsewhere: `make fuzz` explores, keeping what it finds in .hypothesis/ to replay.
# A find becomes an explicit @example (or a regression test) so CI keeps checking it.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "explore"))


REQUIRE_ENV = "DLFP_REQUIRE_ENGINE"
REQUIRED_MODULES = ("vllm", "papermill")
IMPORT_TIMEOUT_S = 300
"""What the suite's skipped modules need, imported before any test runs where :data:`REQUIRE_ENV` is set."""


def unimportable(modules: tuple[str, ...]) -> dict[str, str]:
    """Each of ``modules`` that does not import, with the import's last line of error. Each is imported in
    a child interpreter of this one (same path, same environment), so the check leaves this process as it
    found it: importing vLLM here would set up its logging and environment before any test runs."""
    failed = {}
    for name in modules:
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            failed[name] = lines[-1] if lines else f"exit status {done.returncode}"
    return failed


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get(REQUIRE_ENV, "") in ("", "0"):
        return
    failed = unimportable(REQUIRED_MODULES)
    if failed:
        raise pytest.UsageError(f"{REQUIRE_ENV} is set, and the suite needs modules that do not import: "
                                + "; ".join(f"{k} ({v})" for k, v in failed.items())
                                + ": install them (make setup) or unset it to skip their tests")


@pytest.fixture(scope="session", autouse=True)
def _scratch_runs_may_be_dirty() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ALLOW_DIRTY_ENV, "1")
        yield


ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
              "VLLM_NO_USAGE_STATS": "1"}


@pytest.fixture(scope="module")
def engine_env() -> Iterator[None]:
    """In-process engines for a test module; vLLM caches its env after an engine starts, so the
    cache is reset on the way in and out."""
    pytest.importorskip("vllm")
    import vllm.envs

    saved = {k: os.environ.get(k) for k in ENGINE_ENV}
    os.environ.update(ENGINE_ENV)
    vllm.envs.disable_envs_cache()
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    vllm.envs.disable_envs_cache()


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` during the test, however the suite was launched.

    A shell starts background jobs (and ``nohup`` its command) with SIGINT ignored, and the trial
    runner rightly leaves an ignored signal ignored (``test_an_ignored_signal_stays_ignored``), so
    a test that sends Ctrl-C sets the disposition it needs and restores the launcher's after.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
