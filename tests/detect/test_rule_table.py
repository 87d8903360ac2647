"""The rule table and the alert object (SPEC section 4), and that every rule has scenarios that
fire, stay quiet and resolve."""

from __future__ import annotations

import pytest
from support.rule_cases import CASES
from support.rule_events import B1, HB_LOST, SPEC_RULES, C, F, R, hb, later, line_of, past, run, t

from streaming.records.alert import RULES


@pytest.mark.parametrize("rule", sorted(SPEC_RULES))
def test_every_rule_has_fires_quiet_and_resolves_cases(rule):
    tags = set().union(*(c.tags for c in CASES.get(rule, [])))
    assert {"fires", "quiet"} <= tags
    # every rule's expected alerts include its own resolution somewhere
    assert any(R_line[0] == "resolved" and R_line[1] == rule
               for cs in CASES.values() for c in cs for R_line in c.expected), f"no resolution case for {rule}"


def test_rule_table_matches_spec():
    assert RULES == SPEC_RULES


def test_alert_object_is_the_spec_alert_contract():
    (alert,) = run([hb(t(0), 1), later(past(t(9)))])
    assert set(alert) == {"schema", "alert_id", "rule", "status", "severity", "cluster_id", "target", "broker_id",
                          "endpoint", "starts_at", "ends_at", "summary", "details",
                          # additive fields (issue 43; streaming/detect/README.md, "Alert fields")
                          "cluster_name", "tags", "broker_host", "rack"}
    assert alert["schema"] == "fleetwatch.alert/v1"
    assert (alert["rule"], alert["severity"], alert["status"]) == (HB_LOST, "critical", "firing")
    assert (alert["cluster_id"], alert["broker_id"], alert["target"], alert["endpoint"]) == (C, 1, None, None)
    assert len(alert["alert_id"]) == 32 and int(alert["alert_id"], 16) >= 0
    assert alert["summary"]


def test_alert_id_is_stable_per_incident():
    alerts = run([hb(t(0), 1), hb(t(20), 1), hb(t(40), 1), hb(t(41), 1)])
    assert [line_of(a) for a in alerts] == [
        F(HB_LOST, B1, t(9)), R(HB_LOST, B1, t(9), t(20)), F(HB_LOST, B1, t(29)), R(HB_LOST, B1, t(29), t(40))]
    ids = [a["alert_id"] for a in alerts]
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]
