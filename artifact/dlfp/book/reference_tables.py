"""The method chapter's reference tables, generated from the declarations they document: every DLFP
parameter from :class:`dlfp.control.params.DLFPParams`' fields (default, unit, allowed values, meaning),
and every design rule from :class:`dlfp.trials.design.Rules`, so the book cannot list a bound or a default
the code does not enforce."""

from __future__ import annotations

import json

import pandas as pd

from dlfp.control.fields import declared
from dlfp.control.params import SPECS
from dlfp.trials.design import RULES_VERSION, Rules


def params_table() -> pd.DataFrame:
    """One row per parameter, in declaration order; defaults as JSON (``null``, ``true``), as a config writes them."""
    return pd.DataFrame([{"parameter": s.name, "default": json.dumps(s.default), "unit": s.unit, "allowed": s.allowed,
                          "meaning": s.doc} for s in SPECS])


def rules_table() -> pd.DataFrame:
    """One row per design rule, in declaration order: its default, unit, allowed values and meaning."""
    return pd.DataFrame([{"rule": f.name, "default": json.dumps(f.default), "unit": rule.unit, "allowed": rule.allowed,
                          "meaning": rule.doc} for f, rule in declared(Rules)])


def rules_version() -> str:
    """The line naming the rules' version, printed above the table."""
    return f"design rules version {RULES_VERSION}"
