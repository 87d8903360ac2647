"""The identity rules, misrouted connections and endpoint collisions (SPEC section 4) on their
scenarios (tests/support/rule_cases/identity.py, misroutes.py), and the subject fields of
target and endpoint alerts."""

from __future__ import annotations

import pytest
from support.rule_cases import identity, misroutes
from support.rule_events import (
    BIL,
    MISROUTED,
    O_ID,
    UNREACHABLE_RULE,
    fail,
    later,
    lines,
    past,
    probe,
    run,
    same_lines,
    t,
    table,
    table_ids,
)

SCENARIOS = table(identity.CASES | misroutes.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    got = lines(scenario.events, scenario.book)
    same_lines(got, scenario.expected)


def test_target_and_cluster_fields():
    alerts = run([probe(0, O_ID, 2), probe(5, BIL, 1), fail(6, "ord"), later(past(t(36)))])
    by_rule = {a["rule"]: a for a in alerts if a["status"] == "firing"}
    mis = by_rule[MISROUTED]
    assert (mis["endpoint"], mis["target"], mis["cluster_id"]) == ("o2:9092", "ord", BIL)
    unreachable = by_rule[UNREACHABLE_RULE]
    assert (unreachable["target"], unreachable["cluster_id"], unreachable["starts_at"]) == ("ord", None, t(36))
