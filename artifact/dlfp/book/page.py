"""What a section of a results notebook produces, in reading order, as data: a module builds the items
(tested without a kernel), and the notebook's cell only hands them to :func:`emit`.

The order is the page's: a glued value is an output of its cell too, so the rendered notebook, and the
committed book compared with it byte for byte (:mod:`dlfp.book.render`), depend on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """A matplotlib figure shown with its caption under it (:func:`dlfp.book.notebook.show`)."""

    fig: Any
    caption: str
    glue_as: str | None = None


@dataclass(frozen=True)
class Glue:
    """A value glued under ``key`` for another page to paste, not shown here."""

    key: str
    value: Any


@dataclass(frozen=True)
class Show:
    """A table (a DataFrame or a Styler) or Markdown shown in the page."""

    value: Any


@dataclass(frozen=True)
class Say:
    """A line printed in the page (a note on what is missing or was recomputed)."""

    text: str


Item = Figure | Glue | Show | Say


def glued(items: Iterable[Item]) -> dict[str, Any]:
    """The values an item sequence glues, by key (a later glue of a key wins, as in myst-nb)."""
    return {i.key: i.value for i in items if isinstance(i, Glue)}


def emit(items: Iterable[Item]) -> None:
    """Hand each item to the notebook's kernel, in order."""
    from IPython.display import display
    from myst_nb import glue

    from dlfp.book.notebook import show

    for item in items:
        if isinstance(item, Figure):
            show(item.fig, item.caption, glue_as=item.glue_as)
        elif isinstance(item, Glue):
            glue(item.key, item.value, display=False)
        elif isinstance(item, Show):
            display(item.value)
        else:
            print(item.text)
