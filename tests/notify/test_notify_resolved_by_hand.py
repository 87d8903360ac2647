"""`fleetwatch alerts resolve` (issue 41.3), the real CLI as a process: an operator closes a stuck
alert, and the real notifier (`notify --once`, a process) delivers the resolve to a real HTTP
receiver on 127.0.0.1 like any other, signed, with who and why. The store's side on both databases
is tests/store/test_resolve_by_hand.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from sqlalchemy import select
from support.paths import ROOT

from streaming.notify.receivers import verify_signature
from streaming.plumbing.clock import iso_ms
from streaming.records.alert import Alert
from streaming.store import Store, alert_history
from streaming.workshop.hooks import SECRET, env_with, make_alert, outbox_rows, run_cli, write_config

pytestmark = pytest.mark.integration


def _fleetwatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_an_operator_resolves_a_stuck_alert_and_the_notifier_delivers_the_resolve(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    env = env_with(FW_WEBHOOK_SECRET=SECRET)
    cfg = ("--config", str(config))
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    stuck = make_alert("broker.heartbeat_lost", cluster="gone", broker=1, starts_at=now - 3_600_000,
                       details={"last_heartbeat_ms": now - 3_609_000})
    other = make_alert("broker.fenced", cluster="live", broker=2, starts_at=now - 60_000)
    store.record_alerts(map(Alert.from_dict, [stuck, other]))
    run_cli("notify", *cfg, "--once", env=env)
    assert sorted(json.loads(a["body"])["status"] for a in hook.got()) == ["firing", "firing"]

    listed = _fleetwatch("alerts", "list", "--firing", *cfg, env=env)
    assert listed.returncode == 0, listed.stderr
    assert stuck["alert_id"] in listed.stdout and "broker:gone:1" in listed.stdout

    before = int(time.time() * 1000)
    done = _fleetwatch("alerts", "resolve", stuck["alert_id"], "--reason",
                       "cluster decommissioned, runbook https://bob:hunter22@wiki.example/rr", "--by", "sre-ana",
                       *cfg, env=env)
    after = int(time.time() * 1000)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"alert {stuck['alert_id']} resolved: broker.heartbeat_lost broker:gone:1 at ")
    why = "cluster decommissioned, runbook https://***@wiki.example/rr"  # a secret in the text is redacted

    run_cli("notify", *cfg, "--once", env=env)
    (arrival,) = [a for a in hook.got() if json.loads(a["body"])["status"] == "resolved"]
    body = json.loads(arrival["body"])
    assert (body["alert_id"], body["rule"], body["broker_id"]) == (stuck["alert_id"], "broker.heartbeat_lost", 1)
    assert before <= body["ends_at"] <= after
    assert body["details"] == {"last_heartbeat_ms": now - 3_609_000, "reason": why, "resolved_by": "sre-ana"}
    assert arrival["headers"]["x-fleetwatch-status"] == "resolved"
    assert verify_signature(SECRET, arrival["body"], arrival["headers"]["x-fleetwatch-signature"], now=time.time())
    with store.engine.connect() as conn:
        history = {r.status: json.loads(r.body) for r in conn.execute(
            select(alert_history).where(alert_history.c.alert_id == stuck["alert_id"]))}
    # Who and why, in the alert's history: the alert as delivered, less the links the notifier adds.
    assert body["runbook_url"] and body["dashboard_url"]
    assert history["resolved"] == {k: v for k, v in body.items() if k not in ("runbook_url", "dashboard_url")}
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))

    # Once more, or an id the store does not know: one line, exit 2, nothing recorded.
    again = _fleetwatch("alerts", "resolve", stuck["alert_id"], "--reason", "again", *cfg, env=env)
    unknown = _fleetwatch("alerts", "resolve", "0" * 32, "--reason", "typo", *cfg, env=env)
    assert (again.returncode, again.stderr) == (
        2, f"fleetwatch alerts: alert {stuck['alert_id']} is already resolved (ended {iso_ms(body['ends_at'])})\n")
    assert (unknown.returncode, unknown.stderr) == (
        2, f"fleetwatch alerts: no alert with id '{'0' * 32}' (see `fleetwatch alerts list`)\n")
    assert len(outbox_rows(store)) == 3
    store.close()
