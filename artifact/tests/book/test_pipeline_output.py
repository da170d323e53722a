"""What ``dlfp pipeline`` prints while a notebook runs (``dlfp.book.pipeline.execute``): its own lines and
the progress lines relayed from the kernel, never the kernel's or its children's own output, which
goes to the notebook's log. A real papermill kernel on a two-cell notebook; no engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("papermill")

import nbformat
import papermill

from dlfp.book.pipeline import execute

NOISY = """\
import os, subprocess, sys
os.write(2, b"kernel fd 2: NUMA binding notice\\n")
subprocess.run([sys.executable, "-c", "import sys; print('child: Triton is installed, but', file=sys.stderr)"])
from dlfp.trials.progress import progress_stream
with progress_stream() as stream:
    stream.write("[run] trial 1/1 stock (unit 1/2): 10/40 requests\\n")
"""


def notebook(root: Path, name: str, code: str) -> None:
    parameters = nbformat.v4.new_code_cell("fail = False")
    parameters.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[parameters, nbformat.v4.new_code_cell(code)],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    (root / "notebooks").mkdir(exist_ok=True)
    nbformat.write(nb, str(root / "notebooks" / f"{name}.ipynb"))


def test_the_terminal_gets_pipeline_and_progress_lines_and_the_log_gets_the_noise(tmp_path, capfd) -> None:
    notebook(tmp_path, "noisy", NOISY + "assert not fail, 'the cell failed'\n")
    logs = tmp_path / "logs"
    execute(tmp_path, tmp_path / "out", {"noisy": {}}, ("noisy",), logs=logs)
    err = capfd.readouterr().err.splitlines()
    assert err[0] == f"[pipeline] noisy (notebook 1/1) ...; kernel output: {logs / 'noisy.log'}"
    assert err[1] == "[run] trial 1/1 stock (unit 1/2): 10/40 requests"  # relayed from the kernel
    assert err[2].startswith("[pipeline] noisy done in ") and len(err) == 3
    text = (logs / "noisy.log").read_text()
    assert "NUMA binding notice" in text and "Triton is installed" in text
    assert list(logs.iterdir()) == [logs / "noisy.log"]  # the progress sink is gone

    with pytest.raises(papermill.PapermillExecutionError, match="the cell failed"):
        execute(tmp_path, tmp_path / "out", {"noisy": {"fail": True}}, ("noisy",), logs=logs)
    err = capfd.readouterr().err.splitlines()
    executed, log = tmp_path / "out" / "noisy.ipynb", logs / "noisy.log"
    assert err[2].startswith("[pipeline] noisy failed after ")
    assert err[2].endswith(f"its traceback is in {executed}; last lines of {log}:")
    assert any("Triton is installed" in line for line in err[3:])  # the log's tail, on failure only
