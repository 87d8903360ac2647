"""A broker incident's blast radius (issue 30, `details.impact`) in what each receiver is sent: the
webhook's alert object, Slack's text and PagerDuty's custom details."""

from __future__ import annotations

import json

from streaming.config import FleetwatchConfig
from streaming.notify.receivers import PagerDutyReceiver, SlackReceiver, WebhookReceiver
from streaming.workshop.hooks import make_alert, outgoing

IMPACT = {"layout_at": 1_763_799_998_000, "led_as_of": 1_763_799_998_000, "complete": True,
          "partitions_led": 4, "replicas_held": 12, "partitions_offline": 0, "partitions_under_min_isr": 12,
          "top_topics": [{"topic": "orders", "led": 4, "replicas": 12, "offline": 0, "under_min_isr": 12}]}
TEXT = ("leads 4 partitions, 12 replicas; 0 offline, 12 under min ISR "
        "(top: orders 4 led, 12 under min ISR, 0 offline)")


def _receivers() -> tuple[WebhookReceiver, SlackReceiver, PagerDutyReceiver]:
    cfg = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "hook", "type": "webhook", "url": "http://127.0.0.1:1/h"},
        {"name": "chat", "type": "slack", "url": "http://127.0.0.1:1/s"},
        {"name": "pager", "type": "pagerduty", "routing_key_env": "PD"}]}}).alerting.receivers
    return WebhookReceiver(cfg[0], {}), SlackReceiver(cfg[1], {}), PagerDutyReceiver(cfg[2], {"PD": "key"})


def test_every_body_carries_the_blast_radius():
    hook, slack, pager = _receivers()
    alert = make_alert("broker.heartbeat_lost", cluster="c1", broker=3, starts_at=1_763_800_000_000,
                       details={"impact": IMPACT})
    item = outgoing(alert)
    assert json.loads(hook.request([item], 0).body)["details"]["impact"] == IMPACT
    assert f"> blast radius: {TEXT}" in json.loads(slack.request([item], 0).body)["text"]
    details = json.loads(pager.request([item], 0).body)["payload"]["custom_details"]
    assert details["blast_radius"] == TEXT and details["details"]["impact"] == IMPACT


def test_an_alert_without_an_impact_is_sent_as_before():
    _, slack, pager = _receivers()
    alert = make_alert("broker.heartbeat_lost", cluster="c1", broker=3, starts_at=1_763_800_000_000)
    item = outgoing(alert)
    assert "blast radius" not in json.loads(slack.request([item], 0).body)["text"]
    assert json.dumps(json.loads(pager.request([item], 0).body)["payload"]["custom_details"]) == json.dumps(
        alert, sort_keys=True)
