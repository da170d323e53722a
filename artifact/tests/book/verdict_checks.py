"""Checks of the verdicts the results notebook renders, re-derived from the numbers its tables show.

The pipeline test used to hold the book's verdict sentence against the very function that wrote it,
run over the same folders, so a wrong verdict rule could never fail it. These helpers take only the
*rendered* output (the glued HTML tables and text of an executed ``03_results.ipynb``) and derive
every verdict again with the arithmetic and regexes written here; they never call
:mod:`dlfp.studies` or :mod:`dlfp.analysis.stats`. A disagreement means the rendering or the rule is
wrong, whichever it is.

Rendered numbers are rounded (one decimal in the claims table, integers in the explanations table),
so each is a :class:`Shown` range of half its last digit either side. A verdict the rounding leaves
open is accepted either way; one the rounding settles must be the one rendered.

Every ``check_*`` returns a list of problems (empty: the rendering agrees), so one test asserts none
and another that a deliberately wrong table is flagged: the checker itself can fail.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

LARGE_PCT = 10.0
"""A reduction whose CI lies above this is a *large* benefit (below minus this: a large harm)."""
NO_BENEFIT_BELOW = 10.0
"""The paper's pattern: a setting shows *no benefit* when its CI's upper bound is below this."""
VERDICTS = ("reproduced", "not reproduced", "not testable here")
EVIDENCE_KINDS = ("measured (CPU engine)", "measured (GPU)", "simulated (modeled accelerator)", "unverified device")
NEEDS_TRIALS = "not testable here (needs two or more trials)"
OUTSIDE_REGIME = "not testable here (run outside its design regime)"
SITUATIONS = {"the paper's failure does not occur here": "CI below 10.0% (no benefit)"}
"""A claims verdict "not testable here (<words>: arm <arm> <shown>)" -> the situation, in the table's
own expectation words, that the shown arm must then fail (``given`` in ``configs/claims.yaml``)."""
WORKS = "a100-qwen3-0.6b"
FAILS = ("a100-qwen3-8b", "a100-qwen3-32b", "a100-qwen3-8b-tp2")
"""The paper's pattern: DLFP works on the first setting and on none of the others."""
GROUPS = ("reproduce the paper's pattern", "do not reproduce it", "not testable yet")
"""The explanations sentence's groups, as it words them."""
SIM_PATTERN_GLUES = {WORKS: "sim_a100_qwen3_0_6b_tp1", "a100-qwen3-8b": "sim_a100_qwen3_8b_tp1",
                     "a100-qwen3-32b": "sim_a100_qwen3_32b_tp1", "a100-qwen3-8b-tp2": "sim_a100_qwen3_8b_tp2"}
"""Setting -> the text glue with its modeled-study reduction, which ``sim_pattern`` judges."""
CLAIMS_COLUMNS = ("claim", "paper", "ours", "source", "evidence", "expected (declared)", "false if", "verdict",
                  "design", "note")
RECORD = "application/papermill.record/"
NUM = r"-?\d+(?:\.\d+)?"


# --- rounded numbers -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A rendered number: the true value lies in [low, high] (half a unit of its last digit either side)."""

    value: float
    low: float
    high: float

    @classmethod
    def parse(cls, text: str, scale: float = 1.0, exact: bool = False) -> Shown:
        """``text`` as printed (``scale`` turns 59.2 (%) into 0.592); ``exact`` for integer counts."""
        decimals = len(text.split(".", 1)[1]) if "." in text else 0
        half = 0.0 if exact else 0.5 * 10.0 ** -decimals
        v = float(text)
        return cls(v * scale, (v - half) * scale, (v + half) * scale)

    def corners(self) -> tuple[float, ...]:
        """The values to try: the ends and the middle (each test here crosses one threshold at most)."""
        return (self.low, self.value, self.high)

    def agrees(self, other: Shown) -> bool:
        """Whether both can be roundings of one number (their ranges overlap by more than a point)."""
        return self.low < other.high and other.low < self.high


def possible(test: Callable[[Mapping[str, float]], bool], shown: Mapping[str, Shown]) -> set[bool]:
    """What ``test`` can give for true values within the rounding of ``shown``: {True}, {False} or both."""
    names = sorted(shown)
    out = set()
    for values in itertools.product(*(shown[n].corners() for n in names)):
        q = dict(zip(names, values, strict=True))
        if "lo" in q and "hi" in q and q["lo"] > q["hi"]:
            continue  # an interval cannot end before it starts
        out.add(bool(test(q)))
    return out


def _kind(lo: float, hi: float) -> str:
    if lo > LARGE_PCT:
        return "large benefit"
    if lo > 0:
        return "detectable benefit"
    if hi < -LARGE_PCT:
        return "large harm"
    if hi < 0:
        return "detectable harm"
    return "no detectable effect"


def effect_kinds(lo: Shown, hi: Shown) -> set[str]:
    """What a reduction's paired CI [lo, hi] (%) may be called: a benefit when it lies above zero
    (large above 10%), a harm when below (large below -10%), no detectable effect when it spans zero."""
    return {_kind(a, b) for a, b in itertools.product(lo.corners(), hi.corners()) if a <= b} or {_kind(lo.value,
                                                                                                        hi.value)}


