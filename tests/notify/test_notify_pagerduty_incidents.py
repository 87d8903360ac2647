"""Fleet incidents at PagerDuty (issue 30.2), against the project's real HTTP receiver on 127.0.0.1
standing in for the Events API and a real SQLite store written as the job writes it.

Rack r7 fails under three clusters while an unrelated broker of a fourth fails too. One member (c0)
fires alone before there is an incident and is paged by its own dedup key; once c1's member makes
it an incident, PagerDuty gets ONE trigger with the incident's dedup key (refused once: retried as a
whole), a late joiner (c3) a trigger with the same key, c1's resolve an update with the same key
(c3 still fires), c0's resolve its own key's resolve, and, after a notifier restart, c3's resolve
the incident's resolve. The unrelated alert is triggered and resolved by its own key as before.
Every event arrives once, and the outbox ends with everything delivered."""

from __future__ import annotations

import json
import time

from streaming.config import FleetwatchConfig
from streaming.notify import Notifier, NotifyOptions
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import all_delivered, make_alert, outbox_rows, rack_fleet_brokers, resolved

KEY = "pd-routing-key-test"
IMPACT = {"layout_at": 1, "led_as_of": 1, "complete": True, "partitions_led": 4, "replicas_held": 12,
          "partitions_offline": 0, "partitions_under_min_isr": 12,
          "top_topics": [{"topic": "orders", "led": 4, "replicas": 12, "offline": 0, "under_min_isr": 12}]}


def _events(hook, start: int = 0) -> list[dict]:
    return [json.loads(a["body"]) for a in hook.got("/v2/enqueue")[start:]]


def test_one_pagerduty_alert_for_a_fleet_incident_resolved_by_its_last_member(tmp_path, hook):
    hook.start()
    config = FleetwatchConfig.model_validate({
        "incidents": {"notify_wait_ms": 10_000},
        "alerting": {"receivers": [{"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"),
                                    "routing_key_env": "FW_PD_KEY"}]}})
    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    options = NotifyOptions(group_wait_ms=0, retry_base_ms=1000, retry_max_ms=1000)

    def notifier() -> Notifier:
        return Notifier(config, store, options, env={"FW_PD_KEY": KEY}, clock=clock)

    def record(*alerts: dict) -> None:
        """As the job records them (the outbox's wall clock); the notifier's clock then reads the wall
        clock again, so that a held firing is not yet due."""
        store.record_alerts(map(Alert.from_dict, alerts))
        clock.now = time.time() + 1

    first = notifier()
    t0 = clock.ms - 60_000
    store.write({"brokers": rack_fleet_brokers(clock.ms)})
    solo = make_alert("broker.heartbeat_lost", cluster="c0", broker=1, starts_at=t0)
    record(solo)
    first.run(once=True)
    assert _events(hook) == []  # held: it could join an incident
    clock.advance(10)
    first.run(once=True)  # none formed: paged on its own, as before
    (own,) = _events(hook)
    assert (own["event_action"], own["dedup_key"]) == ("trigger", solo["alert_id"])

    rack_c1 = make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=t0 + 400,
                         details={"impact": IMPACT})
    other = make_alert("broker.heartbeat_lost", cluster="c2", broker=1, starts_at=t0 + 200)
    record(rack_c1, other)
    first.run(once=True)  # the unrelated one could join none: sent at once, by its own key; c1's is held
    assert [(e["event_action"], e["dedup_key"]) for e in _events(hook, 1)] == [("trigger", other["alert_id"])]

    hook.script.append(("status", 503, "busy"))
    clock.advance(10)
    first.run(once=True)  # the incident's trigger is refused: nothing of it is recorded
    assert len(hook.refused) == 1 and len(hook.got()) == 2
    clock.advance(2)
    first.run(once=True)  # retried as a whole
    (trigger,) = _events(hook, 2)
    incident_key = trigger["dedup_key"]
    details = trigger["payload"]["custom_details"]
    assert incident_key == f"fleet-incident:{details['incident_id']}" and trigger["event_action"] == "trigger"
    assert trigger["routing_key"] == KEY and trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["summary"].startswith("Fleet incident: 2 clusters share rack r7")
    assert details["domain"] == "rack:r7" and details["clusters"] == ["c0", "c1"]
    assert [(m["alert_id"], m["cluster"], m["subject"]) for m in details["members"]] == [
        (solo["alert_id"], "c0", "tgt-c0 (c0) broker 1"), (rack_c1["alert_id"], "c1", "tgt-c1 (c1) broker 2")]
    assert details["new"] == [rack_c1["alert_id"]] and "blast_radius" not in details["members"][0]
    assert details["members"][1]["blast_radius"].startswith("leads 4 partitions, 12 replicas")

    # A late member (c3's broker in r7) joins: a trigger with the same key, listing all three.
    late = make_alert("broker.fenced", cluster="c3", broker=1, starts_at=t0 + 30_000)
    record(late)
    first.run(once=True)
    assert len(hook.got()) == 3  # held
    clock.advance(10)
    first.run(once=True)
    (joined,) = _events(hook, 3)
    assert (joined["event_action"], joined["dedup_key"]) == ("trigger", incident_key)
    assert [m["alert_id"] for m in joined["payload"]["custom_details"]["members"]] == [
        solo["alert_id"], rack_c1["alert_id"], late["alert_id"]]
    assert joined["payload"]["custom_details"]["new"] == [late["alert_id"]]

    # c1 resolves while c3, sent under the incident, still fires: an update of the incident's alert.
    record(resolved(rack_c1, t0 + 90_000))
    first.run(once=True)
    (update,) = _events(hook, 4)
    assert (update["event_action"], update["dedup_key"]) == ("trigger", incident_key)
    assert update["payload"]["custom_details"]["resolved"]["alert_id"] == rack_c1["alert_id"]
    assert [m["alert_id"] for m in update["payload"]["custom_details"]["still_firing"]] == [late["alert_id"]]
    assert "resolved; 1 alerts of 1 clusters still fire" in update["payload"]["summary"]

    # c0 was paged on its own before the incident formed: it resolves by its own key.
    record(resolved(solo, t0 + 91_000))
    first.run(once=True)
    assert _events(hook, 5) == [{"routing_key": KEY, "dedup_key": solo["alert_id"], "event_action": "resolve"}]
    first.close()

    # A new notifier (a restart: nothing in memory) resolves the incident by its last member.
    second = notifier()
    record(resolved(late, t0 + 92_000), resolved(other, t0 + 92_000))
    second.run(once=True)
    assert sorted(map(json.dumps, _events(hook, 6))) == sorted(json.dumps(
        {"routing_key": KEY, "dedup_key": key, "event_action": "resolve"}) for key in (incident_key, other["alert_id"]))

    # Nothing lost, nothing twice: eight events, every notification delivered.
    assert [(e["event_action"], e["dedup_key"]) for e in _events(hook)[:6]] == [
        ("trigger", solo["alert_id"]), ("trigger", other["alert_id"]), ("trigger", incident_key),
        ("trigger", incident_key), ("trigger", incident_key), ("resolve", solo["alert_id"])]
    assert len(hook.got()) == 8 and all_delivered(store) and len(outbox_rows(store)) == 8
    second.close()
    store.close()


