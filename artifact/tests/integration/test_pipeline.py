"""The whole artifact end to end with reduced parameters: notebooks, traces, strict book, browser.

The book is the session's reduced artifact (``conftest.py``): every notebook run with papermill
into a scratch copy of the book (five engine starts), by a chain of SLURM jobs where a real SLURM
is usable (``test_slurm.py`` checks the chain) and in-process otherwise, then built with
``jupyter-book build -W -n``. Here: every page is there, the verdicts it renders hold when
re-derived independently, and the results page opened in headless Chromium has its figures
decoded and not blank and its table there. Bad notebook parameters must fail before any trial starts.
"""

from __future__ import annotations

import functools
import html
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("papermill")

from dlfp.paths import REPO_ROOT
from tests.book.verdict_checks import check_notebook, check_page_counts, glued_table, glued_text, read_glues
from tests.integration.slurm_cluster import ReducedArtifact

pytestmark = pytest.mark.slow
ROOT = REPO_ROOT
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_bad_parameter_fails_before_any_trial(tmp_path) -> None:
    import papermill

    out = tmp_path / "nb.ipynb"
    run_dir = tmp_path / "run"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(str(ROOT / "notebooks" / "01_paired_trials.ipynb"), str(out),
                                   parameters={"run_dir": str(run_dir), "overrides": {"trials": 0}},
                                   cwd=str(ROOT), kernel_name="python3", progress_bar=False)
    assert "'trials' = 0" in str(err.value)
    assert "'trials' = 0" in out.read_text()  # the message is in the executed notebook
    assert not run_dir.exists()  # nothing started, nothing written


@pytest.fixture(scope="module")
def built_book(reduced_artifact: ReducedArtifact) -> Path:
    """The reduced artifact's HTML folder, however it was made."""
    return reduced_artifact.book()


def test_book_builds_strictly_with_every_page(built_book: Path, reduced_artifact: ReducedArtifact) -> None:
    for page in ("book/intro", "book/method", "book/simulation", "book/beyond", "book/generated/03_results",
                 "book/generated/02_generalization", "book/generated/04_reproducibility"):
        assert (built_book / f"{page}.html").is_file(), page
    intro = (built_book / "book" / "intro.html").read_text()
    assert "measured:" in intro  # glued provenance reached the prose
    simulation = (built_book / "book" / "simulation.html").read_text()
    assert "public spec" in simulation and "(assumed)" in simulation  # the glued profile table
    assert "a100-qwen3-0.6b-tp1" in simulation  # the glued study design
    beyond = html.unescape((built_book / "book" / "beyond.html").read_text())
    assert "of the best fixed budget at equal TTFT" in beyond  # the goal sentence, from the baselines runs
    # every verdict the built book renders, re-derived from the numbers its own tables show (not by the
    # functions that wrote them: tests/book/verdict_checks.py), and the intro shows the counts checked
    notebook = reduced_artifact.notebooks / "03_results.ipynb"
    problems = check_notebook(notebook)
    assert not problems, "\n".join(problems)
    glues = read_glues(notebook)
    counts = check_page_counts(intro, glued_table(glues, "claims_table"))
    assert not counts, "\n".join(counts)
    assert glued_text(glues, "explanations_verdict") in beyond  # the sentence checked is the one the chapter shows


def _serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


IMAGE_CHECK = """() => Array.from(document.querySelectorAll('main img')).map(img => {
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  let inked = 0;
  if (img.complete && img.naturalWidth > 0) {
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) inked++;
  }
  const area = Math.max(1, c.width * c.height);
  return {src: img.src, complete: img.complete, width: img.naturalWidth, inked: inked / area};
})"""


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("DLFP_REQUIRE_BROWSER"),
                    reason="Debian's chromium is not installed (CI installs it)")
def test_results_page_in_a_real_browser(built_book: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "DLFP_REQUIRE_BROWSER is set but no chromium executable was found"
    server, url = _serve(built_book)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page()
            page.goto(f"{url}/book/generated/03_results.html", wait_until="load")
            images = page.evaluate(IMAGE_CHECK)
            tables = page.eval_on_selector_all("main table", "ts => ts.map(t => t.innerText)")
            page.screenshot(path=str(built_book.parent / "results.png"), full_page=True)
            browser.close()
    finally:
        server.shutdown()
    assert len(images) >= 4, images
    for img in images:
        assert img["complete"] and img["width"] > 0, img
        assert img["inked"] > 0.01, f"figure looks blank: {img}"
    assert any("P99 ITL stock" in t for t in tables), tables
