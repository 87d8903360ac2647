"""The controller rules (SPEC section 4) on their scenarios (tests/support/rule_cases/controller.py)."""

from __future__ import annotations

import pytest
from support.rule_cases import controller
from support.rule_events import lines, same_lines, table, table_ids

SCENARIOS = table(controller.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    got = lines(scenario.events, scenario.book)
    same_lines(got, scenario.expected)
