"""Executed notebooks that are a function of their inputs: same traces and code, same bytes.

A reviewer diffs a rebuild of the book against what was published; that only works if
rendering writes nothing that changes from one execution to the next. The notebooks keep
their own cell ids and figures are saved without a software stamp (:func:`dlfp.book.notebook.show`);
what remains is written by the execution machinery and is removed or made stable here, in
one place, after papermill has written a notebook:

- papermill's timestamps, durations and absolute input/output paths (the parameters stay);
- nbclient's per-cell execution timings;
- the random id papermill gives the injected-parameters cell;
- object addresses in text representations (``<pandas.io.formats.style.Styler at 0x7f...>``);
- the random table ids of pandas Stylers (``T_a13a9``), renamed after their cell.

The result records the versions of the rendering stack (:data:`RENDER_STACK`): the same
code and traces render the same bytes with the same versions, and that is what the byte
comparison of a rebuild can promise. The stack is pinned (:data:`CONSTRAINTS`, which ``make setup``
and ``environment.yml`` install with), so a fresh environment has the versions the committed book
records and the comparison runs instead of being skipped; :func:`drift` names what differs.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from dlfp.paths import REPO_ROOT

RENDER_STACK = ("python", "numpy", "pandas", "matplotlib", "papermill", "nbformat", "myst-nb")
"""Packages whose version shapes an executed notebook's bytes (HTML tables, PNGs, glue)."""
CONSTRAINTS = REPO_ROOT / "constraints" / "book.txt"
"""The pip constraints file pinning :data:`RENDER_STACK` (all but Python) and what shapes the bytes below it."""
INJECTED = "injected-parameters"
"""papermill's tag on the cell it inserts; also the stable id it gets here."""
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_STYLER_TABLE = re.compile(r'<table id="T_([A-Za-z0-9_-]+)"')


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def render_stack() -> dict[str, str | None]:
    """Versions of :data:`RENDER_STACK` in this environment (None: not installed).

    Python is recorded as major.minor: pip cannot pin its patch release (so the constraints
    cannot make two environments agree on it), and a patch release changes no rendered byte.
    """
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {name: python if name == "python" else _installed(name) for name in RENDER_STACK}


def _canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): ``Myst_NB`` is ``myst-nb``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path = CONSTRAINTS) -> dict[str, str]:
    """``{name: version}`` of each ``name==version`` line of a pip constraints file (names canonical).

    Raises ``ValueError`` for any other requirement line: a range would let two environments
    render different bytes, which is what the file is there to prevent.
    """
    pins: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)", line)
        if match is None:
            raise ValueError(f"{path}:{number}: {line!r} is not an exact pin (name==version)")
        pins[_canonical(match[1])] = match[2]
    return pins


def drift(path: Path = CONSTRAINTS) -> dict[str, tuple[str | None, str]]:
    """``{name: (installed, pinned)}`` for each pin of ``path`` this environment does not hold (None:
    not installed); empty when the environment renders with the pinned stack."""
    found = {name: (_installed(name), version) for name, version in pinned(path).items()}
    return {name: pair for name, pair in found.items() if pair[0] != pair[1]}


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else value


def _stable_styler_ids(html: str, cell_id: str, taken: list[str]) -> str:
    """Rename each Styler's random uuid to ``<cell id>-<k>``; ``taken`` counts tables in the cell."""
    for uuid in dict.fromkeys(_STYLER_TABLE.findall(html)):
        if re.fullmatch(rf"{re.escape(cell_id)}-\d+", uuid):
            continue  # already stable (normalising twice changes nothing)
        taken.append(uuid)
        html = re.sub(rf"T_{re.escape(uuid)}(?![A-Za-z0-9])", f"T_{cell_id}-{len(taken) - 1}", html)
    return html


def _normalise_output(output: dict[str, Any], cell_id: str, tables: list[str]) -> None:
    if output.get("output_type") == "stream":
        output["text"] = _ADDRESS.sub(">", _text(output["text"]))
        return
    data = output.get("data") or {}
    for mime, value in data.items():  # also glue's copies (application/papermill.record/text/html)
        if mime.endswith("text/plain"):
            data[mime] = _ADDRESS.sub(">", _text(value))
        elif mime.endswith("text/html"):
            data[mime] = _stable_styler_ids(_text(value), cell_id, tables)


def normalise(nb: Any) -> Any:
    """Make an executed notebook (an ``nbformat`` v4 node) independent of when and where it ran.

    Raises ``ValueError`` for a source cell without an id (nbformat < 4.5): nbformat would
    otherwise invent a random one on every write.
    """
    pm = nb.metadata.get("papermill")
    if pm is not None:
        nb.metadata["papermill"] = {"parameters": pm.get("parameters", {})}
    nb.metadata["dlfp"] = {"render_stack": render_stack()}
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if INJECTED in cell.metadata.get("tags", []):
            cell["id"] = INJECTED
        if not cell.get("id"):
            raise ValueError(f"cell {i} has no id: give the source notebook stable cell ids (nbformat 4.5)")
        if "outputs" in cell:
            cell["outputs"] = _merge_streams(cell["outputs"])
        tables: list[str] = []
        for output in cell.get("outputs", []):
            _normalise_output(output, cell["id"], tables)
    return nb


def _merge_streams(outputs: list[Any]) -> list[Any]:
    """Join consecutive stream outputs of one stream: the kernel splits a cell's prints into
    messages by timing (one ``print`` can land as its text and its newline in two), so the split
    differs between two runs of the same code."""
    merged: list[Any] = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")):
            last["text"] = "".join(last["text"]) + "".join(output["text"])
        else:
            merged.append(output)
    return merged


def normalise_file(path: Path) -> None:
    """Normalise an executed notebook in place (atomically)."""
    import nbformat

    from dlfp.paths import write_text_atomic

    nb = nbformat.read(str(path), as_version=4)
    write_text_atomic(Path(path), nbformat.writes(normalise(nb)) + "\n")
