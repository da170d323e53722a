"""``dlfp bench schedule`` (``dlfp.bench.schedule_overhead``): DLFP schedule() time over stock's, side by side."""

from __future__ import annotations

import pytest

from dlfp.cli import main


@pytest.mark.parametrize("clock", ["cpu", "wall"])
def test_schedule_benchmark_runs(capsys, clock: str) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "schedule", "--running", "8", "--rounds", "2", "--steps-per-round", "5",
                 "--clock", clock]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for scenario in ("decode", "mixed"):
        arms = [line.split()[1].rstrip(":") for line in lines if line.split()[:1] == [scenario]]
        assert arms == ["stock", "dlfp", "dlfp-slo", "dlfp-deadline", "stock-b"], out
    assert all("ratio" in line for line in lines[1:]), out
    assert f"scheduler {clock} time" in lines[0], out


def test_the_benchmarked_slo_arm_really_runs_its_fit() -> None:
    """The dlfp-slo arm is the SLO controller, and its fit sees the benchmark's steps."""
    pytest.importorskip("vllm")
    from dlfp.bench.schedule_overhead import ARMS, _prepare, _step
    from dlfp.control.slo import SLOController

    s = _prepare(ARMS["dlfp-slo"], 8, True)
    for _ in range(20):
        _step(s)
    assert isinstance(s.dlfp_controller, SLOController) and s.dlfp_controller.model.n >= 20


def test_every_arm_takes_every_place_in_the_round_equally_often() -> None:
    from dlfp.bench.schedule_overhead import ARMS, round_order

    names = list(ARMS)
    places = [round_order(names, i) for i in range(3 * len(names))]
    assert all(sorted(p) == sorted(names) for p in places)
    for place in range(len(names)):
        assert sorted(p[place] for p in places) == sorted(names * 3)
