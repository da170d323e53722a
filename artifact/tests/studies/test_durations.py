"""``dlfp.studies.durations``: a run's durations as its manifest recorded them, and a resumed run's span
never passed off as one sitting."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dlfp.paths import REPO_ROOT
from dlfp.studies.durations import markdown_table, run_times

SOURCE = REPO_ROOT / "data" / "runs" / "study-stability" / "rep-1" / "manifest.json"


def _study(tmp_path: Path, **changes: object) -> Path:
    folder = tmp_path / "study-stability" / "rep-1"
    folder.mkdir(parents=True)
    manifest = {**json.loads(SOURCE.read_text()), **changes}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(SOURCE, folder / "extra.bin")  # a file whose size counts as traces
    return tmp_path


def test_units_and_span_come_from_the_manifest(tmp_path: Path) -> None:
    raw = json.loads(SOURCE.read_text())
    units = [{**u, "wall_s": 60.0} for u in raw["units"]]
    root = _study(tmp_path, units=units, created="2026-12-06T10:00:00+00:00", resumed="2026-12-06T10:00:00+00:00",
                  finished="2026-12-06T10:09:30+00:00")
    (t,) = run_times(root, ("study-stability",))
    assert t.units == len(units) and t.units_s == 60.0 * len(units) and t.span_s == 570.0
    assert t.traces_mb > 0 and t.commit == raw["git"]["commit"][:8]
    row = markdown_table(root).splitlines()[2]
    assert f"| stability | `rep-1` | {len(units)} | {len(units)} min 00 s | 9 min 30 s |" in row


def test_a_resumed_run_shows_no_span(tmp_path: Path) -> None:
    root = _study(tmp_path, created="2026-12-06T10:00:00+00:00", resumed="2026-12-07T10:00:00+00:00",
                  finished="2026-12-07T10:05:00+00:00")
    (t,) = run_times(root, ("study-stability",))
    assert t.span_s is None and "| resumed |" in markdown_table(root)


def test_an_unfinished_run_shows_no_span(tmp_path: Path) -> None:
    root = _study(tmp_path, finished=None, status="partial")
    (t,) = run_times(root, ("study-stability",))
    assert t.span_s is None
