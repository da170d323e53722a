"""The method chapter's reference tables, generated from the declarations they document: every DLFP
parameter from :class:`dlfp.control.params.DLFPParams`' fields (default, unit, allowed values, meaning),
and every design rule from :class:`dlfp.trials.design.Rules`, so the book cannot list a bound or a default
the code does not enforce."""

from __future__ import annotations

import json
from dataclasses import fields

import pandas as pd

from dlfp.control.params import SPECS
from dlfp.trials.design import RULE_DOCS, RULES_VERSION, Rules


def params_table() -> pd.DataFrame:
    """One row per parameter, in declaration order; defaults as JSON (``null``, ``true``), as a config writes them."""
    return pd.DataFrame([{"parameter": s.name, "default": json.dumps(s.default), "unit": s.unit, "allowed": s.allowed,
                          "meaning": s.doc} for s in SPECS])


def rules_table() -> pd.DataFrame:
    """One row per design rule with its default and meaning."""
    return pd.DataFrame([{"rule": f.name, "default": getattr(Rules(), f.name), "meaning": RULE_DOCS[f.name]}
                         for f in fields(Rules)])


def rules_version() -> str:
    """The line naming the rules' version, printed above the table."""
    return f"design rules version {RULES_VERSION}"
