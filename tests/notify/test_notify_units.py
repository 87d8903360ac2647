"""The notifier's parts in one process, without a child process or a real receiver: signatures,
redaction, durations, routing, how each HTTP answer is classed and retried, and the messages each
kind of receiver gets (Slack, PagerDuty, Alertmanager).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert, select

from streaming.config import ConfigError, FleetwatchConfig, Route
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.notify.receivers import (
    ALERTMANAGER_FIRING_TTL_MS,
    AlertmanagerReceiver,
    HttpRequest,
    IncidentTag,
    PagerDutyReceiver,
    SlackReceiver,
    sign,
    verify_signature,
)
from streaming.notify.routes import Router
from streaming.plumbing.redact import Scrubber, redact_text, redact_url
from streaming.records.alert import Alert
from streaming.store import DEAD, NO_RECEIVER, PENDING, Store, deliveries, outbox, parse_duration
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import SECRET, delivery_rows, iso_ms, make_alert, outgoing, resolved


def test_signature_roundtrip_and_tamper():
    body = b'{"alert_id":"x"}'
    header = sign(SECRET, body, 1_763_800_000)
    t, v1 = header.split(",")
    assert t == "t=1763800000" and re.fullmatch(r"v1=[0-9a-f]{64}", v1)
    assert verify_signature(SECRET, body, header, now=1_763_800_000 + 10)
    assert not verify_signature(SECRET, body + b" ", header, now=1_763_800_000)
    assert not verify_signature("other", body, header, now=1_763_800_000)
    assert not verify_signature(SECRET, body, header, now=1_763_800_000 + 3600)
    assert not verify_signature(SECRET, body, header), "the wall clock is years later: a replay"


def test_redaction():
    assert redact_url("https://user:pw@hooks.example/x?token=abc&v=2") == "https://***@hooks.example/***"
    assert redact_url("https://hooks.slack.com/services/T0/B0/XOXB") == "https://hooks.slack.com/***"
    assert redact_url("http://127.0.0.1:9093") == "http://127.0.0.1:9093"
    assert redact_url("http://[::1]:9093/") == "http://[::1]:9093"
    said = redact_text("POST to https://bob:hunter22@h.example/p?k=s3cr3t failed; see http://ok.example/a")
    assert "hunter22" not in said and "s3cr3t" not in said and "http://ok.example/a" in said
    assert Scrubber(["routing-key-123"]).clean("bad key routing-key-123") == "bad key ***"


def test_parse_duration():
    assert parse_duration("2h") == 7_200_000
    assert parse_duration("1h30m") == 5_400_000
    assert parse_duration("45s") == 45_000
    for bad in ("", "2", "h", "2x", "-1h", "0m"):
        with pytest.raises(ConfigError):
            parse_duration(bad)


def test_routes_are_a_union_with_patterns_and_cluster_tags():
    config = FleetwatchConfig.model_validate({"clusters": [{"name": "pay", "tags": {"env": "prod"}}]})
    router = Router([Route(receiver="pager", match={"severity": ["critical"], "env": ["prod"]}),
                     Route(receiver="fence", match={"rule": ["broker.fen*"]}),
                     Route(receiver="ops")], ["pager", "fence", "ops", "unused"], config.clusters)
    crit = make_alert("broker.heartbeat_lost", cluster="c1", target="pay", broker=1, starts_at=1)
    assert router.receivers_for(Alert.from_dict(crit)) == ["pager", "ops"]
    assert router.receivers_for(Alert.from_dict({**crit, "target": "staging"})) == ["ops"]
    fenced = Alert.from_dict(make_alert("broker.fenced", cluster="c1", broker=1, starts_at=1))
    assert router.receivers_for(fenced) == ["fence", "ops"]
    assert Router([], ["a", "b"]).receivers_for(Alert.from_dict(crit)) == ["a", "b"]


def _notifier(tmp_path: Path, handler: Callable[[httpx.Request], httpx.Response], **opts) -> Notifier:
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "ops", "type": "webhook", "url": "http://u:pw-secret@127.0.0.1:1/x"}]}})
    return Notifier(config, Store(f"sqlite:///{tmp_path / 'u.db'}"), NotifyOptions(**opts), env={},
                    transport=httpx.MockTransport(handler))


def test_response_classes_and_backoff(tmp_path):
    answers = iter([httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(503, text="busy"),
                    httpx.Response(404, text="no such hook"), httpx.Response(302, headers={"Location": "/y"}),
                    httpx.Response(202)])

    def handler(request):
        return next(answers)

    notifier = _notifier(tmp_path, handler, retry_base_ms=1000, retry_max_ms=60_000)
    receiver = notifier.receivers["ops"]
    req = HttpRequest(receiver.url, b"{}")
    too_many = notifier.sender.send(receiver, req)
    assert not too_many.ok and not too_many.permanent and too_many.retry_after_ms == 7000
    busy = notifier.sender.send(receiver, req)
    assert not busy.permanent and busy.error == "HTTP 503 Service Unavailable: busy"
    gone = notifier.sender.send(receiver, req)
    assert gone.permanent and "404" in gone.error and "no such hook" in gone.error
    moved = notifier.sender.send(receiver, req)
    assert moved.permanent and "redirect" in moved.error
    assert notifier.sender.send(receiver, req).ok

    def refuse(request):
        raise httpx.ConnectError("connection refused to http://u:pw-secret@127.0.0.1:1/x")

    refusing = _notifier(tmp_path, refuse)
    down = refusing.sender.send(receiver, req)
    assert not down.permanent and "pw-secret" not in down.error and "ConnectError" in down.error
    refusing.close()
    for attempts in range(1, 12):
        delay = notifier.sender.backoff_ms(attempts)
        step = min(60_000, 1000 * 2 ** (attempts - 1))
        assert step / 2 <= delay <= step
    assert notifier.sender.backoff_ms(1, retry_after_ms=7000) >= 7000
    assert notifier.sender.backoff_ms(1, retry_after_ms=10**9) <= 60_000
    notifier.close()


def test_a_down_receiver_is_probed_not_hammered(tmp_path):
    calls = []

    def refuse(request):
        calls.append(request)
        raise httpx.ConnectError("connection refused")

    clock = FakeClock(time.time() + 5)  # a little ahead: rows just recorded are due
    notifier = _notifier(tmp_path, refuse, retry_base_ms=1000, concurrency=4)
    notifier._clock = clock
    store = notifier.store
    store.record_alerts(map(Alert.from_dict, [make_alert("broker.fenced", cluster=f"c{i}", broker=1, starts_at=1000 + i)
                         for i in range(20)]))
    notifier.run(once=True)
    assert len(calls) == 20  # the first pass tries everything that is due
    notifier.run(once=True)
    assert len(calls) == 20  # paused: the receiver as a whole backs off
    clock.advance(3600)
    notifier.run(once=True)
    assert len(calls) == 24  # then a probe of `concurrency` requests, not the backlog
    assert {r["state"] for r in delivery_rows(store)} == {"pending"}
    notifier.close()


def test_alertmanager_refresh_keeps_open_alerts_alive_and_only_those(tmp_path):
    posts: list[list[dict]] = []

    def accept(request):
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "am", "type": "alertmanager", "url": "http://alertmanager.invalid:9093"}]}})
    clock = FakeClock(time.time() + 5)  # a little ahead: rows just recorded are due
    store = Store(f"sqlite:///{tmp_path / 'am.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0, alertmanager_refresh_ms=60_000), env={},
                        clock=clock, transport=httpx.MockTransport(accept))
    now = int(clock.now * 1000)
    first = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=now - 5000)
    second = make_alert("broker.fenced", cluster="c1", broker=2, starts_at=now - 4000)
    store.record_alerts(map(Alert.from_dict, [first, second]))
    notifier.run(once=True)
    assert [[e["annotations"]["alert_id"] for e in post] for post in posts] == [[first["alert_id"],
                                                                                 second["alert_id"]]]
    store.record_alerts(map(Alert.from_dict, [resolved(first, now)]))
    clock.advance(61)
    notifier.run(once=True)
    resolution, refresh = posts[1:]
    assert [e["annotations"]["alert_id"] for e in resolution] == [first["alert_id"]]
    assert iso_ms(resolution[0]["endsAt"]) == now  # its ends_at
    assert iso_ms(posts[0][1]["endsAt"]) == now + ALERTMANAGER_FIRING_TTL_MS
    assert [e["annotations"]["alert_id"] for e in refresh] == [second["alert_id"]]
    assert iso_ms(refresh[0]["endsAt"]) == now + 61_000 + ALERTMANAGER_FIRING_TTL_MS  # pushed forward
    notifier.close()
    store.close()


def test_slack_and_pagerduty_messages():
    cfg = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "chat", "type": "slack", "url": "http://127.0.0.1:1/s"},
        {"name": "pager", "type": "pagerduty", "routing_key_env": "PD"}]}}).alerting.receivers
    slack, pager = SlackReceiver(cfg[0], {}), PagerDutyReceiver(cfg[1], {"PD": "key-12345"})
    alert = {**make_alert("connection.misrouted", cluster="c1", endpoint="b1:9092", starts_at=1_763_800_000_000),
             "summary": "b1:9092 answers as <cluster c2> & node 4"}
    text = json.loads(slack.request([outgoing(alert)], 0).body)["text"]
    assert "&lt;cluster c2&gt; &amp; node 4" in text and "*[FIRING]* critical `connection.misrouted`" in text
    assert pager.url == "https://events.pagerduty.com/v2/enqueue"
    trigger = json.loads(pager.request([outgoing(alert)], 0).body)
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == alert["alert_id"]
    assert trigger["payload"]["timestamp"] == "2025-11-22T08:26:40.000Z"
    assert trigger["payload"]["component"] == "b1:9092" and trigger["payload"]["source"] == "tgt-c1"
    # the alert object as stored: its keys sorted
    assert json.dumps(trigger["payload"]["custom_details"]) == json.dumps(alert, sort_keys=True)
    resolve = json.loads(pager.request([outgoing(resolved(alert, 1_763_800_060_000))], 0).body)
    assert resolve == {"routing_key": "key-12345", "dedup_key": alert["alert_id"], "event_action": "resolve"}
    with pytest.raises(ConfigError, match=r"\$PD, which is not set"):
        PagerDutyReceiver(cfg[1], {})


def test_alertmanager_entry_times():
    receiver_cfg = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9093/"}]}}).alerting.receivers[0]
    am = AlertmanagerReceiver(receiver_cfg, {})
    assert am.url == "http://127.0.0.1:9093/api/v2/alerts"
    now = 1_763_800_100_000
    firing = make_alert("broker.partitioned", cluster="c1", broker=3, starts_at=now - 60_000)
    entry = am.alert_entry(Alert.from_dict(firing), now)
    assert entry["labels"] == {"alertname": "broker.partitioned", "rule": "broker.partitioned",
                               "severity": "critical", "cluster_id": "c1", "target": "tgt-c1", "broker": "3"}
    assert entry["startsAt"] == "2025-11-22T08:27:20.000Z" and entry["endsAt"] > entry["startsAt"]
    # a resolution stamped in the future (clock skew) must not keep it firing
    late = am.alert_entry(Alert.from_dict(resolved(firing, now + 3_600_000)), now)
    assert late["endsAt"] == "2025-11-22T08:28:20.000Z"
    # a firing member of a fleet incident starts now at Alertmanager (its group waits its group_wait for the
    # other members); its resolve keeps the true start; the annotation says the true start either way
    tag = IncidentTag("i1", "rack:r7")
    member = am.alert_entry(Alert.from_dict(firing), now, tag)
    ended = am.alert_entry(Alert.from_dict(resolved(firing, now - 1000)), now, tag)
    assert (member["startsAt"], member["labels"]["fleet_incident"]) == ("2025-11-22T08:28:20.000Z", "i1")
    assert (ended["startsAt"], ended["endsAt"]) == ("2025-11-22T08:27:20.000Z", "2025-11-22T08:28:19.000Z")
    assert entry["annotations"]["starts_at"] == member["annotations"]["starts_at"] == "2025-11-22T08:27:20.000Z"


def test_planning_dead_letters_an_outbox_body_that_is_not_an_alert(tmp_path):
    """The body is parsed once, into `Alert`: JSON that is not an object, or an object that is not
    a whole alert (a field missing, a rule unknown), is a dead letter at once; an alert is planned."""
    notifier = _notifier(tmp_path, lambda request: httpx.Response(200))
    good = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=1_000)
    no_summary = {k: v for k, v in make_alert("broker.fenced", cluster="c1", broker=2, starts_at=1_000).items()
                  if k != "summary"}
    bodies = {"good": json.dumps(good, sort_keys=True), "not json": "{", "a list": "[1, 2]",
              "no summary": json.dumps(no_summary), "unknown rule": json.dumps({**good, "rule": "broker.gone"})}
    with notifier.store.engine.begin() as conn:
        conn.execute(insert(outbox), [{"alert_id": name, "status": "firing", "subject": "broker:c1:1", "body": body,
                                       "created_at": 1_000, "attempts": 0} for name, body in bodies.items()])
    notifier.planner.plan()
    with notifier.store.engine.connect() as conn:
        planned = {r.alert_id: (r.receiver, r.state, r.rule, r.group_key)
                   for r in conn.execute(select(deliveries))}
    assert planned.pop("good") == ("ops", PENDING, "broker.fenced", "cluster:c1")
    assert planned == {name: (NO_RECEIVER, DEAD, "", "") for name in bodies if name != "good"}
    notifier.close()


def test_a_body_is_sent_as_the_store_holds_it(tmp_path):
    """The queue reads a body once, into its alert and the object as stored: a webhook is sent the
    object as stored (with its links), not the alert written out again, so an older job's object
    (without the names of issue 43) goes without them."""
    sent: list[bytes] = []
    notifier = _notifier(tmp_path, lambda request: sent.append(request.content) or httpx.Response(200), group_wait_ms=0)
    older = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=1_000)
    with notifier.store.engine.begin() as conn:
        conn.execute(insert(outbox), [{"alert_id": older["alert_id"], "status": "firing", "subject": "broker:c1:1",
                                       "body": json.dumps(older, sort_keys=True), "created_at": 1_000, "attempts": 0}])
    notifier.run(once=True)
    links = notifier.receivers["ops"].links.of_alert(Alert.from_dict(older))
    assert sent == [json.dumps({**older, **links}, sort_keys=True, separators=(",", ":")).encode()]
    assert "cluster_name" not in json.loads(sent[0])
    notifier.close()
