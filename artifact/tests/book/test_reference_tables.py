"""The method chapter's reference tables (:mod:`dlfp.book.reference_tables`): one row per declared parameter
and rule, in declaration order, with the defaults as a config writes them."""

from __future__ import annotations

import json
from dataclasses import fields

from dlfp.book.reference_tables import params_table, rules_table, rules_version
from dlfp.control.params import DLFPParams
from dlfp.trials.design import RULES_VERSION, Rules


def test_every_parameter_in_declaration_order_with_its_default_as_json() -> None:
    table = params_table()
    assert list(table.parameter) == [f.name for f in fields(DLFPParams)]
    row = table.set_index("parameter")
    assert row.loc["step_log", "default"] == "null" and row.loc["enabled", "default"] == "true"
    assert json.loads(row.loc["gain", "default"]) == DLFPParams().gain
    assert row.loc["chunk_init", "allowed"] == "[chunk_min, chunk_max]"


def test_every_rule_with_its_default_unit_and_allowed_values() -> None:
    table = rules_table()
    assert list(table.rule) == [f.name for f in fields(Rules)]
    assert all(table.meaning.str.len() > 0) and all(table.unit.str.len() > 0)
    row = table.set_index("rule")
    assert json.loads(row.loc["max_load", "default"]) == Rules().max_load and row.loc["max_load", "allowed"] == "(0, 1)"
    assert row.loc["max_cost_drift", "allowed"] == "(1, 1000000]"
    assert rules_version() == f"design rules version {RULES_VERSION}"
