"""Byte-stable rendering: the book's trace-reading notebooks, rendered twice from the committed
traces with the same code, are the same bytes, and (on a clean checkout) the same bytes as the
committed ``book/generated/``.

The rendering stack is pinned (``constraints/book.txt``, installed by ``make setup``), so a stack
that differs from the pinned one, here or in a committed notebook, fails the comparison with how
to fix it; it skips only where a user cannot compare (no git checkout, a shallow clone, a dirty
tree, another Python than the book's, a notebook that predates normalised or pinned rendering).

A render executes ``03_results`` and ``04_reproducibility`` with papermill as ``make book`` does (no
engine starts: about 100 s on 2 idle cores). Where the committed book must equal a render here (a
clean checkout with the pinned stack, as CI's), the committed notebook is the second, independent
render; elsewhere the notebooks are rendered twice.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("papermill")

import nbformat

from dlfp.book.pipeline import FROM_TRACES, execute, load_target, notebook_parameters
from dlfp.book.render import INJECTED, drift, normalise, render_stack
from dlfp.paths import REPO_ROOT
from dlfp.trials import provenance

ROOT = REPO_ROOT
BOOK_RUNS = ("data/runs/cpu-default", "data/runs/generalization-cpu", "data/runs/generalization-sim")
"""What ``make book`` renders (the Makefile's BOOK_RUN, BOOK_GEN, SIM)."""


def _executed() -> nbformat.NotebookNode:
    """A notebook as papermill leaves it: timings, absolute paths, a random injected-cell id,
    a Styler's random table id and an object address."""
    html = ('<style type="text/css">\n#T_a13a9_row0_col0 {color: red}\n</style>\n<table id="T_a13a9">\n'
            '<td id="T_a13a9_row0_col0">1</td></table>\n<table id="T_0bf3c"></table>')
    nb = nbformat.v4.new_notebook(metadata={"papermill": {
        "parameters": {"run_dir": "data/runs/x"}, "input_path": "/home/a/notebooks/03.ipynb",
        "output_path": "/tmp/x/03.ipynb", "start_time": "2026-01-01T00:00:00", "duration": 1.5, "version": "2.6.0"}})
    injected = nbformat.v4.new_code_cell('run_dir = "data/runs/x"', id="6f22325b", metadata={
        "tags": [INJECTED], "papermill": {"duration": 0.1}})
    table = nbformat.v4.new_code_cell("table.style", id="e85333af", metadata={
        "tags": ["hide-input"], "execution": {"iopub.execute_input": "2026-01-01T00:00:00Z"},
        "papermill": {"start_time": "2026-01-01T00:00:00", "status": "completed"}})
    table.outputs = [nbformat.v4.new_output("execute_result", execution_count=1, data={
        "text/html": html, "text/plain": "<pandas.io.formats.style.Styler at 0x7fe02dc56390>"})]
    glued = nbformat.v4.new_code_cell('glue("claims", claims.style, display=False)', id="c1a1b2")
    glued.outputs = [nbformat.v4.new_output("display_data", data={  # myst-nb's glue keeps its own copies
        "application/papermill.record/text/html": '<table id="T_75146"><th id="T_75146_level0_col0">',
        "application/papermill.record/text/plain": "<pandas.io.formats.style.Styler at 0x7fb9ffe07d90>"})]
    nb.cells = [injected, table, glued]
    return nb


def test_normalise_removes_what_changes_between_executions() -> None:
    nb = normalise(_executed())
    assert nb.metadata["papermill"] == {"parameters": {"run_dir": "data/runs/x"}}
    assert nb.metadata["dlfp"] == {"render_stack": render_stack()}
    injected, table, glued = nb.cells
    assert injected.id == INJECTED and injected.metadata == {"tags": [INJECTED]}
    assert table.metadata == {"tags": ["hide-input"]}
    data = table.outputs[0]["data"]
    assert data["text/plain"] == "<pandas.io.formats.style.Styler>"
    assert "a13a9" not in data["text/html"] and "0bf3c" not in data["text/html"]
    assert data["text/html"].count("T_e85333af-0") == 3 and 'id="T_e85333af-1"' in data["text/html"]
    assert glued.outputs[0]["data"] == {
        "application/papermill.record/text/html": '<table id="T_c1a1b2-0"><th id="T_c1a1b2-0_level0_col0">',
        "application/papermill.record/text/plain": "<pandas.io.formats.style.Styler>"}
    again = normalise(copy.deepcopy(nb))
    assert nbformat.writes(again) == nbformat.writes(nb)  # idempotent


def test_a_print_split_into_two_messages_renders_as_one() -> None:
    """The kernel may send one print's text and its newline as two stream messages."""
    nb = _executed()
    cell = nbformat.v4.new_code_cell("print(a); print(b)", id="5b1d0e2a")
    err = nbformat.v4.new_output("stream", name="stderr", text="w\n")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a"),
                    nbformat.v4.new_output("stream", name="stdout", text="\nb\n"), err,
                    nbformat.v4.new_output("stream", name="stdout", text="c\n")]
    nb.cells.append(cell)
    whole = copy.deepcopy(nb)
    whole.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\nb\n"), err,
                               nbformat.v4.new_output("stream", name="stdout", text="c\n")]
    assert nbformat.writes(normalise(nb)) == nbformat.writes(normalise(whole))
    assert [o["text"] for o in normalise(nb).cells[-1].outputs] == ["a\nb\n", "w\n", "c\n"]


def test_a_cell_without_an_id_is_refused() -> None:
    nb = _executed()
    del nb.cells[1]["id"]
    with pytest.raises(ValueError, match="cell 1 has no id"):
        normalise(nb)


