"""What an SRE's page says (issue 43), as the receivers get it: the cluster's name, the broker's host
and rack, the rule's runbook and the alert's page on the dashboard, at a webhook, Slack and PagerDuty
(the project's real HTTP receiver on 127.0.0.1, the notifier in this process over a real SQLite
store), for an alert alone and for a fleet incident's members. The alert comes from detection itself
(`detect` over the events of a silent broker, with the configured cluster), as the job would write it.
Alertmanager's annotations: tests/notify/test_notify_alertmanager.py."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from support.rule_events import C, bk, boot, hb, later, past, t

from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.notify import Notifier, NotifyOptions, verify_signature
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import SECRET, make_alert, rack_fleet_brokers

DASHBOARD = "https://fleetwatch.example.com"
RUNBOOKS = "https://wiki.example.com/kafka/runbooks"
PAYMENTS = {"name": "payments-eu1", "bootstrap": ["b1.pay:9092"], "expected_cluster_id": C,
            "tags": {"env": "prod", "region": "eu-west-1"}}


def _config(hook, **alerting) -> FleetwatchConfig:
    return FleetwatchConfig.model_validate({
        "clusters": [PAYMENTS],
        "alerting": {"receivers": [
            {"name": "ops", "type": "webhook", "url": hook.url("/hook"), "secret_env": "FW_SECRET"},
            {"name": "chat", "type": "slack", "url": hook.url("/slack")},
            {"name": "pager", "type": "pagerduty", "url": hook.url("/pd"), "routing_key_env": "FW_PD"}],
            **alerting}})


def _notifier(config: FleetwatchConfig, store: Store, clock: FakeClock) -> Notifier:
    return Notifier(config, store, NotifyOptions(group_wait_ms=0, retry_base_ms=1000, retry_max_ms=1000),
                    env={"FW_SECRET": SECRET, "FW_PD": "pd-key"}, clock=clock)


def _silent_broker_3(config: FleetwatchConfig, now_ms: int) -> Alert:
    """Detection's broker.heartbeat_lost of payments-eu1's broker 3 (b3.pay:9092, rack a)."""
    shift = now_ms - t(60)  # event times a minute ago, on the notifier's clock
    listing = [{**bk(1, "b1.pay:9092"), "rack": "c"}, {**bk(3, "b3.pay:9092"), "rack": "a"}]
    events = [boot(0, "pay", C, "b1.pay:9092", listing), hb(t(1), 1), hb(t(1), 3), hb(t(9), 1), later(past(t(10)))]
    (alert,) = detect([replace(e, ts=e.ts + shift) for e in events], config.rule_book())
    return alert


def test_every_receiver_gets_the_names_and_both_links(tmp_path, hook):
    hook.start()
    clock = FakeClock(time.time() + 5)
    config = _config(hook, dashboard_url=DASHBOARD, runbook_base_url=RUNBOOKS)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    alert = _silent_broker_3(config, clock.ms)
    assert (alert.cluster_name, alert.broker_host, alert.rack) == ("payments-eu1", "b3.pay:9092", "a")
    store.record_alerts([alert])
    notifier = _notifier(config, store, clock)
    notifier.run(once=True)
    runbook = f"{RUNBOOKS}/broker.heartbeat_lost"
    page = f"{DASHBOARD}/alerts?alert={alert.alert_id}"

    (webhook,) = hook.got("/hook")
    assert verify_signature(SECRET, webhook["body"], webhook["headers"]["x-fleetwatch-signature"], now=clock.now)
    body = json.loads(webhook["body"])
    assert body == {**alert.to_dict(), "runbook_url": runbook, "dashboard_url": page}
    assert (body["cluster_name"], body["tags"], body["broker_host"], body["rack"]) == (
        "payments-eu1", {"env": "prod", "region": "eu-west-1"}, "b3.pay:9092", "a")
    assert body["summary"] == "payments-eu1: broker 3 (b3.pay:9092, rack a) has sent no heartbeat for 9 s"

    (slack,) = hook.got("/slack")
    text = json.loads(slack["body"])["text"]
    assert "payments-eu1: broker 3 (b3.pay:9092, rack a) has sent no heartbeat for 9 s" in text
    assert f"<{runbook}|runbook>" in text and f"<{page}|dashboard>" in text

    (pager,) = hook.got("/pd")
    event = json.loads(pager["body"])
    assert event["links"] == [{"href": runbook, "text": "Runbook: broker.heartbeat_lost"},
                              {"href": page, "text": "Alert on the dashboard"}]
    payload = event["payload"]
    assert payload["summary"].startswith("[broker.heartbeat_lost] payments-eu1: broker 3 (b3.pay:9092, rack a) ")
    assert (payload["source"], payload["component"]) == ("payments-eu1", "broker 3 (b3.pay:9092)")
    details = payload["custom_details"]
    assert (details["cluster_name"], details["broker_host"], details["rack"]) == ("payments-eu1", "b3.pay:9092", "a")
    notifier.close()
    store.close()


def test_without_configured_links_they_lead_to_the_dashboards_own_pages(tmp_path, hook):
    hook.start()
    clock = FakeClock(time.time() + 5)
    config = _config(hook)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    alert = _silent_broker_3(config, clock.ms)
    store.record_alerts([alert])
    notifier = _notifier(config, store, clock)
    notifier.run(once=True)
    body = json.loads(hook.got("/hook")[0]["body"])
    assert body["runbook_url"] == "http://127.0.0.1:8050/runbooks/broker.heartbeat_lost"
    assert body["dashboard_url"] == f"http://127.0.0.1:8050/alerts?alert={alert.alert_id}"
    notifier.close()
    store.close()


def test_a_fleet_incidents_notification_names_its_members_and_links_the_incident_and_runbooks(tmp_path, hook):
    hook.start()
    clock = FakeClock(time.time() + 5)
    config = _config(hook, dashboard_url=DASHBOARD, runbook_base_url=RUNBOOKS)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.write({"brokers": rack_fleet_brokers(clock.ms)})
    t0 = clock.ms - 60_000
    members = [make_alert("broker.heartbeat_lost", cluster=cluster, broker=broker, starts_at=t0 + i * 400,
                          names={"cluster_name": f"orders-{cluster}", "tags": {}, "broker_host": host, "rack": "r7"})
               for i, (cluster, broker, host) in enumerate([("c0", 1, "c0-b1.dc1.example:9092"),
                                                            ("c1", 2, "c1-b2.dc1.example:9092")])]
    store.record_alerts(map(Alert.from_dict, members))
    notifier = _notifier(config, store, clock)
    notifier.run(once=True)  # held for the incident
    clock.advance(11)
    notifier.run(once=True)

    (webhook,) = hook.got("/hook")
    body = json.loads(webhook["body"])
    assert body["schema"] == "fleetwatch.incident/v1"
    assert body["dashboard_url"] == f"{DASHBOARD}/incidents?incident={body['incident_id']}"
    for sent, member in zip(body["alerts"], members, strict=True):
        assert (sent["cluster_name"], sent["broker_host"], sent["rack"]) == (
            member["cluster_name"], member["broker_host"], "r7")
        assert sent["runbook_url"] == f"{RUNBOOKS}/broker.heartbeat_lost"
        assert sent["dashboard_url"] == f"{DASHBOARD}/alerts?alert={member['alert_id']}"

    text = json.loads(hook.got("/slack")[0]["body"])["text"]
    assert f"<{DASHBOARD}/incidents?incident={body['incident_id']}|dashboard>" in text
    assert "orders-c0" in text and "orders-c1" in text and f"<{RUNBOOKS}/broker.heartbeat_lost|runbook>" in text

    event = json.loads(hook.got("/pd")[0]["body"])
    assert event["dedup_key"] == f"fleet-incident:{body['incident_id']}"
    assert event["links"] == [{"href": f"{DASHBOARD}/incidents?incident={body['incident_id']}",
                               "text": "Fleet incident on the dashboard"},
                              {"href": f"{RUNBOOKS}/broker.heartbeat_lost", "text": "Runbook: broker.heartbeat_lost"}]
    assert [m["cluster_name"] for m in event["payload"]["custom_details"]["members"]] == ["orders-c0", "orders-c1"]
    notifier.close()
    store.close()
