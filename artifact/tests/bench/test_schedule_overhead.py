"""``dlfp bench schedule`` (``dlfp.bench.schedule_overhead``): DLFP schedule() time over stock's, side by side."""

from __future__ import annotations

import re

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


def test_out_writes_a_report_whose_readme_text_carries_its_ratios_and_origin(tmp_path, capsys) -> None:
    pytest.importorskip("vllm")
    import json

    from dlfp.bench.schedule_overhead import overhead_markdown

    out = tmp_path / "report.json"
    assert main(["bench", "schedule", "--running", "8", "--rounds", "2", "--steps-per-round", "3", "--out", str(out),
                 "--allow-dirty", "--scenario", "decode"]) == 0
    report = json.loads(out.read_text())
    assert set(report["scenarios"]) == {"decode"} and report["running"] == 8 and report["git"]["commit"]
    text = overhead_markdown(report, "x/report.json")
    law = report["scenarios"]["decode"]["dlfp"]
    row = next(line for line in text.splitlines() if line.startswith("| the paper's law"))
    assert row.split(" | ")[1:] == [f"{law['schedule_ratio']:.3f}", "not run", f"{law['step_ratio']:.3f}",
                                    "not run |"]
    assert "`dlfp bench schedule --out x/report.json`" in text and report["machine"] in text


PLUGIN_README = "dlfp-vllm/README.md"
REPORT = "data/runs/bench-schedule/report.json"
SECTION = re.compile(r"<!-- overhead: from (\S+) -->\n(.*?)<!-- end of overhead -->", flags=re.S)


def test_the_plug_ins_readme_quotes_the_committed_report() -> None:
    """The README's overhead numbers are :func:`overhead_markdown` of the committed report, not typed: a
    rerun of the benchmark with ``--out`` there fails here until the README is regenerated."""
    import json

    from dlfp.bench.schedule_overhead import overhead_markdown
    from dlfp.paths import REPO_ROOT

    found = SECTION.search((REPO_ROOT / PLUGIN_README).read_text(encoding="utf-8"))
    assert found and found.group(1) == REPORT, f"{PLUGIN_README}: the overhead section's markers are missing"
    report = json.loads((REPO_ROOT / REPORT).read_text(encoding="utf-8"))
    assert found.group(2) == overhead_markdown(report, REPORT), (
        f"{PLUGIN_README}'s overhead section is not the committed report's: regenerate it with "
        f"dlfp.bench.schedule_overhead.overhead_markdown")