def _render(folder: Path) -> Path:
    """The book-only notebooks rendered from the committed traces into ``folder``, as ``make book`` does."""
    execute(ROOT, folder, notebook_parameters(*BOOK_RUNS, reduced=False), FROM_TRACES,
            load_target(ROOT / "params" / "cpu.yaml"))
    return folder


@pytest.fixture(scope="module")
def render(tmp_path_factory) -> Path:
    return _render(tmp_path_factory.mktemp("render"))


@pytest.fixture(scope="module")
def independent(render, tmp_path_factory) -> dict[str, bytes]:
    """Per notebook, a render made independently of :func:`render`: the committed notebook where a
    render here must equal it (another process, another day: the stronger check, and no second
    render to pay for), else a second render now."""
    if all(_committed_book_comparable(name) is None for name in FROM_TRACES) and not drift():
        return {name: _committed_notebook(name) or b"" for name in FROM_TRACES}
    again = _render(tmp_path_factory.mktemp("render-again"))
    return {name: (again / f"{name}.ipynb").read_bytes() for name in FROM_TRACES}


@pytest.mark.parametrize("name", FROM_TRACES)
def test_two_renders_are_the_same_bytes(render, independent, name) -> None:
    first = (render / f"{name}.ipynb").read_bytes()
    assert b"image/png" in first or name != "03_results"  # the figures are part of what is compared
    assert first == independent[name], f"{name}: two renders of the same traces and code differ"


def _committed_notebook(name: str) -> bytes | None:
    """``book/generated/<name>.ipynb`` as HEAD holds it, or None when HEAD has none."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:book/generated/{name}.ipynb"], capture_output=True)
    return shown.stdout if shown.returncode == 0 else None


def _committed_book_comparable(name: str) -> str | None:
    """Why a render here cannot be compared with the committed notebook (a skip), or None when it must
    equal it. A stack other than the pinned one is no reason: that fails the test, saying how to fix it."""
    root = provenance.repo_root()
    if root is None:
        return "not a git checkout"
    git = ["git", "-C", str(root)]
    if subprocess.run([*git, "rev-parse", "--is-shallow-repository"], capture_output=True, text=True).stdout.strip() \
            == "true":
        return "a shallow clone lacks the runs' commits the appendix compares with"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", *provenance.DEPENDS_ON, "data/runs"],
                           capture_output=True, text=True, check=True).stdout
    if dirty.strip():
        return "code or committed runs differ from HEAD here, so the appendix rightly renders differently"
    committed = _committed_notebook(name)
    if committed is None:
        return f"HEAD has no book/generated/{name}.ipynb"
    return _recorded_stack_skip(name, json.loads(committed).get("metadata", {}).get("dlfp", {}).get("render_stack"))


def _recorded_stack_skip(name: str, recorded: dict[str, str | None] | None) -> str | None:
    """Why a committed notebook recording ``recorded`` cannot be compared here, or None. Any other
    difference from this environment's stack is the test's to report, as a failure."""
    if recorded is None:
        return "the committed notebook predates normalised rendering: regenerate it (make book)"
    python = str(recorded.get("python"))
    if python.count(".") > 1:  # the patch release: recorded before the stack was pinned
        return (f"book/generated/{name}.ipynb predates the pinned rendering stack (it records Python {python}; "
                "renders now record major.minor and the constraints/book.txt versions): regenerate it with "
                "`make book` from a clean tree and commit it")
    if python != render_stack()["python"]:
        return (f"the committed book was rendered with Python {python}, this is Python {render_stack()['python']} "
                f"(pip cannot pin it): compare in a Python {python} environment (`make setup PYTHON=python{python}`, "
                "or environment.yml)")
    return None


def test_only_a_notebook_from_before_pinning_or_another_python_skips_the_comparison() -> None:
    """A stack that differs in a pinned package is no reason to skip: the comparison runs and fails."""
    stack = render_stack()
    old = _recorded_stack_skip("03_results", {**stack, "python": f"{stack['python']}.7"})
    assert old is not None and "predates the pinned rendering stack" in old and "`make book`" in old
    other = _recorded_stack_skip("03_results", {**stack, "python": "3.99"})
    assert other is not None and "Python 3.99" in other
    assert _recorded_stack_skip("03_results", stack) is None
    assert _recorded_stack_skip("03_results", {**stack, "numpy": "1.0.0"}) is None


@pytest.mark.parametrize("name", FROM_TRACES)
def test_render_reproduces_the_committed_book(request, name) -> None:
    reason = _committed_book_comparable(name)
    if reason is not None:
        pytest.skip(reason)  # before rendering: a skip costs no render
    wrong = drift()
    assert not wrong, (
        f"this environment's rendering stack is not the pinned one (installed, pinned): {wrong}, so it cannot "
        "reproduce the committed book: reinstall with the pins (`make -B setup`, which passes -c constraints/book.txt "
        "to pip) and run this test again")
    committed = _committed_notebook(name)
    assert committed is not None
    recorded = json.loads(committed)["metadata"]["dlfp"]["render_stack"]
    assert recorded == render_stack(), (
        f"book/generated/{name}.ipynb was rendered with {recorded}, not the pinned stack {render_stack()} "
        "(constraints/book.txt): regenerate it with `make book` (after `make -B setup`, from a clean tree) "
        "and commit it")
    assert (request.getfixturevalue("render") / f"{name}.ipynb").read_bytes() == committed, (
        f"book/generated/{name}.ipynb is not what the committed code renders from the committed traces: "
        "regenerate it with `make book` (from a clean tree) and commit it")
