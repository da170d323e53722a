"""A notebook section's items (:mod:`dlfp.book.page`): emitted in order, each the way its kind is shown,
and the glued values read back by key. Inside a kernel the rendered book checks the rest byte for byte
(``test_render.py``); here no kernel runs, so a glue shows nothing and a figure its image and caption."""

from __future__ import annotations

import matplotlib
import pandas as pd

from dlfp.book.page import Figure, Glue, Say, Show, emit, glued

matplotlib.use("Agg")


def test_items_are_emitted_in_order_each_as_its_kind(capsys) -> None:
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    emit([Say("first"), Glue("hidden", 3), Show(pd.DataFrame({"column": [7]})), Figure(fig, "its caption"),
          Say("last")])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "first" and out[-1] == "last"
    assert "column" in out[1] and out[2].split() == ["0", "7"]
    assert out[3:5] == ["<IPython.core.display.Image object>", "<IPython.core.display.Markdown object>"]
    assert not any("hidden" in line or line == "3" for line in out)  # glued, not shown
    assert fig.number not in plt.get_fignums()  # the figure was freed once shown


def test_glued_values_are_read_by_key_the_later_one_winning() -> None:
    items = [Glue("a", 1), Say("x"), Glue("b", 2), Show("t"), Glue("a", 3)]
    assert glued(items) == {"a": 3, "b": 2}
