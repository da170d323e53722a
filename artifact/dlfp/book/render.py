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
comparison of a rebuild can promise.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any

RENDER_STACK = ("python", "numpy", "pandas", "matplotlib", "papermill", "nbformat", "myst-nb")
"""Packages whose version shapes an executed notebook's bytes (HTML tables, PNGs, glue)."""
INJECTED = "injected-parameters"
"""papermill's tag on the cell it inserts; also the stable id it gets here."""
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_STYLER_TABLE = re.compile(r'<table id="T_([A-Za-z0-9_-]+)"')


def render_stack() -> dict[str, str | None]:
    """Versions of :data:`RENDER_STACK` in this environment."""
    import platform

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {name: platform.python_version() if name == "python" else version(name) for name in RENDER_STACK}


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