def _symmetric(where: str, mean: Shown, lo: Shown, hi: Shown) -> list[str]:
    """A t interval is centred on its mean: a CI that is not belongs to another number."""
    if not lo.value <= hi.value:
        return [f"{where}: CI {lo.value:g} to {hi.value:g} ends before it starts"]
    slack = (mean.high - mean.low) / 2 + (lo.high - lo.low + hi.high - hi.low) / 4
    if abs(mean.value - (lo.value + hi.value) / 2) > slack + 1e-9:
        return [f"{where}: mean {mean.value:g} is not the centre of its CI {lo.value:g} to {hi.value:g}"]
    return []


# --- reading the rendered notebook -----------------------------------------------------------------------------


@dataclass
class Table:
    """One rendered HTML table: column labels, row labels ("" where the index is hidden), cell texts."""

    columns: list[str]
    index: list[str]
    cells: list[list[str]]

    def rows(self) -> list[dict[str, str]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.cells]

    def row(self, label: str) -> dict[str, str]:
        return dict(zip(self.columns, self.cells[self.index.index(label)], strict=True))


class _TableParser(HTMLParser):
    """Collects every <table>: per section (thead/tbody) its rows, per row its (tag, text) cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[dict[str, list[list[tuple[str, str]]]]] = []
        self._section = "tbody"
        self._row: list[tuple[str, str]] | None = None
        self._cell: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append({"thead": [], "tbody": []})
            self._section = "tbody"
        elif tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr" and self.tables:
            self._row = []
            self.tables[-1][self._section].append(self._row)
        elif tag in ("th", "td") and self._row is not None:
            self._cell = (tag, [])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None and self._row is not None:
            self._row.append((self._cell[0], " ".join("".join(self._cell[1]).split())))
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag in ("thead", "tbody", "table"):
            self._section = "tbody"

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[1].append(data)


def parse_tables(html_text: str) -> list[Table]:
    """Every table in ``html_text`` (a Styler's or a DataFrame's HTML, or a whole built page).

    Leading <th> cells of body rows are the index; the first header row labels the columns after it
    (a DataFrame's second header row, its index name, is dropped).
    """
    parser = _TableParser()
    parser.feed(html_text)
    parser.close()
    out = []
    for raw in parser.tables:
        head, body = raw["thead"], raw["tbody"]
        if not head and body:
            head, body = body[:1], body[1:]
        n_index = len(list(itertools.takewhile(lambda c: c[0] == "th", body[0]))) if body else 0
        columns = [text for _, text in head[0]][n_index:] if head else []
        index = [" ".join(text for _, text in r[:n_index]) for r in body]
        cells = [[text for _, text in r[n_index:]] for r in body]
        if any(len(r) != len(columns) for r in cells):
            raise ValueError(f"a table's rows do not match its {len(columns)} columns {columns}")
        out.append(Table(columns, index, cells))
    return out


def read_glues(path: str | Path) -> dict[str, dict[str, str]]:
    """An executed notebook's glued values: name -> {"text/plain": ..., "text/html": ...}."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            name = ((output.get("metadata") or {}).get("scrapbook") or {}).get("name")
            if name is None:
                continue
            out[name] = {mime.removeprefix(RECORD): text if isinstance(text, str) else "".join(text)
                         for mime, text in (output.get("data") or {}).items() if mime.startswith(RECORD)}
    return out


def glued_table(glues: Mapping[str, Mapping[str, str]], key: str) -> Table:
    """The one table glued as ``key``; a KeyError that says to re-render when it is missing."""
    if "text/html" not in glues.get(key, {}):
        raise KeyError(f"the rendered notebook has no HTML glue {key!r}: re-render it")
    tables = parse_tables(glues[key]["text/html"])
    if len(tables) != 1:
        raise ValueError(f"glue {key!r} holds {len(tables)} tables, expected one")
    return tables[0]


def glued_text(glues: Mapping[str, Mapping[str, str]], key: str) -> str:
    if "text/plain" not in glues.get(key, {}):
        raise KeyError(f"the rendered notebook has no text glue {key!r}: re-render it")
    return glues[key]["text/plain"]


# --- the claims table ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """One declared range, as the table words it, and the quantities of ``ours`` it tests."""

    text: str
    needs: tuple[str, ...]
    test: Callable[[Mapping[str, float]], bool]
    bounds: tuple[str, ...]


def parse_expectations(text: str) -> list[Expectation] | None:
    """"CI above 0.0%; >= 1.0" -> the ranges, all of which must hold; None if a part is not recognised."""
    out = []
    for part in text.split("; "):
        if m := re.fullmatch(rf"CI above ({NUM})%", part):
            a = float(m[1])
            out.append(Expectation(part, ("lo",), lambda q, a=a: q["lo"] > a, (m[1],)))
        elif m := re.fullmatch(rf"CI below ({NUM})%(?: \(no benefit\))?", part):
            a = float(m[1])
            out.append(Expectation(part, ("hi",), lambda q, a=a: q["hi"] < a, (m[1],)))
        elif m := re.fullmatch(rf"CI overlaps \[({NUM}), ({NUM})\]", part):
            a, b = float(m[1]), float(m[2])
            out.append(Expectation(part, ("lo", "hi"), lambda q, a=a, b=b: q["lo"] <= b and q["hi"] >= a,
                                   (f"[{m[1]}, {m[2]}]",)))
        elif m := re.fullmatch(rf">= ({NUM})", part):
            a = float(m[1])
            out.append(Expectation(part, ("value",), lambda q, a=a: q["value"] >= a, (m[1],)))
        elif m := re.fullmatch(rf"<= ({NUM})", part):
            a = float(m[1])
            out.append(Expectation(part, ("value",), lambda q, a=a: q["value"] <= a, (m[1],)))
        else:
            return None
    return out


@dataclass
class Ours:
    """A claims row's ``ours`` cell, read: its kind, the quantities it shows, the arm it names."""

    kind: str
    q: dict[str, Shown]
    arm: str | None
    nan: bool
    problems: list[str]


ITL = re.compile(rf"(?P<v>{NUM}|nan)% \((?:paired 95% CI (?P<lo>{NUM}) to (?P<hi>{NUM})%, (?P<n>\d+) trials"
                 rf"|(?P<one>one trial))\)")


def parse_ours(text: str) -> Ours | None:
    """The ``ours`` forms the claims table renders; None for one this check does not know."""
    arm = None
    if m := re.fullmatch(r"(?P<body>.+) \(arm (?P<arm>[^()\s]+)\)", text):
        text, arm = m["body"], m["arm"]
    nan = "nan" in text
    if m := ITL.fullmatch(text):
        q = {"value": Shown.parse(m["v"])}
        problems = []
        if m["lo"] is not None:
            q["lo"], q["hi"] = Shown.parse(m["lo"]), Shown.parse(m["hi"])
            problems += [] if nan else _symmetric(f"{text!r}", q["value"], q["lo"], q["hi"])
            if int(m["n"]) < 2:
                problems.append(f"{text!r}: a CI from {m['n']} trial(s)")
        return Ours("itl", q, arm, nan, problems)
    if m := re.fullmatch(r"(\d+) of (\d+) requests identical", text):  # counts: exact, unlike a rounded rate
        same, compared = int(m[1]), int(m[2])
        problems = [] if 0 <= same <= compared else [f"{text!r}: more identical than compared"]
        value = Shown.parse(f"{same / compared if compared else math.nan!r}", exact=True)
        return Ours("agreement", {"value": value}, arm, nan, problems)
    if m := re.fullmatch(r"(\d+) failed requests", text):
        return Ours("failures", {"value": Shown.parse(m[1], exact=True)}, arm, nan, [])
    if m := re.fullmatch(rf"compliance stock ({NUM})%, DLFP ({NUM})% \(largest per-trial change ({NUM})%\)", text):
        stock, dlfp, change = (Shown.parse(x) for x in m.groups())
        # the mean change is the mean of the per-trial changes, so it cannot exceed the largest of them
        slack = 0.15
        problems = [] if abs(dlfp.value - stock.value) <= change.value + slack else [
            f"{text!r}: the means differ by more than the largest per-trial change"]
        return Ours("slo", {"value": Shown.parse(m[3], scale=0.01)}, arm, nan, problems)
    if m := re.fullmatch(rf"P99 TTFT [+-]{NUM}% \(mean change\); DLFP's P99 TTFT (?P<v>\d+)% of the \d+ ms SLO "
                         rf"(?:\(95% CI (?P<lo>{NUM})% to (?P<hi>{NUM})%, (?P<n>\d+) trials; worst trial (?P<w>\d+)%\)"
                         rf"|(?P<one>\(one trial\)))", text):
        q = {"value": Shown.parse(m["v"])}
        problems = []
        if m["lo"] is not None:
            q["lo"], q["hi"] = Shown.parse(m["lo"]), Shown.parse(m["hi"])
            problems += [] if nan else _symmetric(f"{text!r}", q["value"], q["lo"], q["hi"])
            if float(m["w"]) + 0.5 < q["value"].low:
                problems.append(f"{text!r}: the worst trial lies below the mean")
        return Ours("ttft", q, arm, nan, problems)
    return None


def evidence_of(source: str) -> str | None:
    """The kind of evidence a row's ``source`` names: simulated, measured on vLLM's CPU build, on a GPU;
    for a run not rendered, the slot's kind (``gpu``: GPU, ``paired``: the CPU engine, else simulated)."""
    if source.startswith("simulated: "):
        return EVIDENCE_KINDS[2]
    if source.startswith("measured: unverified device "):
        return EVIDENCE_KINDS[3]
    if source.startswith("measured: "):
        return EVIDENCE_KINDS[0] if "+cpu" in source else EVIDENCE_KINDS[1]
    if m := re.fullmatch(r"no (\S+) run rendered", source):
        return EVIDENCE_KINDS[1] if m[1] == "gpu" else EVIDENCE_KINDS[0] if m[1] == "paired" else EVIDENCE_KINDS[2]
    return None


GIVEN = re.compile(r"not testable here \((?P<words>[^:()]+): arm (?P<arm>\S+) (?P<shown>.+)\)")


def check_claim_row(row: Mapping[str, str]) -> list[str]:
    """One claims row's verdict against its own ``ours`` and ``expected (declared)`` (module docstring)."""
    out = []
    verdict, ours, source, expected = row["verdict"], row["ours"], row["source"], row["expected (declared)"]
    if not row["false if"].strip():
        out.append("'false if' is empty: the row does not say what would have made it false")
    kind = evidence_of(source)
    if kind is None or kind != row["evidence"]:
        out.append(f"evidence {row['evidence']!r} does not fit source {source!r} (expected {kind!r})")
    exps = parse_expectations(expected)
    if exps is None:
        return [*out, f"expectation {expected!r} is not in a form this check knows"]
    for e in exps:
        missing = [b for b in e.bounds if b not in row["false if"]]
        if missing:
            out.append(f"'false if' {row['false if']!r} does not name the bound {missing} of {e.text!r}")
    if not ours:
        if verdict != "not testable here":
            out.append(f"no value shown, yet the verdict is {verdict!r}")
        if not re.fullmatch(r"no \S+ run rendered", source):
            out.append(f"no value shown, yet the source is {source!r}")
        return out
    if verdict == "not testable here":
        out.append(f"'not testable here' without a reason, yet a value is shown ({ours!r})")
        return out
    parsed = parse_ours(ours)
    if parsed is None:
        return [*out, f"ours {ours!r} is not in a form this check knows"]
    out += parsed.problems
    needs = {n for e in exps for n in e.needs}
    if parsed.nan or not needs <= set(parsed.q):
        if verdict != NEEDS_TRIALS:
            out.append(f"{ours!r} cannot be held against {expected!r} (no interval), so the verdict must be "
                       f"{NEEDS_TRIALS!r}, not {verdict!r}")
        return out
    if verdict == NEEDS_TRIALS:
        out.append(f"{verdict!r}, but {ours!r} has what {expected!r} needs")
        return out
    if verdict == OUTSIDE_REGIME:
        if parsed.kind != "itl":
            out.append(f"{verdict!r} on a row that is not an ITL reduction ({ours!r})")
        return out
    if m := GIVEN.fullmatch(verdict):
        return out + _situation_problems(m)
    if verdict not in VERDICTS[:2]:
        return [*out, f"verdict {verdict!r} is not one this check knows"]
    outcomes = possible(lambda q: all(e.test(q) for e in exps), {n: parsed.q[n] for n in needs})
    allowed = {"reproduced" if o else "not reproduced" for o in outcomes}
    if verdict not in allowed:
        out.append(f"{ours!r} against {expected!r} is {' or '.join(sorted(allowed))}, but the table says {verdict!r}")
    return out


def _situation_problems(m: re.Match[str]) -> list[str]:
    """A row "not testable here" because its situation does not arise: the situation must fail on the arm shown."""
    situation = SITUATIONS.get(m["words"])
    if situation is None:
        return [f"situation {m['words']!r} is not one this check knows (add it to SITUATIONS)"]
    exps = parse_expectations(situation)
    shown = parse_ours(m["shown"])
    assert exps is not None, situation
    if shown is None:
        return [f"the situation's arm shows {m['shown']!r}, a form this check does not know"]
    needs = {n for e in exps for n in e.needs}
    if shown.nan or not needs <= set(shown.q):
        return shown.problems  # the situation cannot be judged: not testable, rightly
    if possible(lambda q: all(e.test(q) for e in exps), {n: shown.q[n] for n in needs}) == {True}:
        return [*shown.problems, f"not testable because {m['words']!r}, but arm {m['arm']} {m['shown']!r} meets "
                                 f"the situation {situation!r}: the row should have been judged"]
    return shown.problems


def check_claims(table: Table) -> list[str]:
    """Every claims row (:func:`check_claim_row`), each problem naming its row."""
    missing = [c for c in CLAIMS_COLUMNS if c not in table.columns]
    if missing:
        return [f"the claims table lacks columns {missing}"]
    out = []
    for i, row in enumerate(table.rows()):
        where = f"claims row {i} ({row['claim'][:50]!r}, {row['source'][:40]!r})"
        out += [f"{where}: {p}" for p in check_claim_row(row)]
    return out


def check_claims_against_run_text(table: Table, glues: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The claims rows on the chapter's own paired run against what its text says of that run: an
    ITL row is "outside its design regime" exactly when the run's design check says so, and shows
    the reduction and CI the intro quotes."""
    source, regime = glued_text(glues, "source"), glued_text(glues, "regime")
    itl_ci, itl_effect = glued_text(glues, "itl_ci"), glued_text(glues, "itl_effect")
    out = []
    for i, row in enumerate(table.rows()):
        parsed = parse_ours(row["ours"]) if row["ours"] else None
        if not row["ours"] or not source.startswith(row["source"]) or parsed is None or parsed.kind != "itl":
            continue
        judged = not parsed.nan and "lo" in parsed.q
        if judged and (row["verdict"] == OUTSIDE_REGIME) != (regime != "in regime"):
            out.append(f"claims row {i}: verdict {row['verdict']!r}, but the run's design check says {regime!r}")
        if parsed.arm is None and judged:
            m = re.fullmatch(rf"({NUM})% to ({NUM})%", itl_ci)
            if m is None or (m[1], m[2]) != (f"{parsed.q['lo'].value:.1f}", f"{parsed.q['hi'].value:.1f}"):
                out.append(f"claims row {i} shows {row['ours']!r}; the intro's CI is {itl_ci!r}")
            mean = re.search(rf"by a mean of ({NUM})%", itl_effect)
            if mean and float(mean[1]) != abs(parsed.q["value"].value):
                out.append(f"claims row {i} shows {row['ours']!r}; the intro says {itl_effect!r}")
    return out


# --- verdict counts --------------------------------------------------------------------------------------------


def expected_counts(claims: Table) -> dict[str, dict[str, int]]:
    """Per kind of evidence, how many claims rows got each verdict (the words before any " (")."""
    counts: dict[str, dict[str, int]] = {}
    for row in claims.rows():
        kind = row["verdict"].split(" (", 1)[0]
        per = counts.setdefault(row["evidence"], dict.fromkeys(VERDICTS, 0))
        per[kind] = per.get(kind, 0) + 1
    return counts


def check_counts(claims: Table, counts: Table) -> list[str]:
    """The counts table shows exactly the claims table's verdicts, per kind of evidence, never pooled."""
    expected = expected_counts(claims)
    out = [f"verdict {v!r} ({e}) is none of {VERDICTS}" for e, per in expected.items() for v in per
           if v not in VERDICTS]
    if counts.columns != list(VERDICTS):
        return [*out, f"the counts table's columns are {counts.columns}, expected {list(VERDICTS)}"]
    shown = {label: {v: int(n) for v, n in zip(counts.columns, row, strict=True)}
             for label, row in zip(counts.index, counts.cells, strict=True)}
    for kind in sorted(set(shown) | set(expected)):
        want = {v: n for v, n in expected.get(kind, dict.fromkeys(VERDICTS, 0)).items() if v in VERDICTS}
        got = shown.get(kind)
        if got != want and not (got is None and not any(want.values())):
            out.append(f"counts for {kind!r}: the table shows {got}, the claims table's verdicts give {want}")
    return out


def check_counts_text(claims: Table, text: str) -> list[str]:
    """The counts sentence ("kind: n verdict, n verdict; ...") says the claims table's counts."""
    said: dict[str, dict[str, int]] = {}
    for clause in text.split("; "):
        kind, _, rest = clause.partition(": ")
        for part in rest.split(", "):
            m = re.fullmatch(r"(\d+) (.+)", part)
            if m is None:
                return [f"counts sentence {text!r}: clause {clause!r} is not 'kind: n verdict, ...'"]
            said.setdefault(kind, {})[m[2]] = int(m[1])
    want = {k: {v: n for v, n in per.items() if n} for k, per in expected_counts(claims).items()}
    return [] if said == want else [f"counts sentence {text!r} says {said}; the claims table gives {want}"]


def check_page_counts(page_html: str, claims: Table) -> list[str]:
    """A built page (the intro) shows the counts table, and it holds the claims table's counts."""
    found = [t for t in parse_tables(page_html) if t.columns == list(VERDICTS)]
    if len(found) != 1:
        return [f"the page shows {len(found)} verdict-counts tables, expected one"]
    return check_counts(claims, found[0])


# --- the explanations table and sentence ------------------------------------------------------------------------

Cells = Mapping[str, tuple[Shown, Shown] | None]
CELL = re.compile(r"(?P<mean>-?\d+)%(?: \[(?P<lo>-?\d+), (?P<hi>-?\d+)\])?")


def explanation_cells(table: Table) -> tuple[dict[str, dict[str, tuple[Shown, Shown] | None]], list[str]]:
    """Variant (row) -> setting (column) -> the rendered CI (None: not rendered, or one trial), and the
    cells' problems."""
    settings = [c for c in table.columns if not c.startswith("pattern")]
    out: dict[str, dict[str, tuple[Shown, Shown] | None]] = {v: {} for v in table.index}
    problems = [] if sorted(settings) == sorted((WORKS, *FAILS)) else [
        f"the explanations table's settings are {settings}, expected {[WORKS, *FAILS]}"]
    for variant in table.index:
        row = table.row(variant)
        for setting in settings:
            text = row[setting]
            m = CELL.fullmatch(text)
            if text == "not rendered" or (m and m["lo"] is None):
                out[variant][setting] = None
            elif m is None:
                problems.append(f"explanations cell ({variant}, {setting}) {text!r} is not 'mean% [lo, hi]'")
            else:
                mean, lo, hi = Shown.parse(m["mean"]), Shown.parse(m["lo"]), Shown.parse(m["hi"])
                problems += _symmetric(f"explanations cell ({variant}, {setting})", mean, lo, hi)
                out[variant][setting] = (lo, hi)
    return out, problems


def _works(q: Mapping[str, float]) -> bool:
    return q["lo"] > 0


def _no_benefit(q: Mapping[str, float]) -> bool:
    return q["hi"] < NO_BENEFIT_BELOW


def pattern_groups(cells: Cells) -> set[str]:
    """Which group(s) of :data:`GROUPS` the rounded cells allow: the pattern holds when the 0.6B CI's lower
    bound is above zero and each other setting's upper bound is below :data:`NO_BENEFIT_BELOW`."""
    if any(cells.get(t) is None for t in (WORKS, *FAILS)):
        return {GROUPS[2]}
    shown = {"w": cells[WORKS][0], **{f"f{i}": cells[t][1] for i, t in enumerate(FAILS)}}  # type: ignore[index]
    outcomes = possible(lambda q: q["w"] > 0 and all(q[f"f{i}"] < NO_BENEFIT_BELOW for i in range(len(FAILS))),
                        shown)
    return {GROUPS[0] if o else GROUPS[1] for o in outcomes}


def _breaks(setting: str, cell: tuple[Shown, Shown]) -> set[bool]:
    """Whether this setting can break the pattern, given the rounding."""
    lo, hi = cell
    if setting == WORKS:
        return {not o for o in possible(_works, {"lo": lo})}
    return {not o for o in possible(_no_benefit, {"hi": hi})}


REASON = re.compile(r"(?P<words>.+) on (?P<name>\S+) \(CI (?P<lo>-?\d+) to (?P<hi>-?\d+)%\)")


def check_reasons(where: str, reasons: str, cells: Cells) -> list[str]:
    """A "does not reproduce" list of reasons: it names exactly the settings that break the pattern, each
    with the table's CI and with words that fit it ("a large benefit" iff lo > 10, "a detectable benefit"
    iff 0 < lo <= 10, "a benefit of up to {hi}% not ruled out" iff lo <= 0 <= hi)."""
    out, named = [], set()
    names = {"0.6B": WORKS, **{t.split("-", 1)[1]: t for t in FAILS}}
    for part in reasons.split("; "):
        m = REASON.fullmatch(part)
        setting = names.get(m["name"]) if m else None
        if m is None or setting is None:
            out.append(f"{where}: reason {part!r} is not '<words> on <setting> (CI lo to hi%)'")
            continue
        named.add(setting)
        lo, hi = Shown.parse(m["lo"]), Shown.parse(m["hi"])
        cell = cells.get(setting)
        if cell is None or not (lo.agrees(cell[0]) and hi.agrees(cell[1])):
            out.append(f"{where}: reason {part!r}, but the table's CI for {setting} is "
                       f"{None if cell is None else (cell[0].value, cell[1].value)}")
        kinds = effect_kinds(lo, hi)
        if setting == WORKS:
            allowed = {"no detectable benefit" if k == "no detectable effect" else f"a {k}" for k in kinds}
        else:
            allowed = {f"a benefit of up to {m['hi']}% not ruled out" if k == "no detectable effect" else f"a {k}"
                       for k in kinds}
        if m["words"] not in allowed:
            out.append(f"{where}: {m['words']!r} said of CI {m['lo']} to {m['hi']}% on {m['name']}; it is "
                       f"{' or '.join(sorted(allowed))}")
    for setting in (WORKS, *FAILS):
        cell = cells.get(setting)
        if cell is None:
            continue
        breaks = _breaks(setting, cell)
        if breaks == {True} and setting not in named:
            out.append(f"{where}: {setting} (CI {cell[0].value:g} to {cell[1].value:g}) breaks the pattern "
                       f"but is not named")
        if breaks == {False} and setting in named:
            out.append(f"{where}: {setting} (CI {cell[0].value:g} to {cell[1].value:g}) fits the pattern "
                       f"but is named as breaking it")
    return out


def check_explanations(table: Table, sentence: str) -> list[str]:
    """The explanations sentence puts each variant in the group its rendered column gives, as the table's
    pattern column does; the reasons in that column fit the intervals beside them (:func:`check_reasons`)."""
    cells, out = explanation_cells(table)
    headers = list(re.finditer(r"(?:^|; )(" + "|".join(map(re.escape, GROUPS)) + r"): ", sentence))
    if not headers:
        return [*out, f"explanations sentence {sentence!r} names none of the groups {GROUPS}"]
    spans = [(h[1], h.end(), headers[i + 1].start() if i + 1 < len(headers) else len(sentence))
             for i, h in enumerate(headers)]
    pattern = next((c for c in table.columns if c.startswith("pattern")), None)
    if pattern is None:
        return [*out, "the explanations table has no pattern column (the reasons live there)"]
    for variant in table.index:
        if sentence.count(variant) != 1:
            out.append(f"variant {variant!r} appears {sentence.count(variant)} times in the sentence, not once")
            continue
        pos = sentence.index(variant)
        group = next((g for g, start, end in spans if start <= pos < end), None)
        allowed = pattern_groups(cells[variant])
        if group not in allowed:
            out.append(f"variant {variant!r} is listed under {group!r}; its column gives "
                       f"{' or '.join(sorted(allowed))}")
        cell = table.row(variant)[pattern]
        if group == GROUPS[1] and cell.startswith("does not: "):
            out += check_reasons(f"variant {variant!r}", cell.removeprefix("does not: "), cells[variant])
        agrees = (cell == "reproduces the pattern" if group == GROUPS[0] else
                  cell.startswith("does not: ") if group == GROUPS[1] else cell.startswith("not testable"))
        if not agrees:
            out.append(f"the pattern column says {cell!r} of {variant!r}; the sentence lists it under {group!r}")
    return out


def check_sim_pattern(glues: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``sim_pattern`` (the modeled study against the paper's pattern) from the four settings' glued CIs."""
    cells: dict[str, tuple[Shown, Shown] | None] = {}
    for setting, key in SIM_PATTERN_GLUES.items():
        m = re.search(rf"paired 95% CI ({NUM})% to ({NUM})%", glued_text(glues, key))
        cells[setting] = (Shown.parse(m[1]), Shown.parse(m[2])) if m else None
    text = glued_text(glues, "sim_pattern")
    group = (GROUPS[0] if text == "reproduces the pattern" else GROUPS[1] if text.startswith("does not: ")
             else GROUPS[2] if text.startswith("not testable") else None)
    allowed = pattern_groups(cells)
    out = [] if group in allowed else [f"sim_pattern says {text!r}; the glued CIs give {' or '.join(sorted(allowed))}"]
    if group == GROUPS[1]:
        out += check_reasons("sim_pattern", text.removeprefix("does not: "), cells)
    return out


# --- effect words in the text ----------------------------------------------------------------------------------

EFFECT = re.compile(
    rf"(?:(?P<verb>reduces|raises) it by a mean of (?P<mean>{NUM})% \(a (?P<kind>[a-z ]+?)\)"
    rf"|(?P<none>shows no detectable effect on it))(?P<rest>[^;()]*); paired 95% CI (?P<a>{NUM})% to (?P<b>{NUM})%")
LEAD = re.compile(rf"(?P<lead>{NUM})% \($")


def check_effect_words(texts: Mapping[str, str]) -> list[str]:
    """Every "<effect words>; paired 95% CI A% to B%" in the text glues: the words fit [A, B] (a large
    benefit iff A > 10, a detectable benefit iff 0 < A <= 10, no detectable effect iff A <= 0 <= B, a harm
    iff B < 0, large below -10), the mean is the CI's centre and has the verb's sign."""
    out = []
    for key, text in texts.items():
        found = list(EFFECT.finditer(text))
        if text.count("paired 95% CI") != len(found):
            out.append(f"{key}: {text!r} has an interval whose effect words this check does not recognise")
        for m in found:
            lo, hi = Shown.parse(m["a"]), Shown.parse(m["b"])
            kind = "no detectable effect" if m["none"] else m["kind"]
            allowed = effect_kinds(lo, hi)
            if kind not in allowed:
                out.append(f"{key}: {kind!r} said of CI {m['a']}% to {m['b']}%; it is {' or '.join(sorted(allowed))}")
            lead = LEAD.search(text[:m.start()])
            means = []
            if m["mean"] is not None:
                mean = Shown.parse(m["mean"])
                means.append(mean if m["verb"] == "reduces" else Shown(-mean.value, -mean.high, -mean.low))
            if lead:
                means.append(Shown.parse(lead["lead"]))
            for mean in means:
                out += _symmetric(f"{key}: {m[0]!r}", mean, lo, hi)
    return out


def _negated(number: str) -> str:
    return number[1:] if number.startswith("-") else f"-{number}"


def check_headline_effects(glues: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The intro's "DLFP <itl_effect> (paired 95% CI <itl_ci> ...)" and the same for TTFT, whose CI is of
    the increase (the reduction's, negated): the words fit the interval (:func:`check_effect_words`)."""
    out = []
    for effect_key, ci_key, sign in (("itl_effect", "itl_ci", 1), ("ttft_effect", "ttft_ci", -1)):
        effect, ci = glued_text(glues, effect_key), glued_text(glues, ci_key)
        m = re.fullmatch(rf"({NUM})% to ({NUM})%", ci)
        if m is None:
            if not effect.startswith("cannot be judged"):
                out.append(f"{ci_key} {ci!r} gives no interval, yet {effect_key} says {effect!r}")
            continue
        lo, hi = (m[1], m[2]) if sign > 0 else (_negated(m[2]), _negated(m[1]))
        out += check_effect_words({effect_key: f"{effect}; paired 95% CI {lo}% to {hi}%"})
    return out


# --- the whole notebook ----------------------------------------------------------------------------------------


# --- the baselines' TTFT premise --------------------------------------------------------------------------------


PREMISE = ("holds", "does not hold", "is mixed")
"""The premise sentence's verdicts, as it words them."""


def premise_verdicts(measured: list[Shown], simulated: list[Shown]) -> set[str]:
    """The premise verdicts the rounded spreads allow: *holds* where every measured (CPU) spread is below
    every simulated one, *does not hold* where every one is above, *is mixed* otherwise."""
    if max(m.high for m in measured) < min(s.low for s in simulated):
        return {"holds"}
    if min(m.low for m in measured) > max(s.high for s in simulated):
        return {"does not hold"}
    surely_not_below = max(m.low for m in measured) >= min(s.high for s in simulated)
    surely_not_above = min(m.high for m in measured) <= max(s.low for s in simulated)
    return {"is mixed"} if surely_not_below and surely_not_above else set(PREMISE)


def check_ttft_premise(spread: str, premise: str) -> list[str]:
    """The premise sentence against the spreads it judges ("t lo-hi ms (p% apart)"; a ``cpu-`` target is
    the measured one, every other a modeled accelerator)."""
    pct = {t: Shown.parse(p) for t, p in re.findall(r"(\S+) \d+-\d+ ms \((\d+)% apart\)", spread)}
    measured = [v for t, v in pct.items() if t.startswith("cpu-")]
    simulated = [v for t, v in pct.items() if not t.startswith("cpu-")]
    if not measured or not simulated:
        return [] if premise.startswith("not testable") else [f"premise {premise!r} judged without both kinds"]
    m = re.match(r"the premise (holds|does not hold|is mixed)\b", premise)
    allowed = premise_verdicts(measured, simulated)
    if m is None or m.group(1) not in allowed:
        return [f"premise {premise!r}: the spreads ({spread}) allow only {sorted(allowed)}"]
    return []


# --- the SLO controller's baselines goal -------------------------------------------------------------------------


SLO_ARM = "dlfp-slo"
TTFT_LINE, NEAR_POINTS = 10.0, 5.0
"""The goal's TTFT line (at most this much P99 TTFT over the best arm meeting the ITL objective) and how
near it a target is named as one a rerun may put on the other side."""


def check_slo_goal(summary: Table, sentence: str) -> list[str]:
    """The baselines goal sentence of the SLO controller against the summary table's row of it (cells
    "+13% TTFT", "misses ITL (a > b ms)" or "not run"): the counts of targets meeting the objective and
    within the line, the verdict, and every target whose excess is near the line named as such (a value
    the rounding leaves on either side of a line accepted either way)."""
    if SLO_ARM not in summary.index:
        return [] if sentence.startswith("not testable") else [f"{SLO_ARM} is in no baselines run: {sentence!r}"]
    cells = dict(zip(summary.columns, summary.cells[summary.index.index(SLO_ARM)], strict=True))
    judged = {t: c for t, c in cells.items() if c != "not run"}
    excess = {t: Shown.parse(m.group(1)) for t, c in judged.items() if (m := re.fullmatch(r"\+?(-?\d+)% TTFT", c))}
    misses = [t for t, c in judged.items() if c.startswith("misses ITL")]
    m = re.search(r"\) (holds|does not hold) on the runs' means: it meets the objective on (\d+) of (\d+) targets, "
                  r"within 10% on (\d+)", sentence)
    if m is None:
        return [f"{SLO_ARM}'s goal sentence is not in the expected words: {sentence!r}"]
    out = []
    if (int(m.group(2)), int(m.group(3))) != (len(excess), len(judged)) or len(excess) + len(misses) != len(judged):
        out.append(f"{SLO_ARM}: the sentence says it meets the objective on {m.group(2)} of {m.group(3)}, the table "
                   f"shows {len(excess)} of {len(judged)}")
    surely = sum(v.high <= TTFT_LINE for v in excess.values())
    maybe = sum(v.low <= TTFT_LINE for v in excess.values())
    if not surely <= int(m.group(4)) <= maybe:
        out.append(f"{SLO_ARM}: within 10% on {m.group(4)}, the table allows {surely}-{maybe}")
    full = not misses and len(judged) == len(cells)
    verdicts = {"holds"} if full and surely == len(excess) else {"does not hold"} if not full or maybe < len(excess) \
        else {"holds", "does not hold"}
    if m.group(1) not in verdicts:
        out.append(f"{SLO_ARM}: the goal '{m.group(1)}', the table allows only {sorted(verdicts)}")
    near_part = sentence.split("near a line", 1)[1] if "near a line" in sentence else ""
    named = set(re.findall(r"(\S+?)(?: \((?:measured|simulated)\))? \([+-]\d+% TTFT\)", near_part))
    for t, v in excess.items():
        gap = abs(v.value - TTFT_LINE)  # a shown integer: the true gap is within half a point of it
        surely_near, maybe_near = gap <= NEAR_POINTS - 0.5, gap <= NEAR_POINTS + 0.5
        if (surely_near and t not in named) or (t in named and not maybe_near):
            out.append(f"{SLO_ARM}: {t}'s excess {v.value:+.0f}% is {'' if surely_near else 'not '}near the line, "
                       f"the sentence {'omits' if surely_near else 'names'} it")
    return out


def check_notebook(path: str | Path) -> list[str]:
    """Every check above on one executed results notebook; a missing glue is a problem, not a skip."""
    glues = read_glues(path)
    try:
        claims = glued_table(glues, "claims_table")
        out = check_claims(claims)
        out += check_claims_against_run_text(claims, glues)
        out += check_counts(claims, glued_table(glues, "claims_counts"))
        out += check_counts_text(claims, glued_text(glues, "claims_counts_text"))
        out += check_explanations(glued_table(glues, "explanations_table"), glued_text(glues, "explanations_verdict"))
        out += check_sim_pattern(glues)
        out += check_headline_effects(glues)
        out += check_effect_words(plain_texts(glues))
        out += check_ttft_premise(glued_text(glues, "baselines_ttft_spread"),
                                  glued_text(glues, "baselines_ttft_premise"))
        out += check_slo_goal(glued_table(glues, "baselines_summary"), glued_text(glues, "baselines_slo_goal"))
    except KeyError as exc:
        out = [str(exc.args[0])]
    return out


def plain_texts(glues: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The glues that are text, not tables (a table's text/plain is pandas' truncated repr)."""
    return {k: v["text/plain"] for k, v in glues.items() if "text/plain" in v and "text/html" not in v}
