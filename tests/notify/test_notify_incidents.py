"""Fleet incidents in the notifier (issue 30.2), against the project's real HTTP receiver on
127.0.0.1 and a real SQLite store written as the job writes it: one rack fails under two clusters
while an unrelated broker of a third fails at the same moment. The webhook gets ONE signed incident
notification for the two members and the unrelated alert alone; a refused incident notification is
retried as a whole and recorded only once accepted; a late member goes as a joiner; every member's
resolve is delivered as before, and the outbox ends with everything delivered."""

from __future__ import annotations

import json
import time

from streaming.config import FleetwatchConfig
from streaming.notify import Notifier, NotifyOptions, verify_signature
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import SECRET, all_delivered, make_alert, outbox_rows, rack_fleet_brokers, resolved


def test_one_notification_for_a_fleet_incident_and_every_resolve_as_before(tmp_path, hook):
    hook.start()
    config = FleetwatchConfig.model_validate({
        "incidents": {"notify_wait_ms": 10_000},
        "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": hook.url(),
                                    "secret_env": "FW_SECRET"}]}})
    clock = FakeClock(time.time() + 5)  # a little ahead: rows just recorded are due
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0, retry_base_ms=1000, retry_max_ms=1000),
                        env={"FW_SECRET": SECRET}, clock=clock)
    t0 = clock.ms - 60_000
    store.write({"brokers": rack_fleet_brokers(clock.ms)})
    rack_c0 = make_alert("broker.heartbeat_lost", cluster="c0", broker=1, starts_at=t0)
    rack_c1 = make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=t0 + 400)
    other = make_alert("broker.heartbeat_lost", cluster="c2", broker=1, starts_at=t0 + 200)
    store.record_alerts(map(Alert.from_dict, [rack_c0, rack_c1, other]))

    notifier.run(once=True)  # the two that could join an incident are held; the unrelated one could join none
    assert [a["headers"]["x-fleetwatch-alert-id"] for a in hook.got()] == [other["alert_id"]]

    hook.script.append(("status", 503, "busy"))
    clock.advance(10)
    notifier.run(once=True)  # the incident's one notification is refused: nothing of it is recorded
    assert len(hook.refused) == 1 and len(hook.got()) == 1
    assert not any(r["delivered_at"] for r in outbox_rows(store) if r["alert_id"] != other["alert_id"])
    clock.advance(2)
    notifier.run(once=True)  # retried as a whole
    incident = hook.got()[1]
    body = json.loads(incident["body"])
    assert verify_signature(SECRET, incident["body"], incident["headers"]["x-fleetwatch-signature"], now=clock.now)
    assert body["schema"] == "fleetwatch.incident/v1" and body["status"] == "firing"
    assert body["domain"] == {"kind": "rack", "value": "r7"} and body["clusters"] == ["c0", "c1"]
    assert [a["alert_id"] for a in body["alerts"]] == [rack_c0["alert_id"], rack_c1["alert_id"]]
    assert incident["headers"]["x-fleetwatch-incident-id"] == body["incident_id"]
    assert incident["headers"]["x-fleetwatch-delivery-id"].startswith(f"{body['incident_id']}:firing:")

    # A late member (c3's broker in r7) joins: one notification naming all three members.
    late = make_alert("broker.fenced", cluster="c3", broker=1, starts_at=t0 + 30_000)
    store.record_alerts(map(Alert.from_dict, [late]))
    clock.advance(10)
    notifier.run(once=True)
    joined = json.loads(hook.got()[2]["body"])
    assert joined["incident_id"] == body["incident_id"] and [a["alert_id"] for a in joined["alerts"]] == [
        late["alert_id"]]
    assert joined["member_ids"] == [rack_c0["alert_id"], rack_c1["alert_id"], late["alert_id"]]

    # Every member resolves on its own, as before.
    store.record_alerts(map(Alert.from_dict, [resolved(a, t0 + 90_000) for a in (rack_c0, rack_c1, late, other)]))
    notifier.run(once=True)
    resolves = [(a["headers"]["x-fleetwatch-alert-id"], a["headers"]["x-fleetwatch-status"]) for a in hook.got()[3:]]
    assert sorted(resolves) == sorted((a["alert_id"], "resolved") for a in (rack_c0, rack_c1, late, other))
    assert all_delivered(store) and len(hook.got()) == 7
    notifier.close()
    store.close()
