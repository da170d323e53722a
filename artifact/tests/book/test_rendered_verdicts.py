"""The verdicts the committed results notebook renders, re-derived from its own rendered tables.

:mod:`tests.book.verdict_checks` recomputes every verdict from the numbers the glued tables show,
without the project's verdict functions; here it runs on the committed executed notebook (fast: no
engine, no book build), and on deliberately wrong copies of it and on hand-made rows, so that a
checker that passes everything would fail here. ``DLFP_RENDERED_RESULTS`` points it at another
executed ``03_results.ipynb``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dlfp.paths import CONFIGS, REPO_ROOT
from tests.book import verdict_checks as vc
from tests.book.verdict_checks import Table

RESULTS = Path(os.environ.get("DLFP_RENDERED_RESULTS") or REPO_ROOT / "book" / "generated" / "03_results.ipynb")
"""The executed results notebook under test (the committed one unless ``DLFP_RENDERED_RESULTS`` says)."""


@pytest.fixture(scope="module")
def glues() -> dict[str, dict[str, str]]:
    return vc.read_glues(RESULTS)


def _with(table: Table, row: int, column: str, text: str) -> Table:
    """A copy of ``table`` with one cell replaced: a wrong rendering to show the checker."""
    cells = [list(r) for r in table.cells]
    cells[row][table.columns.index(column)] = text
    return Table(list(table.columns), list(table.index), cells)


def test_the_checkers_thresholds_and_words_are_the_projects() -> None:
    """The checker keeps its own literals; the project's constants must still be these, or the
    checker is testing a rule the project no longer has."""
    from dlfp.analysis.stats import LARGE_PCT
    from dlfp.studies.claims import EVIDENCE, VERDICTS
    from dlfp.studies.explanations import FAILS, NO_BENEFIT_BELOW, WORKS

    assert vc.LARGE_PCT == 10.0 and LARGE_PCT == 10.0
    assert vc.NO_BENEFIT_BELOW == 10.0 and NO_BENEFIT_BELOW == 10.0
    assert vc.VERDICTS == ("reproduced", "not reproduced", "not testable here") == VERDICTS
    assert vc.EVIDENCE_KINDS == ("measured (CPU engine)", "measured (GPU)", "simulated (modeled accelerator)",
                                 "unverified device")
    assert vc.EVIDENCE_KINDS == EVIDENCE
    assert (vc.WORKS, vc.FAILS) == ("a100-qwen3-0.6b", ("a100-qwen3-8b", "a100-qwen3-32b", "a100-qwen3-8b-tp2"))
    assert (WORKS, FAILS) == (vc.WORKS, vc.FAILS)


def test_every_declared_situation_is_one_the_checker_knows() -> None:
    """A ``given`` in claims.yaml the checker does not map would make its rows uncheckable."""
    declared = yaml.safe_load((CONFIGS / "claims.yaml").read_text(encoding="utf-8"))
    givens = {r["given"]["unmet"]: r["given"]["expect"] for c in declared["claims"] for r in c["rows"] if "given" in r}
    assert givens == {"the paper's failure does not occur here": {"ci_hi_below": 10.0}}
    assert vc.SITUATIONS == {"the paper's failure does not occur here": "CI below 10.0% (no benefit)"}


def test_the_rendered_verdicts_agree_with_the_rendered_tables() -> None:
    problems = vc.check_notebook(RESULTS)
    assert not problems, f"{RESULTS}:\n" + "\n".join(problems)


def test_the_rendered_tables_are_there_to_check(glues) -> None:
    """Guards against a vacuous pass: the tables parsed into the rows and columns the checks read."""
    claims = vc.glued_table(glues, "claims_table")
    assert claims.columns == list(vc.CLAIMS_COLUMNS) and len(claims.cells) >= 5
    assert any(r["verdict"] in ("reproduced", "not reproduced") for r in claims.rows())
    counts = vc.glued_table(glues, "claims_counts")
    assert counts.columns == list(vc.VERDICTS) and set(counts.index) <= set(vc.EVIDENCE_KINDS)
    expl = vc.glued_table(glues, "explanations_table")
    assert len(expl.columns) == 5 and len(expl.index) == 5
    assert sum(len(list(vc.EFFECT.finditer(t))) for t in vc.plain_texts(glues).values()) > 0


# --- the checker fails on wrong renderings ----------------------------------------------------------------------


def test_a_flipped_claims_verdict_is_flagged(glues) -> None:
    claims = vc.glued_table(glues, "claims_table")
    flip = {"reproduced": "not reproduced", "not reproduced": "reproduced"}
    judged = [i for i, r in enumerate(claims.rows()) if r["verdict"] in flip and "paired 95% CI" in r["ours"]]
    assert judged, "no judged CI row to flip"
    for i in judged:
        wrong = _with(claims, i, "verdict", flip[claims.rows()[i]["verdict"]])
        assert any(p.startswith(f"claims row {i} ") for p in vc.check_claims(wrong)), claims.rows()[i]


def test_a_ci_that_does_not_fit_its_mean_is_flagged(glues) -> None:
    claims = vc.glued_table(glues, "claims_table")
    i, row = next((i, r) for i, r in enumerate(claims.rows()) if "paired 95% CI" in r["ours"])
    lo = vc.ITL.match(row["ours"])["lo"]  # type: ignore[index]
    wrong = _with(claims, i, "ours", row["ours"].replace(f"CI {lo} to", f"CI {float(lo) - 20:.1f} to", 1))
    assert any("is not the centre of its CI" in p for p in vc.check_claims(wrong))


def test_claims_rows_that_contradict_the_runs_own_text_are_flagged(glues) -> None:
    """The paired run's ITL row against the intro's design check and CI."""
    claims = vc.glued_table(glues, "claims_table")
    assert vc.check_claims_against_run_text(claims, glues) == []
    regime = vc.glued_text(glues, "regime")
    flipped = "OUTSIDE REGIME: made up" if regime == "in regime" else "in regime"
    assert vc.check_claims_against_run_text(claims, {**glues, "regime": {"text/plain": flipped}})
    assert vc.check_claims_against_run_text(claims, {**glues, "itl_ci": {"text/plain": "1.0% to 2.0%"}})


def test_wrong_counts_are_flagged(glues) -> None:
    claims, counts = vc.glued_table(glues, "claims_table"), vc.glued_table(glues, "claims_counts")
    wrong = _with(counts, 0, "reproduced", str(int(counts.cells[0][0]) + 1))
    assert vc.check_counts(claims, wrong)
    sentence = vc.glued_text(glues, "claims_counts_text")
    assert vc.check_counts_text(claims, sentence.replace("1", "2", 1) if "1" in sentence else sentence + "; x: 1 y")
    page = f"<html><body>{glues['claims_counts']['text/html']}</body></html>"
    assert vc.check_page_counts(page, claims) == []
    assert vc.check_page_counts(page.replace("<td>", "<td>9", 1), claims)
    assert vc.check_page_counts("<html></html>", claims)


def test_a_wrong_explanations_sentence_or_table_is_flagged(glues) -> None:
    table, sentence = vc.glued_table(glues, "explanations_table"), vc.glued_text(glues, "explanations_verdict")
    cells, _ = vc.explanation_cells(table)
    failing = [v for v, c in cells.items() if vc.pattern_groups(c) == {"do not reproduce it"}]
    assert failing and "do not reproduce it: " in sentence
    assert vc.check_explanations(table, sentence) == []
    # the variants that do not reproduce the pattern, said to reproduce it
    wrong = sentence.replace("do not reproduce it: ", "reproduce the paper's pattern: ")
    flagged = vc.check_explanations(table, wrong)
    assert all(any(f"variant {v!r} is listed under" in p for p in flagged) for v in failing), flagged
    # a reason's words that do not fit its interval ("not ruled out" said of a large, certain benefit: the old bug)
    row, column = table.index.index(failing[0]), next(c for c in table.columns if c.startswith("pattern"))
    reasons = table.cells[row][table.columns.index(column)].removeprefix("does not: ")
    m = vc.REASON.fullmatch(reasons.split("; ")[-1])
    assert m is not None
    words = f"a benefit of up to {m['hi']}% not ruled out" if m["words"] == "a large benefit" else "a large benefit"
    said = reasons.replace(m[0], f"{words} on {m['name']} (CI {m['lo']} to {m['hi']}%)", 1)
    assert any("said of CI" in p for p in vc.check_explanations(_with(table, row, column, f"does not: {said}"),
                                                                 sentence))
    # the table's cell changed under an unchanged pattern column
    setting = next(t for t in vc.FAILS if (c := cells[failing[0]].get(t)) is not None and c[0].value > 20)
    changed = _with(table, table.index.index(failing[0]), setting, "4% [1, 7]")
    assert any("but the table's CI" in p or "fits the pattern" in p for p in vc.check_explanations(changed, sentence))


def test_wrong_effect_words_are_flagged(glues) -> None:
    texts = vc.plain_texts(glues)
    key, text = next((k, t) for k, t in texts.items() if "(a large benefit); paired 95% CI" in t)
    assert vc.check_effect_words({key: text}) == []
    assert vc.check_effect_words({key: text.replace("(a large benefit)", "(a detectable benefit)")})
    assert vc.check_effect_words({key: text.replace("reduces it by a mean of", "raises it by a mean of")})
    assert vc.check_headline_effects(glues) == []
    lo = float(vc.glued_text(glues, "itl_ci").split("%")[0])
    words = "shows no detectable effect on it" if lo > 0.1 else "reduces it by a mean of 50.0% (a large benefit)"
    assert vc.check_headline_effects({**glues, "itl_effect": {"text/plain": words}})


# --- the checker on hand-made rows -------------------------------------------------------------------------------

ROW = {"claim": "c", "paper": "p", "note": "", "design": "",
       "source": "simulated: cost profile a100 (...), real vLLM 0.32.0+cpu scheduler",
       "evidence": "simulated (modeled accelerator)"}
ABOVE = {"expected (declared)": "CI above 0.0%", "false if": "the CI's lower bound is 0.0% or less"}
BELOW = {"expected (declared)": "CI below 10.0% (no benefit)",
         "false if": "the CI's upper bound reaches 10.0% (a benefit not ruled out)"}
CPU = {"source": "measured: 2-core Intel Xeon (engine on CPUs 0-1), vLLM 0.32.0+cpu",
       "evidence": "measured (CPU engine)"}
TTFT = {**CPU, "expected (declared)": "CI below 100.0%", "false if": "the CI's upper bound reaches 100.0%"}


@pytest.mark.parametrize(("row", "flagged"), [
    ({**ABOVE, "ours": "59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)", "verdict": "reproduced"}, None),
    ({**ABOVE, "ours": "59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)", "verdict": "not reproduced"},
     "but the table says"),
    ({**ABOVE, "ours": "2.5% (paired 95% CI 0.0 to 5.0%, 2 trials)", "verdict": "reproduced"}, None),  # a tie
    ({**ABOVE, "ours": "2.5% (paired 95% CI 0.0 to 5.0%, 2 trials)", "verdict": "not reproduced"}, None),
    ({**ABOVE, "ours": "59.2% (paired 95% CI 14.6 to 73.8%, 3 trials)", "verdict": "reproduced"}, "centre"),
    ({**BELOW, "ours": "93.5% (paired 95% CI 92.6 to 94.4%, 3 trials)", "verdict": "reproduced"},
     "but the table says"),
    ({**BELOW, "ours": "3.5% (paired 95% CI -2.0 to 9.0%, 3 trials)", "verdict": "reproduced"}, None),
    ({**ABOVE, "ours": "88.0% (one trial)", "verdict": "not testable here (needs two or more trials)"}, None),
    ({**ABOVE, "ours": "88.0% (one trial)", "verdict": "reproduced"}, "must be"),
    ({**ABOVE, "ours": "88.0% (paired 95% CI 81.9 to 94.2%, 3 trials)",
      "verdict": "not testable here (needs two or more trials)"}, "has what"),
    ({**ABOVE, "ours": "79.1% (paired 95% CI 69.2 to 89.1%, 2 trials) (arm dlfp-completion)",
      "verdict": "not testable here (the paper's failure does not occur here: arm dlfp 75.0% (paired 95% CI 74.9 "
                 "to 75.2%, 2 trials))"}, None),
    ({**ABOVE, "ours": "79.1% (paired 95% CI 69.2 to 89.1%, 2 trials) (arm dlfp-completion)",
      "verdict": "not testable here (the paper's failure does not occur here: arm dlfp 5.0% (paired 95% CI 1.0 "
                 "to 9.0%, 2 trials))"}, "should have been judged"),
    ({**ABOVE, "ours": "79.1% (paired 95% CI 69.2 to 89.1%, 2 trials) (arm dlfp-completion)",
      "verdict": "not testable here (the weather is wrong: arm dlfp 75.0% (one trial))"}, "not one this check knows"),
    ({**ABOVE, **CPU, "ours": "59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)",
      "verdict": "not testable here (run outside its design regime)"}, None),
    ({**CPU, "expected (declared)": "<= 0", "false if": "the value is above 0", "ours": "0 failed requests",
      "verdict": "not testable here (run outside its design regime)"}, "not an ITL reduction"),
    ({**CPU, "expected (declared)": "<= 0", "false if": "the value is above 0", "ours": "1 failed requests",
      "verdict": "reproduced"}, "but the table says"),
    ({**CPU, "expected (declared)": ">= 1.0", "false if": "the value is below 1.0",
      "ours": "300 of 300 requests identical", "verdict": "not reproduced"}, "but the table says"),
    ({**CPU, "expected (declared)": ">= 1.0", "false if": "the value is below 1.0",
      "ours": "299 of 300 requests identical", "verdict": "reproduced"}, "but the table says"),
    ({**CPU, "expected (declared)": ">= 1.0", "false if": "the value is below 1.0",
      "ours": "299 of 300 requests identical", "verdict": "not reproduced"}, None),
    ({**CPU, "expected (declared)": "<= 0.05", "false if": "the value is above 0.05",
      "ours": "compliance stock 100.0%, DLFP 90.0% (largest per-trial change 10.0%)", "verdict": "reproduced"},
     "but the table says"),
    ({**CPU, "expected (declared)": "<= 0.05", "false if": "the value is above 0.05",
      "ours": "compliance stock 100.0%, DLFP 90.0% (largest per-trial change 1.0%)", "verdict": "not reproduced"},
     "largest per-trial change"),
    ({**TTFT, "ours": "P99 TTFT +113.3% (mean change); DLFP's P99 TTFT 62% of the 1070 ms SLO (95% CI 40% to 84%, "
                      "3 trials; worst trial 70%)", "verdict": "reproduced"}, None),
    ({**TTFT, "ours": "P99 TTFT +113.3% (mean change); DLFP's P99 TTFT 62% of the 1070 ms SLO (95% CI 20% to 104%, "
                      "3 trials; worst trial 90%)", "verdict": "reproduced"}, "but the table says"),  # the interval
    ({**TTFT, "ours": "P99 TTFT +113.3% (mean change); DLFP's P99 TTFT 60% of the 1070 ms SLO (95% CI 20% to 100%, "
                      "3 trials; worst trial 80%)", "verdict": "not reproduced"}, None),  # within the rounding
    ({**TTFT, "ours": "P99 TTFT +113.3% (mean change); DLFP's P99 TTFT 62% of the 1070 ms SLO (95% CI 40% to 84%, "
                      "3 trials; worst trial 30%)", "verdict": "reproduced"}, "worst trial lies below"),
    ({**TTFT, "ours": "P99 TTFT +113.3% (mean change); DLFP's P99 TTFT 62% of the 1070 ms SLO (one trial)",
      "verdict": "not testable here (needs two or more trials)"}, None),
    ({**ABOVE, "ours": "", "source": "no gpu run rendered", "evidence": "measured (GPU)",
      "verdict": "not testable here"}, None),
    ({**ABOVE, "ours": "", "source": "no gpu run rendered", "evidence": "measured (GPU)", "verdict": "reproduced"},
     "no value shown"),
    ({**ABOVE, "ours": "", "source": "no gpu run rendered", "evidence": "simulated (modeled accelerator)",
      "verdict": "not testable here"}, "does not fit source"),
    ({**ABOVE, "ours": "59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)", "verdict": "reproduced", "false if": ""},
     "'false if' is empty"),
    ({**ABOVE, "ours": "59.2 percent", "verdict": "reproduced"}, "not in a form"),
])
def test_claim_rows(row: dict[str, str], flagged: str | None) -> None:
    problems = vc.check_claim_row({**ROW, **row})
    if flagged is None:
        assert problems == []
    else:
        assert any(flagged in p for p in problems), problems


EXPL = {"(x) works": ["50% [2, 98]", "2% [-3, 7]", "4% [-1, 9]", "0% [-5, 5]", "reproduces the pattern"],
        "(y) tie": ["50% [0, 100]", "5% [0, 10]", "4% [-1, 9]", "0% [-5, 5]", ""],
        "(z) missing": ["50% [2, 98]", "not rendered", "4% [-1, 9]", "0% [-5, 5]", "not testable (a setting is ..."]}
"""A hand-made explanations table: (x) shows the pattern, (y) sits on both thresholds, (z) lacks a setting."""
TIE_REASONS = ("no detectable benefit on 0.6B (CI 0 to 100%); "
               "a benefit of up to 10% not ruled out on qwen3-8b (CI 0 to 10%)")
GROUPED = "reproduce the paper's pattern: (x) works; do not reproduce it: (y) tie; not testable yet: (z) missing."


@pytest.mark.parametrize(("sentence", "tie_cell", "flagged"), [
    ("reproduce the paper's pattern: (x) works, (y) tie; not testable yet: (z) missing.", "reproduces the pattern",
     None),
    (GROUPED, f"does not: {TIE_REASONS}", None),
    (GROUPED, "does not: a large benefit on qwen3-8b (CI 0 to 10%)", "said of CI"),
    (GROUPED, "does not: a detectable benefit on qwen3-32b (CI -1 to 9%)", "fits the pattern but is named"),
    (GROUPED, "does not: a large benefit on qwen3-8b (CI 5 to 9%)", "but the table's CI"),
    (GROUPED, "reproduces the pattern", "the pattern column says"),
    ("do not reproduce it: (x) works, (y) tie; not testable yet: (z) missing.", f"does not: {TIE_REASONS}",
     "is listed under"),
    ("reproduce the paper's pattern: (x) works, (y) tie, (z) missing.", "reproduces the pattern", "is listed under"),
    ("reproduce the paper's pattern: (x) works; not testable yet: (y) tie, (z) missing.", "reproduces the pattern",
     "is listed under"),
])
def test_explanations_sentences(sentence: str, tie_cell: str, flagged: str | None) -> None:
    """The sentence groups the variants; the table's pattern column says why a variant does not reproduce it."""
    cells = {**EXPL, "(y) tie": [*EXPL["(y) tie"][:4], tie_cell]}
    frame = pd.DataFrame(cells, index=[vc.WORKS, *vc.FAILS, "pattern (0.6B works; 8B, 32B, TP=2 do not)"]).T
    table = vc.parse_tables(frame.style.to_html())[0]  # a Styler, as the book glues it: no 50-character cut
    problems = vc.check_explanations(table, sentence)
    if flagged is None:
        assert problems == []
    else:
        assert any(flagged in p for p in problems), problems


