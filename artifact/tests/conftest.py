"""Suite-wide settings.

Runs started by tests are scratch runs, never published, and developers test in working trees
with uncommitted code: the suite allows runs from a dirty tree through the environment
(:data:`dlfp.provenance.ALLOW_DIRTY_ENV`), which also reaches the processes tests start
(``dlfp trial`` subprocesses, papermill kernels). Session-scoped, so it is in place before any
module-scoped fixture starts a run. ``test_provenance.py`` removes it to test the refusal.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dlfp.provenance import ALLOW_DIRTY_ENV


@pytest.fixture(scope="session", autouse=True)
def _scratch_runs_may_be_dirty() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ALLOW_DIRTY_ENV, "1")
        yield
