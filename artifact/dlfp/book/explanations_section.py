"""The explanations study in the results chapter: per candidate explanation of the paper's negative result
and per setting, DLFP's P99 ITL reduction, and whether the variant shows the paper's pattern; the table and
its one-sentence verdict are glued for *Beyond the paper*."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlfp.book.notebook import Plain
from dlfp.book.page import Glue, Item
from dlfp.studies import explanations


def table(baselines_root: str, explanations_root: str) -> Any:
    """The study's table as the page shows it (a Styler: no 50-character cut)."""
    return explanations.from_runs(Path(baselines_root), Path(explanations_root)).style.set_caption(
        "P99 ITL reduction against stock, % (mean [paired 95% CI]), per variant and setting; simulated (vLLM's "
        "scheduler over the modeled A100). The last column: whether the variant shows the paper's pattern, and where "
        "not, which settings break it, in the words their intervals allow.")


def glues(styled: Any) -> Iterator[Item]:
    """The table and its verdict, glued."""
    yield Glue("explanations_table", styled)
    yield Glue("explanations_verdict", Plain(explanations.verdict(styled.data)))
