"""Names in every alert (issue 43; streaming/detect/naming.py, README "Alert fields"): the cluster's
configured name, else the target that last reported it; its tags; a broker's host and rack as last
seen; the summary naming them; the alert id as before; and alerts written before names decode."""

from __future__ import annotations

from pathlib import Path

from support.rule_events import HB_LOST, ID_CHANGED, UNREACHABLE_RULE, C, D, bk, boot, fail, hb, later, past, run, t

from streaming.config import ClusterConfig, RuleBook, RuleSettings
from streaming.detect import load_engine
from streaming.records.alert import Alert, alert_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
PAYMENTS = ClusterConfig(name="payments-eu1", bootstrap=["b1.pay:9092"], expected_cluster_id=C,
                         tags={"env": "prod", "region": "eu-west-1"})


def _lost_broker_3(target: str = "pay") -> list:
    """Cluster C listed by `target` (broker 3 at b3.pay:9092, rack a), then broker 3 silent."""
    listing = [{**bk(1, "b1.pay:9092"), "rack": "c"}, {**bk(3, "b3.pay:9092"), "rack": "a"}]
    return [boot(0, target, C, "b1.pay:9092", listing), hb(t(1), 1), hb(t(1), 3), hb(t(9), 1),
            later(past(t(10)))]


def test_a_broker_alert_names_the_configured_cluster_its_tags_and_the_brokers_host_and_rack():
    (alert,) = run(_lost_broker_3(), RuleBook(RuleSettings(), [PAYMENTS]))
    assert alert["rule"] == HB_LOST and alert["broker_id"] == 3
    assert alert["cluster_name"] == "payments-eu1"  # by its pinned id, whatever the target is called
    assert alert["tags"] == {"env": "prod", "region": "eu-west-1"}
    assert (alert["broker_host"], alert["rack"]) == ("b3.pay:9092", "a")
    assert alert["summary"] == "payments-eu1: broker 3 (b3.pay:9092, rack a) has sent no heartbeat for 9 s"
    # The names are no part of the id: receivers and the store dedupe on rule + subject + starts_at.
    assert alert["alert_id"] == alert_id(HB_LOST, f"{C}/3", t(10))


def test_without_config_a_cluster_is_named_by_the_target_that_last_reported_it():
    (alert,) = run(_lost_broker_3("pay-internal"))
    assert (alert["cluster_name"], alert["tags"]) == ("pay-internal", {})
    assert alert["summary"].startswith("pay-internal: broker 3 (b3.pay:9092, rack a) ")


def test_a_cluster_configured_by_target_name_carries_its_tags():
    named = ClusterConfig(name="pay", tags={"env": "prod"})
    (alert,) = run(_lost_broker_3(), RuleBook(RuleSettings(), [named]))
    assert (alert["cluster_name"], alert["tags"]) == ("pay", {"env": "prod"})


def test_the_name_is_the_reporting_targets_of_the_alerts_moment_whatever_the_micro_batches():
    # Broker 3 of C falls silent while "pay" reports C; "pay-b" reports it only after the deadline.
    # run() checks every batching gives the same alerts: the name must not depend on which batch
    # (the watermark's timer or pay-b's response) fired the deadline.
    events = [*_lost_broker_3()[:-1], boot(11, "pay-b", C, "b9:9092", [bk(1, "b1.pay:9092")]), later(past(t(12)))]
    (alert,) = [a for a in run(events) if a["rule"] == HB_LOST]
    assert alert["cluster_name"] == "pay"


def test_a_target_alert_is_named_by_its_target_with_the_configured_tags():
    book = RuleBook(RuleSettings(), [ClusterConfig(name="search", tags={"env": "staging"})])
    alerts = run([boot(0, "search", D, "s1:9092"), boot(1, "search", C, "s1:9092"),
                  *[fail(s, "search") for s in (2, 20, 33)]], book)
    changed = next(a for a in alerts if a["rule"] == ID_CHANGED)
    assert (changed["cluster_name"], changed["tags"], changed["broker_host"]) == ("search", {"env": "staging"}, None)
    assert changed["summary"] == f"search: bootstrap reports cluster id {C}, pinned {D}"
    unreachable = next(a for a in alerts if a["rule"] == UNREACHABLE_RULE)
    assert unreachable["summary"] == "search: every probe failed for 30 s"


def test_a_broker_heard_of_by_heartbeats_only_is_named_by_nothing_and_says_so_as_before():
    (alert,) = run([hb(t(0), 1), later(past(t(9)))])
    assert (alert["cluster_name"], alert["tags"], alert["broker_host"], alert["rack"]) == (None, {}, None, None)
    assert alert["summary"] == "broker 1 has sent no heartbeat for 9 s"


def test_an_alert_stored_before_names_decodes_with_none():
    old = {"schema": "fleetwatch.alert/v1", "alert_id": "a" * 32, "rule": HB_LOST, "status": "firing",
           "severity": "critical", "cluster_id": C, "target": None, "broker_id": 2, "endpoint": None,
           "starts_at": t(10), "ends_at": None, "summary": "broker 2 sent no heartbeat for 9000 ms", "details": {}}
    alert = Alert.from_dict(old)
    assert (alert.cluster_name, alert.tags, alert.broker_host, alert.rack) == (None, {}, None, None)
    assert {k: v for k, v in alert.to_dict().items() if k in old} == old


def test_a_detection_state_written_before_names_loads_and_resolves_its_open_alert_as_it_fired():
    # Written by main 69ef28b (before issue 43): cluster C's shard with broker 1's heartbeat_lost open.
    engine = load_engine((FIXTURES / "cluster-engine-format4-69ef28b.bin").read_bytes())
    ((rule, subject),) = engine.incidents.open
    assert (rule, subject) == (HB_LOST, f"{C}/1")
    out = engine.process([(("hb", 9), hb(t(30), 1))], t(20), RuleBook(RuleSettings(), [PAYMENTS]))
    resolved, fired = (next(a for a in out.alerts if a.status == status) for status in ("resolved", "firing"))
    assert (resolved.subject, resolved.ends_at) == (subject, t(30))
    assert resolved.alert_id == alert_id(HB_LOST, subject, t(10))
    # It fired without names: its resolution repeats the firing line, unnamed, and decodes.
    assert resolved.summary == "broker 1 sent no heartbeat for 9000 ms" and resolved.cluster_name is None
    assert Alert.from_json(resolved.message()).to_dict() == resolved.to_dict()
    # What the restored shard fires now is named (broker 2, silent since t(9), as the state kept it).
    assert (fired.subject, fired.starts_at) == (f"{C}/2", t(18))
    assert fired.summary == "payments-eu1: broker 2 (b2.pay:9092) has sent no heartbeat for 9 s"