@pytest.mark.parametrize(("reason", "ok"), [
    ("a large benefit on qwen3-8b (CI 75 to 75%)", True),
    ("a benefit of up to 75% not ruled out on qwen3-8b (CI 75 to 75%)", False),
    ("a detectable benefit on qwen3-8b (CI 75 to 75%)", False),
    ("a detectable benefit on qwen3-8b (CI 3 to 75%)", True),
    ("a benefit of up to 75% not ruled out on qwen3-8b (CI -3 to 75%)", True),
    ("a benefit of up to 74% not ruled out on qwen3-8b (CI -3 to 75%)", False),
    ("a large benefit on qwen3-8b (CI 10 to 75%)", True),  # lo 10 may be 10.4: large or detectable
    ("a detectable benefit on qwen3-8b (CI 10 to 75%)", True),
])
def test_reason_words_fit_their_interval(reason: str, ok: bool) -> None:
    lo, hi = (x.strip("%") for x in reason.split("(CI ")[1].rstrip(")").split(" to "))
    cells = {vc.WORKS: (vc.Shown.parse("5"), vc.Shown.parse("50")),
             "a100-qwen3-8b": (vc.Shown.parse(lo), vc.Shown.parse(hi))}
    problems = vc.check_reasons("test", reason, cells)
    assert (problems == []) is ok, problems


