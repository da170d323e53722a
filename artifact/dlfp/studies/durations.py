"""How long each committed study run took, read from its manifest: the one place the reference page's
durations come from (``book/reference/studies.md`` pastes :func:`markdown_table`, and a test compares the
two), so a regenerated run changes the table, not a sentence someone must remember to edit.

Two durations per run, because they answer different questions: the units' wall time (the sum of each
unit's replay, :attr:`dlfp.trials.schema.Unit.wall_s`: what the trials themselves cost, without engine
starts or the pre-flight) and start to end (the manifest's ``created`` to ``finished``: what a user
waits), the latter only for a run made in one go: a run resumed in a later session also counts the
pause between sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dlfp.paths import REPO_ROOT
from dlfp.trials.progress import duration
from dlfp.trials.schema import MANIFEST, read_manifest

STUDIES = ("study-baselines", "study-explanations", "study-sensitivity", "study-capacity", "study-stability")
"""The committed studies' folders under ``data/runs``, in the order the reference page describes them."""


@dataclass(frozen=True)
class RunTime:
    """One run folder's durations, as its manifest recorded them."""

    study: str
    run: str
    units: int
    units_s: float
    span_s: float | None
    """``created`` to ``finished``; None for a run resumed in a later session or not finished."""
    commit: str
    cores: int | None
    traces_mb: float


def run_time(study: str, folder: Path) -> RunTime:
    m = read_manifest(folder)
    made_in_one_go = m.created is not None and m.finished is not None and m.resumed in (None, m.created)
    span = (datetime.fromisoformat(m.finished) - datetime.fromisoformat(m.created)).total_seconds() \
        if made_in_one_go and m.finished and m.created else None
    cores = (m.hardware or {}).get("cpu_logical_cores")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return RunTime(study=study, run=folder.name, units=len(m.units),
                   units_s=sum(u.wall_s or 0.0 for u in m.units), span_s=span,
                   commit=str((m.git or {}).get("commit") or "")[:8], cores=cores if isinstance(cores, int) else None,
                   traces_mb=size / 1e6)


def run_times(root: Path = REPO_ROOT / "data" / "runs", studies: Sequence[str] = STUDIES) -> list[RunTime]:
    """Every run folder of ``studies`` under ``root``, by study then run name."""
    return [run_time(study, manifest.parent) for study in studies
            for manifest in sorted((root / study).glob(f"*/{MANIFEST}"))]


def markdown_table(root: Path = REPO_ROOT / "data" / "runs") -> str:
    """The committed studies' run durations as the reference page's Markdown table."""
    rows = ["| study | run | units | units' wall time | start to end | commit | cores | traces |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in run_times(root):
        span = duration(t.span_s) if t.span_s is not None else "resumed"
        rows.append(f"| {t.study.removeprefix('study-')} | `{t.run}` | {t.units} | {duration(t.units_s)} | {span} | "
                    f"`{t.commit}` | {t.cores if t.cores is not None else '-'} | {t.traces_mb:.0f} MB |")
    return "\n".join(rows) + "\n"
