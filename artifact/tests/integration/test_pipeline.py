"""The whole artifact end to end with reduced parameters: notebooks, traces, strict book, browser.

The book is the session's reduced artifact (``conftest.py``): every notebook run with papermill
into a scratch copy of the book (five engine starts), by a chain of SLURM jobs where a real SLURM
is usable (``test_slurm.py`` checks the chain) and in-process otherwise, then built with
``jupyter-book build -W -n``. Here: every page is there, the verdicts it renders hold when
re-derived independently, and every page opened in headless Chromium at a desktop and a phone width
neither scrolls sideways nor shows a blank figure (screenshots kept in ``build/screenshots``). Bad
notebook parameters must fail before any trial starts.
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


SIDEWAYS = """() => {
  const root = document.scrollingElement;
  const scrolls = el => { for (let a = el.parentElement; a; a = a.parentElement) {
      const x = getComputedStyle(a).overflowX; if (x === 'auto' || x === 'scroll' || x === 'hidden') return true; }
    return false; };
  const wide = Array.from(document.querySelectorAll('main *')).filter(el => {
    const r = el.getBoundingClientRect(); return r.width > 0 && r.right > window.innerWidth + 1 && !scrolls(el); });
  return {overflow: root.scrollWidth - root.clientWidth,
          culprits: wide.slice(0, 5).map(el =>
            el.tagName + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right))};
}"""
"""How far the page itself scrolls sideways, and the first elements past the viewport's right edge that
no scroll box of their own holds (a wide table inside its own scroll box is fine)."""
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}
CHAPTERS = ("intro", "method", "simulation", "reproduce", "generated/00_verify", "generated/01_paired_trials",
            "generated/03_results", "generated/02_generalization", "beyond", "generated/04_reproducibility")
"""The book's first part, in its order (``_toc.yml``): the first page and every chapter."""
SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
"""Where each chapter's screenshot at each width is kept for a person to look at (``build/`` is ignored)."""


def _toc_pages() -> list[list[str]]:
    """The pages of ``_toc.yml`` relative to ``book/``, per part; the root page opens the first part."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    parts = [[c["file"].removeprefix("book/") for c in part["chapters"]] for part in toc["parts"]]
    return [[toc["root"].removeprefix("book/"), *parts[0]], *parts[1:]]


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("DLFP_REQUIRE_BROWSER"),
                    reason="Debian's chromium is not installed (CI installs it)")
def test_every_page_in_a_real_browser_at_desktop_and_phone_widths(built_book: Path) -> None:
    """Each page of the book opened in headless Chromium at 1280 and 390 px: no page scrolls sideways
    (a wide table scrolls inside its own box), every figure is decoded and not blank, no glue role is
    left unrendered; the first page and every chapter are screenshotted into :data:`SCREENSHOTS`."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "DLFP_REQUIRE_BROWSER is set but no chromium executable was found"
    first, *rest = _toc_pages()
    assert tuple(first) == CHAPTERS  # every chapter is screenshotted
    reference = [page for part in rest for page in part]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob("*.png"):  # the count below is of this run's screenshots only
        stale.unlink()
    server, url = _serve(built_book)
    problems: list[str] = []
    seen: dict[tuple[str, str], dict] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            for width_name, (w, h) in WIDTHS.items():
                page = browser.new_page(viewport={"width": w, "height": h})
                for name in (*CHAPTERS, *reference):
                    page.goto(f"{url}/book/{name}.html", wait_until="load")
                    side = page.evaluate(SIDEWAYS)
                    images = page.evaluate(IMAGE_CHECK)
                    text = page.inner_text("main")
                    seen[(name, width_name)] = {"images": images, "tables": page.eval_on_selector_all(
                        "main table", "ts => ts.map(t => t.innerText)")}
                    if side["overflow"] > 1:
                        problems.append(f"{name} at {w} px scrolls sideways by {side['overflow']} px: "
                                        f"{side['culprits']}")
                    for img in images:
                        if not (img["complete"] and img["width"] > 0 and img["inked"] > 0.01):
                            problems.append(f"{name} at {w} px: a figure did not load or is blank: {img}")
                    if "{glue" in text or "glue:" in text:
                        problems.append(f"{name} at {w} px shows an unrendered glue role")
                    if name in CHAPTERS:
                        page.screenshot(path=str(SCREENSHOTS / f"{name.replace('/', '-')}-{width_name}.png"),
                                        full_page=True)
                page.close()
            browser.close()
    finally:
        server.shutdown()
    assert not problems, "\n".join(problems)
    results = seen[("generated/03_results", "desktop")]
    assert len(results["images"]) >= 4, results["images"]
    assert any("P99 ITL stock" in t for t in results["tables"]), results["tables"]
    intro = seen[("intro", "desktop")]
    assert len(intro["images"]) == 1  # the headline figure, pasted from the results chapter
    assert any("reported by the paper" in t and "✓" in t for t in intro["tables"])  # the claims summary
    assert len(list(SCREENSHOTS.glob("*.png"))) >= 2 * len(CHAPTERS)
