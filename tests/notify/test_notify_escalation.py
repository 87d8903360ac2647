"""A stall's page escalates, it does not repeat (issue 44; streaming/detect/README.md, "Broker rules"): the
alerts the engines make of a broker frozen under quorum readings (`broker.stalled`, then
`broker.heartbeat_lost` naming it in `details.escalates`, both resolved at its next fetch) go through the
notifier to the project's real HTTP receiver standing in for PagerDuty's Events API, from a real SQLite
store written as the job writes it. PagerDuty gets one alert: the warning's trigger, the page's trigger
with the same dedup key (raised to critical), and the resolves of that key."""

from __future__ import annotations

import json
import time

from support.rule_cases.readings import frozen, readings
from support.rule_events import run, t

from streaming.config import FleetwatchConfig
from streaming.notify import Notifier, NotifyOptions
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock

KEY = "pd-routing-key-test"


def test_the_page_of_a_stalled_broker_raises_its_pagerduty_alert_instead_of_paging_again(tmp_path, hook):
    hook.start()
    config = FleetwatchConfig.model_validate({
        "incidents": {"enabled": False},
        "alerting": {"receivers": [{"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"),
                                    "routing_key_env": "FW_PD_KEY"}]}})
    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0), env={"FW_PD_KEY": KEY}, clock=clock)
    stalled, lost, *resolves = run(readings(0, 16, frozen(4, back=15)))
    assert [(a["rule"], a["status"]) for a in (stalled, lost)] == [
        ("broker.stalled", "firing"), ("broker.heartbeat_lost", "firing")]
    assert {(a["rule"], a["status"], a["ends_at"]) for a in resolves} == {
        ("broker.stalled", "resolved", t(15) - 100), ("broker.heartbeat_lost", "resolved", t(15) - 100)}  # its fetch
    for step in ([stalled], [lost], resolves):
        store.record_alerts(map(Alert.from_dict, step))
        clock.now = time.time() + 1
        notifier.run(once=True)
    events = [json.loads(a["body"]) for a in hook.got("/v2/enqueue")]
    assert [(e["event_action"], e["dedup_key"], e.get("payload", {}).get("severity")) for e in events] == [
        ("trigger", stalled["alert_id"], "warning"), ("trigger", stalled["alert_id"], "critical"),
        ("resolve", stalled["alert_id"], None), ("resolve", stalled["alert_id"], None)]
    assert events[1]["payload"]["custom_details"]["details"]["escalates"] == stalled["alert_id"]
