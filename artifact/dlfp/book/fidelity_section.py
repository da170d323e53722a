"""The simulation's fidelity on the CPU: a profile fitted to one measured run, and one other workload run on
the real engine and replayed on the modeled one (``dlfp bench sim fidelity``), side by side, as
:mod:`dlfp.book.page` items."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from dlfp.analysis.fidelity import compared, fidelity_table
from dlfp.analysis.figures import provenance
from dlfp.analysis.runs import load_run
from dlfp.book.page import Item, Say, Show
from dlfp.sim.costmodel import load_profile


def section(root: str) -> Iterator[Item]:
    """The fitted profile's own held-out error, then the comparison table (``root``: the bench's folder)."""
    fid = Path(root)
    if not ((fid / "real" / "manifest.json").is_file() and (fid / "modeled" / "manifest.json").is_file()):
        yield Say(f"no fidelity runs under {fid} (dlfp bench sim fidelity --out {fid} makes them)")
        return
    fitted = load_profile(fid / "profile.yaml")
    yield Say(f"profile {fitted.name}: fitted on {fitted.calibration['run']} ({fitted.device}); "
              f"held-out error there p50 {fitted.fit.heldout_p50:.1%}, p90 {fitted.fit.heldout_p90:.1%}")
    table = fidelity_table(compared(fid))
    numbers = [c for c in table.columns if c in ("real", "modeled", "virtual") or c.startswith("modeled (")]
    yield Show(table.style.format({**{c: "{:.2f}" for c in numbers},
                                   **{c: "{:+.1%}" for c in table.columns if "difference" in c}}, na_rep="")
               .hide(axis="index").set_caption(
                   f"real: {provenance(load_run(fid / 'real'))}; modeled: simulated, fitted profile (real time: this "
                   "machine's engine core runs for real; virtual time: the engine-core costs fitted to the same "
                   "measured run, engine.yaml)"))