@pytest.mark.parametrize(("text", "ok"), [
    ("88.0% (reduces it by a mean of 88.0% (a large benefit); paired 95% CI 81.9% to 94.2%)", True),
    ("5.0% (reduces it by a mean of 5.0% (a detectable benefit); paired 95% CI 1.0% to 9.0%)", True),
    ("5.0% (reduces it by a mean of 5.0% (a large benefit); paired 95% CI 1.0% to 9.0%)", False),
    ("36.6% (shows no detectable effect on it, on two trials only; paired 95% CI -30.5% to 103.7%)", True),
    ("36.6% (reduces it by a mean of 36.6% (a large benefit), on two trials only; paired 95% CI -30.5% to 103.7%)",
     False),
    ("-20.0% (raises it by a mean of 20.0% (a large harm); paired 95% CI -30.1% to -9.9%)", False),
    ("-20.0% (raises it by a mean of 20.0% (a detectable harm); paired 95% CI -30.1% to -9.9%)", True),
    ("-20.0% (raises it by a mean of 20.0% (a large harm); paired 95% CI -30.0% to -10.0%)", True),  # -10.0 may be
    ("-20.0% (raises it by a mean of 20.0% (a detectable harm); paired 95% CI -30.0% to -10.0%)", True),  # either
    ("-20.0% (raises it by a mean of 20.0% (a large harm); paired 95% CI -30.0% to -10.1%)", True),
    ("36.6% (shows no detectable effect on it; paired 95% CI 30.5% to 42.7%)", False),
    ("40.0% (shows no detectable effect on it; paired 95% CI -30.5% to 103.7%)", False),  # not the CI's centre
    ("36.6% (some new words; paired 95% CI -30.5% to 103.7%)", False),
])
def test_effect_words_fit_their_interval(text: str, ok: bool) -> None:
    problems = vc.check_effect_words({"t": text})
    assert (problems == []) is ok, problems


