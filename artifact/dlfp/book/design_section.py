"""The results chapter's design comparisons: one paired design on two machine speeds, and the same number
of requests split into more, shorter trials, each a table of the runs side by side, as
:mod:`dlfp.book.page` items. A list naming no run folder is said, not shown empty."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from dlfp.analysis.runs import RunData, load_run
from dlfp.analysis.tables import design_table, trials_table
from dlfp.book.page import Glue, Item, Say, Show


def _runs(dirs: Sequence[str]) -> list[RunData]:
    return [load_run(d) for d in dirs if Path(d, "manifest.json").is_file()]


def speed(dirs: Sequence[str]) -> Iterator[Item]:
    """The runs' designs and outcomes, one column per run (the same design on machines of two speeds)."""
    runs = _runs(dirs)
    if not runs:
        yield Say(f"none of {list(dirs)} is a run folder")
        return
    table = design_table(runs, outcome=True)
    yield Glue("speed_table", table.set_index("run").T)
    yield Show(table.set_index("run").T)


def split(dirs: Sequence[str]) -> Iterator[Item]:
    """The runs' outcomes per trial count (the same requests in fewer, longer or more, shorter trials)."""
    runs = _runs(dirs)
    if not runs:
        yield Say(f"none of {list(dirs)} is a run folder")
        return
    table = trials_table(runs)
    yield Glue("trials_table", table)
    yield Show(table)