def test_a_resolve_never_closes_the_incident_before_a_joiner_sent_in_the_same_pass(tmp_path, hook):
    """c0 and c1 are paged as one incident; c0 resolves; then c3 joins while c1 resolves, both due in
    one pass. c1's resolve would close the incident (nothing else sent under it fires), racing the
    joiner's trigger: it waits for the next pass and, the joiner sent, is an update instead."""
    hook.start()
    config = FleetwatchConfig.model_validate({
        "incidents": {"notify_wait_ms": 10_000},
        "alerting": {"receivers": [{"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"),
                                    "routing_key_env": "FW_PD_KEY"}]}})
    clock = FakeClock(time.time() + 11)  # past the hold of the rows recorded now
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0), env={"FW_PD_KEY": KEY}, clock=clock)
    t0 = clock.ms - 60_000
    store.write({"brokers": rack_fleet_brokers(clock.ms)})
    c0 = make_alert("broker.heartbeat_lost", cluster="c0", broker=1, starts_at=t0)
    c1 = make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=t0 + 400)
    store.record_alerts(map(Alert.from_dict, [c0, c1]))
    notifier.run(once=True)
    store.record_alerts(map(Alert.from_dict, [resolved(c0, t0 + 50_000)]))
    clock.advance(1)
    notifier.run(once=True)
    (trigger, update) = _events(hook)
    key = trigger["dedup_key"]
    assert (update["event_action"], update["dedup_key"]) == ("trigger", key)

    late = make_alert("broker.fenced", cluster="c3", broker=1, starts_at=t0 + 30_000)
    store.record_alerts(map(Alert.from_dict, [late, resolved(c1, t0 + 60_000)]))
    clock.advance(11)
    notifier.run(once=True)  # the joiner only
    (joined,) = _events(hook, 2)
    assert (joined["event_action"], joined["dedup_key"]) == ("trigger", key)
    assert joined["payload"]["custom_details"]["new"] == [late["alert_id"]]
    clock.advance(1)
    notifier.run(once=True)  # c1's resolve: an update, c3 still fires under the incident
    (after,) = _events(hook, 3)
    assert (after["event_action"], after["dedup_key"]) == ("trigger", key)
    assert [m["alert_id"] for m in after["payload"]["custom_details"]["still_firing"]] == [late["alert_id"]]
    store.record_alerts(map(Alert.from_dict, [resolved(late, t0 + 70_000)]))
    clock.advance(1)
    notifier.run(once=True)
    assert _events(hook, 4) == [{"routing_key": KEY, "dedup_key": key, "event_action": "resolve"}]
    assert all_delivered(store) and len(hook.got()) == 5
    notifier.close()
    store.close()
