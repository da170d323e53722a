"""Where the rendered runs come from, in the words the book's first page prints.

The reproducibility appendix audits every rendered run (:func:`dlfp.trials.provenance.audit`: its commit,
whether code changed since, its re-verified files). A reader who stops at the first page should still learn
which commit and machine made the headline run, whether the code rendering the book is the code that made
it, and how many of the book's runs share that state: :func:`run_provenance` and :func:`book_provenance`
word it from the audit rows and the manifests, so the page cannot say something the appendix does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlfp.analysis.labels import cpu_host
from dlfp.trials.schema import Manifest

UNCHANGED = "none"
"""An audit's ``code changed since`` where the run's commit has the code rendering the book."""


def host(manifest: Manifest) -> str:
    """The machine a run's process ran on: its CPU (cores and model), and its GPUs where it recorded any.
    A simulated run's host is what ran its scheduler, not the accelerator it models."""
    hardware = manifest.hardware
    hardware = hardware if isinstance(hardware, Mapping) else {}
    where = cpu_host(hardware)
    gpus = hardware.get("gpus")
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, Mapping)}) if isinstance(gpus, list) else []
    return f"{where} with {', '.join(names)}" if names else where


def run_provenance(audit: Mapping[str, Any], manifest: Manifest) -> str:
    """One run: "made at commit 1a2b3c4d5e (clean tree) on a 2-core Intel Xeon Processor; code changed since:
    12 files (+340 -120)", or "...; code unchanged since"."""
    since = audit.get("code changed since", "unknown")
    tail = "code unchanged since" if since == UNCHANGED else f"code changed since: {since}"
    return (f"made at commit {audit.get('commit', '?')} ({audit.get('tree at run', 'tree unknown')}) on a "
            f"{host(manifest)}; {tail}")


def book_provenance(audits: Sequence[Mapping[str, Any]], manifests: Sequence[Manifest]) -> str:
    """Every rendered run at once: how many, at how many commits, on which machines, and for how many the
    code rendering the book differs from the code that made them."""
    if len(audits) != len(manifests):
        raise ValueError(f"{len(audits)} audits for {len(manifests)} manifests: one of each per run")
    if not audits:
        return "The book renders no run."
    commits = {a.get("commit") for a in audits}
    machines: dict[str, int] = {}
    for m in manifests:
        machines[host(m)] = machines.get(host(m), 0) + 1
    changed = sum(a.get("code changed since") != UNCHANGED for a in audits)
    on = "; ".join(f"{n} on a {name}" for name, n in sorted(machines.items(), key=lambda kv: (-kv[1], kv[0])))
    n = len(audits)
    state = ("the code rendering it is the code that made every one" if not changed else
             f"the code rendering it differs from the code that made {changed} of them")
    return (f"The book renders {n} run{'s' if n != 1 else ''}, made at {len(commits)} "
            f"commit{'s' if len(commits) != 1 else ''} ({on}); {state} (appendix: what changed, per run).")
