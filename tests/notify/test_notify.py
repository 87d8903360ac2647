"""`fleetwatch notify` / `fleetwatch silence` against real HTTP receivers on 127.0.0.1.

The notifier runs as a real process (`python -m streaming.notify`) over a real SQLite store
written through `Store.record_alerts`, the way the Spark job and `replay` write it. Every wait
is a poll with a deadline.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import time

import pytest
from sqlalchemy import select

from streaming.config import ConfigError
from streaming.notify.receivers import verify_signature
from streaming.records.alert import Alert, queue_subject_of
from streaming.store import Store, silences
from streaming.workshop.hooks import (
    SECRET,
    NotifierProcess,
    all_delivered,
    delivery_rows,
    env_with,
    make_alert,
    outbox_rows,
    resolved,
    run_cli,
    store_text,
    write_config,
)
from streaming.workshop.polling import poll


@pytest.mark.integration
def test_nothing_lost_through_outage_errors_slowness_and_a_kill(tmp_path, hook, store_url):
    """Receiver down, then 500s, then slow; the notifier is SIGKILLed mid-delivery and restarted."""
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}], store_url=store_url)
    store = Store(store_url)
    env = env_with(FW_WEBHOOK_SECRET=SECRET)
    t0 = int(time.time() * 1000) - 600_000
    # 6 clusters x 3 brokers: per broker, incident A fires and resolves, then (for half) incident B.
    firing_a = [make_alert("broker.heartbeat_lost", cluster=f"c{c}", broker=b, starts_at=t0 + 1000 * (3 * c + b))
                for c in range(6) for b in range(3)]
    firing_b = [make_alert("broker.heartbeat_lost", cluster=a["cluster_id"], broker=a["broker_id"],
                           starts_at=a["starts_at"] + 200_000) for a in firing_a[::2]]
    wave1 = firing_a
    wave2 = [resolved(a, a["starts_at"] + 100_000) for a in firing_a] + firing_b
    wave3 = [resolved(a, a["starts_at"] + 100_000) for a in firing_b]
    expected_order: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for alert in wave1 + wave2 + wave3:
        expected_order.setdefault((alert["rule"], queue_subject_of(alert)), []).append(
            (alert["alert_id"], alert["status"]))

    log1, log2 = tmp_path / "notify-1.log", tmp_path / "notify-2.log"
    opts = ("--group-wait-ms", "0", "--retry-base-ms", "100", "--retry-max-ms", "800", "--timeout", "2")
    store.record_alerts(map(Alert.from_dict, wave1))
    first = NotifierProcess(config, log1, env, *opts)
    try:
        # 1. The receiver is down: connection errors are recorded and retried with backoff.
        poll(lambda: any(r["attempts"] >= 2 and "Connect" in (r["last_error"] or "")
                             for r in delivery_rows(store)), 20, "retries against the down receiver", interval_s=0.05)
        assert not any(r["delivered_at"] for r in outbox_rows(store))
        # 2. It comes up answering 500 a few times, then slowly (longer than the notifier's timeout).
        hook.script.extend([("status", 500, "oops")] * 6 + [("slow", 3.0)] * 2)
        hook.start()
        poll(lambda: len(hook.got()) >= 12, 30, "deliveries after the receiver came up", interval_s=0.05)
        store.record_alerts(map(Alert.from_dict, wave2))
        # 3. One request hangs in the receiver; the notifier is killed while it is in flight.
        with hook.lock:
            hook.script.append(("hang",))
        poll(hook.in_flight.is_set, 20, "a request in flight", interval_s=0.05)
        first.kill()
        hung = hook.hung
        hook.release.set()
        store.record_alerts(map(Alert.from_dict, wave3))  # written while no notifier runs
        second = NotifierProcess(config, log2, env, *opts)
        try:
            poll(lambda: all_delivered(store), 40, "every outbox row delivered after the restart", interval_s=0.05)
        finally:
            assert second.stop() == 0
    finally:
        if first.proc.poll() is None:
            first.kill()

    arrivals = hook.got("/hook")
    got = [(json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in arrivals]
    expected = {item for items in expected_order.values() for item in items}
    assert set(got) == expected, "every (alert_id, status) arrives"
    duplicates = len(got) - len(set(got))
    assert duplicates <= 10, f"{duplicates} duplicates"
    # the request in flight at the kill was sent again by the restarted notifier
    hung_key = (json.loads(hung["body"])["alert_id"], json.loads(hung["body"])["status"])
    assert got.count(hung_key) >= 2
    now_s = time.time()
    for a in arrivals:
        assert verify_signature(SECRET, a["body"], a["headers"]["x-fleetwatch-signature"], now=now_s), "signed"
        body = json.loads(a["body"])
        assert a["headers"]["x-fleetwatch-alert-id"] == body["alert_id"]
        assert body["schema"] == "fleetwatch.alert/v1"
    # in order per (rule, subject): repeats only of the current item, never of an earlier one
    for subject, order in expected_order.items():
        seen = [order.index(item) for item in got if item in order]
        assert seen == sorted(seen), f"out of order for {subject}: {seen}"
        assert sorted(set(seen)) == list(range(len(order)))
    rows = delivery_rows(store)
    assert {r["state"] for r in rows} == {"delivered"} and len(rows) == len(expected)
    errors = " ".join(r["last_error"] or "" for r in rows)
    assert "ConnectError" in errors and "HTTP 500" in errors and "timed out" in errors
    for r in outbox_rows(store):
        assert r["attempts"] >= 1 and r["delivered_at"] >= r["created_at"]
    logs = log1.read_text() + log2.read_text()
    assert "took over the notifier lease" in logs
    assert SECRET not in logs and SECRET not in store_text(store)
    for line in logs.splitlines():
        json.loads(line)  # structured logs only
    store.close()


@pytest.mark.integration
def test_dead_letter_routing_pagerduty_and_requeue(tmp_path, hook, store_url):
    """A 4xx is a dead letter with its reason; routes pick receivers; PagerDuty Events v2 trigger/resolve."""
    hook.by_path["/reject"] = ("status", 400, '{"message":"Invalid payload: missing field summary"}')
    hook.start()
    config = write_config(tmp_path, [
        {"name": "ops", "type": "webhook", "url": hook.url("/hook"), "secret_env": "FW_WEBHOOK_SECRET"},
        {"name": "strict", "type": "webhook", "url": hook.url("/reject")},
        {"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"), "routing_key_env": "FW_PD_KEY"},
    ], routes=[{"receiver": "pager", "match": {"severity": ["critical"]}},
               {"receiver": "strict", "match": {"rule": ["cluster.*"]}},
               {"receiver": "ops"}], store_url=store_url)
    env = env_with(FW_WEBHOOK_SECRET=SECRET, FW_PD_KEY="pd-routing-key-0042")
    store = Store(store_url)
    now = int(time.time() * 1000)
    crit = make_alert("cluster.no_controller", cluster="c9", starts_at=now - 30_000)
    warn = make_alert("broker.fenced", cluster="c9", broker=2, starts_at=now - 20_000)
    store.record_alerts(map(Alert.from_dict, [crit, warn]))
    store.record_alerts(map(Alert.from_dict, [resolved(crit, now - 1000)]))
    once = ("notify", "--config", str(config), "--once", "--retry-base-ms", "50")

    done = run_cli(*once, env=env)
    assert "dead" in done.stdout
    # pager: the critical alert only, trigger then resolve, deduplicated on alert_id
    events = [json.loads(a["body"]) for a in hook.got("/v2/enqueue")]
    assert [(e["event_action"], e["dedup_key"]) for e in events] == [("trigger", crit["alert_id"]),
                                                                    ("resolve", crit["alert_id"])]
    assert events[0]["routing_key"] == "pd-routing-key-0042"
    assert events[0]["payload"]["severity"] == "critical" and events[0]["payload"]["class"] == "cluster.no_controller"
    assert events[0]["payload"]["custom_details"]["alert_id"] == crit["alert_id"]
    # ops: everything
    assert sorted((json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in hook.got("/hook")) \
        == sorted([(crit["alert_id"], "firing"), (warn["alert_id"], "firing"), (crit["alert_id"], "resolved")])
    # strict: refused with 400 -> dead letters with the reason, tried once each, never retried
    strict = delivery_rows(store, "strict")
    assert len(strict) == 2 and {r["state"] for r in strict} == {"dead"} and all(r["dead_letter"] for r in strict)
    assert all(r["attempts"] == 1 for r in strict)
    assert "HTTP 400 Bad Request" in strict[0]["last_error"] and "missing field summary" in strict[0]["last_error"]
    boxed = {(r["alert_id"], r["status"]): r for r in outbox_rows(store)}
    assert boxed[(crit["alert_id"], "firing")]["delivered_at"] is None
    assert boxed[(crit["alert_id"], "firing")]["last_error"].startswith("dead letter: strict: HTTP 400")
    assert boxed[(warn["alert_id"], "firing")]["delivered_at"] is not None
    # a second pass does not retry dead letters
    run_cli(*once, env=env)
    assert len(hook.refused) == 2
    # after fixing the receiver, --requeue-dead sends them again
    hook.by_path.clear()
    run_cli(*once, "--requeue-dead", env=env)
    assert {r["state"] for r in delivery_rows(store)} == {"delivered"}
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))
    assert "pd-routing-key-0042" not in store_text(store)
    assert "pd-routing-key-0042" not in done.stderr and SECRET not in done.stderr
    store.close()


@pytest.mark.integration
def test_silences(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    env = env_with(FW_WEBHOOK_SECRET=SECRET)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    cfg = ("--config", str(config))
    added = run_cli("silence", "add", *cfg, "--cluster", "clusterA", "--rule", "broker.*", "--for", "2h",
                    "--reason", "rolling restart, runbook https://bob:hunter22@wiki.example/rr", "--author", "sre",
                    env=env)
    silence_id = re.search(r"silence ([0-9a-f]{12}) added", added.stdout)[1]
    listed = run_cli("silence", "list", *cfg, env=env).stdout
    assert silence_id in listed and "cluster=clusterA rule=broker.*" in listed and "active" in listed
    assert "https://***@wiki.example/rr" in listed and "hunter22" not in listed + added.stdout
    assert "hunter22" not in store_text(store)

    now = int(time.time() * 1000)
    quiet = make_alert("broker.fenced", cluster="clusterA", broker=1, starts_at=now - 5000)
    other_rule = make_alert("cluster.no_controller", cluster="clusterA", starts_at=now - 5000)
    other_cluster = make_alert("broker.fenced", cluster="clusterB", broker=1, starts_at=now - 5000)
    store.record_alerts(map(Alert.from_dict, [quiet, other_rule, other_cluster]))
    once = ("notify", *cfg, "--once")
    assert "1 silenced" in run_cli(*once, env=env).stdout
    got = {json.loads(a["body"])["alert_id"] for a in hook.got()}
    assert got == {other_rule["alert_id"], other_cluster["alert_id"]}
    row = next(r for r in delivery_rows(store) if r["alert_id"] == quiet["alert_id"])
    assert row["state"] == "held" and row["silence_id"] == silence_id and row["attempts"] == 0

    # the silence is expired by hand while quiet still fires: quiet is paged at the next pass, then
    # its resolution (recorded after the silence ended); a new incident is delivered too
    assert f"silence {silence_id} expired" in run_cli("silence", "expire", *cfg, silence_id[:6], env=env).stdout
    assert run_cli("silence", "list", *cfg, env=env).stdout.strip() == "no active silences"
    assert "expired" in run_cli("silence", "list", *cfg, "--all", env=env).stdout
    again = make_alert("broker.fenced", cluster="clusterA", broker=1, starts_at=now - 1000)
    store.record_alerts(map(Alert.from_dict, [resolved(quiet, now - 2000), resolved(other_rule, now - 2000), again]))
    run_cli(*once, env=env)
    got = [(json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in hook.got()]
    assert got.index((quiet["alert_id"], "firing")) < got.index((quiet["alert_id"], "resolved"))
    assert (other_rule["alert_id"], "resolved") in got and (again["alert_id"], "firing") in got
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))
    with store.engine.connect() as conn:
        assert conn.execute(select(silences.c.expired_at)).scalar_one() is not None
    # bad input: one line, non-zero
    bad = run_cli("silence", "add", *cfg, "--for", "2h", "--reason", "x", env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "at least one of" in bad.stderr
    assert run_cli("silence", "expire", *cfg, "ffffffffffff", env=env, check=False).returncode == 2
    store.close()


@pytest.mark.integration
def test_storm_is_grouped_for_slack_but_not_for_webhooks(tmp_path, hook):
    hook.start()
    slack_url = hook.url("/services/T000/B000/XOXB-s3cr3t-slack-path")
    config = write_config(tmp_path, [{"name": "chat", "type": "slack", "url_env": "FW_SLACK_URL"},
                                     {"name": "ops", "type": "webhook", "url": hook.url("/hook"),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    env = env_with(FW_SLACK_URL=slack_url, FW_WEBHOOK_SECRET=SECRET)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    storm = [make_alert(rule, cluster="stormy", broker=b, starts_at=now - 10_000 + b)
             for b in range(4) for rule in ("broker.heartbeat_lost", "broker.partitioned")]
    calm = [make_alert("broker.fenced", cluster="calm", broker=1, starts_at=now - 9000)]
    log = tmp_path / "notify.log"
    proc = NotifierProcess(config, log, env, "--group-wait-ms", "2500")
    try:
        store.record_alerts(map(Alert.from_dict, storm[:5]))
        store.record_alerts(map(Alert.from_dict, storm[5:] + calm))

        def slack_ids():
            return {aid for m in hook.got("/services/") for aid in re.findall(r"alert ([0-9a-f]{32})",
                                                                              json.loads(m["body"])["text"])}

        poll(lambda: slack_ids() >= {a["alert_id"] for a in storm + calm}, 20, "the grouped Slack messages",
             interval_s=0.05)
        poll(lambda: len(hook.got("/hook")) >= 9, 20, "the webhook deliveries", interval_s=0.05)
        messages = [json.loads(m["body"])["text"] for m in hook.got("/services/")]
        assert len(messages) == 2, messages
        big = next(m for m in messages if "stormy" in m)
        assert big.startswith("*8 fleetwatch alerts for tgt-stormy* (8 firing)") and big.count("\n• ") == 8
        assert len(hook.got("/hook")) == 9  # webhooks get one request per alert
        # the storm's resolutions: one more grouped message
        store.record_alerts(map(Alert.from_dict, [resolved(a, now) for a in storm]))
        poll(lambda: len(hook.got("/services/")) == 3 and all_delivered(store), 20, "the resolved group",
             interval_s=0.05)
        assert "(8 resolved)" in json.loads(hook.got("/services/")[-1]["body"])["text"]
    finally:
        assert proc.stop() == 0
    logs = log.read_text()
    assert "XOXB-s3cr3t-slack-path" not in logs and "XOXB-s3cr3t-slack-path" not in store_text(store)
    assert "(from $FW_SLACK_URL)" in logs
    store.close()


@pytest.mark.integration
def test_credentials_in_urls_are_redacted_everywhere(tmp_path, hook):
    hook.script.extend([("status", 503, "try later", {"Retry-After": "0"})] * 2)
    hook.start()
    url = f"http://fw:pa55w0rd-xyz@127.0.0.1:{hook.port}/auth?token=tok-abcdef"
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": url}])
    env = env_with()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.record_alerts(map(Alert.from_dict, [make_alert("endpoint.collision", cluster="c1", endpoint="b1:9092",
                                    starts_at=int(time.time() * 1000))]))
    log = tmp_path / "notify.log"
    proc = NotifierProcess(config, log, env, "--retry-base-ms", "50", "--group-wait-ms", "0")
    try:
        poll(lambda: all_delivered(store), 20, "delivery after two 503s", interval_s=0.05)
    finally:
        assert proc.stop() == 0
    (arrival,) = hook.got("/auth")
    assert arrival["headers"]["authorization"] == "Basic " + base64.b64encode(b"fw:pa55w0rd-xyz").decode()
    assert "x-fleetwatch-signature" not in arrival["headers"]
    (row,) = delivery_rows(store)
    assert row["attempts"] == 3 and "HTTP 503" in row["last_error"]
    logs = log.read_text()
    assert f"http://***@127.0.0.1:{hook.port}/***" in logs
    assert "HTTP 503" in logs
    for secret in ("pa55w0rd-xyz", "tok-abcdef"):
        assert secret not in logs and secret not in store_text(store)
    # a config error names the problem in one line, without the secret
    bad = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": "ftp://fw:pa55w0rd-xyz@h/x"}])
    done = run_cli("notify", "--config", str(bad), "--once", env=env, check=False)
    assert done.returncode == 2 and "pa55w0rd-xyz" not in done.stderr and "ftp://***@h/***" in done.stderr
    missing = write_config(tmp_path, [{"name": "chat", "type": "slack", "url_env": "FW_UNSET_URL"}])
    done = run_cli("notify", "--config", str(missing), "--once", env=env, check=False)
    assert done.returncode == 2 and "$FW_UNSET_URL, which is not set" in done.stderr
    store.close()


@pytest.mark.integration
def test_second_notifier_waits_for_the_lease(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url()}])
    env = env_with()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    proc = NotifierProcess(config, tmp_path / "n.log", env)
    try:
        poll(lambda: "notifier started" in (tmp_path / "n.log").read_text(), 20, "the first notifier", interval_s=0.05)
        done = run_cli("notify", "--config", str(config), "--once", env=env, check=False)
        assert done.returncode == 6 and "another notifier (pid" in done.stderr
    finally:
        assert proc.stop() == 0
    assert run_cli("notify", "--config", str(config), "--once", env=env).returncode == 0
    store.close()


def test_notify_functions_for_the_main_cli(tmp_path):
    """The functions streaming/cli.py wires: configure_parser/command, configure_silence_parser/silence_command."""
    from streaming.notify import cli

    parser = argparse.ArgumentParser(prog="fleetwatch")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.configure_parser(sub.add_parser("notify"))
    cli.configure_silence_parser(sub.add_parser("silence"))
    args = parser.parse_args(["notify", "--config", "f.yaml", "--once", "--group-wait-ms", "0"])
    assert args.command == "notify" and args.once and args.group_wait_ms == 0
    args = parser.parse_args(["silence", "add", "--cluster", "c", "--broker", "3", "--for", "2h", "--reason", "r"])
    assert args.command == "silence" and args.silence_action == "add" and args.broker == 3
    empty = write_config(tmp_path, [])
    with pytest.raises(ConfigError, match=r"alerting\.receivers is empty"):
        cli.command(parser.parse_args(["notify", "--config", str(empty), "--once"]))