def test_the_table_parser_reads_pandas_and_styler_html() -> None:
    df = pd.DataFrame({"a b": ["x &lt; y", "1"], ">= 1.0": ["", "two  words"]}, index=pd.Index(["r1", "r2"], name="i"))
    for html_text, index in ((df.to_html(), ["r1", "r2"]), (df.style.to_html(), ["r1", "r2"]),
                             (df.style.hide(axis="index").to_html(), ["", ""])):
        (table,) = vc.parse_tables(html_text)
        assert table.columns == ["a b", ">= 1.0"]
        assert table.index == index
        assert table.cells[1] == ["1", "two words"]
        assert table.cells[0][1] == ""


def test_a_missing_glue_is_a_problem_not_a_pass(tmp_path, glues) -> None:
    import json

    nb = json.loads(RESULTS.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        cell["outputs"] = [o for o in cell.get("outputs", [])
                           if (o.get("metadata") or {}).get("scrapbook", {}).get("name") != "claims_counts"]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert vc.check_notebook(path) == ["the rendered notebook has no HTML glue 'claims_counts': re-render it"]
    assert copy.deepcopy(glues) == glues  # the module's glues were not touched


@pytest.mark.parametrize(("spread", "premise", "ok"), [
    ("cpu-tiny 126-187 ms (49% apart); a100-qwen3-8b 280-296 ms (6% apart)", "the premise does not hold: ...", True),
    ("cpu-tiny 126-187 ms (49% apart); a100-qwen3-8b 280-296 ms (6% apart)", "the premise holds: ...", False),
    ("cpu-tiny 100-105 ms (5% apart); a100-qwen3-8b 100-150 ms (50% apart)", "the premise holds: ...", True),
    ("cpu-tiny 100-130 ms (30% apart); a 1-1 ms (20% apart); b 1-1 ms (40% apart)", "the premise is mixed: ...", True),
    ("cpu-tiny 100-130 ms (30% apart); a 1-1 ms (20% apart); b 1-1 ms (40% apart)", "the premise holds: ...", False),
    ("cpu-tiny 100-106 ms (6% apart); a 1-1 ms (6% apart)", "the premise holds: ...", True),  # rounding: open
    ("a100-qwen3-8b 280-296 ms (6% apart)", "not testable: it needs a measured and a simulated baselines run", True),
])
def test_a_premise_the_spreads_do_not_allow_is_flagged(spread: str, premise: str, ok: bool) -> None:
    assert (vc.check_ttft_premise(spread, premise) == []) is ok


def test_a_wrong_slo_goal_sentence_or_summary_is_flagged(glues) -> None:
    summary, sentence = vc.glued_table(glues, "baselines_summary"), vc.glued_text(glues, "baselines_slo_goal")
    assert vc.SLO_ARM in summary.index and vc.check_slo_goal(summary, sentence) == []
    flipped = sentence.replace("does not hold", "holds") if "does not hold" in sentence else \
        sentence.replace("holds", "does not hold", 1)
    assert vc.check_slo_goal(summary, flipped)
    row, column = summary.index.index(vc.SLO_ARM), summary.columns[0]
    cell = summary.cells[row][summary.columns.index(column)]
    wrong = "misses ITL (99 > 9 ms)" if cell.endswith("% TTFT") else "+0% TTFT"
    assert vc.check_slo_goal(_with(summary, row, column, wrong), sentence)
    assert vc.check_slo_goal(_with(summary, row, column, "+9% TTFT"), sentence.split("; near a line")[0] + ".")


def test_the_slo_goal_checker_on_made_up_rows() -> None:
    table = Table(["x", "y"], [vc.SLO_ARM], [["+3% TTFT", "+13% TTFT"]])
    good = ("the goal for dlfp-slo (...) does not hold on the runs' means: it meets the objective on 2 of 2 targets, "
            "within 10% on 1; it pays +13% on y; near a line (within 5 points), where a rerun may fall the other way: "
            "y (+13% TTFT).")
    assert vc.check_slo_goal(table, good) == []
    assert vc.check_slo_goal(table, good.replace("y (+13% TTFT).", "x (+3% TTFT), y (+13% TTFT)."))  # 3% is not near
    assert vc.check_slo_goal(table, good.replace("within 10% on 1", "within 10% on 2"))
    edge = Table(["x"], [vc.SLO_ARM], [["+10% TTFT"]])  # 9.5-10.5: either verdict, either count
    for verdict, within in (("holds", 1), ("does not hold", 0)):
        text = (f"the goal for dlfp-slo (...) {verdict} on the runs' means: it meets the objective on 1 of 1 targets, "
                f"within 10% on {within}; near a line (within 5 points), where a rerun may fall the other way: "
                "x (+10% TTFT).")
        assert vc.check_slo_goal(edge, text) == []


def test_the_committed_verify_chapter_lists_every_dlfp_parameter_in_order() -> None:
    """``make book`` re-executes only the notebooks that read traces, so the verify chapter's parameter table
    (built from ``SPECS`` when ``00_verify`` runs) can fall behind the code unnoticed: it lacked three
    parameters for several stops. This names the fix when it does: ``dlfp pipeline --only 00_verify``."""
    from dlfp.control.params import SPECS

    table = vc.glued_table(vc.read_glues(REPO_ROOT / "book" / "generated" / "00_verify.ipynb"), "params_table")
    shown = [row[table.columns.index("parameter")] for row in table.cells]
    assert shown == [s.name for s in SPECS], (
        "the verify chapter's parameter table is stale: re-run it with `dlfp pipeline --only 00_verify` "
        "(with make book's --params, --run, --gen and --sim) and commit book/generated/00_verify.ipynb")
