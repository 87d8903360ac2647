"""A collector's rounds (issue 41; streaming/detect/README.md, "Collectors: rounds, gaps, leaving") on
their scenarios (tests/support/rule_cases/collectors.py): a silent collector is blindness, not its
brokers' silence; a target it drops resolves its alerts; `collector.silent` says what it no longer sees."""

from __future__ import annotations

import pytest
from support.rule_cases import collectors
from support.rule_events import lines, same_lines, table, table_ids

SCENARIOS = table(collectors.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    got = lines(scenario.events, scenario.book)
    same_lines(got, scenario.expected)
