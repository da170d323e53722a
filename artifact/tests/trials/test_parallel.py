"""Virtual units on worker processes (:mod:`dlfp.trials.parallel`): every unit comes back once, with the
bytes it gives in this process, whatever the number of workers."""

from __future__ import annotations

import pytest

from dlfp.harness import workload
from dlfp.harness.engine import EngineSpec
from dlfp.trials import parallel


def _tasks() -> list[parallel.Task]:
    spec = EngineSpec(model="qwen3-0.6b", dtype="bfloat16", max_model_len=4096, max_num_batched_tokens=1024,
                      sim={"profile": "a100", "clock": "virtual"}, dlfp={"enabled": False})
    return [(i, spec, workload.generate(workload.paper_mix(n_requests=10, rate_rps=30.0, seed=i))) for i in range(3)]


@pytest.mark.slow
def test_units_on_two_workers_are_the_units_in_this_process() -> None:
    here: dict[int, object] = {}
    parallel.run_units(range(3), _tasks().__getitem__, 1, lambda i, r, wall: here.__setitem__(i, r))
    there: dict[int, object] = {}
    parallel.run_units(range(3), _tasks().__getitem__, 2, lambda i, r, wall: there.__setitem__(i, r))
    assert sorted(here) == sorted(there) == [0, 1, 2]
    for i in here:
        assert here[i].trace.tokens.equals(there[i].trace.tokens)
        assert here[i].steps.equals(there[i].steps)


def test_workers_must_be_positive_and_default_to_this_process_cores() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        parallel.run_units([], _tasks().__getitem__, 0, lambda *a: None)
    assert parallel.default_workers() >= 1
