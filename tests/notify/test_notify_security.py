"""The notifier's security (issue 19) on real parts: a real notifier process, real HTTP receivers
on 127.0.0.1, a real SQLite store (and PostgreSQL for the lease).

- a secret-bearing receiver URL (an inline Slack webhook URL, a token in a path) is never shown;
- `verify_signature` needs a fresh timestamp and never raises; the README's receiver-side
  snippet (deploy/README.md) is the one a receiver can copy, and it verifies real deliveries;
- the webhook says the status in headers too, and its signature's v2 covers the delivery id
  (issue 42.8), so a receiver deduplicating on that header, once verified, keeps resolutions;
- two notifiers in one process (same host name, same pid: containers) never both send.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest
from support.paths import ROOT

from streaming.config import FleetwatchConfig
from streaming.notify.delivery import Notifier, NotifierBusy, NotifyOptions
from streaming.notify.lease import Lease
from streaming.notify.receivers import sign, verify_signature
from streaming.records.alert import Alert
from streaming.store import DeliveryQueue, Store
from streaming.workshop.hooks import (
    Hook,
    NotifierProcess,
    env_with,
    make_alert,
    outbox_rows,
    resolved,
    run_cli,
    store_text,
    write_config,
)
from streaming.workshop.polling import poll

SECRET = "whsec-security-8d2c4e"
README = ROOT / "deploy" / "README.md"


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.stop()


# -- secret-bearing URLs -----------------------------------------------------------------------

@pytest.mark.integration
def test_an_inline_slack_url_or_a_token_in_a_path_is_never_printed_or_logged(tmp_path, hook):
    slack_path = "/services/T0001/B0002/XOXB-inline-s3cr3t"
    token_path = "/hooks/tok-9f8e7d6c5b4a3"
    config = write_config(tmp_path, [{"name": "chat", "type": "slack", "url": hook.url(slack_path)},
                                     {"name": "ops", "type": "webhook", "url": hook.url(token_path)}])
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.record_alerts(map(Alert.from_dict, [
        make_alert("broker.fenced", cluster="c1", broker=1, starts_at=int(time.time() * 1000))]))
    log = tmp_path / "notify.log"
    # the receiver is down at first: connection errors are logged, then it comes up
    proc = NotifierProcess(config, log, env_with(), "--group-wait-ms", "0", "--retry-base-ms", "100",
                           "--retry-max-ms", "300")
    try:
        poll(lambda: "delivery failed" in log.read_text(), 20, "a failed delivery to be logged", interval_s=0.05)
        hook.start()
        poll(lambda: all(r["delivered_at"] for r in outbox_rows(store)), 30, "the delivery", interval_s=0.05)
    finally:
        assert proc.stop() == 0
    logs = log.read_text()
    assert f"slack http://127.0.0.1:{hook.port}/***" in logs and "ConnectError" in logs
    for secret in ("XOXB-inline-s3cr3t", "T0001/B0002", "tok-9f8e7d6c5b4a3"):
        assert secret not in logs and secret not in store_text(store), secret
    # a bad URL in the config is named without its secret, by the notifier and by check-config
    bad = write_config(tmp_path, [{"name": "chat", "type": "slack",
                                   "url": "ftp://hooks.slack.example/services/T0001/B0002/XOXB-inline-s3cr3t"}])
    done = run_cli("notify", "--config", str(bad), "--once", env=env_with(), check=False)
    assert done.returncode == 2 and "ftp://hooks.slack.example/***" in done.stderr
    checked = subprocess.run([sys.executable, "-m", "streaming.ops.check_config", "--env", str(bad)], cwd=ROOT,
                             env=env_with(), capture_output=True, text=True, timeout=60)
    for said in (done.stdout, done.stderr, checked.stdout, checked.stderr):
        assert "XOXB-inline-s3cr3t" not in said and "T0001" not in said
    store.close()


# -- signatures --------------------------------------------------------------------------------

def test_verify_signature_needs_a_fresh_timestamp_and_never_raises():
    body = b'{"alert_id":"a1","status":"firing"}'
    now = int(time.time())
    assert verify_signature(SECRET, body, sign(SECRET, body, now))
    assert verify_signature(SECRET, body, sign(SECRET, body, now - 200))
    # without `now`, the wall clock decides: an old or future signature is a replay
    assert not verify_signature(SECRET, body, sign(SECRET, body, now - 3600))
    assert not verify_signature(SECRET, body, sign(SECRET, body, now + 3600))
    assert verify_signature(SECRET, body, sign(SECRET, body, now - 3600), tolerance_s=7200)
    assert verify_signature(SECRET, body, sign(SECRET, body, 1000), now=1100)
    # key rotation: any v1 may match
    rotated = sign(SECRET, body, now) + "," + sign("old-secret", body, now).split(",")[1]
    assert verify_signature(SECRET, body, rotated) and verify_signature("old-secret", body, rotated)
    mac = sign(SECRET, body, now).split("v1=")[1]
    for header in ("", "garbage", "t=,v1=", f"t=abc,v1={mac}", f"v1={mac}", f"t={now}", f"t={now},v1=é",
                   f"t={now},v1={mac[:-1]}é", "t=\u0661\u0667\u0666\u0663,v1=00",
                   f"t=99999999999999999999999999,v1={mac}", f"t=-{now},v1={mac}",
                   f"t={now},v1={mac},,", "t=1=2,v1=3", "\udcff", "t=\x00",
                   f"t={now}.5,v1={mac}", "t=" + "9" * 5000 + f",v1={mac}", f"t={now},t={now},v1={mac}",
                   None, 12, f"t={now},v1={mac}".encode("utf-16"), b"\xff\xfe"):
        assert verify_signature(SECRET, body, header) is False, header
    assert verify_signature(SECRET, body, f"t={now},v1={mac}".encode())  # bytes, as some frameworks give
    assert verify_signature(SECRET, "not bytes", sign(SECRET, b"not bytes", now)) is True
    with pytest.raises(ValueError):
        verify_signature(SECRET, body, sign(SECRET, body, now), tolerance_s=0)


def test_v2_signs_the_delivery_id_and_v1_receivers_still_verify():
    """Issue 42.8: v1 covers the body only, so a replay may carry any X-Fleetwatch-Delivery-Id; v2
    covers it, and a header with v2 still verifies for a receiver that checks v1 only."""
    body = b'{"alert_id":"a1","status":"firing"}'
    now = int(time.time())
    header = sign(SECRET, body, now, "a1:firing")
    assert header.startswith(f"t={now},v1=") and ",v2=" in header
    assert verify_signature(SECRET, body, header, delivery_id="a1:firing")
    assert verify_signature(SECRET, body, header), "v1 alone, as a receiver of before v2 checks it"
    for altered in ("a1:resolved", "a1:firing ", "", "a1:firing\nx", "a1:fir\u00efng"):
        assert verify_signature(SECRET, body, header, delivery_id=altered) is False, altered
    # v1 alone does not vouch for a delivery id; v2 over another body or time does not either.
    assert verify_signature(SECRET, body, sign(SECRET, body, now), delivery_id="a1:firing") is False
    assert verify_signature(SECRET, body + b" ", header, delivery_id="a1:firing") is False
    v2 = header.split(",v2=")[1]
    assert verify_signature(SECRET, body, f"t={now - 1},v2={v2}", delivery_id="a1:firing") is False
    assert verify_signature(SECRET, body, f"t={now},v2={v2}") is False, "no v1: nothing for a v1 check"
    assert verify_signature("wrong", body, header, delivery_id="a1:firing") is False


def _readme_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- receiver-verification -->\s*```python\n(.*?)```", text, re.S)
    assert found, "deploy/README.md has the receiver-side verification snippet"
    return found[1]


@pytest.mark.integration
def test_webhook_headers_and_the_readme_receiver_snippet_on_real_deliveries(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    alert = make_alert("broker.partitioned", cluster="c1", broker=3, starts_at=now - 60_000)
    store.record_alerts(map(Alert.from_dict, [alert]))
    store.record_alerts(map(Alert.from_dict, [resolved(alert, now - 1000)]))
    run_cli("notify", "--config", str(config), "--once", env=env_with(FW_WEBHOOK_SECRET=SECRET))
    arrivals = hook.got()
    assert [json.loads(a["body"])["status"] for a in arrivals] == ["firing", "resolved"]
    seen_delivery_ids = set()
    for arrival, status in zip(arrivals, ("firing", "resolved"), strict=True):
        headers = arrival["headers"]
        assert headers["x-fleetwatch-alert-id"] == alert["alert_id"]  # SPEC section 6, unchanged
        assert headers["x-fleetwatch-status"] == status
        assert headers["x-fleetwatch-delivery-id"] == f"{alert['alert_id']}:{status}"
        seen_delivery_ids.add(headers["x-fleetwatch-delivery-id"])
    assert len(seen_delivery_ids) == 2, "a receiver deduplicating on the delivery id keeps the resolution"

    namespace: dict = {}
    exec(compile(_readme_snippet(), str(README), "exec"), namespace)
    verify = namespace["verify_fleetwatch_signature"]
    for arrival in arrivals:
        headers = arrival["headers"]
        signature, delivery_id = headers["x-fleetwatch-signature"], headers["x-fleetwatch-delivery-id"]
        assert verify(SECRET.encode(), arrival["body"], signature) is True
        assert verify(SECRET.encode(), arrival["body"] + b" ", signature) is False
        assert verify(b"wrong", arrival["body"], signature) is False
        # v2: the delivery id is signed; the other status's id (a replay passed off as it) is refused.
        assert verify(SECRET.encode(), arrival["body"], signature, delivery_id=delivery_id) is True
        assert verify(SECRET.encode(), arrival["body"], signature.encode(), delivery_id=delivery_id.encode()) is True
        other = f"{alert['alert_id']}:{'resolved' if delivery_id.endswith(':firing') else 'firing'}"
        assert verify(SECRET.encode(), arrival["body"], signature, delivery_id=other) is False
        assert verify_signature(SECRET, arrival["body"], signature, delivery_id=delivery_id)
    body = arrivals[0]["body"]
    replayed = sign(SECRET, body, int(time.time()) - 301)
    assert verify(SECRET.encode(), body, replayed) is False, "older than the tolerance: a replay"
    assert verify(SECRET.encode(), body, sign(SECRET, body, int(time.time()) - 290)) is True
    for header in ("", "t=x", "t=1,v1=é", None, "t=\u0661,v1=00"):
        assert verify(SECRET.encode(), body, header) is False
    store.close()


# -- one notifier per store --------------------------------------------------------------------

def _notifier(store_url: str, url: str) -> Notifier:
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "ops", "type": "webhook", "url": url}]}})
    return Notifier(config, Store(store_url), NotifyOptions(group_wait_ms=0, interval_ms=20), env={})


def test_two_notifiers_with_the_same_host_and_pid_never_both_send(store_url, hook):
    hook.start()
    first, second = _notifier(store_url, hook.url()), _notifier(store_url, hook.url())
    assert (first.lease.host, first.lease.pid) == (second.lease.host, second.lease.pid)
    assert first.lease.acquire()
    assert not second.lease.acquire(), "a second instance on the same host and pid must not take over"
    assert first.lease.acquire(), "the holder keeps it"
    with pytest.raises(NotifierBusy):
        second.run(once=True)
    first.lease.release()

    stops = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=n.run, args=(stop,), daemon=True) for n, stop in zip((first, second), stops,
                                                                                             strict=True)]
    for thread in threads:
        thread.start()
    now = int(time.time() * 1000)
    alerts = [make_alert("broker.fenced", cluster=f"c{i % 5}", broker=i, starts_at=now - 10_000 + i)
              for i in range(40)]
    for start in range(0, 40, 10):
        first.store.record_alerts(map(Alert.from_dict, alerts[start:start + 10]))
    poll(lambda: all(r["delivered_at"] for r in outbox_rows(first.store)) and len(outbox_rows(first.store)) == 40,
         30, "every alert delivered", interval_s=0.05)
    sent = [json.loads(a["body"])["alert_id"] for a in hook.got()]
    assert sorted(sent) == sorted(a["alert_id"] for a in alerts), "each exactly once: one notifier sent"
    for stop, thread in zip(stops, threads, strict=True):
        stop.set()
        thread.join(20)
    for n in (first, second):
        n.close()
        n.store.close()


def test_lease_identity_is_per_process_instance(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'lease.db'}")
    a, b = Lease(store, 1000), Lease(store, 1000)
    assert a.owner != b.owner
    assert a.acquire() and not b.acquire()
    assert b.holder is not None and str(a.pid) in b.holder
    # the holder stops renewing: its lease expires on the database's clock, then it may be taken over
    poll(b.acquire, 10, "the expired lease taken over", interval_s=0.1)
    assert not a.acquire() and not a.held
    assert (a.generation, b.generation) == (1, 2), "every takeover is a new generation"
    # the deposed holder's late write is refused: the fence is checked in the recording transaction
    queue = DeliveryQueue(store)
    assert queue.record_outcome([], 0, delivered=True, permanent=False, error=None, retry_at={}, given_up={},
                                outbox_error=None, fence=a.fence) is False
    assert queue.record_outcome([], 0, delivered=True, permanent=False, error=None, retry_at={}, given_up={},
                                outbox_error=None, fence=b.fence) is True
    store.close()

