"""Suite-wide settings.

Runs started by tests are scratch runs, never published, and developers test in working trees
with uncommitted code: the suite allows runs from a dirty tree through the environment
(:data:`dlfp.trials.provenance.ALLOW_DIRTY_ENV`), which also reaches the processes tests start
(``dlfp trial`` subprocesses, papermill kernels). Session-scoped, so it is in place before any
module-scoped fixture starts a run. ``test_provenance.py`` removes it to test the refusal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dlfp.trials.provenance import ALLOW_DIRTY_ENV


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
