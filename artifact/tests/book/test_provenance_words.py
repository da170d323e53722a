"""The first page's provenance words, from hand-made audit rows and manifests."""

from __future__ import annotations

from typing import Any

import pytest

from dlfp.book.provenance_words import book_provenance, host, run_provenance
from dlfp.trials.schema import Manifest


def ran_on(hardware: Any) -> Manifest:
    return Manifest(status="complete", config={}, units=[], hardware=hardware)


INTEL = ran_on({"cpu_logical_cores": 2, "cpu_model": "Intel(R) Xeon(R) Processor"})
AMD = ran_on({"cpu_logical_cores": 2, "cpu_model": "AMD EPYC 7B13"})
GPU = ran_on({"cpu_logical_cores": 32, "cpu_model": "AMD EPYC 7B13",
              "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}, {"name": "NVIDIA A100-SXM4-80GB"}]})


def audit(commit: str, since: str = "none") -> dict[str, str]:
    return {"commit": commit, "tree at run": "clean tree", "code changed since": since}


def test_host_names_cores_cpu_and_gpus() -> None:
    assert host(INTEL) == "2-core Intel Xeon Processor"
    assert host(AMD) == "2-core AMD EPYC 7B13 CPU"
    assert host(GPU) == "32-core AMD EPYC 7B13 CPU with NVIDIA A100-SXM4-80GB"
    assert host(ran_on(None)) == "unknown CPU" and host(ran_on("junk")) == "unknown CPU"


def test_one_run_says_its_commit_machine_and_whether_code_changed() -> None:
    assert run_provenance(audit("1a2b3c4d5e"), INTEL) == ("made at commit 1a2b3c4d5e (clean tree) on a 2-core Intel "
                                                          "Xeon Processor; code unchanged since")
    assert run_provenance(audit("1a2b3c4d5e", "3 files (+10 -2)"), INTEL).endswith(
        "; code changed since: 3 files (+10 -2)")


def test_every_run_counted_by_commit_machine_and_changed_code() -> None:
    words = book_provenance([audit("a"), audit("a", "2 files (+1 -1)"), audit("b")], [INTEL, INTEL, AMD])
    assert words == ("The book renders 3 runs, made at 2 commits (2 on a 2-core Intel Xeon Processor; 1 on a 2-core "
                     "AMD EPYC 7B13 CPU); the code rendering it differs from the code that made 1 of them "
                     "(appendix: what changed, per run).")
    same = book_provenance([audit("a")], [INTEL])
    assert "made at 1 commit (1 on a" in same and "is the code that made every one" in same
    assert book_provenance([], []) == "The book renders no run."
    with pytest.raises(ValueError, match="one of each per run"):
        book_provenance([audit("a")], [])
